//! Gmsh `.msh` reader (4.1 ASCII and binary, 2.2 ASCII).
// Placeholder API, replaced by the gmsh branch.

use super::{Mesh, MeshError};
use std::path::Path;

/// Reads a volume mesh; physical surface groups become patches.
pub fn read_msh(path: &Path) -> Result<Mesh, MeshError> {
    Err(MeshError::InFile {
        file: path.to_path_buf(),
        msg: "gmsh reading is not built yet".into(),
    })
}
