//! Removing unfinished outputs when the process is interrupted (Ctrl-C, `kill`, a closed
//! terminal). Without this, stopping a long `glint quantize` would leave a hidden temporary as
//! large as the model next to it.
//!
//! A signal handler may only call async-signal-safe functions, so the temporaries' paths are
//! kept as C strings in a fixed table of atomic pointers: the handler `unlink`s every registered
//! path, restores the default action and re-raises the signal, so the process still dies of it
//! (exit status 130 for SIGINT in a shell). Registered strings are never freed, only
//! unregistered (a few bytes per output), so the handler can never read freed memory.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// Outputs that can be open at once and still be cleaned up on a signal; glint opens one.
const SLOTS: usize = 16;

static TEMPS: [AtomicPtr<libc::c_char>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static INSTALL: Once = Once::new();
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A registered temporary (its slot); [`unregister`] it once it is renamed or removed.
#[derive(Debug)]
pub(crate) struct Registration(Option<usize>);

/// Registers `path` for removal on SIGINT/SIGTERM/SIGHUP, installing the handler on first use.
/// If the table is full the output still works; it is just not removed on a signal.
pub(crate) fn register(path: &Path) -> Registration {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Registration(None);
    };
    INSTALL.call_once(install);
    let raw = c.into_raw();
    for (i, slot) in TEMPS.iter().enumerate() {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            return Registration(Some(i));
        }
    }
    // SAFETY: `raw` came from `CString::into_raw` above and was not stored anywhere.
    drop(unsafe { CString::from_raw(raw) });
    tracing::debug!(path = %path.display(), "no free slot: temporary not removed on a signal");
    Registration(None)
}

/// Stops removing the path on a signal. The string is deliberately leaked (see module docs).
pub(crate) fn unregister(r: &mut Registration) {
    if let Some(i) = r.0.take() {
        TEMPS[i].store(std::ptr::null_mut(), Ordering::SeqCst);
    }
}

fn install() {
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler only calls
        // async-signal-safe functions (unlink, sigaction, raise) and reads atomics.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            let mut old: libc::sigaction = std::mem::zeroed();
            // Only where the action is still the default: a signal the user chose to ignore
            // (`nohup`) stays ignored, and a program with its own handler (a server shutting
            // down gracefully, whose drops remove the temporaries) keeps it.
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            act.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

extern "C" fn handler(sig: libc::c_int) {
    for slot in &TEMPS {
        let p = slot.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: registered pointers are valid NUL-terminated strings that are never freed.
            unsafe {
                libc::unlink(p);
            }
        }
    }
    // SAFETY: restoring the default action and re-raising are async-signal-safe.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut());
        libc::raise(sig);
    }
}
