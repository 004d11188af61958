//! `fvpoisson bench --smoothers`: the smoother comparison of Wikberg 2024, Table 4.1,
//! and PCG time to solution with each smoother as the preconditioner against
//! Jacobi-PCG, on each bench mesh.
//!
//! Smoothers, Wikberg's (2024) protocol (§4.4): `smoother_sweeps` sweeps
//! from x = 0, the residual Σ|b − A x| computed every 10 sweeps, host wall-clock
//! time including the residual checks (their time, after a device
//! synchronisation, is also given apart). CPU Gauss–Seidel runs on one thread
//! in natural order (Wikberg's: CSR, natural order, one core), forward and
//! symmetric (Wikberg's alternating forward/backward: a symmetric sweep counts
//! as two); GPU Jacobi and L1-Jacobi run in RCM order (computed here, whatever
//! the bench's `--orderings`), multicolour Gauss–Seidel
//! in RCM order renumbered colour by colour (and, rows marked `list`, in RCM
//! order with a colour index list);
//! block Jacobi on grown blocks with Wikberg's inner settings (to 1e-8 relative
//! or 100 inner steps), synchronous and asynchronous. Reported per row: total
//! ms, ms per sweep, and the residual reduction Σ|r| after / before.
//!
//! `--smoother-sweeps` below 2 counts as 2 (a symmetric sweep is two); an odd
//! count adds one vector copy to the double-buffered smoothers (their sweeps
//! alternate between x and a spare vector and must end in x).
//!
//! PCG: OpenFOAM-normalised tolerance 1e-6 from x = 0; the solve on a backend
//! built beforehand (the preconditioner's set-up — colouring, uploads, the
//! device factorisation — given apart), timed after a warm-up solve;
//! iterations and the speed-up over Jacobi-PCG's solve time (the fused device
//! loop in its default launch mode, RCM order; preconditioned PCG runs on the
//! same loop, the preconditioner's kernels inside it). The preconditioners:
//! the smoothers, and the level-scheduled DIC and IC(0) of `gpu::ic` in RCM
//! and in colour order (their level counts in the notes).

use std::time::Instant;

use super::eisenstat::EisenstatBench;
use super::tables::{
    controls, convergence_mark, rcm_system, BenchSettings, JacobiBaseline, Row, TimingRows,
};
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions, GpuVector};
use fvpoisson::gpu::smooth::{
    block_layout, colour_layout, DevicePreconditioner, DeviceSmoother,
    DeviceSmootherPreconditioner, GpuSmoothing,
};
use fvpoisson::gpu::{Gpu, GpuError};
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::smooth_solver::CpuSmoothing;
use fvpoisson::solve::{
    pcg, ColouringKind, InnerSolver, SmoothBackend, SmootherKind, SmootherSettings, SolveError,
    SolverControls, SolverPerformance, Sweep,
};
use fvpoisson::sparse::blocks::in_block_fraction;
use fvpoisson::sparse::{Csr, Permutation};

/// Sweeps between residual checks (Wikberg's (2024) 10).
const CHECK_EVERY: usize = 10;

/// Time and residual reduction of a run of sweeps.
struct Sweeps {
    ms: f64,
    residual_ms: f64,
    reduction: f64,
}

/// `sweeps` sweeps on `backend` from the x given, the residual every
/// [`CHECK_EVERY`]; `sync` waits for the device before a residual check is timed.
fn run_sweeps<B: SmoothBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    sweeps: usize,
    sync: &dyn Fn() -> Result<(), GpuError>,
) -> anyhow::Result<Sweeps> {
    let mut r = backend.new_vector();
    let initial = backend.initialize(b, x, &mut r).residual_sum;
    backend.device_status()?;
    let start = Instant::now();
    let (mut residual_s, mut last, mut done) = (0.0, initial, 0);
    while done < sweeps {
        let k = CHECK_EVERY.min(sweeps - done);
        backend.smooth(b, x, k)?;
        done += k;
        sync()?;
        let t = Instant::now();
        last = backend.initialize(b, x, &mut r).residual_sum;
        residual_s += t.elapsed().as_secs_f64();
    }
    backend.device_status()?;
    Ok(Sweeps {
        ms: start.elapsed().as_secs_f64() * 1e3,
        residual_ms: residual_s * 1e3,
        reduction: last / initial,
    })
}

