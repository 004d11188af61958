//! `fvpoisson bench --ilu`: GMRES(20) with level-scheduled ILU(k), DILU and
//! (nested) restricted additive Schwarz on the GPU (`gpu::ilu`,
//! `gpu::schwarz`) against
//! GMRES(20) with Jacobi measured in the same run, in Yang 2015's setting
//! (Yang 2015, §3.4–3.5: 3-D Poisson 120³, 7-point, Dirichlet; GMRES(20), left
//! preconditioning, MGS) and on the convection–diffusion system of each
//! `--krylov-cd` mesh (swirling upwind flow, `fvm::convection`). The
//! `--krylov` rows (`krylov`) list DILU, ILU(0) and RAS too, next to
//! Jacobi, per method and with the bandwidth floor.
//!
//! Per row: set-up (host: ILU(k) pattern, METIS decomposition; device:
//! numeric factorisation), forward/backward levels (each a kernel launch per
//! application), Arnoldi steps and restart cycles (Yang 2015's "Iteration"
//! counts cycles), solve time, total and the speed-up of the total
//! over GMRES-Jacobi. Yang 2015's numbers are quoted in the row labels of the
//! configurations it ran (nested RAS on 1 and 4 Tesla C2050/C2070 against one
//! Xeon X5570 thread; tolerance, right-hand side and x0 unstated). Its
//! "outer RAS" counts GPUs; here one GPU runs all outer sub-domains (the
//! preconditioner is the same, the GPU count is not). The level counts of
//! ILU(0)/ILU(1) in natural, RCM and multicolour order are listed first.
//!
//! Tolerance: OpenFOAM's normalised residual 1e-6 from x = 0 (the bench's),
//! right-hand side b = A·1. CPU rows (sequential sweeps, one thread for the
//! triangular solves) for ILU(0) and Yang 2015's Seq 1 unless `--no-cpu`.

use std::time::Instant;

use super::tables::{controls, convergence_mark, BenchSettings, Row, TimingRows};
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::ilu::DeviceIlu;
use fvpoisson::gpu::krylov::{run_krylov, DeviceDiagonal, GpuKrylovBackend};
use fvpoisson::gpu::schwarz::DeviceSchwarz;
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::krylov::{
    solve_krylov, GmresSettings, KrylovMethod, Orthogonalization, PreconditioningSide,
};
use fvpoisson::solve::{Preconditioner, SolveError};
use fvpoisson::sparse::fill::ilu_pattern;
use fvpoisson::sparse::levels::LevelSchedule;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::grid_laplacian;
use fvpoisson::sparse::Csr;

/// Yang 2015's GMRES(20) + nested RAS ILU(k) rows for 3D_Poisson (Tables
/// 5.6/5.10), as (our preconditioner, its label): Seq (outer, inner,
/// δo, δi), k, "Iteration" (restart cycles), GPU time (1 or 4 C2050s), one
/// CPU thread.
pub const THESIS_POISSON: [(&str, &str); 6] = [
    (
        "ras:subdomains=1:overlap=1:fill=0:nested=16:inner-overlap=1",
        "thesis Seq 1 (1,16,1,1) k=0: 5 cycles, 1 GPU 1.6412 s, 1 CPU thread 19.2223 s",
    ),
    (
        "ras:subdomains=1:overlap=1:fill=1:nested=16:inner-overlap=1",
        "thesis Seq 1 (1,16,1,1) k=1: 3 cycles, 1 GPU 1.2312 s, 1 CPU thread 11.3803 s",
    ),
    (
        "ras:subdomains=4:overlap=1:fill=0:nested=16:inner-overlap=1",
        "thesis Seq 4 (4,16,1,1) k=0: 5 cycles, 4 GPUs 0.7087 s, 1 CPU thread 18.7378 s",
    ),
    (
        "ras:subdomains=4:overlap=1:fill=1:nested=16:inner-overlap=1",
        "thesis Seq 4 (4,16,1,1) k=1: 4 cycles, 4 GPUs 0.8437 s, 1 CPU thread 15.9671 s",
    ),
    (
        "ras:subdomains=4:overlap=1:fill=0:nested=128:inner-overlap=1",
        "thesis Seq 6 (4,128,1,1) k=0: 6 cycles, 4 GPUs 0.7913 s, 1 CPU thread 21.7188 s",
    ),
    (
        "ras:subdomains=4:overlap=1:fill=0:nested=2048:inner-overlap=1",
        "thesis Seq 8 (4,2048,1,1) k=0: 6 cycles, 4 GPUs 0.8589 s, 1 CPU thread 24.2982 s",
    ),
];

