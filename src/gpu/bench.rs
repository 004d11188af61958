//! `fvpoisson bench`: device copy bandwidth, SpMV per format, PCG on the
//! device against its bandwidth floor (per launch mode, and Jacobi-PCG
//! against Jacobi-scaled and Ruiz-equilibrated CG) and against the CPU.
//!
//! Bytes counted (the minimum each kernel must move, each array once):
//! CSR 12·nnz + 8(n+1) + 16n (values + column indices, row pointers, x, y);
//! SELL 12·nnz + 16n (values + columns, x, y; padding not counted);
//! mod-SELL 12(nnz − n) + 24n (off-diagonal values + codes, diagonal, x, y).
//! One fused PCG iteration ([`pcg_iteration_bytes`]): mod-SELL SpMV +
//! direction (read z, p; write p: 24n) + update (read p, q, x, r; write x, r:
//! 48n; Jacobi also reads D⁻¹ and writes z: +16n; an equilibrated system
//! reads the residual weights 1/s: +8n). Jacobi-PCG: SpMV + 88n; CG on an
//! equilibrated system (z = r, not stored): SpMV + 80n.
//!
//! Assembly on the device (`gpu::assembly`; n cells, f internal faces, b
//! boundary faces; corrected scheme, so Γ_f|S_f| is written too):
//! face coefficients 48f + 8n (owner, neighbour, w, |S|, Δ, Γ; write the
//! coefficient and Γ_f|S_f|), 32f with uniform Γ (|S|, Δ; two writes); matrix
//! rows 34f + 44n + 32b (face codes and slots of both sides 10f, coefficients
//! 8f, off-diagonal writes 16f; boundary pointers, V, q, diagonal, explicit
//! rhs, rhs; Γ_b, |S_b|, gradient coefficients). Assembly: 82f + 52n + 32b
//! (66f + 44n + 32b with uniform Γ). The explicit correction (`update_rhs`,
//! Gauss gradient): gradient 50f + 44n + 40b (mod-SELL codes, face codes and
//! slots, w, S_f; p, boundary pointers, V, the gradient; p_b coefficients and
//! S_b), face flux 56f + 24n (owner, neighbour, w, k, Γ_f|S_f|, flux; the
//! gradient), rhs 18f + 20n: 124f + 88n + 40b.

use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::assembly::DeviceLaplacian;
use super::matrix::{DeviceMatrix, Format};
use super::pcg::{solve_pcg_gpu, GpuCgBackend, GpuSolveOptions, GpuVector, LaunchMode};
use super::{Gpu, GpuError};
use crate::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, PatchValues, Schemes,
};
use crate::mesh::{Geometry, Mesh, PatchKind};
use crate::solve::{
    pcg, solve_pcg, CgBackend, EquilibrationKind, PreconditionerKind, RuizNorm, RuizSettings,
    SolverControls,
};
use crate::sparse::ordering::{bandwidth, reverse_cuthill_mckee};
use crate::sparse::{Csr, ModSell};

/// −∇·(Γ∇p) = 1 + x·y with p = 0 on every patch (empty patches stay empty).
fn poisson_problem(mesh: &Mesh, gamma: CellField) -> LaplacianProblem {
    let boundary = mesh
        .patches()
        .iter()
        .map(|p| match p.kind {
            PatchKind::Empty => BoundaryCondition::Empty,
            _ => BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        })
        .collect();
    LaplacianProblem::steady(gamma, CellField::function(|c| 1.0 + c.x * c.y), boundary)
}

/// A bench case: a mesh source (`box:` spec, OpenFOAM case, Gmsh file; see
/// `mesh::source`) gives its mesh and geometry and the FVM Poisson system of
/// [`poisson_problem`] with Γ = 1; a Matrix Market file (`.mtx`) gives no
/// mesh, its matrix and the right-hand side A·1 (the solution is all ones).
type BenchCase = (Option<(Mesh, Geometry)>, Csr, Vec<f64>);

