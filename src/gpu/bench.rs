//! `fvpoisson bench`: device copy bandwidth, SpMV per format, Jacobi-PCG on
//! the device against its bandwidth floor and against the CPU.
//!
//! Bytes counted (the minimum each kernel must move, each array once):
//! CSR 12·nnz + 8(n+1) + 16n (values + column indices, row pointers, x, y);
//! SELL 12·nnz + 16n (values + columns, x, y; padding not counted);
//! mod-SELL 12(nnz − n) + 24n (off-diagonal values + codes, diagonal, x, y).
//! One fused PCG iteration: mod-SELL SpMV + direction (read z, p; write p:
//! 24n) + update (read p, q, x, r, D⁻¹; write x, r, z: 64n).

use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::matrix::{DeviceMatrix, Format};
use super::pcg::{solve_pcg_gpu, GpuCgBackend, GpuSolveOptions};
use super::{Gpu, GpuError};
use crate::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, PatchValues, Schemes,
};
use crate::mesh::PatchKind;
use crate::solve::{pcg, solve_pcg, PreconditionerKind, SolverControls};
use crate::sparse::ordering::{bandwidth, reverse_cuthill_mckee};
use crate::sparse::{Csr, ModSell};

/// The FVM Poisson system −∇²p = 1 + x·y with p = 0 on every patch (but
/// `empty` ones), on a mesh source: a box spec (`box:NXxNYxNZ:...`), an
/// OpenFOAM case or a Gmsh file.
pub fn poisson_system(source: &str) -> anyhow::Result<(Csr, Vec<f64>)> {
    let mesh = crate::mesh::load(source)?;
    let geometry = mesh.geometry()?;
    let boundary = mesh
        .patches()
        .iter()
        .map(|p| match p.kind {
            PatchKind::Empty => BoundaryCondition::Empty,
            _ => BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        })
        .collect();
    let problem = LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::function(|c| 1.0 + c.x * c.y),
        boundary,
    );
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem)?;
    Ok((system.matrix.clone(), system.rhs.clone()))
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

/// Settings of `fvpoisson bench`.
#[derive(Clone, Debug)]
pub struct BenchSettings {
    /// Box specs of the meshes.
    pub meshes: Vec<String>,
    pub slice_height: usize,
    pub reps: usize,
    /// Time PCG on the GPU (and on the CPU when `cpu_solve`).
    pub pcg: bool,
    /// Also time the CPU solve (slow on big meshes).
    pub cpu_solve: bool,
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
        let (a, rhs) = poisson_system(spec)?;
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
        };
        // End to end (input checks, RCM, mod-SELL build, upload, download):
        // one warm-up, then the timed call.
        let mut x = vec![0.0; n];
        let end_to_end = |x: &mut [f64]| {
            solve_pcg_gpu(
                gpu,
                &a,
                PreconditionerKind::Jacobi,
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
        // The solve alone on a backend built beforehand (host clock, from
        // x = 0, residual read-backs included).
        let t = Instant::now();
        let backend = GpuCgBackend::new(
            gpu,
            &a_rcm,
            true,
            settings.slice_height,
            settings.check_interval,
        )?;
        let b_dev = backend.upload(&p.to_new(&rhs))?;
        gpu.synchronize()?;
        let setup_s = t.elapsed().as_secs_f64();
        let mut x_dev = backend.upload(&vec![0.0; n])?;
        let t = Instant::now();
        let solve = pcg(&backend, &b_dev, &mut x_dev, &controls, "p")?;
        let solve_s = t.elapsed().as_secs_f64();
        // The iterations on the device clock: the same count, no convergence test.
        let iters = solve.iterations.max(1);
        let fixed = SolverControls {
            tolerance: 0.0,
            rel_tol: 0.0,
            max_iter: iters,
            min_iter: 0,
        };
        let mut x_dev = backend.upload(&vec![0.0; n])?;
        let loop_ms = gpu.time_ms(|| {
            pcg(&backend, &b_dev, &mut x_dev, &fixed, "p")
                .map(|_| ())
                .map_err(|e| GpuError::Invalid(e.to_string()))
        })?;
        let iter_bytes = spmv_bytes(Format::ModSell, n, nnz) + 88.0 * n as f64;
        let floor_ms = iter_bytes / (copy * 1e9) * 1e3;
        let iter_ms = loop_ms / iters as f64;
        rows.push(Row {
            case: spec.clone(),
            what: "PCG iteration".into(),
            n,
            nnz,
            bytes: iter_bytes,
            ms: iter_ms,
            gb_s: iter_bytes / (iter_ms * 1e-3) / 1e9,
            of_copy: floor_ms / iter_ms,
            note: format!("floor {floor_ms:.4} ms at copy bandwidth; of copy = floor / measured"),
        });
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

/// The table printed last.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<34} {:<16} {:>10} {:>11} {:>11} {:>9} {:>7}  {}\n",
        "case", "what", "n", "MB counted", "ms", "GB/s", "of copy", "note"
    );
    for r in rows {
        out += &format!(
            "{:<34} {:<16} {:>10} {:>11.1} {:>11.4} {:>9.0} {:>7.2}  {}\n",
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
