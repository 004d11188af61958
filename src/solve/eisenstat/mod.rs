//! Symmetric Gauss–Seidel PCG by Eisenstat's trick (Eisenstat 1981): the
//! iterates of SGS-PCG (SSOR, ω = 1,
//! [`super::PreconditionerKind::SymGaussSeidel`]) at the cost of about one
//! matrix read per iteration instead of an SpMV and two sweeps.
//!
//! With Â = D^-1/2 A D^-1/2 = I + L + Lᵀ (L strictly lower in the row order;
//! in a colour-contiguous order: the columns of earlier colours) and C = I + L,
//! SGS is M = D^1/2 C Cᵀ D^1/2, and PCG with M is plain CG on
//! C⁻¹ Â C⁻ᵀ. Since Â = C + Cᵀ − I, that operator applied to p is
//! t + s with t = (I + Lᵀ)⁻¹ p (a backward sweep over the upper part) and
//! s = (I + L)⁻¹ (p − t) (a forward sweep over the lower part).
//!
//! The CG runs on ρ = C⁻¹ D^-1/2 r (ρ · ρ is SGS-PCG's r · z, p · (t + s) its
//! p · A p), but x and the residual r = b − A x of the original system are
//! carried along every iteration, so the stopping test is OpenFOAM's on the
//! original system, iteration for iteration, as in [`super::pcg()`]:
//! x += α D^-1/2 t (the step of the original x is D^-1/2 C⁻ᵀ p = D^-1/2 t) and
//! r −= α D^1/2 g with g = Â t = p + L t, which the forward sweep sums beside s
//! from the same matrix entries (one more gather, no more matrix reads). That
//! costs two vector reads and a write more than a CG on ρ alone, and no
//! recomputation of the residual at the end.
//!
//! [`ResidualCheck::Predicted`] drops that: the forward sweep skips g, the
//! update skips r, and the residual is computed as r = D^1/2 C ρ (a product
//! with the lower triangle: the residual the recursion carries, as PCG's r)
//! only when ‖ρ‖₂, scaled by the ratio Σ|r| / ‖ρ‖₂ of the last check,
//! predicts convergence, or `max_interval` iterations after the last check.
//! The reported history then holds the checked residuals only; the solve
//! may run a few iterations past the first converged one.
//!
//! [`eisenstat_cg`] is the loop, written once over [`EisenstatBackend`] (the
//! method's fused steps on an `executor::Executor`'s vectors); the CPU
//! backend [`CpuEisenstat`] (sequential sweeps in row order) is the reference
//! of the GPU one (`gpu::eisenstat::DeviceEisenstat`, multicolour sweeps on
//! the colour-contiguous order: the same sweeps, rows of one colour being
//! uncoupled).
//!
//! Layout: this folder is the method's home, as `solve/ssor/` is SSOR's.
//! `mod.rs` holds the residual checks, the method trait, the loop, the
//! length-sorted row order both set-ups of the GPU use, and these docs;
//! `cpu.rs` the scaled split ([`ScaledTriangles`], also the GPU's host
//! set-up), the CPU backend and the CPU solve ([`solve_eisenstat`], what
//! `eisenstatSGS` runs on the CPU); `cuda.rs` the device backend (compiled as
//! `gpu::eisenstat`, so `solve` does not depend on `gpu`) with its kernels in
//! `kernels/eisenstat.cu`; `tests.rs` the CPU tests against SGS-PCG and a
//! dense reference (the device is compared with the CPU in
//! `tests/gpu_eisenstat.rs`). Eisenstat SGS is a solver method rather than a
//! preconditioner applied by PCG, so it is not a `Registered` algorithm:
//! `PreconditionerKind::EisenstatSgs` selects it.

mod cpu;

use super::pcg::StopReason;
use super::{Executor, InitialNorms, SolveError, SolverControls, SolverPerformance};
use crate::sparse::Csr;

pub use cpu::{solve_eisenstat, solve_eisenstat_with, CpuEisenstat, ScaledTriangles};

/// Rows renumbered inside each colour of a colour-contiguous `a` (colour k
/// is rows `colour_ptr[k]..colour_ptr[k + 1]`) so that rows with as many
/// lower-triangle (then upper-triangle) entries share SELL slices: in every
/// run of `window` rows of a colour, the longest first (stable; SELL-C-σ's
/// sort, Kreutzer et al. 2014). The GPU's triangles then carry less padding;
/// rows of one colour are uncoupled, so the order inside a colour does not
/// change the preconditioner. Returns new → old.
pub fn length_sorted_order(a: &Csr, colour_ptr: &[usize], window: usize) -> Vec<u32> {
    let lengths = |r: usize| {
        let cols = a.row(r).0;
        let lower = cols.iter().filter(|&&c| (c as usize) < r).count();
        let upper = cols.iter().filter(|&&c| (c as usize) > r).count();
        std::cmp::Reverse((lower, upper))
    };
    let mut order = Vec::with_capacity(a.n_rows());
    for colour in colour_ptr.windows(2) {
        let mut start = colour[0];
        while start < colour[1] {
            let end = (start + window.max(1)).min(colour[1]);
            let mut rows: Vec<u32> = (start as u32..end as u32).collect();
            rows.sort_by_key(|&r| lengths(r as usize));
            order.extend(rows);
            start = end;
        }
    }
    order
}