fn load_case(case: &str) -> anyhow::Result<BenchCase> {
    if case.ends_with(".mtx") {
        let a = crate::sparse::mtx::read_matrix(std::path::Path::new(case))?;
        let mut b = vec![0.0; a.n_rows()];
        a.spmv(&vec![1.0; a.n_cols()], &mut b);
        return Ok((None, a, b));
    }
    let mesh = crate::mesh::source::load(case)?;
    let geometry = mesh.geometry()?;
    let problem = poisson_problem(&mesh, CellField::Uniform(1.0));
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem)?;
    let (a, b) = (system.matrix.clone(), system.rhs.clone());
    drop(system);
    Ok((Some((mesh, geometry)), a, b))
}

/// The matrix and right-hand side of a bench case ([`load_case`]).
pub fn poisson_system(case: &str) -> anyhow::Result<(Csr, Vec<f64>)> {
    load_case(case).map(|(_, a, b)| (a, b))
}

/// Median of a sample (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median device time (ms) of `reps` runs of `work(i)` after `warmup` runs.
fn time_median(
    gpu: &Gpu,
    warmup: usize,
    reps: usize,
    mut work: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    for i in 0..warmup {
        work(i)?;
    }
    let mut t = Vec::with_capacity(reps);
    for i in 0..reps {
        t.push(gpu.time_ms(|| work(i))?);
    }
    Ok(median(&mut t))
}

/// Device-to-device copy bandwidth in GB/s (bytes read + written).
pub fn copy_bandwidth(gpu: &Gpu, bytes: usize) -> Result<f64, GpuError> {
    let n = bytes / 8;
    let src: CudaSlice<f64> = gpu.upload(&vec![1.0; n])?;
    let mut dst: CudaSlice<f64> = gpu.zeros(n)?;
    let ms = time_median(gpu, 3, 20, |_| gpu.copy(&src, &mut dst))?;
    Ok(2.0 * (n * 8) as f64 / (ms * 1e-3) / 1e9)
}

/// One row of the results.
#[derive(Clone, Debug)]
pub struct Row {
    pub case: String,
    pub what: String,
    pub n: usize,
    pub nnz: usize,
    pub bytes: f64,
    pub ms: f64,
    pub gb_s: f64,
    pub of_copy: f64,
    pub note: String,
}

impl Row {
    fn json(&self) -> String {
        format!(
            "{{\"case\":\"{}\",\"what\":\"{}\",\"n\":{},\"nnz\":{},\"bytes\":{},\"ms\":{},\"gb_s\":{},\"of_copy\":{},\"note\":\"{}\"}}",
            self.case, self.what, self.n, self.nnz, self.bytes, self.ms, self.gb_s, self.of_copy, self.note
        )
    }
}

/// Minimum bytes one SpMV moves in `format` (module documentation).
pub fn spmv_bytes(format: Format, n: usize, nnz: usize) -> f64 {
    let (n, nnz) = (n as f64, nnz as f64);
    match format {
        Format::Csr => 12.0 * nnz + 8.0 * (n + 1.0) + 16.0 * n,
        Format::Sell => 12.0 * nnz + 16.0 * n,
        Format::ModSell => 12.0 * (nnz - n) + 24.0 * n,
    }
}

/// Minimum bytes of one fused PCG iteration (module documentation).
pub fn pcg_iteration_bytes(n: usize, nnz: usize, jacobi: bool, equilibrated: bool) -> f64 {
    let vectors = 72 + if jacobi { 16 } else { 0 } + if equilibrated { 8 } else { 0 };
    spmv_bytes(Format::ModSell, n, nnz) + (vectors * n) as f64
}

