//! Incomplete LU for nonsymmetric matrices (Yang 2015, §2.9–2.11): ILU(k) as
//! Yang 2015 decouples it — the symbolic level-of-fill pattern
//! (`sparse::fill`), then ILU(0) in the IKJ order on A padded with zeros at
//! the fill positions — and OpenFOAM's DILU, which modifies only the
//! diagonal.
//!
//! The factors live in the padded matrix's slots: L strictly lower with a
//! unit diagonal, U on and above the diagonal. No pivoting: a pivot u_ii with
//! |u_ii| ≤ ε·max_j |a_ij| (ε the machine epsilon, the row of the padded
//! matrix) is a [`SolveError::ZeroPivot`] naming the row. The GPU
//! (`gpu::ilu`) factorises and sweeps level by level with the same
//! operations in the same order, so its factors equal these bit for bit.
//!
//! Levels: the forward sweep (and the factorisation) of row i waits for the
//! rows j < i of its L row, the backward sweep for the rows j > i of its U
//! row; `sparse::levels` groups them. Fill adds dependencies, so ILU(1) has
//! more levels than ILU(0), and the row order decides the count (natural
//! order on a 3-D grid: the wavefronts nx + ny + nz − 2; RCM about the same;
//! a multicolour order few levels but a weaker factor).
//!
//! Layout: this folder is the algorithm's home. `mod.rs` holds the fill
//! level, its one parser ([`fill_level_from_keys`], which the registry's
//! `ILU` registration calls: the command line `ilu1` / `iluk:2`, case.toml
//! `preconditioner = { name = "ILU", fillLevel = 1 }` and fvSolution
//! `preconditioner { preconditioner ILU; fillLevel 1; }`), the host set-up
//! both sides share (the symbolic pattern, the diagonal slots, the pivot
//! thresholds and the zero-pivot error) and these docs; `cpu.rs` the CPU
//! factorisation and sweeps of ILU(k) and DILU; `cuda.rs` the device
//! ILU(k) (compiled as `gpu::ilu`, so `solve` does not depend on `gpu`),
//! with its kernels in `kernels/ilu.cu`, and the device preconditioner
//! GMRES / BiCGStab build for ILU(k), Schwarz, DIC, DILU and IC(0); DILU's
//! device form is DIC's (`gpu::ic`); `tests.rs` the tests. The settings
//! stay `Preconditioner::Ilu(k)` and `PreconditionerKind::Dilu` (not a
//! `Registered` algorithm): the GPU's PCG and Krylov paths match those
//! values.

mod cpu;

pub use cpu::{dilu, dilu_factor, Ilu};

use super::algorithm::KeyValues;
use super::checks::check_square;
use super::SolveError;
use crate::sparse::fill::{ilu_pattern, FillPattern};
use crate::sparse::Csr;

/// The highest ILU fill level accepted (Yang 2015 uses 0 to 3).
pub const MAX_FILL_LEVEL: u32 = 8;

/// An ILU fill level that is too high for the pattern to stay sparse.
pub fn check_fill_level(k: u32) -> Result<(), String> {
    if k > MAX_FILL_LEVEL {
        return Err(format!(
            "ILU fill level {k} is too high (at most {MAX_FILL_LEVEL}; Yang 2015 uses 0 to 3)"
        ));
    }
    Ok(())
}

/// An ILU fill level from text (`ilu1`'s `1`, `iluk:2`'s `2`).
pub fn parse_fill_level(k: &str) -> Result<u32, String> {
    let k: u32 = k.trim().parse().map_err(|_| {
        format!("ILU fill level must be a whole number (ilu0, ilu1, iluk:K), not '{k}'")
    })?;
    check_fill_level(k)?;
    Ok(k)
}

/// ILU(k)'s fill level from a registered name and its keys: k from the name
/// (`ilu0`, `ilu1`) or the `fillLevel` key (`ILU`, `iluk`), not both.
pub fn fill_level_from_keys(name: &str, keys: &KeyValues) -> Result<u32, String> {
    let lower = name.to_ascii_lowercase();
    let from_name = match lower.strip_prefix("ilu") {
        Some("" | "k") | None => None,
        Some(k) => Some(parse_fill_level(k)?),
    };
    let k = match (from_name, keys.get("fillLevel")) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{name} names its fill level; give ILU with fillLevel, or {name} alone"
            ))
        }
        (Some(k), None) => k,
        (None, Some(v)) => parse_fill_level(v)?,
        (None, None) if lower == "iluk" => {
            return Err("iluk needs its fill level (iluk:K or fillLevel K)".into())
        }
        (None, None) => 0,
    };
    check_fill_level(k)?;
    Ok(k)
}

/// The pivot threshold of each row: ε times the row's largest |a_ij|.
pub fn pivot_thresholds(a: &Csr) -> Vec<f64> {
    (0..a.n_rows())
        .map(|i| f64::EPSILON * a.row(i).1.iter().fold(0.0f64, |m, v| m.max(v.abs())))
        .collect()
}

/// Whether `u` passes as a pivot against `tiny` (false for NaN).
pub fn pivot_ok(u: f64, tiny: f64) -> bool {
    u.abs() > tiny && u.is_finite()
}

/// The ILU(k) pattern of `a` as a solve error when `a` is not square.
pub fn symbolic(a: &Csr, k: u32) -> Result<FillPattern, SolveError> {
    check_square(a)?;
    ilu_pattern(a, k).map_err(SolveError::InvalidControls)
}

/// Slot of each row's diagonal (the padded pattern always has it).
pub fn diagonal_slots(p: &Csr) -> Vec<usize> {
    (0..p.n_rows())
        .map(|i| p.slot(i, i).expect("the ILU pattern holds every diagonal"))
        .collect()
}

/// The zero-pivot error of ILU(k) at `row`.
pub fn zero_pivot(k: u32, row: usize, value: f64) -> SolveError {
    SolveError::ZeroPivot {
        precond: match k {
            0 => "ILU(0)",
            1 => "ILU(1)",
            2 => "ILU(2)",
            3 => "ILU(3)",
            _ => "ILU(k)",
        },
        row,
        value,
    }
}

/// For each slot (j, i) of `a` the slot (i, j); an error naming `precond`
/// when the pattern is not symmetric (FVM matrices always have one).
pub fn transposed_slots(a: &Csr, precond: &str) -> Result<Vec<usize>, SolveError> {
    let mut t = vec![0usize; a.nnz()];
    for k in 0..a.n_rows() {
        let (cols, _) = a.row(k);
        for (s, &i) in (a.row_ptr()[k]..).zip(cols) {
            t[s] = a.slot(i as usize, k).ok_or_else(|| {
                SolveError::InvalidControls(format!(
                    "{precond} needs a symmetric pattern: entry ({k}, {i}) has no ({i}, {k})"
                ))
            })?;
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests;
