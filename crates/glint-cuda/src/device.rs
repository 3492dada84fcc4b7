//! Finding the GPU: library presence checks first, because cudarc's dynamic loading panics on a
//! missing library, and a user asking for `--device cuda` on a laptop deserves a sentence.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use glint_core::CoreError;

/// What was found on the device, for logs and the memory report.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_mem: usize,
    pub driver: String,
}

fn dev_err(msg: impl Into<String>) -> CoreError {
    CoreError::Device {
        op: "opening the CUDA device",
        msg: msg.into(),
    }
}

/// Number of CUDA devices, or an error saying why there are none to ask.
pub fn device_count() -> Result<usize, CoreError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(dev_err(
            "the CUDA driver library (libcuda.so) was not found: no NVIDIA driver on this machine",
        ));
    }
    cudarc::driver::result::init().map_err(|e| dev_err(format!("cuInit failed: {e}")))?;
    let n = CudaContext::device_count().map_err(|e| dev_err(format!("{e}")))?;
    Ok(n.max(0) as usize)
}

pub(crate) fn open(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), CoreError> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(dev_err(format!(
            "cuda:{ordinal} requested but {n} CUDA device(s) found"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| dev_err(format!("cuda:{ordinal}: {e}")))?;
    // One stream, in issue order: cudarc's per-buffer events are not needed, and they would
    // be recorded into (and break) a captured graph.
    // SAFETY: called before any buffer or stream other than the default exists.
    unsafe { ctx.disable_event_tracking() };
    let cc = ctx
        .compute_capability()
        .map_err(|e| dev_err(format!("{e}")))?;
    let mut v = 0i32;
    // SAFETY: out-parameter call on an initialised driver.
    unsafe {
        let _ = cudarc::driver::sys::cuDriverGetVersion(&mut v);
    }
    let info = DeviceInfo {
        ordinal,
        name: ctx.name().unwrap_or_else(|_| "unknown".into()),
        compute_capability: cc,
        total_mem: ctx.total_mem().unwrap_or(0),
        driver: format!("{}.{}", v / 1000, (v % 1000) / 10),
    };
    Ok((ctx, info))
}