/// Device time (ms) per iteration of `iterations` PCG iterations from x = 0
/// with no convergence test, after one untimed chunk (which captures the CUDA
/// graph where the backend uses one). `x` is rewritten in place, so the
/// graph stays valid.
fn time_per_iteration(
    gpu: &Gpu,
    backend: &GpuCgBackend,
    b: &GpuVector,
    x: &mut GpuVector,
    iterations: usize,
    check_interval: usize,
) -> Result<f64, GpuError> {
    let fixed = |max_iter| SolverControls {
        tolerance: 0.0,
        rel_tol: 0.0,
        max_iter,
        min_iter: 0,
    };
    let zeros = vec![0.0; backend.n()];
    let run = |x: &mut GpuVector, max_iter| -> Result<(), GpuError> {
        backend.write(x, &zeros)?;
        pcg(backend, b, x, &fixed(max_iter), "p")
            .map(|_| ())
            .map_err(|e| GpuError::Invalid(e.to_string()))
    };
    run(x, check_interval.min(iterations))?;
    let ms = gpu.time_ms(|| run(x, iterations))?;
    Ok(ms / iterations as f64)
}

/// Minimum bytes of one device assembly (module documentation): n cells,
/// f internal faces, b boundary faces.
pub fn assembly_bytes(n: usize, f: usize, b: usize, uniform_gamma: bool) -> f64 {
    let (n, f, b) = (n as f64, f as f64, b as f64);
    if uniform_gamma {
        66.0 * f + 44.0 * n + 32.0 * b
    } else {
        82.0 * f + 52.0 * n + 32.0 * b
    }
}

/// Minimum bytes of the explicit correction on the device (Gauss gradient).
pub fn correction_bytes(n: usize, f: usize, b: usize) -> f64 {
    let (n, f, b) = (n as f64, f as f64, b as f64);
    124.0 * f + 88.0 * n + 40.0 * b
}

/// Settings of `fvpoisson bench`.
#[derive(Clone, Debug)]
pub struct BenchSettings {
    /// The cases: mesh sources or `.mtx` files ([`poisson_system`]).
    pub meshes: Vec<String>,
    pub slice_height: usize,
    pub reps: usize,
    /// Time PCG on the GPU (and on the CPU when `cpu_solve`).
    pub pcg: bool,
    /// Also time the CPU solve (slow on big meshes).
    pub cpu_solve: bool,
    /// Time the assembly on the device and on the CPU.
    pub assembly: bool,
    pub check_interval: usize,
}

