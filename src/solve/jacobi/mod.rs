//! Jacobi: diagonal scaling as a preconditioner, M = diag(A), z = D⁻¹ r
//! (Saad 2003, §10.2), applied as OpenFOAM's `diagonalPreconditioner` (a
//! multiplication by 1/a_ii, the reciprocals computed once); and the
//! identity, M = I (`none`), its degenerate case.
//!
//! Jacobi is the preconditioner every executor has in its simplest form: on
//! the GPU, PCG fuses it into its preconditioning step (kernels/pcg.cu
//! `cg_precondition`, r · z in the same pass) and splits it over several
//! GPUs, which is why its settings stay `PreconditionerKind::Jacobi` (the
//! value those paths match) rather than a `Registered` algorithm; the
//! registry's `diagonal` entry reads them with [`JacobiSettings::from_keys`].
//!
//! Layout: this folder is the algorithm's home. `mod.rs` holds the settings,
//! their one parser ([`JacobiSettings::from_keys`], used by the command line
//! `--precond jacobi`, case.toml `preconditioner = "diagonal"` and
//! fvSolution `preconditioner diagonal;`; Jacobi takes no keys) and these
//! docs; `cpu.rs` the CPU operators; `cuda.rs` the device preconditioner
//! of GMRES, BiCGStab and every caller that takes a `DevicePreconditioner`
//! (compiled as `gpu::jacobi`, so `solve` does not depend on `gpu`), whose
//! kernel `kr_diagonal` is in `kernels/krylov.cu`.

mod cpu;

use std::fmt;

pub use cpu::{Identity, Jacobi};

use super::algorithm::{Algorithm, KeyValues};
use super::precond::{Preconditioner, PreconditionerKind};
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// Jacobi's settings: none (OpenFOAM's `diagonal` takes no keys).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JacobiSettings;

/// The log line's name of z = D⁻¹ r (`jacobi`) or of z = r, as OpenFOAM
/// names its preconditioners `diagonal` and `none` (`diagonalPCG`).
pub fn log_name(jacobi: bool) -> &'static str {
    let kind = if jacobi {
        PreconditionerKind::Jacobi
    } else {
        PreconditionerKind::None
    };
    kind.log_name().unwrap_or_default()
}

impl fmt::Display for JacobiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PreconditionerKind::Jacobi.name())
    }
}

impl From<JacobiSettings> for Preconditioner {
    /// The value the solvers match: `PreconditionerKind::Jacobi`.
    fn from(_: JacobiSettings) -> Self {
        Preconditioner::Kind(PreconditionerKind::Jacobi)
    }
}

impl Algorithm for JacobiSettings {
    const NAME: &'static str = "diagonal";
    const KEYS: &'static [&'static str] = &[];

    /// Refuses any key: a key given to Jacobi is a typo for another
    /// preconditioner's, not something to ignore.
    fn from_keys(keys: &KeyValues) -> Result<Self, String> {
        match keys.iter().next() {
            None => Ok(Self),
            Some((key, _)) => Err(format!("Jacobi takes no keys, got '{key}'")),
        }
    }

    fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    fn build_cpu<'a>(&self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
        Ok(Box::new(Jacobi::new(a)?))
    }
}

#[cfg(test)]
mod tests;
