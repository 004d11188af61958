//! fvpoisson: finite-volume pressure-Poisson solver on unstructured meshes.
//!
//! The modules read as the pipeline: `mesh` (topology, OpenFOAM-exact geometry,
//! loaders and generators) → `fvm` → `sparse` → `solve` → `gpu` → `case` → `io` → `cli`.

pub mod case;
pub mod cli;
pub mod flow;
pub mod foam;
pub mod fvm;
pub mod gpu;
pub mod io;
pub mod limits;
pub mod mesh;
pub mod parallel;
pub mod precond_study;
pub mod slices;
pub mod solve;
pub mod sparse;
pub mod timings;
pub mod validate;