/// Runs the measurements and returns the rows (printing progress to stderr).
pub fn run(gpu: &Gpu, settings: &BenchSettings) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let copy_bytes = 1usize << 30;
    let copy = copy_bandwidth(gpu, copy_bytes)?;
    eprintln!(
        "device {} (compute {}.{}), kernels {}: copy bandwidth {copy:.0} GB/s",
        gpu.name(),
        gpu.compute_capability().0,
        gpu.compute_capability().1,
        if gpu.module_cached() {
            "from the disk cache"
        } else {
            "compiled by NVRTC"
        }
    );
    rows.push(Row {
        case: "memcpy".into(),
        what: "DtoD copy 1 GiB".into(),
        n: copy_bytes / 8,
        nnz: 0,
        bytes: 2.0 * copy_bytes as f64,
        ms: 2.0 * copy_bytes as f64 / copy / 1e6,
        gb_s: copy,
        of_copy: 1.0,
        note: "read + write".into(),
    });
    for spec in &settings.meshes {
        let t = Instant::now();
        let (mesh, a, rhs) = load_case(spec)?;
        let t_rcm = Instant::now();
        let p = reverse_cuthill_mckee(&a);
        let a_rcm = p.apply_symmetric(&a);
        let rcm_s = t_rcm.elapsed().as_secs_f64();
        let (n, nnz) = (a.n_rows(), a.nnz());
        eprintln!(
            "{spec}: n = {n}, nnz = {nnz}, mesh + assembly + RCM {:.1} s (RCM {:.1} s)",
            t.elapsed().as_secs_f64(),
            rcm_s
        );
        // Enough x/y pairs to exceed L2 (50 MB on an H100) between reuses.
        let sets = (200_000_000 / (16 * n)).clamp(2, 16);
        let xs: Vec<CudaSlice<f64>> = (0..sets)
            .map(|k| {
                gpu.upload(
                    &(0..n)
                        .map(|i| 1.0 + ((i * 31 + k * 7) % 97) as f64 / 97.0)
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Result<_, _>>()?;
        let ys: Vec<CudaSlice<f64>> = (0..sets).map(|_| gpu.zeros(n)).collect::<Result<_, _>>()?;
        for (ordering, matrix) in [("as generated", &a), ("RCM", &a_rcm)] {
            let lambda = ModSell::from_csr(matrix, settings.slice_height)
                .map_err(anyhow::Error::msg)?
                .lambda();
            for format in Format::ALL {
                let dm = DeviceMatrix::upload(gpu, matrix, format, settings.slice_height)?;
                let ms = time_median(gpu, 5, settings.reps, |i| {
                    dm.spmv(gpu, &xs[i % sets], &ys[i % sets])
                })?;
                let bytes = spmv_bytes(format, n, nnz);
                let gb_s = bytes / (ms * 1e-3) / 1e9;
                let mut note = format!("{ordering}, bandwidth {}", bandwidth(matrix));
                if format != Format::Csr {
                    note += &format!(", H {}", settings.slice_height);
                }
                if format == Format::ModSell {
                    note += &format!(", lambda {lambda:.3}");
                }
                rows.push(Row {
                    case: spec.clone(),
                    what: format!("SpMV {}", format.name()),
                    n,
                    nnz,
                    bytes,
                    ms,
                    gb_s,
                    of_copy: gb_s / copy,
                    note,
                });
            }
        }
        drop((xs, ys));
        if let (true, Some((mesh, geometry))) = (settings.assembly, &mesh) {
            rows.extend(assembly_rows(gpu, spec, mesh, geometry, settings, copy)?);
        }
        if !settings.pcg {
            continue;
        }
        let controls = SolverControls {
            tolerance: 1e-6,
            rel_tol: 0.0,
            max_iter: 5000,
            min_iter: 0,
        };
        let options = GpuSolveOptions {
            slice_height: settings.slice_height,
            check_interval: settings.check_interval,
            rcm: true,
            launches: LaunchMode::Auto,
        };
        // End to end (input checks, RCM, mod-SELL build, upload, download):
        // one warm-up, then the timed call.
        let mut x = vec![0.0; n];
        let end_to_end = |x: &mut [f64]| {
            solve_pcg_gpu(
                gpu,
                &a,
                PreconditionerKind::Jacobi,
                &EquilibrationKind::None,
                &rhs,
                x,
                &controls,
                "p",
                &options,
            )
        };
        end_to_end(&mut x)?;
        x.fill(0.0);
        let t = Instant::now();
        let perf = end_to_end(&mut x)?;
        let end_to_end_s = t.elapsed().as_secs_f64();
        let floor_ms = |bytes: f64| bytes / (copy * 1e9) * 1e3;
        let iteration_row = |what: String, bytes: f64, ms: f64, note: String| Row {
            case: spec.clone(),
            what,
            n,
            nnz,
            bytes,
            ms,
            gb_s: bytes / (ms * 1e-3) / 1e9,
            of_copy: floor_ms(bytes) / ms,
            note: format!(
                "{note}; floor {:.4} ms at copy bandwidth, of copy = floor / measured",
                floor_ms(bytes)
            ),
        };
        // Jacobi-PCG: the solve alone on a backend built beforehand (host
        // clock, from x = 0, residual read-backs included), then the
        // iteration on the device clock in each launch mode.
        let b_rcm = p.to_new(&rhs);
        let t = Instant::now();
        let backend = GpuCgBackend::new(gpu, &a_rcm, true, None, &options)?;
        let b_dev = backend.upload(&b_rcm)?;
        gpu.synchronize()?;
        let setup_s = t.elapsed().as_secs_f64();
        let mut x_dev = backend.upload(&vec![0.0; n])?;
        let t = Instant::now();
        let solve = pcg(&backend, &b_dev, &mut x_dev, &controls, "p")?;
        let solve_s = t.elapsed().as_secs_f64();
        let iters = solve.iterations.max(1);
        let jacobi_bytes = pcg_iteration_bytes(n, nnz, true, false);
        let auto = LaunchMode::Auto.resolve(n);
        for mode in [LaunchMode::Separate, LaunchMode::Folded, LaunchMode::Graph] {
            backend.set_launch_mode(mode);
            let ms = time_per_iteration(
                gpu,
                &backend,
                &b_dev,
                &mut x_dev,
                iters,
                options.check_interval,
            )?;
            let launches = if mode == LaunchMode::Separate { 5 } else { 3 };
            let mut note =
                format!("Jacobi-PCG, {launches} launches per iteration, {iters} iterations");
            if mode == auto {
                note += " (auto)";
            }
            if backend.launch_mode() != mode {
                note += &format!(" (ran as {})", backend.launch_mode().name());
            }
            rows.push(iteration_row(
                format!("PCG iter {}", mode.name()),
                jacobi_bytes,
                ms,
                note,
            ));
        }
        rows.push(Row {
            case: spec.clone(),
            what: "PCG solve GPU".into(),
            n,
            nnz,
            bytes: 0.0,
            ms: solve_s * 1e3,
            gb_s: 0.0,
            of_copy: 0.0,
            note: format!(
                "{} iterations, final residual {:.3e}; set-up {:.0} ms (mod-SELL build + upload) \
                 + RCM {:.0} ms; end to end {:.0} ms ({} iterations)",
                solve.iterations,
                solve.final_residual,
                setup_s * 1e3,
                rcm_s * 1e3,
                end_to_end_s * 1e3,
                perf.iterations
            ),
        });
        drop((backend, b_dev, x_dev));
        // Equilibrated systems (seed 000 §6.5–6.6): CG with no preconditioner
        // on S A S against Jacobi-PCG, residuals of the original system.
        let ruiz = |norm| {
            EquilibrationKind::Ruiz(RuizSettings {
                norm,
                ..RuizSettings::default()
            })
        };
        for (label, equilibration) in [
            ("jacobi-scaled", EquilibrationKind::Jacobi),
            ("ruiz-inf", ruiz(RuizNorm::Inf)),
            ("ruiz-2", ruiz(RuizNorm::Two)),
        ] {
            let t = Instant::now();
            let Some(eq) = equilibration.build(&a_rcm)? else {
                continue;
            };
            let scaled = eq.scale_matrix(&a_rcm);
            let scaling_s = t.elapsed().as_secs_f64();
            let backend = GpuCgBackend::new(gpu, &scaled, false, Some(&eq), &options)?;
            let b_dev = backend.upload(&eq.scale_rhs(&b_rcm))?;
            let mut x_dev = backend.upload(&vec![0.0; n])?;
            let t = Instant::now();
            let perf = pcg(&backend, &b_dev, &mut x_dev, &controls, "p")?;
            let solve_ms = t.elapsed().as_secs_f64() * 1e3;
            let iterations = perf.iterations.max(1);
            let ms = time_per_iteration(
                gpu,
                &backend,
                &b_dev,
                &mut x_dev,
                iterations,
                options.check_interval,
            )?;
            let bytes = pcg_iteration_bytes(n, nnz, false, true);
            rows.push(iteration_row(
                format!("PCG {label}"),
                bytes,
                ms,
                format!(
                    "{} iterations to 1e-6 (Jacobi-PCG {}), solve {solve_ms:.1} ms (Jacobi-PCG {:.1}); \
                     scaling {:.0} ms on the host, {} sweeps, deviation {:.1e}; {} launches",
                    perf.iterations,
                    solve.iterations,
                    solve_s * 1e3,
                    scaling_s * 1e3,
                    eq.sweeps(),
                    eq.deviation(),
                    backend.launch_mode().name()
                ),
            ));
        }
        if settings.cpu_solve {
            let mut xc = vec![0.0; n];
            let t = Instant::now();
            let cpu = solve_pcg(
                &a,
                PreconditionerKind::Jacobi,
                &rhs,
                &mut xc,
                &controls,
                "p",
            )?;
            let cpu_s = t.elapsed().as_secs_f64();
            let diff = xc
                .iter()
                .zip(&x)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            let scale = xc.iter().map(|v| v.abs()).fold(0.0, f64::max);
            rows.push(Row {
                case: spec.clone(),
                what: "PCG solve CPU".into(),
                n,
                nnz,
                bytes: 0.0,
                ms: cpu_s * 1e3,
                gb_s: 0.0,
                of_copy: 0.0,
                note: format!(
                    "{} iterations ({} threads); GPU speed-up {:.1}x (solve), {:.1}x (end to end); \
                     max |x_gpu - x_cpu| / max|x| = {:.2e}",
                    cpu.iterations,
                    rayon::current_num_threads(),
                    cpu_s / solve_s,
                    cpu_s / end_to_end_s,
                    diff / scale.max(f64::MIN_POSITIVE)
                ),
            });
        }
    }
    Ok(rows)
}

/// Median wall time (ms) of `reps` runs of `work` on the host.
fn host_median_ms(
    reps: usize,
    mut work: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        work()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut t))
}