/// Our own rows (no thesis counterpart): the undecomposed factorisations,
/// DILU and plain RAS.
const OWN: [&str; 5] = [
    "dilu",
    "ilu0",
    "ilu1",
    "ras:subdomains=64:overlap=1:fill=0",
    "ras:subdomains=64:overlap=1:fill=0:nested=8:inner-overlap=1",
];

/// Yang 2015's method: GMRES(20), MGS, left preconditioning.
fn thesis_gmres() -> KrylovMethod {
    KrylovMethod::Gmres(GmresSettings {
        restart: 20,
        orthogonalization: Orthogonalization::Mgs,
        side: PreconditioningSide::Left,
        flexible: false,
    })
}

/// Yang 2015's matrix: the 7-point Dirichlet Laplacian of a `g`³ grid.
pub fn thesis_rows(gpu: &Gpu, g: usize, settings: &BenchSettings) -> anyhow::Result<Vec<Row>> {
    let a = grid_laplacian(g, g, g);
    let case = format!("3D_Poisson {g}^3");
    eprintln!("{case}: n = {}, nnz = {}", a.n_rows(), a.nnz());
    let mut b = vec![0.0; a.n_rows()];
    a.spmv(&vec![1.0; a.n_rows()], &mut b);
    let mut specs: Vec<(String, String)> = THESIS_POISSON
        .iter()
        .map(|(p, label)| (p.to_string(), label.to_string()))
        .collect();
    specs.extend(OWN.iter().map(|p| (p.to_string(), String::new())));
    let cpu = [THESIS_POISSON[0].0, "ilu0"];
    case_rows(gpu, &case, &a, &b, &specs, &cpu, settings)
}

/// The convection–diffusion system `a`, `b` (`krylov::convection_diffusion_case`
/// of a `--krylov-cd` mesh).
pub fn convection_rows(
    gpu: &Gpu,
    case: &str,
    a: &Csr,
    b: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    eprintln!("{case}: n = {}, nnz = {}", a.n_rows(), a.nnz());
    let mut specs: Vec<(String, String)> = vec![(
        "ras:subdomains=4:overlap=1:fill=0:nested=16:inner-overlap=1".into(),
        String::new(),
    )];
    specs.extend(OWN.iter().map(|p| (p.to_string(), String::new())));
    case_rows(gpu, case, a, b, &specs, &["ilu0"], settings)
}