/// When [`eisenstat_cg`] measures the residual of the original system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResidualCheck {
    /// r carried every iteration (g = Â t from the forward sweep): OpenFOAM's
    /// test after every iteration, as PCG.
    EveryIteration,
    /// The true residual when ‖ρ‖₂ predicts convergence, and at least every
    /// `max_interval` iterations (module documentation).
    Predicted { max_interval: usize },
}

/// The GPU solver's default (`eisenstatSGS` on the device): predicted
/// checks, at least every 50 iterations. The carried residual costs ~32 %
/// more bytes per iteration (README, Smoothers); the prediction stopped at
/// the carried residual's iteration on every mesh measured.
pub const DEFAULT_RESIDUAL_CHECK: ResidualCheck = ResidualCheck::Predicted { max_interval: 50 };

/// The work vectors of one solve: x and r of the original system, ρ, p and
/// the sweeps' t, s, g.
pub struct EisenstatVectors<'a, V> {
    pub x: &'a mut V,
    pub r: &'a mut V,
    pub rho: &'a mut V,
    pub p: &'a mut V,
    pub t: &'a mut V,
    pub s: &'a mut V,
    pub g: &'a mut V,
}

impl<'a, V> EisenstatVectors<'a, V> {
    /// The fields over `work`'s seven vectors in their order (x, r, ρ, p, t,
    /// s, g): scratch vectors for running the steps alone.
    pub fn from_slice(work: &'a mut [V]) -> Self {
        match work {
            [x, r, rho, p, t, s, g] => Self {
                x,
                r,
                rho,
                p,
                t,
                s,
                g,
            },
            _ => panic!("{} work vectors, not seven", work.len()),
        }
    }
}

/// The fused steps of [`eisenstat_cg`] on an [`Executor`]'s vectors (the
/// loop allocates them with `Executor::checked_vector`).
pub trait EisenstatBackend: Executor {
    /// r = b − A x, ρ = C⁻¹ D^-1/2 r; returns the norms of r
    /// (`Executor::initialize`'s) and ρ · ρ.
    fn initialize_rho(
        &self,
        b: &Self::Vector,
        v: &mut EisenstatVectors<'_, Self::Vector>,
    ) -> Result<(InitialNorms, f64), SolveError>;
    /// One iteration: p = ρ + β p (β = 0: p = ρ), t = (I + Lᵀ)⁻¹ p, then
    /// s = (I + L)⁻¹ (p − t) and, when `carried`, g = p + L t, and p · q =
    /// p · (t + s); then, with α = `r_z` / p · q, x += α (t / √d),
    /// ρ −= α (t + s) and, when `carried`, r −= α (√d g). Returns p · q, Σ|r|
    /// (0 unless `carried`) and ρ · ρ. Where p · q is not positive the update
    /// may have run (the loop then stops with an error).
    fn iteration(
        &self,
        beta: f64,
        r_z: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Self::Vector>,
    ) -> Result<(f64, f64, f64), SolveError>;
    /// `count` (≥ 1) iterations without a read-back in between (the GPU
    /// keeps α and β on the device): the first with `beta`, the next ones
    /// with β = ρ · ρ / the previous ρ · ρ; returns each iteration's
    /// [`Self::iteration`] triple, stopping after one whose p · q is not
    /// positive. Predicted checks ask for more than one at a time up to
    /// [`Self::max_chunk`].
    fn iterations(
        &self,
        beta: f64,
        r_z: f64,
        count: usize,
        carried: bool,
        v: &mut EisenstatVectors<'_, Self::Vector>,
    ) -> Result<Vec<(f64, f64, f64)>, SolveError> {
        let (mut beta, mut r_z) = (beta, r_z);
        let mut records = Vec::with_capacity(count);
        for _ in 0..count.max(1) {
            let record = self.iteration(beta, r_z, carried, v)?;
            records.push(record);
            if broke_down(record.0) {
                break;
            }
            (beta, r_z) = (record.2 / r_z, record.2);
        }
        Ok(records)
    }
    /// The most iterations [`eisenstat_cg`] runs between read-backs with
    /// predicted checks (1: every iteration is read back).
    fn max_chunk(&self) -> usize {
        1
    }
    /// r = D^1/2 C ρ, the residual of the original system that the CG's
    /// recursion carries (PCG's r: b − A x up to the recursion's round-off);
    /// returns Σ|r|.
    fn residual_of_rho(
        &self,
        v: &mut EisenstatVectors<'_, Self::Vector>,
    ) -> Result<f64, SolveError>;
}