/// Assembly on the device against the CPU's and against one mod-SELL SpMV
/// of the same matrix on the same device, timed in this run: Γ = 1 + x per
/// cell (Γ = 1/a_P of a SIMPLE loop varies too) and uniform, `Gauss linear
/// corrected` with Gauss gradients, p = 0 on every patch; the correction
/// with a smooth field. The device results are checked against the CPU's.
fn assembly_rows(
    gpu: &Gpu,
    spec: &str,
    mesh: &Mesh,
    geometry: &Geometry,
    settings: &BenchSettings,
    copy: f64,
) -> anyhow::Result<Vec<Row>> {
    let varying = poisson_problem(mesh, CellField::function(|c| 1.0 + c.x));
    let uniform = poisson_problem(mesh, CellField::Uniform(1.0));
    let mut system = LaplacianSystem::new(mesh, geometry, Schemes::default(), &varying)?;
    let (n, nnz) = (mesh.n_cells(), system.matrix.nnz());
    let f = mesh.n_internal_faces();
    let empty: usize = mesh
        .patches()
        .iter()
        .filter(|p| p.kind == PatchKind::Empty)
        .map(|p| p.size)
        .sum();
    let b = mesh.n_faces() - f - empty;
    let p: Vec<f64> = geometry
        .cell_centres
        .iter()
        .map(|c| c.x * c.y + c.z)
        .collect();
    let cpu_reps = 3;
    let evaluate_ms = host_median_ms(cpu_reps, || Ok(system.evaluate(&varying).map(|_| ())?))?;
    let cpu_assembly_ms = host_median_ms(cpu_reps, || Ok(system.reassemble(&varying)?))?;
    let cpu_correction_ms = host_median_ms(cpu_reps, || Ok(system.update_rhs(&p, None)?))?;

    let t = Instant::now();
    let mut device = DeviceLaplacian::new(gpu, &system, &varying, settings.slice_height)?;
    gpu.synchronize()?;
    let setup_s = t.elapsed().as_secs_f64();
    let values = system.evaluate(&varying)?;
    let t = Instant::now();
    device.upload_values(&values, None)?;
    gpu.synchronize()?;
    let upload_ms = t.elapsed().as_secs_f64() * 1e3;
    let assembly_ms = time_median(gpu, 3, settings.reps, |_| device.assemble())?;
    let p_dev = device.to_device_order(&p)?;
    let correction_ms = time_median(gpu, 3, settings.reps, |_| {
        device
            .update_rhs(&p_dev, None)
            .map_err(|e| GpuError::Invalid(e.to_string()))
    })?;
    // The CPU system holds the same assembly and update_rhs(p).
    let matrix = device.download_matrix()?;
    let scale = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let max_diff = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
            / scale(b).max(f64::MIN_POSITIVE)
    };
    let matrix_diff = if matrix.cols() == system.matrix.cols() {
        max_diff(matrix.values(), system.matrix.values())
    } else {
        f64::INFINITY
    };
    let rhs_diff = max_diff(&device.download_rhs()?, &system.rhs);
    let sets = (200_000_000 / (16 * n)).clamp(2, 16);
    let xs: Vec<CudaSlice<f64>> = (0..sets)
        .map(|k| gpu.upload(&vec![1.0 + k as f64 / 7.0; n]))
        .collect::<Result<_, _>>()?;
    let ys: Vec<CudaSlice<f64>> = (0..sets).map(|_| gpu.zeros(n)).collect::<Result<_, _>>()?;
    let spmv_ms = time_median(gpu, 5, settings.reps, |i| {
        device.matrix()?.spmv(gpu, &xs[i % sets], &ys[i % sets])
    })?;
    device.upload_values(&system.evaluate(&uniform)?, Some(1.0))?;
    let uniform_ms = time_median(gpu, 3, settings.reps, |_| device.assemble())?;

    let row = |what: &str, bytes: f64, ms: f64, note: String| Row {
        case: spec.to_string(),
        what: what.into(),
        n,
        nnz,
        bytes,
        ms,
        gb_s: bytes / (ms * 1e-3) / 1e9,
        of_copy: bytes / (ms * 1e-3) / 1e9 / copy,
        note,
    };
    let of_spmv = |ms: f64| format!("{:.2}x SpMV ({spmv_ms:.4} ms, same matrix)", ms / spmv_ms);
    let assembly = assembly_bytes(n, f, b, false);
    let both = assembly + correction_bytes(n, f, b);
    let both_ms = assembly_ms + correction_ms;
    Ok(vec![
        row(
            "assembly GPU",
            assembly,
            assembly_ms,
            format!(
                "Gamma per cell: {}; CPU {cpu_assembly_ms:.1} ms ({:.0}x); values upload \
                 {upload_ms:.1} ms; set-up {setup_s:.1} s; max |A_gpu - A_cpu| / max|A| \
                 {matrix_diff:.1e}",
                of_spmv(assembly_ms),
                cpu_assembly_ms / assembly_ms
            ),
        ),
        row(
            "asm GPU uniform",
            assembly_bytes(n, f, b, true),
            uniform_ms,
            format!("Gamma uniform: {}", of_spmv(uniform_ms)),
        ),
        row(
            "asm+corr GPU",
            both,
            both_ms,
            format!(
                "assembly + explicit correction (update_rhs {correction_ms:.4} ms): {}; CPU \
                 {:.1} ms ({:.0}x); max |b_gpu - b_cpu| / max|b| {rhs_diff:.1e}",
                of_spmv(both_ms),
                cpu_assembly_ms + cpu_correction_ms,
                (cpu_assembly_ms + cpu_correction_ms) / both_ms
            ),
        ),
        row(
            "assembly CPU",
            0.0,
            cpu_assembly_ms,
            format!(
                "LaplacianSystem::reassemble, one thread, of which {evaluate_ms:.1} ms host \
                 evaluation of the problem (both paths); update_rhs {cpu_correction_ms:.1} ms"
            ),
        ),
    ])
}

