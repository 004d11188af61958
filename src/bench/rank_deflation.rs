//! `fvpoisson bench --rank-deflation [MESH..]`: subdomain deflation on GPU
//! ranks (`gpu::multi::pcg_over_ranks`, one deflation vector per
//! rank) against the same ranks without it, measured in the same run.
//!
//! Per mesh (default [`DEFAULT_MESHES`]) and rank count (`--deflation-ranks`,
//! default 2, 4, 8; METIS): thread ranks, rank r on device r % count (ranks
//! share a device when there are fewer; host-driven steps, halos and sums
//! through the thread communicator, as `run -np N --device gpu`), PCG to the
//! bench's tolerance (OpenFOAM residual 1e-6 from x = 0) with Jacobi and with
//! block DIC over the ranks, each without and with deflation. A row is the
//! second of two solves (the first warms up), timed on rank 0 from a
//! barrier; the deflation set-up (AZ uploaded, E summed and inverted, once
//! before the solves) is timed alone and given in the note, with the ratio
//! to the plain solve with and without it; the backend's set-up (the same
//! for both) is in neither. The
//! CPU ranks' block-DIC PCG without and with deflation
//! (`solve::distributed`) on the same split is the reference of the
//! solutions (and of the GPU's time; `--no-cpu` leaves it out).

use std::time::Instant;

use super::tables::{controls, convergence_mark, poisson_system, Row};
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::multi::{pcg_over_ranks, MultiGpuBackend, MultiGpuDeflation, MultiGpuOptions};
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::{Gpu, GpuError};
use fvpoisson::parallel::threads::run_threads;
use fvpoisson::parallel::{gather_global, Communicator};
use fvpoisson::solve::distributed::{agree, solve_pcg_distributed, Deflation};
use fvpoisson::solve::{PreconditionerKind, SolveError};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::Csr;

/// A hex box of 1 M cells and a perturbed tet box of 0.75 M.
pub const DEFAULT_MESHES: [&str; 2] = ["box:100x100x100", "box:50x50x50:tet:perturb=0.2"];

/// The block preconditioners measured.
const BLOCKS: [(PreconditionerKind, &str); 2] = [
    (PreconditionerKind::Jacobi, "Jacobi"),
    (PreconditionerKind::Dic, "block DIC"),
];

/// One solve: iterations, ms, x on rank 0 (empty elsewhere).
struct Timing {
    iterations: usize,
    converged: bool,
    ms: f64,
    /// The deflation set-up (AZ, E; before the solves, not in `ms`; 0
    /// without deflation, NaN on the CPU).
    setup_ms: f64,
    x: Vec<f64>,
}

/// Wall time of `solve` on rank 0, from a barrier (a global sum) to its end.
fn timed<T>(comm: &dyn Communicator, solve: impl FnOnce() -> T) -> (T, f64) {
    comm.sum(&mut [0.0]);
    let t = Instant::now();
    let out = solve();
    comm.sum(&mut [0.0]);
    (out, t.elapsed().as_secs_f64() * 1e3)
}

/// One GPU rank's solves: per block preconditioner, without and with
/// deflation (the second of two solves each).
fn gpu_rank(
    comm: &dyn Communicator,
    devices: usize,
    a: &Csr,
    b: &[f64],
    d: &Decomposition,
    slice_height: usize,
) -> Result<Vec<Timing>, SolveError> {
    let device = |e: GpuError| SolveError::Device(e.to_string());
    let gpu = agree(comm, Gpu::on_device(comm.rank() % devices).map_err(device))?;
    let mut out = Vec::new();
    for (kind, _) in BLOCKS {
        let options = MultiGpuOptions {
            slice_height,
            jacobi: kind == PreconditionerKind::Jacobi,
            ..MultiGpuOptions::default()
        };
        let built = MultiGpuBackend::for_rank(&gpu, a, d, comm, &options).map_err(device);
        let mut backend = agree(comm, built)?;
        if kind == PreconditionerKind::Dic {
            let built = backend.set_preconditioners(a, d, |gpu, a_oo| {
                Ok(
                    Box::new(DeviceIncompleteCholesky::new(gpu, a_oo, IcKind::Dic)?)
                        as Box<dyn DevicePreconditioner>,
                )
            });
            agree(comm, built)?;
        }
        let b_dev = backend.upload(b).map_err(device)?;
        for deflation in [Deflation::None, Deflation::Subdomains] {
            let (ops, setup_ms) = timed(comm, || {
                MultiGpuDeflation::of_setting(&backend, a, d, deflation)
            });
            let ops = ops?;
            let mut timing = None;
            for _ in 0..2 {
                let mut x = backend.upload(&vec![0.0; b.len()]).map_err(device)?;
                let (perf, ms) = timed(comm, || {
                    let perf =
                        pcg_over_ranks(&backend, ops.as_ref(), &b_dev, &mut x, &controls(), "p");
                    backend.synchronize().map_err(device).and(perf)
                });
                let perf = perf?;
                let mut whole = backend.download(&x).map_err(device)?;
                comm.merge(&mut whole);
                if comm.rank() != 0 {
                    whole = Vec::new();
                }
                timing = Some(Timing {
                    iterations: perf.iterations,
                    converged: perf.converged,
                    ms,
                    setup_ms: if ops.is_some() { setup_ms } else { 0.0 },
                    x: whole,
                });
            }
            out.extend(timing);
        }
    }
    Ok(out)
}

