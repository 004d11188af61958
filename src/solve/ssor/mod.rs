//! SSOR: symmetric successive over-relaxation as a preconditioner (Young
//! 1950; Axelsson 1994, §7.2). With A = L + D + Lᵀ and relaxation ω in (0, 2),
//!
//! M = ω / (2 − ω) · (D/ω + L) (D/ω)⁻¹ (D/ω + Lᵀ),
//!
//! symmetric positive definite when A is, so PCG takes it; ω = 1 is
//! symmetric Gauss–Seidel (`sgs`). z = M⁻¹ r is a forward sweep
//! y = ω D⁻¹ (r − L y) and a backward sweep z = (2 − ω)/ω · y − ω D⁻¹ Lᵀ z,
//! one matrix read each.
//!
//! "Lower" is in a row order: the natural one on the CPU ([`Ssor::new`]),
//! a multicolour one on the GPU ([`Ssor::in_colours`], the Jones–Plassmann
//! colouring of `solve::colouring`), where the rows of one colour, never
//! neighbours, update at once. The order changes M, not its properties;
//! the GPU is tested against the CPU in the same colouring.
//!
//! Layout: this folder is the algorithm's home. `mod.rs` holds the settings,
//! their one parser ([`SsorSettings::from_keys`], used by the command line
//! `SSOR:omega=1.2`, case.toml `preconditioner = { name = "SSOR", omega =
//! 1.2 }` and fvSolution `preconditioner { preconditioner SSOR; omega 1.2; }`)
//! and these docs; `cpu.rs` the CPU sweeps; `cuda.rs` the device
//! preconditioner (compiled as `gpu::ssor`, so `solve` does not depend on
//! `gpu`) with its kernel in `kernels/ssor.cu`.

mod cpu;

use std::fmt;

pub use cpu::Ssor;

use super::algorithm::{Algorithm, KeyValues};
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// SSOR's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SsorSettings {
    /// Relaxation ω in (0, 2); 1 is symmetric Gauss–Seidel.
    pub omega: f64,
}

impl Default for SsorSettings {
    fn default() -> Self {
        Self { omega: 1.0 }
    }
}

impl fmt::Display for SsorSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SSOR:omega={}", self.omega)
    }
}

impl Algorithm for SsorSettings {
    const NAME: &'static str = "SSOR";
    const KEYS: &'static [&'static str] = &["omega"];

    fn from_keys(keys: &KeyValues) -> Result<Self, String> {
        let mut s = Self::default();
        if let Some(omega) = keys.parsed("omega", "a number")? {
            s.omega = omega;
        }
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        if self.omega.is_finite() && self.omega > 0.0 && self.omega < 2.0 {
            Ok(())
        } else {
            Err(format!(
                "omega must be in (0, 2) for M to be positive definite, got {}",
                self.omega
            ))
        }
    }

    fn build_cpu<'a>(&self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
        Ok(Box::new(Ssor::new(a, self.omega)?))
    }
}

#[cfg(test)]
mod tests;
