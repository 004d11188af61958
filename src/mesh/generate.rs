//! Built-in mesh generators: boxes of hexahedra or tetrahedra.
// Placeholder API, replaced by the generator branch.

use super::{Mesh, MeshError};
use std::str::FromStr;

/// A generated box mesh, parsed from a spec like `box:64x64x64` (options follow).
#[derive(Clone, Debug, PartialEq)]
pub struct BoxSpec {
    pub cells: [usize; 3],
}

impl FromStr for BoxSpec {
    type Err = MeshError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Err(MeshError::invalid(format!("box generator is not built yet: {s}")))
    }
}

impl BoxSpec {
    pub fn generate(&self) -> Result<Mesh, MeshError> {
        Err(MeshError::invalid("box generator is not built yet"))
    }
}
