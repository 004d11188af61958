//! `fvpoisson bench --krylov`: GMRES(20) (MGS and CGS2, right; MGS left, Yang's
//! (2015) setting) and PBiCGStab with each preconditioner of
//! [`preconditioners`] on the GPU (`gpu::krylov`) and on the CPU reference
//! (`solve::krylov`), on each bench case (the FVM Poisson system; Yang 2015's
//! 3-D Poisson 120³ is `box:120x120x120`: 7-point, Dirichlet) and on the
//! convection–diffusion systems of `--krylov-cd` meshes
//! (`fvm::convection::convection_diffusion`, swirling flow, cell Péclet ≈ 7).
//!
//! Per row: iterations (Arnoldi steps; restart cycles are Yang's
//! (2015) "Iteration"), time per iteration, the bytes one iteration moves at
//! least (counted below; the matrix once per SpMV, every vector read or
//! written once per kernel) and that time at the copy bandwidth measured in
//! the same run (the floor), and the total time to the bench tolerance
//! (OpenFOAM-normalised 1e-6 from x = 0). GPU solves run on the RCM-ordered
//! matrix, after one warm-up solve; the matrix upload and the ordering are not
//! counted. The CPU rows time at most [`CPU_ITERATIONS`] iterations (rayon;
//! build with `--release`) and report the time per iteration, and the GPU's
//! speed-up per iteration. The steps are driven from the host (GMRES's
//! Givens rotations and BiCGStab's scalars live there): one read-back per
//! step, which on small systems costs more than the bytes. The rows
//! "PBiCGStab device loop + Jacobi / none" are `gpu::bicgstab`'s loop, which
//! reads back once per `--check-interval` iterations
//! ([`device_loop_bytes`]).

use std::time::Instant;

use super::tables::{controls, BenchSettings, Row};
use fvpoisson::gpu::bicgstab::DeviceBicgstab;
use fvpoisson::gpu::krylov::{DeviceDiagonal, DevicePreconditioner, GpuKrylovBackend};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::bicgstab::bicgstab;
use fvpoisson::solve::gmres::gmres;
use fvpoisson::solve::precond::Jacobi;
use fvpoisson::solve::{
    CpuKrylovBackend, GmresSettings, KrylovBackend, KrylovMethod, LinearOperator,
    Orthogonalization, PreconditioningSide, SolveError, SolverControls, SolverPerformance,
};
use fvpoisson::sparse::{Csr, ModSell, Reordered, RowOrdering};

/// Iterations the CPU rows run at most.
pub const CPU_ITERATIONS: usize = 200;

/// Builds a device preconditioner for the (RCM-ordered) matrix.
pub type BuildOnDevice =
    for<'g> fn(&'g Gpu, &Csr) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError>;

/// A preconditioner of the Krylov rows: its CPU and GPU builds, and the
/// bytes one application moves on n rows with nnz entries. Add a row (ILU,
/// RAS, ...) by adding an entry to [`preconditioners`].
pub struct KrylovPreconditioner {
    pub name: &'static str,
    pub cpu: fn(&Csr) -> Result<Box<dyn LinearOperator + '_>, SolveError>,
    pub gpu: BuildOnDevice,
    pub bytes: fn(usize, usize) -> f64,
}

