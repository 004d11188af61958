//! Truncated Neumann-series preconditioner NeuM (Gupta, van Gijzen & Vuik
//! 2011, §3.3; Neu1 and Neu2 there): only sparse products, no triangular
//! solves, so every row is independent (the GPU runs them as masked
//! mod-SELL products, `gpu::neumann::DeviceNeumann`).
//!
//! On the Jacobi-scaled matrix Ã = D^-1/2 A D^-1/2 with L̃ its strictly lower
//! part, M̃⁻¹ = K̃ᵀ K̃ with K̃ = Σ_{j=0}^{m} (−L̃)^j, m the `order` (m = 1: Neu1,
//! m = 2: Neu2). Mapped back to A (M⁻¹ = D^-1/2 M̃⁻¹ D^-1/2) that is
//! M⁻¹ = Kᵀ D⁻¹ K with K = Σ_{j=0}^{m} (−L D⁻¹)^j, so the scaled matrix is
//! never formed. Written with the scaled vectors ŷ = D⁻¹ y, both factors
//! are m Horner steps of the same shape, out = base − D⁻¹ T g with T the
//! strictly lower (L) or upper (U = Lᵀ) part of A:
//!
//! - ŷ₀ = D⁻¹ r,  ŷ_{k+1} = ŷ₀ − D⁻¹ L ŷ_k   (ŷ_m = D⁻¹ K r);
//! - û₀ = ŷ_m,    û_{k+1} = ŷ_m − D⁻¹ U û_k  (z = û_m = Kᵀ D⁻¹ K r).
//!
//! M⁻¹ is SPD whenever A has a positive diagonal, for every order (K is unit
//! lower triangular), so PCG takes it; an application costs about m matrix
//! reads. Gupta et al. study m = 1 and 2; higher orders are allowed up to
//! [`MAX_ORDER`].
//!
//! Deflated PCG (`solve::deflation`, `gpu::deflation`) takes it as its inner
//! preconditioner, as in Gupta et al.'s DPCG.
//!
//! Layout: this folder is the algorithm's home, as `solve/ssor/` is SSOR's.
//! `mod.rs` holds the settings, their one parser
//! ([`NeumannSettings::from_keys`], used by the command line `neu2` or
//! `truncatedNeumann:order=2`, case.toml `preconditioner = "neu2"` or
//! `preconditioner = { name = "truncatedNeumann", order = 2 }` and
//! fvSolution `preconditioner { preconditioner truncatedNeumann; order 2; }`)
//! and these docs; `cpu.rs` the CPU Horner steps; `cuda.rs` the device
//! preconditioner (compiled as `gpu::neumann`, so `solve` does not depend on
//! `gpu`) with its kernels in `kernels/neumann.cu`. The name `Neumann` (any
//! case) is the Neumann-series *polynomial* in the Jacobi-scaled matrix
//! (`solve::polynomial`), a different preconditioner; this one answers to
//! `truncatedNeumann`, `neu` and `neuM`.

mod cpu;

use std::fmt;

pub use cpu::TruncatedNeumann;

use super::algorithm::{Algorithm, KeyValues};
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// The highest order accepted: each order adds two triangle products (about
/// one matrix read) to every application while the gain shrinks (Gupta et
/// al. 2011, Table 1: κ 2.66e3 with Neu1, 1.74e3 with Neu2, against 9.68e3
/// unpreconditioned), so a larger number is more likely a slip than a setting.
pub const MAX_ORDER: usize = 8;

/// The truncated Neumann preconditioner's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeumannSettings {
    /// The last power m of the truncated series, 1 to [`MAX_ORDER`].
    pub order: usize,
}

impl NeumannSettings {
    /// Gupta et al.'s (2011) Neu1.
    pub const NEU1: Self = Self { order: 1 };
    /// Gupta et al.'s (2011) Neu2.
    pub const NEU2: Self = Self { order: 2 };
}

impl Default for NeumannSettings {
    fn default() -> Self {
        Self::NEU1
    }
}

/// `neuM`, the short name, which parses back to the same settings.
impl fmt::Display for NeumannSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "neu{}", self.order)
    }
}

impl Algorithm for NeumannSettings {
    const NAME: &'static str = "truncatedNeumann";
    const KEYS: &'static [&'static str] = &["order"];
    const POSITIONAL: Option<&'static str> = Some("order");

    fn from_keys(keys: &KeyValues) -> Result<Self, String> {
        let mut s = Self::default();
        if let Some(order) = keys.parsed("order", "a whole number")? {
            s.order = order;
        }
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        if (1..=MAX_ORDER).contains(&self.order) {
            Ok(())
        } else {
            Err(format!(
                "order must be 1 (Neu1) to {MAX_ORDER}, got {}",
                self.order
            ))
        }
    }

    fn build_cpu<'a>(&self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
        Ok(Box::new(TruncatedNeumann::new(a, self)?))
    }
}

#[cfg(test)]
mod tests;
