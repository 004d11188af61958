//! Preconditioned conjugate gradients with OpenFOAM's convergence test
//! (`PCG.C`, `lduMatrixSolver.C::normFactor`, `SolverPerformance::checkConvergence`),
//! written once over the fused steps of `CgBackend`, an extension of the
//! executor (`executor::Executor`, which holds the vectors, the initial
//! residual and the device status).
//!
//! The same loop is flexible PCG (Notay 2000, FCG(1)) when the backend's
//! preconditioner is not a fixed linear operator (a block smoother with an
//! inner CG, Wikberg 2024, §9.2): the backend then returns z · q from
//! [`CgBackend::flexible_term`] and β = −(z_{k+1} · A p_k)/(p_k · A p_k), the
//! Polak–Ribière form, replaces OpenFOAM's Fletcher–Reeves β = (r·z)_{k+1}/(r·z)_k.
//! For a symmetric linear preconditioner both are equal in exact arithmetic.

use super::executor::{Executor, InitialNorms};
use super::SolveError;
use crate::foam::write::{format_g, format_log};

/// Residual growth over the best residual seen that counts as divergence.
pub const DIVERGENCE_FACTOR: f64 = 1e10;

/// OpenFOAM's `solverPerformance::small_`, added to the normalisation factor.
pub const NORM_FACTOR_SMALL: f64 = 1e-20;

/// Stopping rules, OpenFOAM's `tolerance`, `relTol`, `maxIter`, `minIter`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SolverControls {
    /// Stop when the normalised residual drops below this.
    pub tolerance: f64,
    /// Stop when the residual drops below `rel_tol` × initial residual (0: off).
    pub rel_tol: f64,
    /// At most this many iterations; 0 does no iteration.
    pub max_iter: usize,
    /// At least this many iterations, even when already converged.
    pub min_iter: usize,
}

impl Default for SolverControls {
    /// OpenFOAM's defaults.
    fn default() -> Self {
        Self {
            tolerance: 1e-6,
            rel_tol: 0.0,
            max_iter: 1000,
            min_iter: 0,
        }
    }
}

/// More iterations than any solve takes: a larger `maxIter` is a typo,
/// refused before the solve rather than run for days.
pub const MAX_ITERATIONS: usize = 10_000_000;

impl SolverControls {
    /// Stop below the absolute `tolerance` or after `max_iter` iterations
    /// (relTol off, no minimum).
    pub fn absolute(tolerance: f64, max_iter: usize) -> Self {
        Self {
            tolerance,
            max_iter,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), SolveError> {
        for (name, v) in [("tolerance", self.tolerance), ("relTol", self.rel_tol)] {
            if !v.is_finite() || v < 0.0 {
                return Err(SolveError::InvalidControls(format!(
                    "{name} must be a finite number >= 0, got {v}"
                )));
            }
        }
        for (name, n) in [("maxIter", self.max_iter), ("minIter", self.min_iter)] {
            if n > MAX_ITERATIONS {
                return Err(SolveError::InvalidControls(format!(
                    "{name} {n} is more than the {MAX_ITERATIONS} allowed (a solve that has not \
                     converged by then will not; tolerance 0 with a smaller maxIter runs a fixed \
                     number of iterations)"
                )));
            }
        }
        Ok(())
    }

    /// Tolerance and relTol both 0: OpenFOAM's idiom for "run maxIter
    /// iterations"; stopping there is the plan, not a failure to converge.
    pub fn fixed_iterations(&self) -> bool {
        self.tolerance == 0.0 && self.rel_tol == 0.0
    }

    /// OpenFOAM `checkConvergence`: below the absolute tolerance, or (relTol
    /// switched on) below relTol × initial residual.
    pub fn converged(&self, initial: f64, residual: f64) -> bool {
        residual < self.tolerance || (self.rel_tol > 0.0 && residual < self.rel_tol * initial)
    }
}

/// What a solve did. Residuals are OpenFOAM-normalised (Σ|b − Ax| / normFactor).
#[derive(Clone, Debug, PartialEq)]
pub struct SolverPerformance {
    pub initial_residual: f64,
    pub final_residual: f64,
    pub iterations: usize,
    pub converged: bool,
    /// Residual before the first iteration, then after each iteration.
    pub history: Vec<f64>,
    /// The loop stopped at a vanishing inner product with the residual
    /// already zero (OpenFOAM's `checkSingularity`: PBiCGStab on a zero
    /// right-hand side with `tolerance 0`); the log line says "solution
    /// singularity" as OpenFOAM's does.
    pub singular: bool,
}

impl SolverPerformance {
    /// Before the first iteration: `initial` is the residual of the initial x.
    pub(crate) fn starting_at(initial: f64, controls: &SolverControls) -> Self {
        Self {
            initial_residual: initial,
            final_residual: initial,
            iterations: 0,
            converged: controls.converged(initial, initial),
            history: vec![initial],
            singular: false,
        }
    }

