//! OpenFOAM `constant/polyMesh` reader and writer.
// Placeholder API, replaced by the polyMesh branch.

use super::{Mesh, MeshError};
use std::path::Path;

/// Encoding of written OpenFOAM files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoamFormat {
    Ascii,
    Binary,
}

/// Reads a mesh from a case directory, a `constant/polyMesh` directory or its parent.
pub fn read_polymesh(path: &Path) -> Result<Mesh, MeshError> {
    Err(MeshError::InFile {
        file: path.to_path_buf(),
        msg: "polyMesh reading is not built yet".into(),
    })
}

/// Writes `mesh` as `dir/{points,faces,owner,neighbour,boundary}` (`.gz` when `compress`).
pub fn write_polymesh(
    _mesh: &Mesh,
    dir: &Path,
    _format: FoamFormat,
    _compress: bool,
) -> Result<(), MeshError> {
    Err(MeshError::InFile {
        file: dir.to_path_buf(),
        msg: "polyMesh writing is not built yet".into(),
    })
}