fn block(
    inner: InnerSolver,
    tolerance: f64,
    steps: usize,
    h: usize,
    asynchronous: bool,
) -> SmootherSettings {
    let mut s = SmootherSettings::block_jacobi(inner, tolerance, steps, h);
    s.block.asynchronous = asynchronous;
    s
}

/// Inner Jacobi damped by 0.7: an undamped polynomial of even degree nearly
/// annihilates the eigenvalues of D⁻¹A near 2, which a preconditioner must not.
fn damped(mut s: SmootherSettings) -> SmootherSettings {
    s.omega = 0.7;
    s
}

fn gauss_seidel(sweep: Sweep, colouring: ColouringKind) -> SmootherSettings {
    let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(sweep));
    s.colouring = colouring;
    s
}

/// A system on the device in one row order: the backend (matrix, residuals,
/// PCG steps) and b.
pub(super) struct Ordered<'g> {
    /// The table's ordering column.
    pub ordering: &'static str,
    /// The order in words, for the notes.
    pub name: String,
    pub a: Csr,
    pub backend: GpuCgBackend<'g>,
    pub b: GpuVector,
    /// Gauss–Seidel's colouring, where the order was made for one.
    pub colouring: Option<Colouring>,
}

impl<'g> Ordered<'g> {
    pub fn new(
        gpu: &'g Gpu,
        (ordering, name): (&'static str, String),
        a: Csr,
        b: &[f64],
        options: &GpuSolveOptions,
    ) -> anyhow::Result<Self> {
        let backend = GpuCgBackend::new(gpu, &a, false, None, options)?;
        let b = backend.upload(b)?;
        Ok(Self {
            ordering,
            name,
            a,
            backend,
            b,
            colouring: None,
        })
    }

    /// The colour layout of `colour_layout` ("rcm+col", described by
    /// `name`): the matrix `a_colour` and `b` (given in RCM order) in the
    /// order `p`, with the colouring.
    pub fn colours(
        gpu: &'g Gpu,
        name: String,
        (p, a_colour, colouring): (Permutation, Csr, Colouring),
        b: &[f64],
        options: &GpuSolveOptions,
    ) -> anyhow::Result<Self> {
        let mut ordered = Self::new(gpu, ("rcm+col", name), a_colour, &p.to_new(b), options)?;
        ordered.colouring = Some(colouring);
        Ok(ordered)
    }

    /// The layout of grown blocks of `block_layout`: the matrix `a_blocks`
    /// and `b` (given in the original order) in the order `blocks`, SELL
    /// slices of the block height `block_h`.
    pub fn blocks(
        gpu: &'g Gpu,
        (block_h, blocks, a_blocks): (usize, Permutation, Csr),
        b: &[f64],
        options: &GpuSolveOptions,
    ) -> anyhow::Result<Self> {
        let lambda = in_block_fraction(&a_blocks, block_h);
        Self::new(
            gpu,
            (
                "blocks",
                format!("grown {block_h}-row blocks, lambda {lambda:.3}"),
            ),
            a_blocks,
            &blocks.to_new(b),
            &GpuSolveOptions {
                slice_height: block_h,
                ..*options
            },
        )
    }

    pub fn smoother(
        &self,
        gpu: &'g Gpu,
        s: &SmootherSettings,
    ) -> anyhow::Result<(DeviceSmoother<'g>, f64)> {
        let t = Instant::now();
        let smoother = DeviceSmoother::with_colouring(
            gpu,
            &self.a,
            self.backend.shared_matrix(),
            s,
            self.colouring.clone(),
        )?;
        gpu.synchronize()?;
        Ok((smoother, t.elapsed().as_secs_f64() * 1e3))
    }

    /// Eisenstat SGS-PCG (`gpu::eisenstat`, default options) on this colour
    /// layout: MC-SGS's layout and iterates in its own loop (not a
    /// `DevicePreconditioner`); the run and the colouring.
    pub fn eisenstat(
        &self,
        gpu: &Gpu,
        controls: &SolverControls,
    ) -> anyhow::Result<(EisenstatBench, &Colouring)> {
        let colouring = self.colouring.as_ref().expect("the colour layout");
        let bench = super::eisenstat::bench_solve(
            gpu,
            &self.backend,
            &self.a,
            colouring,
            &self.b,
            controls,
            fvpoisson::gpu::eisenstat::DEFAULT_OPTIONS,
        )?;
        Ok((bench, colouring))
    }
}

/// PCG with `preconditioner` on `ordered` from x = 0, run twice and timed
/// the second time (the first captures the CUDA graph on small systems, as
/// for the Jacobi baseline): the time and the result.
pub(super) fn solve_warm<'g>(
    ordered: &mut Ordered<'g>,
    preconditioner: Box<dyn DevicePreconditioner + 'g>,
    controls: &SolverControls,
) -> anyhow::Result<(f64, Result<SolverPerformance, SolveError>)> {
    ordered.backend.set_preconditioner(preconditioner);
    let zeros = vec![0.0; ordered.a.n_rows()];
    let mut x = ordered.backend.upload(&zeros)?;
    let _ = pcg(&ordered.backend, &ordered.b, &mut x, controls, "p");
    ordered.backend.write(&mut x, &zeros)?;
    let t = Instant::now();
    let result = pcg(&ordered.backend, &ordered.b, &mut x, controls, "p");
    Ok((t.elapsed().as_secs_f64() * 1e3, result))
}