    /// OpenFOAM's log line of a finished solve by `solver`, and a warning
    /// when it did not converge after that many `unit` (iterations, sweeps).
    pub(crate) fn log(&self, solver: &str, unit: &str, field: &str, controls: &SolverControls) {
        if self.singular {
            log::info!("{solver}:  Solving for {field}:  solution singularity");
            return;
        }
        log::info!(
            "{solver}:  Solving for {field}, Initial residual = {}, Final residual = {}, No \
             Iterations {}",
            format_log(self.initial_residual),
            format_log(self.final_residual),
            self.iterations
        );
        if !self.converged && !controls.fixed_iterations() {
            log::warn!(
                "{solver}: {field} not converged after {} {unit} (final residual {}, tolerance \
                 {}, relTol {})",
                self.iterations,
                format_g(self.final_residual),
                format_g(controls.tolerance),
                format_g(controls.rel_tol)
            );
        }
    }
}

/// A Krylov solver's name in its log line: OpenFOAM's, the preconditioner's
/// name before the method's (`DICPCG`, `DILUPBiCGStab`), or the method's
/// alone where the preconditioner has no name.
pub(crate) fn solver_name(preconditioner: Option<&str>, method: &str) -> String {
    format!("{}{method}", preconditioner.unwrap_or(""))
}

impl InitialNorms {
    /// The start of a solver loop: the performance before the first
    /// iteration (its initial residual Σ|r| / normFactor, an error if not
    /// finite) and, when the loop runs at all (minIter > 0 or not converged,
    /// and a limit above 0), the iteration limit max(maxIter, minIter) and
    /// the stop rule (with the initial residual and normFactor).
    pub(crate) fn start(
        &self,
        controls: &SolverControls,
    ) -> Result<(SolverPerformance, Option<(usize, StopRule)>), SolveError> {
        let initial = self.residual_sum / self.norm_factor;
        check_residual(initial, 0)?;
        let perf = SolverPerformance::starting_at(initial, controls);
        let limit = controls.max_iter.max(controls.min_iter);
        let runs = (controls.min_iter > 0 || !perf.converged) && limit > 0;
        let rule = StopRule {
            controls: *controls,
            initial,
            norm_factor: self.norm_factor,
        };
        Ok((perf, runs.then_some((limit, rule))))
    }
}

/// The fused steps of PCG on an [`Executor`]'s vectors (host memory for the
/// CPU, device memory for a GPU); the initial residual, the vectors and the
/// device status are the executor's. Reductions must be deterministic: same
/// bits run to run.
pub trait CgBackend: Executor {
    /// z = M⁻¹ r; returns r · z.
    fn precondition(&self, r: &Self::Vector, z: &mut Self::Vector) -> f64;
    /// p = z + β p; β = 0 overwrites p with z (p may hold anything).
    fn update_direction(&self, beta: f64, z: &Self::Vector, p: &mut Self::Vector);
    /// q = A p; returns p · q.
    fn apply_operator(&self, p: &Self::Vector, q: &mut Self::Vector) -> f64;
    /// [`Self::update_direction`] then [`Self::apply_operator`]: p = z + β p,
    /// q = A p; returns p · q. A backend may fuse the two into one pass over
    /// p with the same operations per entry (the CPU's one-thread product).
    fn direction_and_operator(
        &self,
        beta: f64,
        z: &Self::Vector,
        p: &mut Self::Vector,
        q: &mut Self::Vector,
    ) -> f64 {
        self.update_direction(beta, z, p);
        self.apply_operator(p, q)
    }
    /// x += α p, r −= α q; returns Σ|r|.
    fn update_solution(
        &self,
        alpha: f64,
        p: &Self::Vector,
        q: &Self::Vector,
        x: &mut Self::Vector,
        r: &mut Self::Vector,
    ) -> f64;

