//! Result files: VTK XML for ParaView ([`vtk`]), OpenFOAM fields
//! ([`foam_field`]); one run per case directory at a time ([`lock`]).
//!
//! Every file is written atomically (see [`write_atomic`]): a reader such as
//! ParaView reloading a series while the solver runs never sees half a file,
//! and a run that stops (an error, a kill) leaves each file whole or as it
//! was. Files go to the operating system's cache and are renamed into place
//! at once, as OpenFOAM and ParaView write theirs; with
//! [`set_durable_writes`] (`run --sync`) each is also flushed to the disk
//! before its rename, so that a power loss cannot leave a renamed file
//! empty, at the disk's speed (an 8 M-cell VTK step is about 1 GB).

pub mod foam_field;
pub mod lock;
pub mod vtk;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`write_atomic_file`] flushes each file to the disk before its
/// rename (see the module documentation).
static DURABLE_WRITES: AtomicBool = AtomicBool::new(false);

/// Makes every later write of this process wait until the file is on the
/// disk before it is renamed into place (`on`), or not (the default).
pub fn set_durable_writes(on: bool) {
    DURABLE_WRITES.store(on, Ordering::Relaxed);
}

/// Everything that can go wrong writing result files.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file or directory could not be written; `path` names it.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The data given cannot be written (message names the field or file and why).
    #[error("{0}")]
    Invalid(String),
}

impl OutputError {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }
}

/// Writes `path` atomically: `write` fills a temporary file in the same
/// directory (so the rename stays on one file system), which is then renamed
/// over `path`. On failure the temporary file is removed and `path` is left as
/// it was. The temporary name, `NAME.PID.N.tmp`, is unique to this process and
/// call, so that two processes writing the same file (two runs of one case)
/// never write into or rename each other's temporary file: the last rename wins
/// and each file is whole.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    write_atomic_file(path, |file| {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        write(&mut out)?;
        out.flush()
    })
}

/// [`write_atomic`] for writers that need the file itself, such as several
/// threads writing at their own offsets (`FileExt::write_all_at`); the file
/// is synced before the rename where [`set_durable_writes`] asks for it.
pub fn write_atomic_file(
    path: &Path,
    write: impl FnOnce(&fs::File) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let tmp = temporary_path(path)?;
    let written = fs::File::create(&tmp).and_then(|file| {
        write(&file)?;
        if DURABLE_WRITES.load(Ordering::Relaxed) {
            file.sync_all()
        } else {
            Ok(())
        }
    });
    let result = written
        .map_err(|e| OutputError::io(&tmp, e))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| OutputError::io(path, e)));
    if result.is_err() {
        // Best effort: the error reported is the one that matters.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `path` with `.PID.N.tmp` appended to its file name: N counts the calls
/// in this process.
fn temporary_path(path: &Path) -> Result<PathBuf, OutputError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut tmp_name = path
        .file_name()
        .ok_or_else(|| OutputError::invalid(format!("{}: not a file name", path.display())))?
        .to_os_string();
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// Creates `dir` and its parents, naming `dir` on failure.
pub fn create_dir_all(dir: &Path) -> Result<(), OutputError> {
    fs::create_dir_all(dir).map_err(|e| OutputError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_or_leaves_the_file() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson_atomic");
        create_dir_all(&dir).unwrap();
        let path = dir.join("a.txt");
        write_atomic(&path, |w| w.write_all(b"first")).unwrap();
        let failed = write_atomic(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        let err = failed.unwrap_err().to_string();
        let tmp_name = format!("a.txt.{}.", std::process::id());
        assert!(
            err.contains(&tmp_name) && err.contains(".tmp") && err.contains("disk full"),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "the temporary file is removed"
        );
        let missing = dir.join("no_such_dir").join("b.txt");
        let err = write_atomic(&missing, |w| w.write_all(b"x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no_such_dir"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers of one file in parallel each fill their own temporary file:
    /// every rename publishes a whole file, none fails for want of its
    /// temporary file (a shared `NAME.tmp` made them steal each other's).
    #[test]
    fn concurrent_writers_of_one_file_do_not_collide() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson_atomic_race");
        create_dir_all(&dir).unwrap();
        let path = dir.join("shared.txt");
        let contents: Vec<Vec<u8>> = (0..8u8).map(|k| vec![b'a' + k; 200_000]).collect();
        std::thread::scope(|s| {
            for content in &contents {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..10 {
                        write_atomic(path, |w| {
                            for chunk in content.chunks(1000) {
                                w.write_all(chunk)?;
                            }
                            Ok(())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let written = fs::read(&path).unwrap();
        assert!(contents.contains(&written), "a mixed or partial file");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
