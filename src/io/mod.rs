//! Result files: VTK XML for ParaView ([`vtk`]), OpenFOAM fields ([`foam_field`]).
//!
//! Every file is written atomically (see [`write_atomic`]): a reader such as
//! ParaView reloading a series while the solver runs never sees half a file.

pub mod foam_field;
pub mod vtk;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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

/// Writes `path` atomically: `write` fills `path` + `.tmp` in the same directory
/// (so the rename stays on one file system), which is then renamed over `path`.
/// On failure the temporary file is removed and `path` is left as it was.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let mut tmp_name = path
        .file_name()
        .ok_or_else(|| OutputError::invalid(format!("{}: not a file name", path.display())))?
        .to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let written = fs::File::create(&tmp).and_then(|file| {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()
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

/// Creates `dir` and its parents, naming `dir` on failure.
pub fn create_dir_all(dir: &Path) -> Result<(), OutputError> {
    fs::create_dir_all(dir).map_err(|e| OutputError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_or_leaves_the_file() {
        let dir = std::env::temp_dir().join(format!("fvpoisson_atomic_{}", std::process::id()));
        create_dir_all(&dir).unwrap();
        let path = dir.join("a.txt");
        write_atomic(&path, |w| w.write_all(b"first")).unwrap();
        let failed = write_atomic(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        let err = failed.unwrap_err().to_string();
        assert!(
            err.contains("a.txt.tmp") && err.contains("disk full"),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert!(!dir.join("a.txt.tmp").exists());
        let missing = dir.join("no_such_dir").join("b.txt");
        let err = write_atomic(&missing, |w| w.write_all(b"x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no_such_dir"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