/// [`solve_warm`], the time and the row's note.
fn timed_pcg<'g>(
    ordered: &mut Ordered<'g>,
    preconditioner: Box<dyn DevicePreconditioner + 'g>,
    controls: &SolverControls,
    base_ms: f64,
    detail: &str,
) -> anyhow::Result<(f64, String)> {
    let (ms, result) = solve_warm(ordered, preconditioner, controls)?;
    Ok((ms, pcg_note(ms, result, base_ms, detail)))
}

/// The note of a timed PCG row: iterations, ms per iteration, speed-up over
/// Jacobi-PCG's `base_ms`, final residual; or the error.
pub(super) fn pcg_note(
    ms: f64,
    result: Result<SolverPerformance, SolveError>,
    base_ms: f64,
    detail: &str,
) -> String {
    match result {
        Ok(perf) => format!(
            "{} iterations, {:.4} ms/iteration, speed-up over Jacobi-PCG {:.2}x, final residual \
             {:.3e}{} ({detail})",
            perf.iterations,
            ms / perf.iterations.max(1) as f64,
            base_ms / ms,
            perf.final_residual,
            convergence_mark(perf.converged)
        ),
        Err(e) => format!("failed: {e} ({detail})"),
    }
}

/// The rows of one case: `a`, `b` as assembled.
pub fn rows(
    gpu: &Gpu,
    spec: &str,
    a: &Csr,
    b: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    let n = a.n_rows();
    let sweeps = settings.smoother_sweeps.max(2);
    let mut rows = TimingRows::new(spec, a);
    let sweep_note = |s: &Sweeps, count: usize, extra: &str| {
        format!(
            "{count} sweeps{extra}: {:.4} ms/sweep, residual checks {:.1} ms, reduction {:.3e}",
            (s.ms - s.residual_ms) / count as f64,
            s.residual_ms,
            s.reduction
        )
    };

    // CPU Gauss-Seidel, natural order, one thread (Wikberg's (2024) baseline; not
    // with --no-cpu).
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let cpu_rows = [
        ("CPU GS fwd", Sweep::Forward, sweeps),
        ("CPU GS fwd&bwd", Sweep::Symmetric, sweeps / 2),
    ];
    for (name, sweep, count) in cpu_rows.into_iter().filter(|_| settings.cpu_solve) {
        let s = gauss_seidel(sweep, ColouringKind::Natural);
        let timed = one_thread.install(|| -> anyhow::Result<Sweeps> {
            let smoother = s.build(a)?;
            let backend = CpuSmoothing::new(a, smoother.as_ref());
            let mut x = vec![0.0; n];
            run_sweeps(&backend, &b.to_vec(), &mut x, count, &|| Ok(()))
        })?;
        rows.push(
            name.into(),
            "natural",
            timed.ms,
            sweep_note(&timed, count, ", 1 thread"),
        );
    }

    let h = settings.slice_height;
    let options = settings.gpu_options();
    let sync = || gpu.synchronize();
    let (a_rcm, b_rcm) = rcm_system(a, b);
    let mut by_rcm = Ordered::new(
        gpu,
        (
            "rcm",
            format!("RCM, lambda {:.3}", in_block_fraction(&a_rcm, h)),
        ),
        a_rcm,
        &b_rcm,
        &options,
    )?;
    let layout = colour_layout(gpu, &by_rcm.a, h)?;
    let lambda = in_block_fraction(&layout.1, h);
    let mut by_colour = Ordered::colours(
        gpu,
        format!("RCM, colour-contiguous, lambda {lambda:.3}"),
        layout,
        &b_rcm,
        &options,
    )?;
    let layout = block_layout(gpu, a, h)?;
    let block_h = layout.0;
    let mut by_blocks = Ordered::blocks(gpu, layout, b, &options)?;
    let mut cases: Vec<(String, SmootherSettings, usize, &Ordered)> = vec![
        (
            "GPU Jacobi".into(),
            SmootherSettings::new(SmootherKind::Jacobi),
            sweeps,
            &by_rcm,
        ),
        (
            "GPU L1-Jacobi".into(),
            SmootherSettings::new(SmootherKind::L1Jacobi),
            sweeps,
            &by_rcm,
        ),
        (
            "GPU MC-GS fwd, list".into(),
            gauss_seidel(Sweep::Forward, ColouringKind::JonesPlassmann),
            sweeps,
            &by_rcm,
        ),
        (
            "GPU MC-GS fwd".into(),
            gauss_seidel(Sweep::Forward, ColouringKind::JonesPlassmann),
            sweeps,
            &by_colour,
        ),
        (
            "GPU MC-GS sym".into(),
            gauss_seidel(Sweep::Symmetric, ColouringKind::JonesPlassmann),
            sweeps / 2,
            &by_colour,
        ),
    ];
    for (name, inner) in [
        ("GPU BJ-Jacobi", InnerSolver::Jacobi),
        ("GPU BJ-GS", InnerSolver::GaussSeidel),
        ("GPU BJ-CG", InnerSolver::Cg),
    ] {
        for asynchronous in [false, true] {
            let label = if asynchronous { "async" } else { "sync" };
            let s = block(inner, 1e-8, 100, block_h, asynchronous);
            cases.push((format!("{name} {label}"), s, sweeps, &by_blocks));
        }
    }
    for (name, s, count, ordered) in cases {
        let (smoother, setup_ms) = ordered.smoother(gpu, &s)?;
        let backend = GpuSmoothing {
            cg: &ordered.backend,
            smoother: &smoother,
        };
        let mut x = ordered.backend.upload(&vec![0.0; n])?;
        let timed = run_sweeps(&backend, &ordered.b, &mut x, count, &sync)?;
        let colours = smoother
            .colouring()
            .map_or(String::new(), |c| format!(", {} colours", c.n_colours()));
        let extra = format!(" ({}{colours}, set-up {setup_ms:.0} ms)", ordered.name);
        rows.push(
            name,
            ordered.ordering,
            timed.ms,
            sweep_note(&timed, count, &extra),
        );
    }

    if !settings.pcg {
        return Ok(rows.into_rows());
    }
    let controls = controls();
    // The warm-up solve captures the CUDA graph (set-up, like the smoothers').
    let baseline = JacobiBaseline::measure(gpu, &by_rcm.a, &by_rcm.b, &options)?;
    let base_ms = baseline.ms;
    rows.push_baseline(&baseline, "");
    let mut jacobi2 = SmootherSettings::new(SmootherKind::Jacobi);
    jacobi2.sweeps = 2;
    jacobi2.omega = 0.8;
    let preconditioners: Vec<(&str, SmootherSettings)> = vec![
        (
            "PCG MC-SGS, list",
            gauss_seidel(Sweep::Symmetric, ColouringKind::JonesPlassmann),
        ),
        (
            "PCG MC-SGS",
            gauss_seidel(Sweep::Symmetric, ColouringKind::JonesPlassmann),
        ),
        ("PCG 2xJacobi(0.8)", jacobi2),
        (
            "PCG BJ-Jacobi(0.7) x4",
            damped(block(InnerSolver::Jacobi, 0.0, 4, block_h, false)),
        ),
        (
            "PCG BJ-Jacobi(0.7) x8",
            damped(block(InnerSolver::Jacobi, 0.0, 8, block_h, false)),
        ),
        (
            "PCG BJ-SGS x1",
            block(InnerSolver::SymGaussSeidel, 0.0, 1, block_h, false),
        ),
        (
            "PCG BJ-SGS x2",
            block(InnerSolver::SymGaussSeidel, 0.0, 2, block_h, false),
        ),
        (
            "FPCG BJ-CG 1e-1",
            block(InnerSolver::Cg, 1e-1, 30, block_h, false),
        ),
        (
            "FPCG BJ-CG 1e-2",
            block(InnerSolver::Cg, 1e-2, 50, block_h, false),
        ),
    ];
    for (name, s) in preconditioners {
        let ordered = if s.kind == SmootherKind::BlockJacobi {
            &mut by_blocks
        } else if name == "PCG MC-SGS" {
            &mut by_colour
        } else {
            &mut by_rcm
        };
        let (smoother, setup_ms) = ordered.smoother(gpu, &s)?;
        let colours = smoother
            .colouring()
            .map_or(String::new(), |c| format!(", {} colours", c.n_colours()));
        let detail = format!("{}{colours}, set-up {setup_ms:.0} ms", ordered.name);
        let preconditioner = Box::new(DeviceSmootherPreconditioner::new(smoother, &s));
        let (ms, note) = timed_pcg(ordered, preconditioner, &controls, base_ms, &detail)?;
        rows.push(name.into(), ordered.ordering, ms, note);
    }
    // Level-scheduled incomplete Cholesky (gpu::ic): RCM order (few, long
    // dependency chains: many levels) and colour order (levels = colours).
    for (kind, name) in [(IcKind::Dic, "PCG DIC"), (IcKind::Ic0, "PCG IC(0)")] {
        for ordered in [&mut by_rcm, &mut by_colour] {
            let t = Instant::now();
            let ic = DeviceIncompleteCholesky::new(gpu, &ordered.a, kind)?;
            gpu.synchronize()?;
            let setup_ms = t.elapsed().as_secs_f64() * 1e3;
            let (forward, backward) = ic.levels();
            let detail = format!(
                "{}, {forward} + {backward} levels, factorised on the device in {setup_ms:.0} ms",
                ordered.name
            );
            let (ms, note) = timed_pcg(ordered, Box::new(ic), &controls, base_ms, &detail)?;
            rows.push(name.into(), ordered.ordering, ms, note);
        }
    }
    let (bench, colouring) = by_colour.eisenstat(gpu, &controls)?;
    let detail = format!(
        "{}, {} colours, set-up {:.0} ms, {}",
        by_colour.name,
        colouring.n_colours(),
        bench.setup_ms,
        bench.phases(None)
    );
    let ms = bench.solve_ms;
    let note = pcg_note(ms, bench.result, base_ms, &detail);
    rows.push("PCG Eisenstat SGS".into(), by_colour.ordering, ms, note);
    Ok(rows.into_rows())
}