    /// Runs up to `count` PCG iterations from `state` (precondition, direction,
    /// A p, update, as in `pcg`), stopping early where `rule` stops the loop, and
    /// returns one record per iteration started. A backend may run them all
    /// without returning to the host (the GPU keeps the scalars on the device and
    /// applies the same `rule` there); the host then replays the records through
    /// `rule` to build the log and the errors, so both paths stop at the same
    /// iteration.
    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, Self::Vector>,
    ) -> Vec<IterationRecord> {
        iterate_steps(self, rule, state, count, v)
    }

    /// Flexible PCG: z · q for the z just preconditioned and q = A p of the
    /// last iteration (still in q), when the preconditioner is not a fixed
    /// linear operator; `None` (the default) keeps Fletcher–Reeves β.
    fn flexible_term(&self, _z: &Self::Vector, _q: &Self::Vector) -> Option<f64> {
        None
    }

    /// The preconditioner's name in the log line ([`solver_name`]).
    fn preconditioner_name(&self) -> Option<&'static str> {
        None
    }
}

/// The four steps of [`CgBackend`] every backend must give, each passed on
/// unchanged to the backend in field `$inner` (written inside the `impl
/// CgBackend` block of a wrapper that adds or replaces other methods:
/// `iterate`, `flexible_term`, its own executor).
macro_rules! cg_steps_of {
    ($inner:ident) => {
        fn precondition(&self, r: &Self::Vector, z: &mut Self::Vector) -> f64 {
            self.$inner.precondition(r, z)
        }
        fn update_direction(&self, beta: f64, z: &Self::Vector, p: &mut Self::Vector) {
            self.$inner.update_direction(beta, z, p)
        }
        fn apply_operator(&self, p: &Self::Vector, q: &mut Self::Vector) -> f64 {
            self.$inner.apply_operator(p, q)
        }
        fn update_solution(
            &self,
            alpha: f64,
            p: &Self::Vector,
            q: &Self::Vector,
            x: &mut Self::Vector,
            r: &mut Self::Vector,
        ) -> f64 {
            self.$inner.update_solution(alpha, p, q, x, r)
        }
        fn preconditioner_name(&self) -> Option<&'static str> {
            self.$inner.preconditioner_name()
        }
    };
}
pub(crate) use cg_steps_of;

/// The PCG iterations of [`CgBackend::iterate`] driven one step at a time from
/// the host: the trait's default, and the path a backend takes when it cannot
/// fuse its preconditioner into a device loop.
pub fn iterate_steps<B: CgBackend + ?Sized>(
    backend: &B,
    rule: &StopRule,
    state: &LoopState,
    count: usize,
    v: CgVectors<'_, B::Vector>,
) -> Vec<IterationRecord> {
    let mut s = *state;
    let mut records = Vec::new();
    for _ in 0..count {
        let r_z = backend.precondition(v.r, v.z);
        let mut record = IterationRecord::preconditioned(r_z);
        if rule.after_precondition(r_z, s.last_residual).is_some() {
            records.push(record);
            break;
        }
        let beta = if s.iterations == 0 {
            0.0
        } else {
            match backend.flexible_term(v.z, v.q) {
                Some(z_q) => -z_q / s.p_q_old,
                None => r_z / s.r_z_old,
            }
        };
        record.p_q = backend.direction_and_operator(beta, v.z, v.p, v.q);
        if rule.after_operator(record.p_q).is_some() {
            records.push(record);
            break;
        }
        let alpha = r_z / record.p_q;
        record.residual = backend.update_solution(alpha, v.p, v.q, v.x, v.r) / rule.norm_factor;
        records.push(record);
        match s.next(rule, &record) {
            Some(next) => s = next,
            None => break,
        }
    }
    records
}