/// The CPU ranks' block-DIC PCG without and with deflation.
fn cpu_ranks(comm: &dyn Communicator, a: &Csr, b: &[f64], d: &Decomposition) -> Vec<Timing> {
    let local = d
        .local(a, comm.rank())
        .expect("a METIS split of the matrix");
    let bl = local.scatter(b);
    [Deflation::None, Deflation::Subdomains]
        .into_iter()
        .map(|deflation| {
            let mut xl = vec![0.0; local.n_owned];
            let (perf, ms) = timed(comm, || {
                solve_pcg_distributed(
                    &local,
                    comm,
                    PreconditionerKind::Dic,
                    deflation,
                    &bl,
                    &mut xl,
                    &controls(),
                    "p",
                )
            });
            let (iterations, converged) = perf.map_or((0, false), |p| (p.iterations, p.converged));
            Timing {
                iterations,
                converged,
                ms,
                setup_ms: f64::NAN,
                x: gather_global(comm, &local, &xl),
            }
        })
        .collect()
}

/// The rows and a markdown table (module documentation).
pub fn run(
    meshes: &[String],
    ranks: &[usize],
    slice_height: usize,
    cpu: bool,
) -> anyhow::Result<(Vec<Row>, String)> {
    // The kernels compiled (or loaded) once, before the ranks' threads load
    // them from the disk cache.
    drop(Gpu::new()?);
    let devices = Gpu::device_count()?;
    let mut rows = Vec::new();
    let mut markdown = String::from(
        "| case | ranks | preconditioner | iterations | + deflation | solve ms | + deflation | \
         time deflated / plain |\n|---|---|---|---|---|---|---|---|\n",
    );
    for spec in meshes {
        let (a, b) = poisson_system(spec)?;
        let size = (a.n_rows(), a.nnz());
        eprintln!("{spec}: n = {}, nnz = {}", size.0, size.1);
        for &k in ranks {
            let t = Instant::now();
            let d = Decomposition::metis(&a, k).map_err(anyhow::Error::msg)?;
            eprintln!(
                "{spec}: METIS into {k} in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let mut pairs: Vec<(String, Vec<Timing>)> = Vec::new();
            if cpu {
                let mut all = run_threads(k, |comm| cpu_ranks(comm, &a, &b, &d));
                pairs.push((format!("CPU ranks x{k}, block DIC"), all.swap_remove(0)));
            }
            let mut all = run_threads(k, |comm| gpu_rank(comm, devices, &a, &b, &d, slice_height));
            let gpu = all.swap_remove(0)?;
            let mut gpu = gpu.into_iter();
            for (_, name) in BLOCKS {
                let pair = gpu.by_ref().take(2).collect();
                pairs.push((format!("GPU ranks x{k} ({devices} GPUs), {name}"), pair));
            }
            // The reference solution: the CPU ranks' deflated one, else the
            // first GPU solve's.
            let reference = match cpu {
                true => pairs[0].1[1].x.clone(),
                false => pairs[0].1[0].x.clone(),
            };
            for (what, pair) in &pairs {
                let [plain, deflated] = &pair[..] else {
                    anyhow::bail!("{what}: expected two solves");
                };
                for (t, label) in [(plain, ""), (deflated, " + deflation")] {
                    let setup = match t.setup_ms > 0.0 {
                        true => format!(
                            ", deflation set-up {:.1} ms (not included; x{:.2} time with it)",
                            t.setup_ms,
                            (t.ms + t.setup_ms) / plain.ms
                        ),
                        false => String::new(),
                    };
                    let reference_name = match cpu {
                        true => "CPU ranks, deflated",
                        false => "GPU ranks, Jacobi",
                    };
                    let note = format!(
                        "{} iterations{}, {:.3} ms/iteration{setup}, x{:.2} iterations and \
                         x{:.2} time of the same without deflation, max |x - x_ref| / \
                         max |x_ref| {:.1e} (x_ref: {reference_name})",
                        t.iterations,
                        convergence_mark(t.converged),
                        t.ms / t.iterations.max(1) as f64,
                        t.iterations as f64 / plain.iterations.max(1) as f64,
                        t.ms / plain.ms,
                        max_rel_diff(&t.x, &reference),
                    );
                    rows.push(Row::timing(
                        spec,
                        "metis",
                        format!("{what}{label}"),
                        size,
                        t.ms,
                        note,
                    ));
                }
                markdown.push_str(&format!(
                    "| {spec} | {k} | {what} | {} | {} | {:.1} | {:.1} | {:.2} |\n",
                    plain.iterations,
                    deflated.iterations,
                    plain.ms,
                    deflated.ms,
                    deflated.ms / plain.ms
                ));
            }
        }
    }
    Ok((rows, markdown))
}
