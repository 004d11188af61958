//! Symmetric Gauss–Seidel PCG by Eisenstat's trick (S. C. Eisenstat,
//! "Efficient implementation of a class of preconditioned conjugate gradient
//! methods", SIAM J. Sci. Stat. Comput. 2 (1981) 1–4): the iterates of
//! SGS-PCG (SSOR, ω = 1, [`super::PreconditionerKind::SymGaussSeidel`]) at the
//! cost of about one matrix read per iteration instead of an SpMV and two
//! sweeps.
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
//! method's fused steps on an `executor::Executor`'s vectors); the
//! CPU backend here (sequential sweeps in row order) is the reference of the
//! GPU one (`gpu::eisenstat`, multicolour sweeps on the colour-contiguous
//! order: the same sweeps, rows of one colour being uncoupled).

use rayon::prelude::*;

use super::checks::{check_system, on_copies};
use super::cpu::CpuBackend;
use super::jacobi::Identity;
use super::pcg::StopReason;
use super::reduce::{sum_pairs, CHUNK};
use super::triangles::Triangles;
use super::{Executor, InitialNorms, SolveError, SolverControls, SolverPerformance};
use crate::sparse::Csr;

/// The symmetrically scaled triangles of A: L and Lᵀ of Â = I + L + Lᵀ as
/// separate matrices (unit diagonal not stored), and D^∓1/2.
#[derive(Clone, Debug)]
pub struct ScaledTriangles {
    /// Strictly lower part of Â, columns ascending per row.
    pub lower: Csr,
    /// Strictly upper part of Â, columns ascending per row.
    pub upper: Csr,
    /// 1 / √a_ii.
    pub inv_sqrt_diag: Vec<f64>,
    /// √a_ii.
    pub sqrt_diag: Vec<f64>,
}

impl ScaledTriangles {
    /// Splits `a` (square, symmetric, positive diagonal: an error names the
    /// first row whose diagonal is missing or not positive).
    pub fn new(a: &Csr) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "Eisenstat SGS")?;
        let n = t.n();
        let sqrt_diag: Vec<f64> = (0..n).map(|r| t.diag(r).sqrt()).collect();
        let inv_sqrt_diag: Vec<f64> = sqrt_diag.iter().map(|d| 1.0 / d).collect();
        let part = |slots: &dyn Fn(usize) -> std::ops::Range<usize>| {
            let mut row_ptr = vec![0usize];
            let (mut cols, mut vals) = (Vec::new(), Vec::new());
            for r in 0..n {
                for s in slots(r) {
                    let c = t.col(s);
                    cols.push(c as u32);
                    vals.push(t.value(s) * inv_sqrt_diag[r] * inv_sqrt_diag[c]);
                }
                row_ptr.push(cols.len());
            }
            Csr::new(n, row_ptr, cols, vals).expect("a part of a valid matrix")
        };
        Ok(Self {
            lower: part(&|r| t.lower(r)),
            upper: part(&|r| t.upper(r)),
            inv_sqrt_diag,
            sqrt_diag,
        })
    }

    pub fn n(&self) -> usize {
        self.sqrt_diag.len()
    }

    /// Row i of the backward sweep: t_i = p_i − Σ_j U_ij t_j (columns ascending).
    pub fn backward_row(&self, i: usize, p_i: f64, t: &[f64]) -> f64 {
        let (cols, vals) = self.upper.row(i);
        let mut acc = 0.0;
        for (&c, &v) in cols.iter().zip(vals) {
            acc += v * t[c as usize];
        }
        p_i - acc
    }

    /// Row i of the forward sweep: (s_i, g_i) with s_i = (p_i − t_i) − Σ_j L_ij s_j
    /// and, `with_g`, g_i = p_i + Σ_j L_ij t_j (columns ascending; else g_i = 0).
    pub fn forward_row(
        &self,
        i: usize,
        p_i: f64,
        t: &[f64],
        s: &[f64],
        with_g: bool,
    ) -> (f64, f64) {
        let (cols, vals) = self.lower.row(i);
        let (mut acc_s, mut acc_t) = (0.0, 0.0);
        for (&c, &v) in cols.iter().zip(vals) {
            acc_s += v * s[c as usize];
            if with_g {
                acc_t += v * t[c as usize];
            }
        }
        let g_i = if with_g { p_i + acc_t } else { 0.0 };
        ((p_i - t[i]) - acc_s, g_i)
    }

    /// Row i of r = D^1/2 C ρ: r_i = √a_ii (ρ_i + Σ_j L_ij ρ_j).
    pub fn residual_row(&self, i: usize, rho: &[f64]) -> f64 {
        let (cols, vals) = self.lower.row(i);
        let mut acc = 0.0;
        for (&c, &v) in cols.iter().zip(vals) {
            acc += v * rho[c as usize];
        }
        self.sqrt_diag[i] * (rho[i] + acc)
    }

    /// Row i of ρ = C⁻¹ D^-1/2 r: ρ_i = r_i / √a_ii − Σ_j L_ij ρ_j.
    pub fn initial_row(&self, i: usize, r_i: f64, rho: &[f64]) -> f64 {
        let (cols, vals) = self.lower.row(i);
        let mut acc = 0.0;
        for (&c, &v) in cols.iter().zip(vals) {
            acc += v * rho[c as usize];
        }
        self.inv_sqrt_diag[i] * r_i - acc
    }
}

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
            if record.0.is_nan() || record.0 <= 0.0 {
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

/// The CPU reference: sequential sweeps in row order; the vector steps in
/// `reduce`'s fixed chunks.
pub struct CpuEisenstat<'a> {
    a: &'a Csr,
    split: ScaledTriangles,
    /// [`EisenstatBackend::max_chunk`] (1; more to test the chunked loop).
    max_chunk: usize,
}