/// The work vectors of one PCG solve.
pub struct CgVectors<'a, V> {
    pub x: &'a mut V,
    pub r: &'a mut V,
    pub z: &'a mut V,
    pub p: &'a mut V,
    pub q: &'a mut V,
}

/// Where the PCG loop stands between iterations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopState {
    /// Iterations completed.
    pub iterations: usize,
    /// r · z of the last completed iteration (unused before the first).
    pub r_z_old: f64,
    /// p · A p of the last completed iteration (flexible PCG's β; unused before the first).
    pub p_q_old: f64,
    /// Normalised residual after the last completed iteration (the initial one before).
    pub last_residual: f64,
    /// Smallest normalised residual so far, the initial one included.
    pub best: f64,
}

impl LoopState {
    /// The state after a completed iteration with `record`.
    pub fn after(&self, record: &IterationRecord) -> LoopState {
        LoopState {
            iterations: self.iterations + 1,
            r_z_old: record.r_z,
            p_q_old: record.p_q,
            last_residual: record.residual,
            best: self.best.min(record.residual),
        }
    }

    /// [`Self::after`] the completed iteration `record`, or `None` where
    /// `rule` stops the loop on its residual.
    pub fn next(&self, rule: &StopRule, record: &IterationRecord) -> Option<LoopState> {
        let iteration = self.iterations + 1;
        match rule.after_update(iteration, record.residual, self.best) {
            Some(_) => None,
            None => Some(self.after(record)),
        }
    }
}

/// The scalars of one PCG iteration; fields after the step that stopped the
/// loop are NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterationRecord {
    pub r_z: f64,
    pub p_q: f64,
    /// Normalised residual Σ|r| / normFactor after the update.
    pub residual: f64,
}

impl IterationRecord {
    /// The record of an iteration that has preconditioned with r · z =
    /// `r_z`: p · A p and the residual are NaN until its later steps run.
    pub fn preconditioned(r_z: f64) -> Self {
        Self {
            r_z,
            p_q: f64::NAN,
            residual: f64::NAN,
        }
    }
}

/// Why the PCG loop stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// r · z = 0: the residual is zero, or so small that r · z underflows
    /// (a long run with tolerance 0, OpenFOAM's fixed-iteration idiom,
    /// gets there): nothing left to reduce.
    ExactSolution,
    PreconditionerNotPositive,
    Breakdown,
    NonFiniteResidual,
    Diverged,
    /// Converged or out of iterations (after `min_iter`).
    Finished,
}

/// The stopping tests of `pcg`, in one place so that every backend (the GPU
/// mirrors them in `kernels/pcg.cu`) stops where the host loop does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopRule {
    pub controls: SolverControls,
    /// Initial normalised residual.
    pub initial: f64,
    pub norm_factor: f64,
}

impl StopRule {
    /// Test on r · z at the start of an iteration.
    pub fn after_precondition(&self, r_z: f64, _last_residual: f64) -> Option<StopReason> {
        // A positive definite M gives r · Mr > 0 for every r ≠ 0, so an exact
        // zero is r = 0 or underflow, never a breakdown; a negative or NaN
        // value is one.
        if r_z == 0.0 {
            Some(StopReason::ExactSolution)
        } else if r_z.is_nan() || r_z <= 0.0 {
            Some(StopReason::PreconditionerNotPositive)
        } else {
            None
        }
    }

    /// Test on p · A p: an exact zero is underflow (p · Ap > 0 for p ≠ 0
    /// outside A's null space, which CG's directions avoid), a negative or
    /// NaN value a breakdown.
    pub fn after_operator(&self, p_q: f64) -> Option<StopReason> {
        if p_q == 0.0 {
            Some(StopReason::ExactSolution)
        } else if p_q.is_nan() || p_q < 0.0 {
            Some(StopReason::Breakdown)
        } else {
            None
        }
    }

    /// Test on the residual after iteration `iteration`; `best` excludes it.
    pub fn after_update(&self, iteration: usize, residual: f64, best: f64) -> Option<StopReason> {
        let c = &self.controls;
        if !residual.is_finite() {
            Some(StopReason::NonFiniteResidual)
        } else if residual > DIVERGENCE_FACTOR * best.min(residual) {
            Some(StopReason::Diverged)
        } else if (c.converged(self.initial, residual) || iteration >= c.max_iter)
            && iteration >= c.min_iter
        {
            Some(StopReason::Finished)
        } else {
            None
        }
    }

