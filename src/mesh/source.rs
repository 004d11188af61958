//! Where a mesh comes from: a case or polyMesh directory, a Gmsh file, or a generator spec.

use super::{block_mesh, generate::BoxSpec, gmsh, polymesh, Mesh, MeshError};
use std::path::{Path, PathBuf};

/// A mesh source named on the command line or in a case file.
#[derive(Clone, Debug, PartialEq)]
pub enum MeshSource {
    /// OpenFOAM case directory or `constant/polyMesh` directory; a case
    /// without `constant/polyMesh` but with `system/blockMeshDict` has its mesh
    /// built from the dictionary ([`block_mesh`]).
    PolyMesh(PathBuf),
    /// Gmsh `.msh` file.
    Gmsh(PathBuf),
    /// Built-in box generator (`box:...`).
    Box(BoxSpec),
}

impl MeshSource {
    /// Parses `box:...` as a generator spec, `*.msh` as a Gmsh file and a
    /// directory as an OpenFOAM case or polyMesh.
    pub fn parse(spec: &str) -> Result<Self, MeshError> {
        if spec.starts_with("box:") {
            return Ok(Self::Box(spec.parse()?));
        }
        let path = Path::new(spec);
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("msh"))
        {
            return Ok(Self::Gmsh(path.to_path_buf()));
        }
        if path.is_dir() {
            return Ok(Self::PolyMesh(path.to_path_buf()));
        }
        Err(MeshError::InFile {
            file: path.to_path_buf(),
            msg: if path.exists() {
                "cannot tell the mesh format: expected an OpenFOAM case or polyMesh directory, \
                 a Gmsh .msh file, or a generator spec like box:32x32x32"
                    .into()
            } else {
                "no such file or directory".into()
            },
        })
    }

    pub fn load(&self) -> Result<Mesh, MeshError> {
        match self {
            Self::PolyMesh(dir) => match block_mesh::block_mesh_dict(dir) {
                Some(dict) if !polymesh::has_polymesh(dir) => {
                    log::info!(
                        "{}: no constant/polyMesh; building the mesh from {}",
                        dir.display(),
                        dict.display()
                    );
                    block_mesh::read_block_mesh_dict(&dict)
                }
                _ => polymesh::read_polymesh(dir),
            },
            Self::Gmsh(file) => gmsh::read_msh(file),
            Self::Box(spec) => spec.generate(),
        }
    }
}

/// Parses and loads a mesh source in one step.
pub fn load(spec: &str) -> Result<Mesh, MeshError> {
    MeshSource::parse(spec)?.load()
}
