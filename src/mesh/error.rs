use std::path::{Path, PathBuf};

/// Everything that can be wrong with a mesh or a mesh file. Each variant names
/// where the problem is (file and line, or the face/cell) and what it is.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// The mesh arrays break an invariant (message names the entity).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be parsed at `line` (1-based; 0 when the line is unknown).
    #[error("{}:{line}: {msg}", file.display())]
    Parse {
        file: PathBuf,
        line: usize,
        msg: String,
    },
    /// A problem found in the mesh read from `file`.
    #[error("{}: {msg}", file.display())]
    InFile { file: PathBuf, msg: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl MeshError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }

    pub fn parse(file: impl AsRef<Path>, line: usize, msg: impl Into<String>) -> Self {
        Self::Parse {
            file: file.as_ref().to_path_buf(),
            line,
            msg: msg.into(),
        }
    }

    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Names the file a mesh-level error came from; other errors pass unchanged.
    pub fn in_file(self, file: impl AsRef<Path>) -> Self {
        match self {
            Self::Invalid(msg) => Self::InFile {
                file: file.as_ref().to_path_buf(),
                msg,
            },
            other => other,
        }
    }
}