    /// The end of iteration `iteration` of `solver`'s loop (`best`: the best
    /// residual before it): the residual checked finite, logged and
    /// recorded in `perf`, an error if it diverged. Returns whether the loop
    /// stops, and the best residual now.
    pub(crate) fn record(
        &self,
        perf: &mut SolverPerformance,
        iteration: usize,
        residual: f64,
        best: f64,
        solver: &str,
        field: &str,
    ) -> Result<(bool, f64), SolveError> {
        let stop = self.after_update(iteration, residual, best);
        check_residual(residual, iteration)?;
        log::debug!("{solver}: {field} iteration {iteration}, residual = {residual:e}");
        record(perf, &self.controls, self.initial, iteration, residual);
        let best = best.min(residual);
        if stop == Some(StopReason::Diverged) {
            return Err(SolveError::Diverged {
                iteration,
                residual,
                best,
                factor: DIVERGENCE_FACTOR,
            });
        }
        Ok((stop.is_some(), best))
    }
}

/// Solves A x = b by PCG from the initial guess in `x`, OpenFOAM's `PCG::solve`
/// loop (precondition, direction, A p, update; convergence checked after each
/// update). `field` names the unknown in the log line.
pub fn pcg<B: CgBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let perf = pcg_unlogged(backend, b, x, controls, field)?;
    let solver = solver_name(backend.preconditioner_name(), "PCG");
    perf.log(&solver, "iterations", field, controls);
    Ok(perf)
}

/// [`pcg`] without the final log line (an inner solve: GAMG's coarsest level).
pub(crate) fn pcg_unlogged<B: CgBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    controls.validate()?;
    let (r, perf, run) = initial_residual(backend, b, x, controls)?;
    match run {
        Some((limit, rule)) => iterations(backend, x, r, perf, limit, &rule, field),
        None => Ok(perf),
    }
}

/// [`pcg`] whose preconditioner is set up only when the solve iterates, as
/// OpenFOAM's solvers build theirs: `start` computes the initial residual
/// (it needs the matrix, not the preconditioner) and `set_up` turns it into
/// the backend that iterates, reusing that residual. A solve whose initial
/// x already meets the tolerance (and no `minIter`: a steady case's last
/// iteration, a converged `pFinal`) costs one residual and no set-up; one
/// that iterates computes the residual once.
pub fn pcg_set_up_on_demand<S, B>(
    start_backend: S,
    set_up: impl FnOnce(S) -> Result<B, SolveError>,
    b: &S::Vector,
    x: &mut S::Vector,
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError>
where
    S: CgBackend,
    B: CgBackend<Vector = S::Vector>,
{
    controls.validate()?;
    let (r, perf, run) = initial_residual(&start_backend, b, x, controls)?;
    let (perf, preconditioner) = match run {
        Some((limit, rule)) => {
            let backend = set_up(start_backend)?;
            let perf = iterations(&backend, x, r, perf, limit, &rule, field)?;
            (perf, backend.preconditioner_name())
        }
        None => (perf, start_backend.preconditioner_name()),
    };
    perf.log(
        &solver_name(preconditioner, "PCG"),
        "iterations",
        field,
        controls,
    );
    Ok(perf)
}

/// The start of a solver loop on any executor (PCG, BiCGStab, GMRES,
/// smoothSolver): the initial residual r = b − A x, the performance before
/// the first iteration and, when the loop runs, its limit and rule
/// ([`InitialNorms::start`]). `controls` are the caller's to validate first,
/// in the order of its own argument checks.
#[allow(clippy::type_complexity)]
pub(crate) fn initial_residual<E: Executor + ?Sized>(
    backend: &E,
    b: &E::Vector,
    x: &E::Vector,
    controls: &SolverControls,
) -> Result<(E::Vector, SolverPerformance, Option<(usize, StopRule)>), SolveError> {
    let mut r = backend.new_vector();
    let norms = backend.initialize(b, x, &mut r);
    backend.device_status()?;
    let (perf, run) = norms.start(controls)?;
    Ok((r, perf, run))
}

/// PCG's loop from the initial residual `r` (precondition, direction, A p,
/// update; convergence checked after each update).
fn iterations<B: CgBackend>(
    backend: &B,
    x: &mut B::Vector,
    mut r: B::Vector,
    mut perf: SolverPerformance,
    limit: usize,
    rule: &StopRule,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let [mut z, mut p, mut q] = std::array::from_fn(|_| backend.new_vector());
    let mut state = LoopState {
        iterations: 0,
        r_z_old: 0.0,
        p_q_old: 0.0,
        last_residual: rule.initial,
        best: rule.initial,
    };
    'solve: loop {
        let vectors = CgVectors {
            x: &mut *x,
            r: &mut r,
            z: &mut z,
            p: &mut p,
            q: &mut q,
        };
        let records = backend.iterate(rule, &state, limit - state.iterations, vectors);
        backend.device_status()?;
        if records.is_empty() {
            return Err(SolveError::Device(format!(
                "the backend ran no iteration after iteration {}",
                state.iterations
            )));
        }
        for record in records {
            let iteration = state.iterations + 1;
            let r_z = record.r_z;
            match rule.after_precondition(r_z, state.last_residual) {
                Some(StopReason::ExactSolution) => break 'solve,
                Some(_) => return Err(SolveError::PreconditionerNotPositive { r_z, iteration }),
                None => {}
            }
            match rule.after_operator(record.p_q) {
                Some(StopReason::ExactSolution) => break 'solve,
                Some(_) => {
                    return Err(SolveError::Breakdown {
                        p_ap: record.p_q,
                        iteration,
                    })
                }
                None => {}
            }
            let residual = record.residual;
            let (stop, _) =
                rule.record(&mut perf, iteration, residual, state.best, "PCG", field)?;
            if stop {
                break 'solve;
            }
            state = state.after(&record);
        }
    }
    Ok(perf)
}