impl<'a> CpuEisenstat<'a> {
    /// Eisenstat SGS on `a` in its row order (square, positive diagonal).
    pub fn new(a: &'a Csr) -> Result<Self, SolveError> {
        Ok(Self {
            a,
            split: ScaledTriangles::new(a)?,
            max_chunk: 1,
        })
    }

    /// Runs up to `max_chunk` iterations between read-backs with predicted
    /// checks, as the GPU may (the loop's chunking, tested on the CPU).
    pub fn with_max_chunk(mut self, max_chunk: usize) -> Self {
        self.max_chunk = max_chunk.max(1);
        self
    }

    pub fn split(&self) -> &ScaledTriangles {
        &self.split
    }
}

impl Executor for CpuEisenstat<'_> {
    type Vector = Vec<f64>;

    fn n(&self) -> usize {
        self.split.n()
    }

    fn new_vector(&self) -> Vec<f64> {
        vec![0.0; self.split.n()]
    }

    /// `CpuBackend`'s initial residual of A (in its row order).
    fn initialize(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> InitialNorms {
        let identity = Identity(self.split.n());
        let norms = CpuBackend::new(self.a, &identity).initialize(b, x, r);
        norms
    }

    fn dot(&self, a: &Vec<f64>, b: &Vec<f64>) -> f64 {
        super::reduce::dot(a, b)
    }

    fn sum_abs(&self, v: &Vec<f64>) -> f64 {
        super::reduce::sum_abs(v)
    }
}