/// Level counts, then the GPU solves, then the CPU solves of `cpu`.
fn case_rows(
    gpu: &Gpu,
    case: &str,
    a: &Csr,
    b: &[f64],
    specs: &[(String, String)],
    cpu: &[&str],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    let (n, nnz) = (a.n_rows(), a.nnz());
    let mut rows = TimingRows::new(case, a);
    // Levels of ILU(0)/ILU(1) by ordering (host only).
    let rcm = reverse_cuthill_mckee(a).apply_symmetric(a);
    let (by_colour, colouring) = Colouring::greedy(a).contiguous();
    let coloured = by_colour.apply_symmetric(a);
    for (ordering, m) in [("natural", a), ("rcm", &rcm), ("multicolour", &coloured)] {
        for k in [0, 1] {
            let t = Instant::now();
            let p = ilu_pattern(m, k).map_err(anyhow::Error::msg)?;
            let (fw, bw) = (
                LevelSchedule::lower(&p.matrix).n_levels(),
                LevelSchedule::upper(&p.matrix).n_levels(),
            );
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let colours = if ordering == "multicolour" {
                format!(", {} colours", colouring.n_colours())
            } else {
                String::new()
            };
            rows.push(
                format!("ILU({k}) levels"),
                ordering,
                ms,
                format!(
                    "{fw} forward / {bw} backward levels, {:.0} rows per level, nnz(LU)/nnz(A) \
                     {:.2}{colours} (time: symbolic + level analysis)",
                    n as f64 / fw.max(1) as f64,
                    p.matrix.nnz() as f64 / nnz as f64
                ),
            );
        }
    }
    let method = thesis_gmres();
    let controls = controls();
    let zeros = vec![0.0; n];
    // One solve on the device: set-up (preconditioner), then GMRES.
    let solve = |precond: Box<dyn DevicePreconditioner + '_>| -> anyhow::Result<_> {
        let backend = GpuKrylovBackend::new(gpu, a, precond, settings.slice_height)?;
        let t = Instant::now();
        let result = run_krylov(&backend, &method, b, &zeros, &controls, "p");
        gpu.synchronize()?;
        Ok((
            result.map(|(perf, _)| perf),
            t.elapsed().as_secs_f64() * 1e3,
        ))
    };
    let (jacobi, base_ms) = solve(Box::new(DeviceDiagonal::jacobi(gpu, a)?))?;
    let describe = |perf: &Result<fvpoisson::solve::SolverPerformance, SolveError>,
                    solve_ms: f64| match perf {
        Ok(p) => format!(
            "{} Arnoldi steps ({} cycles of 20), solve {solve_ms:.1} ms, {:.3} ms/step, \
                 final residual {:.3e}{}",
            p.iterations,
            p.iterations.div_ceil(20),
            solve_ms / p.iterations.max(1) as f64,
            p.final_residual,
            convergence_mark(p.converged)
        ),
        Err(e) => format!("failed: {e}"),
    };
    rows.push(
        "GMRES(20) Jacobi".into(),
        "natural",
        base_ms,
        format!(
            "{}; the baseline of the speed-ups",
            describe(&jacobi, base_ms)
        ),
    );
    for (spec, label) in specs {
        let p: Preconditioner = spec.parse().map_err(anyhow::Error::msg)?;
        let t = Instant::now();
        let built = build(gpu, a, &p);
        gpu.synchronize()?;
        let setup_ms = t.elapsed().as_secs_f64() * 1e3;
        let what = if label.is_empty() {
            format!("GMRES(20) {p}")
        } else {
            format!("GMRES(20) {p} [{label}]")
        };
        let (m, (fw, bw)) = match built {
            Ok(built) => built,
            Err(e) => {
                rows.push(what, "natural", 0.0, format!("set-up failed: {e}"));
                continue;
            }
        };
        let (perf, solve_ms) = solve(m)?;
        let total = setup_ms + solve_ms;
        rows.push(
            what,
            "natural",
            total,
            format!(
                "set-up {setup_ms:.1} ms, {fw}/{bw} levels; {}; speed-up of the total over GMRES-Jacobi \
                 {:.2}x",
                describe(&perf, solve_ms),
                base_ms / total
            ),
        );
    }
    if !settings.cpu_solve {
        return Ok(rows.into_rows());
    }
    for spec in cpu {
        let p: Preconditioner = spec.parse().map_err(anyhow::Error::msg)?;
        let mut x = zeros.clone();
        let t = Instant::now();
        let result = solve_krylov(a, &method, p, b, &mut x, &controls, "p");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        rows.push(
            format!("GMRES(20) {p} CPU"),
            "natural",
            ms,
            format!(
                "set-up + solve on the CPU (sequential sweeps); {}",
                describe(&result, ms)
            ),
        );
    }
    Ok(rows.into_rows())
}

/// A device preconditioner and its forward/backward levels.
type Built<'g> = (Box<dyn DevicePreconditioner + 'g>, (usize, usize));

/// The device preconditioner of `p` and its forward/backward levels.
fn build<'g>(gpu: &'g Gpu, a: &Csr, p: &Preconditioner) -> Result<Built<'g>, SolveError> {
    match p {
        Preconditioner::Ilu(k) => {
            let m = DeviceIlu::new(gpu, a, *k)?;
            let levels = m.levels();
            Ok((Box::new(m), levels))
        }
        Preconditioner::Schwarz(s) => {
            let m = DeviceSchwarz::new(gpu, a, s)?;
            let levels = m.levels();
            Ok((Box::new(m), levels))
        }
        Preconditioner::Kind(kind) => match IcKind::of(*kind) {
            Some(ic) => {
                let m = DeviceIncompleteCholesky::new(gpu, a, ic)?;
                let levels = m.levels();
                Ok((Box::new(m), levels))
            }
            None => Err(SolveError::InvalidControls(format!(
                "{kind}: no device sweeps"
            ))),
        },
        other => Err(SolveError::InvalidControls(format!(
            "{other}: not an ILU row"
        ))),
    }
}