/// An error for a residual that is not finite (NaN or infinite).
pub(crate) fn check_residual(residual: f64, iteration: usize) -> Result<(), SolveError> {
    if residual.is_finite() {
        Ok(())
    } else {
        Err(SolveError::NonFiniteResidual {
            iteration,
            residual,
        })
    }
}

/// The divergence test of a loop that keeps the best residual seen
/// (BiCGStab, smoothSolver): an error when `residual` is more than
/// [`DIVERGENCE_FACTOR`] times `best`; otherwise `best` becomes the smaller
/// of the two.
pub(crate) fn check_divergence(
    residual: f64,
    iteration: usize,
    best: &mut f64,
) -> Result<(), SolveError> {
    if residual > DIVERGENCE_FACTOR * *best {
        return Err(SolveError::Diverged {
            iteration,
            residual,
            best: *best,
            factor: DIVERGENCE_FACTOR,
        });
    }
    *best = best.min(residual);
    Ok(())
}

/// Records the residual after `iterations` iterations.
pub(crate) fn record(
    perf: &mut SolverPerformance,
    controls: &SolverControls,
    initial: f64,
    iterations: usize,
    residual: f64,
) {
    perf.iterations = iterations;
    perf.final_residual = residual;
    perf.history.push(residual);
    perf.converged = controls.converged(initial, residual);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_script(residuals: Vec<f64>) -> Result<SolverPerformance, SolveError> {
        let initialized = std::cell::Cell::new(0);
        let backend = Counted::new(&initialized, residuals);
        let controls = SolverControls {
            tolerance: 0.0,
            max_iter: 4,
            ..Default::default()
        };
        pcg(&backend, &(), &mut (), &controls, "p")
    }

    /// A backend that counts its initial residuals; its residual after
    /// each update is scripted.
    struct Counted<'a> {
        initialized: &'a std::cell::Cell<usize>,
        residuals: std::cell::RefCell<std::vec::IntoIter<f64>>,
    }

    impl<'a> Counted<'a> {
        /// Counting into `initialized`, with the residuals `residuals`.
        fn new(initialized: &'a std::cell::Cell<usize>, residuals: Vec<f64>) -> Self {
            Self {
                initialized,
                residuals: std::cell::RefCell::new(residuals.into_iter()),
            }
        }
    }

    impl Executor for Counted<'_> {
        type Vector = ();
        fn n(&self) -> usize {
            1
        }
        fn new_vector(&self) {}
        fn initialize(&self, _: &(), _: &(), _: &mut ()) -> InitialNorms {
            self.initialized.set(self.initialized.get() + 1);
            InitialNorms {
                residual_sum: 1.0,
                norm_factor: 1.0,
            }
        }
        fn dot(&self, _: &(), _: &()) -> f64 {
            1.0
        }
        fn sum_abs(&self, _: &()) -> f64 {
            1.0
        }
    }

    impl CgBackend for Counted<'_> {
        fn precondition(&self, _: &(), _: &mut ()) -> f64 {
            1.0
        }
        fn update_direction(&self, _: f64, _: &(), _: &mut ()) {}
        fn apply_operator(&self, _: &(), _: &mut ()) -> f64 {
            1.0
        }
        fn update_solution(&self, _: f64, _: &(), _: &(), _: &mut (), _: &mut ()) -> f64 {
            self.residuals
                .borrow_mut()
                .next()
                .expect("script long enough")
        }
    }

    #[test]
    fn a_set_up_on_demand_reuses_the_initial_residual_and_runs_only_to_iterate() {
        let initialized = std::cell::Cell::new(0);
        let set_ups = std::cell::Cell::new(0);
        let backend = |residuals: Vec<f64>| Counted::new(&initialized, residuals);
        let controls = SolverControls {
            tolerance: 0.45,
            max_iter: 4,
            ..Default::default()
        };
        let set_up = |_| {
            set_ups.set(set_ups.get() + 1);
            Ok(backend(vec![0.5, 0.4]))
        };
        let perf =
            pcg_set_up_on_demand(backend(vec![]), set_up, &(), &mut (), &controls, "p").unwrap();
        assert_eq!(perf.history, vec![1.0, 0.5, 0.4]);
        assert_eq!((initialized.get(), set_ups.get()), (1, 1));
        // Converged at the start: one residual, no set-up.
        let controls = SolverControls {
            tolerance: 2.0,
            ..controls
        };
        let never = |_| -> Result<Counted<'_>, SolveError> { panic!("set up to iterate") };
        let perf =
            pcg_set_up_on_demand(backend(vec![]), never, &(), &mut (), &controls, "p").unwrap();
        assert_eq!((perf.iterations, initialized.get()), (0, 2));
    }

    #[test]
    fn divergence_non_finite_residuals_and_max_iterations() {
        let err = run_script(vec![0.5, 1e-9, 20.0]).unwrap_err();
        assert_eq!(
            err,
            SolveError::Diverged {
                iteration: 3,
                residual: 20.0,
                best: 1e-9,
                factor: DIVERGENCE_FACTOR
            }
        );
        assert_eq!(
            err.to_string(),
            "solver diverged: residual 20 at iteration 3 is more than 1e+10 times the best \
             residual 1e-09"
        );
        let err = run_script(vec![0.5, f64::NAN]).unwrap_err();
        assert!(matches!(
            err,
            SolveError::NonFiniteResidual { iteration: 2, .. }
        ));
        let perf = run_script(vec![0.5, 0.4, 0.3, 0.2, 0.1]).unwrap();
        assert_eq!(perf.history, vec![1.0, 0.5, 0.4, 0.3, 0.2]);
        assert_eq!((perf.iterations, perf.converged), (4, false));
    }

    #[test]
    fn controls_follow_openfoam_convergence_rules() {
        let c = SolverControls {
            tolerance: 1e-6,
            rel_tol: 0.01,
            ..Default::default()
        };
        assert!(c.converged(1.0, 9e-7));
        assert!(c.converged(1.0, 0.009));
        assert!(!c.converged(1.0, 0.011));
        let no_rel = SolverControls::default();
        assert!(!no_rel.converged(1.0, 0.5));
        assert_eq!(no_rel.max_iter, 1000);
        assert!(SolverControls {
            tolerance: f64::NAN,
            ..no_rel
        }
        .validate()
        .is_err());
        assert!(SolverControls {
            rel_tol: -1.0,
            ..no_rel
        }
        .validate()
        .is_err());
    }
}