/// The preconditioners the `--krylov` rows measure (DILU, ILU(0) and RAS:
/// `gpu::ilu`; `--ilu` has their set-up, levels and Yang 2015's table).
pub fn preconditioners() -> Vec<KrylovPreconditioner> {
    vec![
        KrylovPreconditioner {
            name: "Jacobi",
            cpu: |a| Ok(Box::new(Jacobi::new(a)?)),
            gpu: |gpu, a| Ok(Box::new(DeviceDiagonal::jacobi(gpu, a)?)),
            // Read r and 1/a_ii, write z.
            bytes: |n, _| 24.0 * n as f64,
        },
        KrylovPreconditioner {
            name: "DILU",
            cpu: |a| Ok(Box::new(fvpoisson::solve::ilu::dilu(a)?)),
            gpu: |gpu, a| {
                Ok(Box::new(fvpoisson::gpu::ic::DeviceIncompleteCholesky::new(
                    gpu,
                    a,
                    fvpoisson::gpu::ic::IcKind::Dilu,
                )?))
            },
            // Both sweeps: the off-diagonals (value + column) once, r, 1/d* and
            // w read, w written, a row pointer and diagonal slot per row and sweep.
            bytes: |n, nnz| 12.0 * (nnz - n) as f64 + 72.0 * n as f64,
        },
        KrylovPreconditioner {
            name: "ILU(0)",
            cpu: |a| Ok(Box::new(fvpoisson::solve::ilu::Ilu::new(a, 0)?)),
            gpu: |gpu, a| Ok(Box::new(fvpoisson::gpu::ilu::DeviceIlu::new(gpu, a, 0)?)),
            // Both sweeps: L and U (value + column) once, r read, z written and
            // read back, a row pointer and diagonal slot per row and sweep.
            bytes: |n, nnz| 12.0 * nnz as f64 + 64.0 * n as f64,
        },
        KrylovPreconditioner {
            name: "RAS(64, overlap 1) ILU(0)",
            cpu: |a| {
                let s = "ras:subdomains=64:overlap=1"
                    .parse()
                    .map_err(SolveError::InvalidControls)?;
                Ok(Box::new(fvpoisson::solve::schwarz::Schwarz::new(a, &s)?))
            },
            gpu: |gpu, a| {
                let s = "ras:subdomains=64:overlap=1"
                    .parse()
                    .map_err(SolveError::InvalidControls)?;
                Ok(Box::new(fvpoisson::gpu::schwarz::DeviceSchwarz::new(
                    gpu, a, &s,
                )?))
            },
            // ILU(0)'s bytes (overlap rows not counted) plus the gather and
            // scatter (an index and a value each way).
            bytes: |n, nnz| 12.0 * nnz as f64 + 96.0 * n as f64,
        },
    ]
}

/// The methods of the rows.
fn methods() -> Vec<KrylovMethod> {
    let gmres = |orthogonalization, side| {
        KrylovMethod::Gmres(GmresSettings {
            restart: 20,
            orthogonalization,
            side,
            flexible: false,
        })
    };
    vec![
        gmres(Orthogonalization::Mgs, PreconditioningSide::Right),
        gmres(Orthogonalization::Cgs2, PreconditioningSide::Right),
        gmres(Orthogonalization::Mgs, PreconditioningSide::Left),
        KrylovMethod::BiCgStab,
    ]
}

/// Minimum bytes of one iteration of `method` (GMRES: one Arnoldi step,
/// averaged over a restart cycle, the cycle's solution update and residual
/// included), with a preconditioner application of `precond` bytes; n rows,
/// nnz entries (mod-SELL SpMV as `tables::spmv_bytes`).
pub fn iteration_bytes(method: &KrylovMethod, n: usize, nnz: usize, precond: f64) -> f64 {
    let spmv = super::tables::spmv_bytes(fvpoisson::gpu::matrix::Format::ModSell, n, nnz);
    let v = 8.0 * n as f64;
    match method {
        // 2 SpMV (+ r0 and s read for the fused dots), 2 applications, the
        // direction (r, v, p → p), s = r − αv (r, v → s), the update
        // (y, z, s, t, r0, x → x, r).
        KrylovMethod::BiCgStab => {
            2.0 * spmv + 2.0 * v + 2.0 * precond + 4.0 * v + 3.0 * v + 8.0 * v
        }
        KrylovMethod::Gmres(s) => {
            let m = s.restart;
            let mut cycle = 0.0;
            for j in 0..m {
                let k = (j + 1) as f64;
                let ortho = match s.orthogonalization {
                    // A dot (2), then j+1 axpys with the next dot (x, y, w → y).
                    Orthogonalization::Mgs => 2.0 * v + 4.0 * k * v - v,
                    // Twice: the block dot (k vectors and w), the block axpy
                    // (k vectors, y → y).
                    Orthogonalization::Cgs2 => 2.0 * ((k + 1.0) * v + (k + 2.0) * v),
                };
                // Preconditioner, SpMV, orthogonalisation, v_{j+1} = w / h.
                cycle += precond + spmv + ortho + 2.0 * v;
            }
            let mf = m as f64;
            // x update (m vectors, x; right: into t, then M⁻¹, then x += z),
            // residual (SpMV + b, r), start vector (left: M⁻¹ r too).
            let update = match s.side {
                PreconditioningSide::Left => (mf + 2.0) * v,
                PreconditioningSide::Right => (mf + 3.0) * v + precond + 3.0 * v,
            };
            let restart = spmv
                + 2.0 * v
                + 2.0 * v
                + match s.side {
                    PreconditioningSide::Left => precond + 2.0 * v,
                    PreconditioningSide::Right => 0.0,
                };
            (cycle + update + restart) / mf
        }
    }
}