/// Whether an iteration's p · q = p · C⁻¹ Â C⁻ᵀ p is not positive (or NaN):
/// CG has broken down, the loop stops with an error, and iterations chained
/// after it are meaningless.
pub(crate) fn broke_down(p_q: f64) -> bool {
    p_q.is_nan() || p_q <= 0.0
}

/// SGS-PCG by Eisenstat's trick from the x in `x` (module documentation),
/// with [`super::pcg()`]'s stopping rules, errors and log line, the residual
/// measured as `check` says.
pub fn eisenstat_cg<B: EisenstatBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    check: ResidualCheck,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    const NAME: &str = "PCG (Eisenstat SGS)";
    controls.validate()?;
    let (mut r, mut rho, mut p) = (
        backend.checked_vector()?,
        backend.checked_vector()?,
        backend.checked_vector()?,
    );
    let (mut t, mut s, mut g) = (
        backend.checked_vector()?,
        backend.checked_vector()?,
        backend.checked_vector()?,
    );
    let mut v = EisenstatVectors {
        x,
        r: &mut r,
        rho: &mut rho,
        p: &mut p,
        t: &mut t,
        s: &mut s,
        g: &mut g,
    };
    let (norms, mut r_z) = backend.initialize_rho(b, &mut v)?;
    let (mut perf, run) = norms.start(controls)?;
    if let Some((limit, rule)) = run {
        let (initial, norm_factor) = (rule.initial, rule.norm_factor);
        let (mut r_z_old, mut last, mut best) = (0.0, initial, initial);
        let carried = check == ResidualCheck::EveryIteration;
        // Predicted checks: the last check's iteration and its ρ · ρ, the
        // last two estimates (for the chunk length) and a check that fell
        // due inside a chunk (made at the chunk's end, where x is).
        let (mut checked_at, mut r_z_checked) = (0, r_z);
        let (mut estimate, mut previous_estimate) = (initial, f64::NAN);
        let mut pending = false;
        let target = controls.tolerance.max(if controls.rel_tol > 0.0 {
            controls.rel_tol * initial
        } else {
            0.0
        });
        let mut iteration = 0;
        'solve: while iteration < limit {
            let count = match check {
                ResidualCheck::EveryIteration => 1,
                ResidualCheck::Predicted { max_interval } => {
                    // Iterations left at the last iteration's rate of decrease.
                    let rate = estimate / previous_estimate;
                    let left = if rate > 0.0 && rate < 1.0 && estimate > target {
                        ((target / estimate).ln() / rate.ln()).floor()
                    } else {
                        1.0
                    };
                    let to_check =
                        max_interval.max(1) - (iteration - checked_at).min(max_interval.max(1) - 1);
                    (left.clamp(1.0, backend.max_chunk().max(1) as f64) as usize)
                        .min(to_check)
                        .min(limit - iteration)
                }
            };
            let beta = if iteration == 0 { 0.0 } else { r_z / r_z_old };
            let records = backend.iterations(beta, r_z, count, carried, &mut v)?;
            if records.is_empty() {
                return Err(SolveError::Device(format!(
                    "the backend ran no iteration after iteration {iteration}"
                )));
            }
            let n_records = records.len();
            for (k, &(p_q, mut residual_sum, rho_rho)) in records.iter().enumerate() {
                iteration += 1;
                // rho . rho = 0 means r = D^1/2 C rho = 0: the exact solution,
                // whether or not the last residual check saw it.
                let seen = if r_z == 0.0 { 0.0 } else { last };
                match rule.after_precondition(r_z, seen) {
                    Some(StopReason::ExactSolution) => break 'solve,
                    Some(_) => {
                        return Err(SolveError::PreconditionerNotPositive { r_z, iteration })
                    }
                    None => {}
                }
                match rule.after_operator(p_q) {
                    Some(StopReason::ExactSolution) => break 'solve,
                    Some(_) => {
                        return Err(SolveError::Breakdown {
                            p_ap: p_q,
                            iteration,
                        })
                    }
                    None => {}
                }
                if let ResidualCheck::Predicted { max_interval } = check {
                    (previous_estimate, estimate) =
                        (estimate, last * (rho_rho / r_z_checked).sqrt());
                    pending |= iteration - checked_at >= max_interval.max(1)
                        || iteration == limit
                        || (controls.converged(initial, estimate)
                            && iteration >= controls.min_iter);
                    if !pending || k + 1 < n_records {
                        (r_z_old, r_z) = (r_z, rho_rho);
                        continue;
                    }
                    pending = false;
                    residual_sum = backend.residual_of_rho(&mut v)?;
                    (checked_at, r_z_checked) = (iteration, rho_rho);
                    (previous_estimate, estimate) = (f64::NAN, residual_sum / norm_factor);
                }
                let residual = residual_sum / norm_factor;
                let stop;
                (stop, best) = rule.record(&mut perf, iteration, residual, best, NAME, field)?;
                if stop {
                    break 'solve;
                }
                (r_z_old, r_z, last) = (r_z, rho_rho, residual);
            }
        }
    }
    perf.log(NAME, "iterations", field, controls);
    Ok(perf)
}

#[cfg(test)]
mod tests;