impl EisenstatBackend for CpuEisenstat<'_> {
    fn initialize_rho(
        &self,
        b: &Vec<f64>,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> Result<(InitialNorms, f64), SolveError> {
        let norms = self.initialize(b, v.x, v.r);
        for i in 0..self.split.n() {
            v.rho[i] = self.split.initial_row(i, v.r[i], v.rho);
        }
        Ok((norms, self.dot(v.rho, v.rho)))
    }

    fn iteration(
        &self,
        beta: f64,
        r_z: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> Result<(f64, f64, f64), SolveError> {
        let p_q = self.sweeps(beta, carried, v);
        if p_q.is_nan() || p_q <= 0.0 {
            return Ok((p_q, f64::NAN, f64::NAN));
        }
        let (residual, rho_rho) = self.update(r_z / p_q, carried, v);
        Ok((p_q, residual, rho_rho))
    }

    fn max_chunk(&self) -> usize {
        self.max_chunk
    }

    fn residual_of_rho(&self, v: &mut EisenstatVectors<'_, Vec<f64>>) -> Result<f64, SolveError> {
        let sp = &self.split;
        let rho = &*v.rho;
        v.r.par_iter_mut().enumerate().for_each(|(i, r)| {
            *r = sp.residual_row(i, rho);
        });
        Ok(super::reduce::sum_abs(v.r))
    }
}

impl CpuEisenstat<'_> {
    /// The sweeps of [`EisenstatBackend::iteration`]; returns p · (t + s).
    fn sweeps(&self, beta: f64, carried: bool, v: &mut EisenstatVectors<'_, Vec<f64>>) -> f64 {
        let sp = &self.split;
        let n = sp.n();
        for i in (0..n).rev() {
            let p_i = if beta == 0.0 {
                v.rho[i]
            } else {
                v.rho[i] + beta * v.p[i]
            };
            v.p[i] = p_i;
            v.t[i] = sp.backward_row(i, p_i, v.t);
        }
        for i in 0..n {
            let (s_i, g_i) = sp.forward_row(i, v.p[i], v.t, v.s, carried);
            v.s[i] = s_i;
            v.g[i] = g_i;
        }
        let (p, t, s) = (&*v.p, &*v.t, &*v.s);
        super::reduce::sum_by(n, |i| p[i] * (t[i] + s[i]))
    }

    /// The update of [`EisenstatBackend::iteration`]; returns Σ|r| and ρ · ρ.
    fn update(
        &self,
        alpha: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, Vec<f64>>,
    ) -> (f64, f64) {
        let sp = &self.split;
        let (t, s, g) = (&*v.t, &*v.s, &*v.g);
        let sums: Vec<(f64, f64)> =
            v.x.par_chunks_mut(CHUNK)
                .zip(v.r.par_chunks_mut(CHUNK))
                .zip(v.rho.par_chunks_mut(CHUNK))
                .enumerate()
                .map(|(c, ((x, r), rho))| {
                    let (mut residual, mut rho_rho) = (0.0, 0.0);
                    for k in 0..x.len() {
                        let i = c * CHUNK + k;
                        x[k] += alpha * (sp.inv_sqrt_diag[i] * t[i]);
                        rho[k] -= alpha * (t[i] + s[i]);
                        if carried {
                            r[k] -= alpha * (sp.sqrt_diag[i] * g[i]);
                            residual += r[k].abs();
                        }
                        rho_rho += rho[k] * rho[k];
                    }
                    (residual, rho_rho)
                })
                .collect();
        sum_pairs(&sums)
    }
}

/// Solves A x = b on the CPU with SGS-PCG by Eisenstat's trick in row order,
/// from the x given, after PCG's input checks (square, symmetric, sizes,
/// finite values), the residual carried every iteration: PCG's semantics,
/// history included (the reference; the GPU defaults to
/// [`DEFAULT_RESIDUAL_CHECK`]).
pub fn solve_eisenstat(
    a: &Csr,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    solve_eisenstat_with(a, b, x, controls, ResidualCheck::EveryIteration, field)
}