/// Minimum bytes of one iteration of PBiCGStab's device loop
/// (`gpu::bicgstab`), Jacobi (`jacobi`) or none: 2 SpMV (+ r0 and s read
/// for their dots), the direction (r, v, p → p; Jacobi: 1/a_ii → y), the
/// half step (r, v → s; Jacobi: 1/a_ii → z), the update (y, z, s, t, r0,
/// x → x, r). Against the generic loop, Jacobi reads p and s from the
/// kernel that wrote them instead of reading them again (16n less).
pub fn device_loop_bytes(n: usize, nnz: usize, jacobi: bool) -> f64 {
    fvpoisson::gpu::bicgstab::loop_bytes(n, nnz - n, &[1], jacobi)
}

/// The row of PBiCGStab's device loop (`gpu::bicgstab`) on the ordered
/// system, Jacobi or none, next to the generic loop's rows.
fn device_loop_row(
    gpu: &Gpu,
    case: &str,
    ordered: &Reordered<'_>,
    b_new: &[f64],
    jacobi: bool,
    settings: &BenchSettings,
    copy_gb_s: f64,
) -> anyhow::Result<Row> {
    let a = ordered.matrix();
    let (n, nnz) = (a.n_rows(), a.nnz());
    let options = settings.gpu_options();
    let m = ModSell::from_csr(a, settings.slice_height).map_err(anyhow::Error::msg)?;
    let matrix = DeviceModSell::upload(gpu, &m)?;
    let solver = DeviceBicgstab::new(gpu, n, &options)?;
    let b_dev = gpu.upload(b_new)?;
    let zeros = vec![0.0; n];
    let mut x = gpu.upload(&zeros)?;
    let controls = controls();
    // Warm-up (kernel loading, graph capture), then the timed solve.
    solver.solve(&matrix, jacobi, &b_dev, &x, &controls, "x")?;
    gpu.write(&zeros, &mut x)?;
    gpu.synchronize()?;
    let t = Instant::now();
    let perf = solver.solve(&matrix, jacobi, &b_dev, &x, &controls, "x")?;
    gpu.synchronize()?;
    let total_ms = t.elapsed().as_secs_f64() * 1e3;
    let per_it = total_ms / perf.iterations.max(1) as f64;
    let bytes = device_loop_bytes(n, nnz, jacobi);
    let floor_ms = bytes / (copy_gb_s * 1e9) * 1e3;
    let what = format!(
        "PBiCGStab device loop + {}",
        if jacobi { "Jacobi" } else { "none" }
    );
    let note = format!(
        "GPU: {} iterations, converged {}, total {total_ms:.1} ms, {} launches, read back every \
         {} iterations; floor {floor_ms:.4} ms/iteration ({:.1}x the floor)",
        perf.iterations,
        perf.converged,
        solver.launch_mode().name(),
        settings.check_interval,
        per_it / floor_ms
    );
    eprintln!("{case}: {what}: {per_it:.4} ms/iteration, {note}");
    let mut row = Row::timing(case, "rcm", what, (n, nnz), per_it, note);
    row.bytes = bytes;
    row.gb_s = bytes / (per_it * 1e-3) / 1e9;
    row.of_copy = row.gb_s / copy_gb_s;
    Ok(row)
}

fn solve<B: KrylovBackend>(
    backend: &B,
    method: &KrylovMethod,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
) -> Result<SolverPerformance, SolveError> {
    match method {
        KrylovMethod::Gmres(s) => gmres(backend, b, x, controls, s, "x"),
        KrylovMethod::BiCgStab => bicgstab(backend, b, x, controls, "x"),
    }
}