/// The table printed last.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<34} {:<17} {:>10} {:>11} {:>11} {:>9} {:>7}  {}\n",
        "case", "what", "n", "MB counted", "ms", "GB/s", "of copy", "note"
    );
    for r in rows {
        out += &format!(
            "{:<34} {:<17} {:>10} {:>11.1} {:>11.4} {:>9.0} {:>7.2}  {}\n",
            r.case,
            r.what,
            r.n,
            r.bytes / 1e6,
            r.ms,
            r.gb_s,
            r.of_copy,
            r.note
        );
    }
    out
}

/// The rows as a JSON array.
pub fn json(rows: &[Row]) -> String {
    format!(
        "[{}]",
        rows.iter().map(Row::json).collect::<Vec<_>>().join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::poisson_system;

    #[test]
    fn bench_cases_come_from_mesh_sources_and_matrix_market_files() {
        let (a, b) = poisson_system("meshes/foam/cavity").unwrap();
        assert_eq!((a.n_rows(), b.len()), (400, 400));
        let (a, b) = poisson_system("tests/data/poisson2d_4x4.mtx").unwrap();
        let mut y = vec![0.0; a.n_rows()];
        a.spmv(&vec![1.0; a.n_cols()], &mut y);
        assert_eq!(b, y);
        assert!(poisson_system("meshes/no_such_mesh").is_err());
    }
}
