//! fvpoisson: finite-volume pressure-Poisson solver on unstructured meshes.
//!
//! The modules read as the pipeline: `mesh` (topology, OpenFOAM-exact geometry,
//! loaders and generators) → `fvm` → `sparse` → `solve` → `gpu` → `case` → `io` → `cli`.
//!
//! The library holds the product only: the measurements and studies of
//! `fvpoisson bench` and `fvpoisson preconditioners` are modules of the
//! binary (`src/bench/`), which plugs them into [`cli::main`].

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
pub mod slices;
pub mod solve;
pub mod sparse;
pub mod timings;
pub mod validate;

#[cfg(test)]
mod test_support;
