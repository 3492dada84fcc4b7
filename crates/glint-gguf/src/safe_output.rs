//! Writing an output file so that nothing the user already has is lost.
//!
//! Every command that writes (`glint dequant`, `quantize`, `logits`, [`crate::write_gguf`])
//! goes through [`SafeOutput`]:
//!
//! - The target is checked before anything is written: it must not be a directory, must be a
//!   regular file if it exists (a device such as `/dev/full` or a FIFO is refused rather than
//!   replaced by a regular file), and must not be the same file (device + inode, after resolving
//!   links) as any input or shard. Writing over a mapped input would truncate it under the map
//!   (SIGBUS) and destroy it.
//! - Bytes go to a fresh temporary file in the target's directory, created with `O_EXCL`, so its
//!   name can never be an existing file (in particular no input or shard), and it does not end
//!   in `.gguf`, so it cannot be mistaken for a shard.
//! - [`SafeOutput::commit`] syncs the file and renames it over the target only when complete;
//!   dropping a `SafeOutput` without committing (any error, a full disk, a broken pipe, a panic)
//!   removes the temporary, and on Unix so does SIGINT, SIGTERM or SIGHUP
//!   (`safe_output_signals.rs`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Why an output could not be written. Every variant names the path at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    #[error("output {} is a directory; give a file name", path.display())]
    IsDirectory { path: PathBuf },
    #[error(
        "output {} is not a regular file ({kind}); glint writes only regular files, so it will \
         not replace it",
        path.display()
    )]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error(
        "output {} is the same file as the input {}; writing it would destroy the input",
        path.display(),
        input.display()
    )]
    SameAsInput { path: PathBuf, input: PathBuf },
    #[error("output {}: the directory {} does not exist", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("output {} has no file name", path.display())]
    NoFileName { path: PathBuf },
    #[error("output {}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
}

/// A file being written under a temporary name next to its target; see the module docs.
#[derive(Debug)]
pub struct SafeOutput {
    /// The path the user gave, for messages.
    target: PathBuf,
    /// Where the finished file goes: `target` with links resolved.
    dest: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    #[cfg(unix)]
    on_signal: signals::Registration,
}

#[cfg(unix)]
#[path = "safe_output_signals.rs"]
mod signals;

/// Temporary names tried before giving up (each attempt is an `O_EXCL` create).
const TEMP_ATTEMPTS: u32 = 1000;

impl SafeOutput {
    /// Checks `target` against `inputs` (every file the command reads, shards included) and
    /// creates the temporary file.
    pub fn create(target: &Path, inputs: &[&Path]) -> Result<SafeOutput, OutputError> {
        let dest = check_target(target, inputs)?;
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .ok_or_else(|| OutputError::NoFileName {
                path: target.to_path_buf(),
            })?
            .to_string_lossy()
            .into_owned();
        let pid = std::process::id();
        let mut last_err = None;
        for n in 0..TEMP_ATTEMPTS {
            let temp = dir.join(format!(".{name}.glint-tmp-{pid}-{n}"));
            // Registered before the file exists, so a signal at any moment after its creation
            // removes it. A name that turns out to be taken holds a temporary of an earlier
            // process with this pid, which is garbage either way.
            #[cfg(unix)]
            let mut on_signal = signals::register(&temp);
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(file) => {
                    // Replacing a file keeps its permissions (a private 0600 output stays so).
                    if let Ok(meta) = std::fs::metadata(&dest) {
                        let _ = file.set_permissions(meta.permissions());
                    }
                    tracing::debug!(target = %target.display(), temp = %temp.display(), "writing output");
                    return Ok(SafeOutput {
                        target: target.to_path_buf(),
                        dest,
                        #[cfg(unix)]
                        on_signal,
                        temp,
                        file: Some(file),
                    });
                }
                Err(e) => {
                    #[cfg(unix)]
                    signals::unregister(&mut on_signal);
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(io_err(target, "cannot create a temporary file", e));
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(io_err(
            target,
            "no free temporary name",
            last_err.unwrap_or_else(|| io::Error::other("exhausted")),
        ))
    }

    /// The temporary file, to write to.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file is present until commit")
    }

    /// The path the user asked for.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary file's path (tests check that it is gone after a failure).
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes and syncs the temporary, then renames it over the target. On error the
    /// temporary is removed and the target is untouched.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let mut file = self.file.take().expect("file is present until commit");
        file.flush()
            .and_then(|()| file.sync_all())
            .map_err(|e| io_err(&self.target, "cannot write", e))?;
        drop(file);
        std::fs::rename(&self.temp, &self.dest).map_err(|e| {
            io_err(
                &self.target,
                "cannot rename the finished file into place",
                e,
            )
        })?;
        // Renamed: nothing left to clean up. Unregistered only now, so a signal just before
        // the rename still removes the temporary; one just after unlinks a name that is gone.
        #[cfg(unix)]
        signals::unregister(&mut self.on_signal);
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Drop for SafeOutput {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            self.file = None;
            if let Err(e) = std::fs::remove_file(&self.temp) {
                tracing::warn!(temp = %self.temp.display(), error = %e, "could not remove the temporary output");
            }
        }
        // After the removal, so a signal during it still removes the file.
        #[cfg(unix)]
        signals::unregister(&mut self.on_signal);
    }
}

/// Adapts a writer error into an [`OutputError`] naming the target.
pub fn write_error(target: &Path, e: io::Error) -> OutputError {
    io_err(target, "cannot write", e)
}

fn io_err(path: &Path, what: &'static str, source: io::Error) -> OutputError {
    OutputError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Validates the target and returns the path to rename onto (links resolved, so a symlink to a
/// model replaces the model it points at — after the same-file check — not the link).
fn check_target(target: &Path, inputs: &[&Path]) -> Result<PathBuf, OutputError> {
    let path = || target.to_path_buf();
    if target.as_os_str().is_empty() {
        return Err(OutputError::NoFileName { path: path() });
    }
    match std::fs::metadata(target) {
        Ok(meta) => {
            if meta.is_dir() {
                return Err(OutputError::IsDirectory { path: path() });
            }
            if !meta.is_file() {
                return Err(OutputError::NotRegularFile {
                    path: path(),
                    kind: file_kind(&meta),
                });
            }
            for input in inputs {
                if let Ok(im) = std::fs::metadata(input) {
                    if same_file(&meta, &im, target, input) {
                        return Err(OutputError::SameAsInput {
                            path: path(),
                            input: input.to_path_buf(),
                        });
                    }
                }
            }
            target
                .canonicalize()
                .map_err(|e| io_err(target, "cannot resolve the path", e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(target).is_ok() {
                // A dangling link: renaming onto it would replace the link, writing onto it
                // would create a file somewhere the user may not expect.
                return Err(OutputError::NotRegularFile {
                    path: path(),
                    kind: "a symbolic link to nothing",
                });
            }
            let name = target
                .file_name()
                .ok_or_else(|| OutputError::NoFileName { path: path() })?;
            let dir = match target.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => Ok(dir.join(name)),
                _ => Err(OutputError::NoDirectory {
                    path: path(),
                    dir: dir.to_path_buf(),
                }),
            }
        }
        Err(e) => Err(io_err(target, "cannot inspect the path", e)),
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata, _: &Path, _: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata, a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

#[cfg(unix)]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn file_kind(_: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

#[cfg(test)]
#[path = "safe_output_tests.rs"]
mod tests;