/// [`solve_eisenstat`] with the residual checked as `check` says.
pub fn solve_eisenstat_with(
    a: &Csr,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    check: ResidualCheck,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    check_system(a, b, x, controls)?;
    let backend = CpuEisenstat::new(a)?;
    on_copies(b, x, |b, x| {
        eisenstat_cg(&backend, b, x, controls, check, field)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::{solve_pcg, PreconditionerKind};
    use crate::sparse::testing::{dense, random_symmetric};
    use nalgebra::DVector;

    fn rhs(n: usize) -> Vec<f64> {
        (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect()
    }

    #[test]
    fn same_iterates_as_sgs_pcg() {
        let a = random_symmetric(400, 6, 3);
        let b = rhs(400);
        let controls = SolverControls::absolute(1e-10, 200);
        let x0: Vec<f64> = (0..400).map(|i| (i % 5) as f64 * 0.1).collect();
        let (mut x_sgs, mut x_eis) = (x0.clone(), x0);
        let sgs = solve_pcg(
            &a,
            PreconditionerKind::SymGaussSeidel,
            &b,
            &mut x_sgs,
            &controls,
            "p",
        )
        .unwrap();
        let every = ResidualCheck::EveryIteration;
        let eis = solve_eisenstat_with(&a, &b, &mut x_eis, &controls, every, "p").unwrap();
        assert!(eis.converged && sgs.converged);
        assert_eq!(eis.iterations, sgs.iterations);
        for (k, (e, s)) in eis.history.iter().zip(&sgs.history).enumerate() {
            assert!(
                (e - s).abs() <= 1e-8 * s.abs() + 1e-15,
                "iteration {k}: {e} vs {s}"
            );
        }
        for (e, s) in x_eis.iter().zip(&x_sgs) {
            assert!((e - s).abs() < 1e-9 * (1.0 + s.abs()), "{e} vs {s}");
        }
        // The carried residual is the true one.
        let m = dense(&a);
        let r = DVector::from_column_slice(&b) - &m * DVector::from_column_slice(&x_eis);
        let true_sum: f64 = r.iter().map(|v| v.abs()).sum();
        let mut r0 = vec![0.0; 400];
        let norms = CpuBackend::new(&a, &Identity(400)).initialize(&b, &x_eis, &mut r0);
        assert!((true_sum - norms.residual_sum).abs() < 1e-9 * norms.norm_factor);
    }

    #[test]
    fn predicted_checks_stop_converged_on_the_recursion_residual() {
        // A perturbed tet box: a real FVM matrix, ~60 iterations.
        let (a, _) = crate::fvm::testing::poisson_system("box:10x10x10:tet:perturb=0.2").unwrap();
        let n = a.n_rows();
        let b = crate::fvm::testing::random_field(n, 3);
        let controls = SolverControls::absolute(1e-9, 500);
        let backend = CpuEisenstat::new(&a).unwrap();
        let run = |check| {
            let mut x = vec![0.0; n];
            let perf = eisenstat_cg(&backend, &b, &mut x, &controls, check, "p").unwrap();
            (perf, x)
        };
        let (every, _) = run(ResidualCheck::EveryIteration);
        // Chunks of up to 8 iterations between read-backs: the same solve,
        // checked at a chunk's end.
        let chunked = CpuEisenstat::new(&a).unwrap().with_max_chunk(8);
        let mut x = vec![0.0; n];
        let check = ResidualCheck::Predicted { max_interval: 10 };
        let c = eisenstat_cg(&chunked, &b, &mut x, &controls, check, "p").unwrap();
        println!(
            "chunks of up to 8: {} iterations, {} checks",
            c.iterations,
            c.history.len() - 1
        );
        assert!(c.converged && c.iterations >= every.iterations);
        assert!(c.iterations <= every.iterations + 8, "{}", c.iterations);
        let (predicted, x) = run(ResidualCheck::Predicted { max_interval: 10 });
        assert!(every.converged && predicted.converged);
        assert!(
            predicted.iterations >= every.iterations
                && predicted.iterations <= every.iterations + 10,
            "{} vs {}",
            predicted.iterations,
            every.iterations
        );
        // Fewer residuals recorded, the last one the true residual of x.
        assert!(predicted.history.len() < every.history.len());
        let mut r = vec![0.0; n];
        let identity = Identity(n);
        let cpu = CpuBackend::new(&a, &identity);
        // OpenFOAM's normFactor is the initial x's (x = 0).
        let norm_factor = cpu.initialize(&b, &vec![0.0; n], &mut r).norm_factor;
        // The checked residual is the recursion's: b − A x to round-off.
        let true_residual = cpu.initialize(&b, &x, &mut r).residual_sum / norm_factor;
        let d = (true_residual - predicted.final_residual).abs();
        assert!(
            d < 1e-3 * true_residual + 1e-10 * predicted.history[0],
            "{d}"
        );
        assert!(predicted.final_residual < controls.tolerance);
        println!(
            "every iteration: {} iterations; predicted: {} iterations, {} checks",
            every.iterations,
            predicted.iterations,
            predicted.history.len() - 1
        );
    }

    #[test]
    fn colour_contiguous_order_gives_multicolour_symgs_iterates() {
        // What the GPU runs: the rows renumbered colour by colour; natural
        // Eisenstat there is multicolour symGS-PCG in the original order.
        use crate::solve::colouring::Colouring;
        use crate::solve::{Preconditioner, SmootherSettings};
        for spec in ["box:10x10x10:tet:perturb=0.2:renumber", "box:12x12x12"] {
            let (a, _) = crate::fvm::testing::poisson_system(spec).unwrap();
            let n = a.n_rows();
            let b = crate::fvm::testing::random_field(n, 7);
            let controls = SolverControls::absolute(1e-8, 500);
            let (p, colouring) = Colouring::jones_plassmann(&a).contiguous();
            let mut x = vec![0.0; n];
            let eis = solve_eisenstat_with(
                &p.apply_symmetric(&a),
                &p.to_new(&b),
                &mut x,
                &controls,
                ResidualCheck::EveryIteration,
                "p",
            )
            .unwrap();
            let mc = Preconditioner::Smoother(
                SmootherSettings::named("multicolourSymGaussSeidel").unwrap(),
            );
            let mut x_mc = vec![0.0; n];
            let sgs = solve_pcg(&a, mc, &b, &mut x_mc, &controls, "p").unwrap();
            println!(
                "{spec}: {} colours, Eisenstat {} iterations, multicolour symGS {}",
                colouring.n_colours(),
                eis.iterations,
                sgs.iterations
            );
            assert_eq!(eis.iterations, sgs.iterations, "{spec}");
            let x = p.to_old(&x);
            for (e, s) in x.iter().zip(&x_mc) {
                assert!((e - s).abs() < 1e-7 * (1.0 + s.abs()), "{spec}: {e} vs {s}");
            }
        }
    }

    #[test]
    fn length_sorted_order_keeps_colours_and_iterates() {
        use crate::solve::colouring::Colouring;
        use crate::sparse::{Permutation, Sell};
        let (a, _) = crate::fvm::testing::poisson_system("box:12x12x12:tet:perturb=0.2").unwrap();
        let (p, colouring) = Colouring::jones_plassmann(&a).contiguous();
        let a = p.apply_symmetric(&a);
        let order = length_sorted_order(&a, colouring.colour_ptr(), 256);
        let q = Permutation::from_new_to_old(order.clone()).unwrap();
        let sorted = q.apply_symmetric(&a);
        // A permutation inside each colour: the same colour runs, no coupling inside.
        for (new, &old) in order.iter().enumerate() {
            assert_eq!(colouring.colours()[new], colouring.colours()[old as usize]);
        }
        assert!(colouring.conflict(&sorted).is_none());
        let padding = |m: &Csr| {
            let split = ScaledTriangles::new(m).unwrap();
            let slots = Sell::from_csr(&split.lower, 32).unwrap().cols().len()
                + Sell::from_csr(&split.upper, 32).unwrap().cols().len();
            slots as f64 / (split.lower.nnz() + split.upper.nnz()) as f64
        };
        let (before, after) = (padding(&a), padding(&sorted));
        println!("SELL slots per entry: {before:.3} in colour order, {after:.3} sorted");
        assert!(after < before);
        // The same preconditioner: the same iterations.
        let n = a.n_rows();
        let b = crate::fvm::testing::random_field(n, 2);
        let controls = SolverControls::absolute(1e-8, 500);
        let every = ResidualCheck::EveryIteration;
        let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
        let one = solve_eisenstat_with(&a, &b, &mut x, &controls, every, "p").unwrap();
        let two =
            solve_eisenstat_with(&sorted, &q.to_new(&b), &mut y, &controls, every, "p").unwrap();
        assert_eq!(one.iterations, two.iterations);
        let y = q.to_old(&y);
        for (x, y) in x.iter().zip(&y) {
            assert!((x - y).abs() < 1e-8 * (1.0 + x.abs()), "{x} vs {y}");
        }
    }

    #[test]
    fn operator_is_the_split_preconditioned_matrix() {
        // t + s = C⁻¹ Â C⁻ᵀ p, and g = Â t, checked densely.
        let a = random_symmetric(60, 5, 9);
        let backend = CpuEisenstat::new(&a).unwrap();
        let sp = backend.split();
        let n = 60;
        let d = DVector::from_column_slice(&sp.inv_sqrt_diag);
        let m = dense(&a);
        let hat = nalgebra::DMatrix::from_fn(n, n, |i, j| m[(i, j)] * d[i] * d[j]);
        let c = nalgebra::DMatrix::from_fn(n, n, |i, j| match i.cmp(&j) {
            std::cmp::Ordering::Greater => hat[(i, j)],
            std::cmp::Ordering::Equal => 1.0,
            std::cmp::Ordering::Less => 0.0,
        });
        let c_inv = c.clone().try_inverse().unwrap();
        let op = &c_inv * &hat * c_inv.transpose();
        let mut vecs: Vec<Vec<f64>> = (0..7).map(|_| vec![0.0; n]).collect();
        let [x, r, rho, p, t, s, g] = vecs.get_disjoint_mut([0, 1, 2, 3, 4, 5, 6]).unwrap();
        *rho = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut v = EisenstatVectors {
            x,
            r,
            rho,
            p,
            t,
            s,
            g,
        };
        let p_q = backend.sweeps(0.0, true, &mut v);
        let pv = DVector::from_column_slice(v.rho);
        let expected = &op * &pv;
        for i in 0..n {
            let w = v.t[i] + v.s[i];
            assert!(
                (w - expected[i]).abs() < 1e-12 * (1.0 + expected[i].abs()),
                "row {i}"
            );
        }
        assert!((p_q - pv.dot(&expected)).abs() < 1e-10 * p_q.abs());
        let ghat = &hat * DVector::from_column_slice(v.t);
        for i in 0..n {
            assert!(
                (v.g[i] - ghat[i]).abs() < 1e-12 * (1.0 + ghat[i].abs()),
                "g row {i}"
            );
        }
    }

    #[test]
    fn bad_diagonal_and_asymmetry_are_errors() {
        let a = crate::solve::error::non_positive::matrix();
        let err = CpuEisenstat::new(&a).err().unwrap();
        crate::solve::error::non_positive::assert_refused(&err, "Eisenstat");
        assert!(err.to_string().contains("row 1"), "{err}");
        let a = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![2., -1., 2.]).unwrap();
        let mut x = vec![0.0; 2];
        let err =
            solve_eisenstat(&a, &[1.0, 1.0], &mut x, &SolverControls::default(), "p").unwrap_err();
        assert!(matches!(err, SolveError::NotSymmetric { .. }), "{err}");
    }
}
