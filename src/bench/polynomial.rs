//! `fvpoisson bench --polynomial`: time to solution of PCG with each
//! polynomial preconditioner (`gpu::polynomial`; Neumann, Chebyshev and least
//! squares of degree 2, 4 and 8, in f64 and mixed precision) against the fused
//! Jacobi-PCG and the CPU's DIC-PCG in the same run (Zhang and Zhang 2013, §7.5: the
//! comparison the paper never made).
//!
//! All GPU rows solve the RCM-ordered system on one backend built beforehand
//! (matrix upload and ordering are common to all and not counted). Per row:
//! set-up (Gershgorin bound on the host, coefficients, inverse diagonal, the
//! f32 twin of the matrix in mixed precision; one Lanczos row shows that
//! bound's cost), iterations, solve time, total, and the speed-up of the total
//! over Jacobi-PCG's solve. Jacobi-PCG runs its fused device loop after a
//! warm-up solve; the polynomial PCG is driven from the host one step at a
//! time (three scalar read-backs per iteration) until PCG runs any device
//! preconditioner in its fused loop. Tolerance: the bench's (OpenFOAM
//! normalised 1e-6 from x = 0).
//!
//! The CPU DIC-PCG (set-up + solve, rayon where it parallelises; the
//! triangular solves are sequential) runs only up to [`CPU_DIC_MAX_ROWS`] rows
//! and not with `--no-cpu`; bigger cases get a note (minutes per solve).

use std::time::Instant;

use super::tables::{
    controls, convergence_mark, rcm_system, timed_cpu_pcg, BenchSettings, JacobiBaseline, Row,
    TimingRows,
};
use fvpoisson::gpu::pcg::GpuCgBackend;
use fvpoisson::gpu::polynomial::DevicePolynomial;
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::{
    pcg, EigenBound, PolynomialKind, PolynomialSettings, Precision, PreconditionerKind,
};
use fvpoisson::sparse::Csr;

/// Rows up to which the CPU DIC-PCG is timed (above: minutes per solve).
pub const CPU_DIC_MAX_ROWS: usize = 2 << 20;

/// Degrees of the table.
const DEGREES: [usize; 3] = [2, 4, 8];

/// The rows of one case: `a`, `b` as assembled.
pub fn rows(
    gpu: &Gpu,
    spec: &str,
    a: &Csr,
    b: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    let n = a.n_rows();
    let mut rows = TimingRows::new(spec, a);
    let controls = controls();
    let options = settings.gpu_options();
    let (a_rcm, b_rcm) = rcm_system(a, b);
    let zeros = vec![0.0; n];

    let mut backend = GpuCgBackend::new(gpu, &a_rcm, false, None, &options)?;
    let b_dev = backend.upload(&b_rcm)?;

    let baseline = JacobiBaseline::measure(gpu, &a_rcm, &b_dev, &options)?;
    let base_ms = baseline.ms;
    rows.push_baseline(&baseline, "; the baseline of the speed-ups");
    let mut cases: Vec<PolynomialSettings> = Vec::new();
    for degree in DEGREES {
        for kind in PolynomialKind::ALL {
            for precision in [Precision::Double, Precision::Mixed] {
                cases.push(PolynomialSettings {
                    precision,
                    ..PolynomialSettings::new(kind, degree)
                });
            }
        }
    }
    cases.push(PolynomialSettings {
        bound: EigenBound::Lanczos { steps: 10 },
        precision: Precision::Mixed,
        ..PolynomialSettings::new(PolynomialKind::LeastSquares, 8)
    });
    for s in cases {
        let t = Instant::now();
        let p = DevicePolynomial::new(gpu, &a_rcm, backend.shared_matrix(), &s)?;
        gpu.synchronize()?;
        let setup_ms = t.elapsed().as_secs_f64() * 1e3;
        // One application outside the timing loads the kernels (lazy loading).
        let mut warm = backend.upload(&zeros)?;
        p.apply(b_dev.dev()?, warm.dev()?)?;
        let upper = p.recurrence().hi;
        backend.set_preconditioner(Box::new(p));
        backend.write(&mut warm, &zeros)?;
        let mut x = warm;
        let t = Instant::now();
        let result = pcg(&backend, &b_dev, &mut x, &controls, "p");
        let solve_ms = t.elapsed().as_secs_f64() * 1e3;
        let total = setup_ms + solve_ms;
        let what = format!(
            "PCG {}({}){}",
            s.kind.name(),
            s.degree,
            match (s.precision, s.bound) {
                (Precision::Mixed, EigenBound::Lanczos { .. }) => " mixed, Lanczos",
                (Precision::Mixed, _) => " mixed",
                _ => "",
            }
        );
        let note = match result {
            Ok(perf) => format!(
                "set-up {setup_ms:.1} ms + solve {solve_ms:.1} ms: {} iterations, {:.4} \
                 ms/iteration, {} products by A, speed-up over Jacobi-PCG {:.2}x, bound {upper:.4}, \
                 final residual {:.3e}{}",
                perf.iterations,
                solve_ms / perf.iterations.max(1) as f64,
                perf.iterations * (s.degree + 1),
                base_ms / total,
                perf.final_residual,
                convergence_mark(perf.converged)
            ),
            Err(e) => format!("failed: {e}"),
        };
        rows.push(what, "rcm", total, note);
    }

    if !settings.cpu_solve {
        return Ok(rows.into_rows());
    }
    if n > CPU_DIC_MAX_ROWS {
        rows.push(
            "PCG DIC CPU".into(),
            "natural",
            0.0,
            format!(
                "not run: {n} rows > {CPU_DIC_MAX_ROWS} (sequential triangular solves, minutes \
                 per solve); see a smaller case"
            ),
        );
        return Ok(rows.into_rows());
    }
    let (cpu, _, cpu_s) = timed_cpu_pcg(a, PreconditionerKind::Dic, b, &controls)?;
    let cpu_ms = cpu_s * 1e3;
    rows.push(
        "PCG DIC CPU".into(),
        "natural",
        cpu_ms,
        format!(
            "set-up + solve, {} iterations, final residual {:.3e}; Jacobi-PCG on the GPU is \
             {:.1}x faster",
            cpu.iterations,
            cpu.final_residual,
            cpu_ms / base_ms
        ),
    );
    Ok(rows.into_rows())
}