/// The rows of one system `a`, `b` named `case`.
pub fn rows(
    gpu: &Gpu,
    case: &str,
    a: &Csr,
    b: &[f64],
    settings: &BenchSettings,
    copy_gb_s: f64,
) -> anyhow::Result<Vec<Row>> {
    let (n, nnz) = (a.n_rows(), a.nnz());
    let ordered =
        Reordered::new(a, RowOrdering::Rcm, settings.slice_height).map_err(anyhow::Error::msg)?;
    let b_new = ordered.to_new(b);
    let controls = controls();
    let mut rows = Vec::new();
    for p in preconditioners() {
        let device_p = (p.gpu)(gpu, ordered.matrix())?;
        let backend =
            GpuKrylovBackend::new(gpu, ordered.matrix(), device_p, settings.slice_height)?;
        let host_p = (p.cpu)(a)?;
        let cpu = CpuKrylovBackend::new(a, host_p.as_ref());
        let b_dev = backend.upload(&b_new)?;
        let zeros = vec![0.0; n];
        for method in methods() {
            let bytes = iteration_bytes(&method, n, nnz, (p.bytes)(n, nnz));
            let floor_ms = bytes / (copy_gb_s * 1e9) * 1e3;
            let what = format!("{method} + {}", p.name);
            // Warm-up, then the timed solve.
            let mut x = backend.upload(&zeros)?;
            solve(&backend, &method, &b_dev, &mut x, &controls)?;
            let mut x = backend.upload(&zeros)?;
            gpu.synchronize()?;
            let t = Instant::now();
            let perf = solve(&backend, &method, &b_dev, &mut x, &controls)?;
            gpu.synchronize()?;
            let total_ms = t.elapsed().as_secs_f64() * 1e3;
            let its = perf.iterations.max(1);
            let per_it = total_ms / its as f64;
            let cycles = match method {
                KrylovMethod::Gmres(s) => format!(", {} restart cycles", its.div_ceil(s.restart)),
                KrylovMethod::BiCgStab => String::new(),
            };
            let note = format!(
                "GPU: {} iterations{cycles}, converged {}, total {total_ms:.1} ms; floor {floor_ms:.4} \
                 ms/iteration ({:.1}x the floor)",
                perf.iterations,
                perf.converged,
                per_it / floor_ms
            );
            eprintln!("{case}: {what}: {per_it:.4} ms/iteration, {note}");
            let mut row = Row::timing(case, "rcm", what.clone(), (n, nnz), per_it, note);
            row.bytes = bytes;
            row.gb_s = bytes / (per_it * 1e-3) / 1e9;
            row.of_copy = row.gb_s / copy_gb_s;
            rows.push(row);
            if settings.cpu_solve {
                let cap = SolverControls {
                    max_iter: perf.iterations.clamp(1, CPU_ITERATIONS),
                    ..controls
                };
                let mut x = zeros.clone();
                let t = Instant::now();
                let cpu_perf = solve(&cpu, &method, &b.to_vec(), &mut x, &cap)?;
                let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
                let cpu_per_it = cpu_ms / cpu_perf.iterations.max(1) as f64;
                let note = format!(
                    "CPU ({} threads): {} iterations in {cpu_ms:.1} ms; GPU {:.1}x faster per \
                     iteration",
                    rayon::current_num_threads(),
                    cpu_perf.iterations,
                    cpu_per_it / per_it
                );
                eprintln!("{case}: {what} CPU: {cpu_per_it:.4} ms/iteration, {note}");
                let mut row = Row::timing(
                    case,
                    "natural",
                    format!("{what} CPU"),
                    (n, nnz),
                    cpu_per_it,
                    note,
                );
                row.bytes = bytes;
                row.gb_s = bytes / (cpu_per_it * 1e-3) / 1e9;
                rows.push(row);
            }
        }
        if p.name == "Jacobi" {
            rows.push(device_loop_row(
                gpu, case, &ordered, &b_new, true, settings, copy_gb_s,
            )?);
        }
    }
    rows.push(device_loop_row(
        gpu, case, &ordered, &b_new, false, settings, copy_gb_s,
    )?);
    Ok(rows)
}

/// The convection–diffusion system of `fvm::convection` on the mesh `spec`
/// (Γ = 0.002, swirling flow of unit speed), as a bench case named `cd:spec`.
pub fn convection_diffusion_case(spec: &str) -> anyhow::Result<(String, Csr, Vec<f64>)> {
    let mesh = fvpoisson::mesh::source::load(spec)?;
    let geometry = mesh.geometry()?;
    let (a, b) = fvpoisson::fvm::convection::convection_diffusion(
        &mesh,
        &geometry,
        0.002,
        fvpoisson::fvm::convection::swirl(1.0),
    )?;
    Ok((format!("cd:{spec}"), a, b))
}
