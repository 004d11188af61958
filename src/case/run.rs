//! Runs a [`CaseSetup`]: laplacianFoam's loop (`laplacianFoam.C`:
//! `while (simple.loop())`, inside it `while (simple.correctNonOrthogonal())`
//! solving `fvm::ddt(T) − fvm::laplacian(DT, T) == fvOptions(T)`), with an
//! OpenFOAM-like log and VTK / OpenFOAM result files. On the CPU, or on a GPU
//! where the system is assembled (`gpu::assembly`), updated by the corrector
//! loop and solved with the matrix and the field kept on the device; the host
//! reads the field back only to write results.

use super::decompose::cells_of;
use super::setup::{CaseSetup, LinearSolver, OutputFormat, Scalar, SourceSplit, TimeControl};
use super::CaseError;
use crate::foam::write::format_g;
use crate::fvm::{BoundaryCoeffs, LaplacianProblem, LaplacianSystem, Reference, TimeScheme};
use crate::gpu::amg::{gpu_amg_settings, DeviceAmg};
use crate::gpu::assembly::{AssemblyError, DeviceLaplacian};
use crate::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use crate::gpu::ilu::gpu_krylov_preconditioner;
use crate::gpu::matrix::DeviceModSell;
use crate::gpu::multi::{solve_pcg_with, MultiGpuBackend, MultiGpuDeflation, MultiGpuOptions};
use crate::gpu::pcg::{DeviceSolve, GpuSolveOptions, GpuSolver, GpuVector};
use crate::gpu::polynomial::DevicePolynomial;
use crate::gpu::smooth::DevicePreconditioner;
use crate::gpu::smooth::{gpu_preconditioner, gpu_smoother};
use crate::gpu::{Gpu, GpuError};
use crate::io::foam_field::{write_time_field, ScalarFieldOutput};
use crate::io::vtk::{Field, PreparedCells, VtkSeries};
use crate::mesh::{Geometry, Mesh, Vec3};
use crate::parallel::collective::agreed;
use crate::parallel::{gather_global, Communicator};
use crate::solve::amg::{AmgSettings, CycleKind};
use crate::solve::cpu::check_system;
use crate::solve::distributed::{solve_bicgstab_distributed, solve_pcg_distributed, Deflation};
use crate::solve::gamg::{face_area_pair_weight, solve_gamg, GamgCache, MeshFaces};
use crate::solve::krylov::KrylovMethod;
use crate::solve::polynomial::{EigenBound, PolynomialSettings};
use crate::solve::registry::{self, GpuDefault, Role};
use crate::solve::solve_krylov;
use crate::solve::{
    pcg, solve_pcg_in_place, solve_pcg_scaled, solve_smooth, EquilibrationKind, Preconditioner,
    PreconditionerKind, SolveError, SolverPerformance,
};
use crate::sparse::csr::Pattern;
use crate::sparse::distribute::Decomposition;
use crate::sparse::ordering::{relative_bandwidth, BANDED};
use crate::sparse::{Csr, ModSell, Permutation, RowOrdering};
use crate::timings::{self, Phase, PhaseGuard};
use cudarc::driver::CudaSlice;
use rayon::prelude::*;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc::Receiver;
use std::time::Instant;

pub use crate::fvm::ErrorNorms;

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub n_cells: usize,
    /// Steady iterations or time steps done.
    pub steps: usize,
    /// Final time (steady: the number of iterations).
    pub time: f64,
    /// Steady: the residual control was met (always false without one).
    /// Euler: every linear solve converged.
    pub converged: bool,
    /// Why the run counts as not converged (exit code 1): a steady run's
    /// `residualControl` not met, or linear solves that stopped at `maxIter`
    /// short of their tolerance (a solve with tolerance and relTol 0 runs
    /// maxIter iterations by design). `None` for a steady run without
    /// residualControl that ends at endTime, as OpenFOAM's does.
    pub not_converged: Option<String>,
    /// The solution at the end, one value per cell.
    pub field: Vec<f64>,
    /// Against the exact solution, when the case gives one.
    pub error: Option<ErrorNorms>,
    /// The `.pvd` of the VTK series, when VTK output is on.
    pub vtk_series: Option<PathBuf>,
    /// OpenFOAM field files written (`<case>/<time>/<field>`), in time order.
    pub foam_fields: Vec<PathBuf>,
}

/// Where the run happens. On a GPU the system is assembled and solved there;
/// where the device assembly does not handle the mesh
/// ([`AssemblyError::Unsupported`], logged), it is assembled on the CPU and
/// each linear solve runs on the GPU.
#[derive(Clone, Copy)]
pub enum Device<'g> {
    Cpu,
    Gpu(&'g Gpu),
    /// This rank of a distributed run (`case::decompose`): every rank
    /// assembles the whole system, PCG runs over the ranks' rows
    /// (`solve::distributed`) and each rank then holds the whole solution.
    Distributed(Ranks<'g>),
    /// Several GPUs of this process (`run --device gpu --gpus LIST`): see
    /// [`GpuSet`].
    Gpus(&'g GpuSet),
}

/// The GPUs of a one-process run on several of them: the system is
/// assembled on the host and PCG with Jacobi or no preconditioner runs split
/// over the GPUs (`gpu::multi`: contiguous blocks of a banded row order, else
/// METIS rows; one rank per GPU, the device loop over peer stores or NCCL);
/// other solvers run on the first GPU.
pub struct GpuSet {
    pub gpus: Vec<Gpu>,
    /// The row split of the first system solved (reused while the size
    /// holds).
    decomposition: std::cell::RefCell<Option<Decomposition>>,
}

/// What a run keeps on its GPUs between linear solves: the first GPU's
/// solver (its row orderings) and, where PCG is split over several GPUs,
/// the split system, whose values a later system of the same pattern
/// refreshes in place.
pub(crate) struct GpuSolves<'g> {
    solver: GpuSolver<'g>,
    split: Option<KeptSplit<'g>>,
}

impl<'g> GpuSolves<'g> {
    pub(crate) fn new(gpu: &'g Gpu) -> Self {
        Self {
            solver: GpuSolver::new(gpu),
            split: None,
        }
    }

    /// For `device`'s GPU, or the first of its GPUs; None off the GPU.
    pub(crate) fn of(device: Device<'g>) -> Option<Self> {
        match device {
            Device::Gpu(gpu) => Some(Self::new(gpu)),
            Device::Gpus(set) => set.gpus.first().map(Self::new),
            Device::Cpu | Device::Distributed(_) => None,
        }
    }
}

/// A split system kept between solves: the pattern it was built from and
/// the preconditioner it was set up for.
pub(crate) struct KeptSplit<'g> {
    pattern: Pattern,
    /// The values it holds (`Csr::values_stamp`).
    values_stamp: u64,
    jacobi: bool,
    backend: MultiGpuBackend<'g>,
}

impl GpuSet {
    pub fn new(gpus: Vec<Gpu>) -> Self {
        Self {
            gpus,
            decomposition: std::cell::RefCell::new(None),
        }
    }

    /// PCG over the GPUs when `solver` (as the GPU runs it) is PCG with
    /// Jacobi or no preconditioner and no equilibration; None otherwise.
    fn solve<'g>(
        &'g self,
        kept: &mut Option<KeptSplit<'g>>,
        solver: &LinearSolver,
        matrix: &Csr,
        b: &[f64],
        x: &mut [f64],
        field: &str,
    ) -> Option<Result<SolverPerformance, SolveError>> {
        let jacobi = match solver.preconditioner {
            Preconditioner::Kind(PreconditionerKind::Jacobi) => true,
            Preconditioner::Kind(PreconditionerKind::None) => false,
            _ => return None,
        };
        if !solver.is_pcg() || solver.equilibration != EquilibrationKind::None {
            return None;
        }
        let n_gpus = self.gpus.len();
        let mut cached = self.decomposition.borrow_mut();
        if cached
            .as_ref()
            .is_none_or(|d| d.owners().len() != matrix.n_rows())
        {
            *kept = None;
            let t = Instant::now();
            // A banded row order (a mesh numbered along its axes) splits
            // into slabs in row order, with interfaces about as small as
            // METIS finds for a few parts, at no cost (METIS took 21.6 s for
            // the 32.8 M-cell box); any other order is split by METIS.
            let banded = relative_bandwidth(matrix) <= BANDED;
            let (split, how) = match banded {
                true => (
                    Decomposition::contiguous(matrix.n_rows(), n_gpus),
                    "in contiguous blocks of the mesh order (banded)",
                ),
                false => (Decomposition::metis(matrix, n_gpus), "by METIS"),
            };
            match split {
                Ok(d) => *cached = Some(d),
                Err(e) => return Some(Err(SolveError::InvalidControls(e))),
            }
            log::info!(
                "Rows split over {n_gpus} GPUs {how} in {:.2} s",
                t.elapsed().as_secs_f64()
            );
        }
        let d = cached.as_ref().expect("decomposed above");
        let options = MultiGpuOptions {
            jacobi,
            ..MultiGpuOptions::default()
        };
        Some(self.solve_split(kept, matrix, d, b, x, solver, field, &options))
    }

    /// PCG over the GPUs on the kept split system, its values refreshed,
    /// where it has `matrix`'s pattern and preconditioner; else on one set
    /// up now and kept. A failed solve drops it.
    #[allow(clippy::too_many_arguments)]
    fn solve_split<'g>(
        &'g self,
        kept: &mut Option<KeptSplit<'g>>,
        matrix: &Csr,
        d: &Decomposition,
        b: &[f64],
        x: &mut [f64],
        solver: &LinearSolver,
        field: &str,
        options: &MultiGpuOptions,
    ) -> Result<SolverPerformance, SolveError> {
        let device = |e: GpuError| SolveError::Device(e.to_string());
        check_system(matrix, b, x, &solver.controls)?;
        let reusable = kept
            .as_ref()
            .is_some_and(|k| matrix.has_pattern(&k.pattern) && k.jacobi == options.jacobi);
        if reusable {
            let k = kept.as_mut().expect("checked above");
            // A matrix whose values did not change since the last solve
            // (a steady run's next iteration, constant coefficients in
            // time) is on the GPUs already.
            if matrix.values_stamp() != k.values_stamp {
                if let Err(e) = k.backend.refresh_values(matrix, d, options) {
                    *kept = None;
                    return Err(device(e));
                }
                k.values_stamp = matrix.values_stamp();
            }
        } else {
            // The old split system's device memory goes before the new one
            // is allocated.
            *kept = None;
            let backend = timings::span("split system set up on the GPUs", || {
                MultiGpuBackend::new(&self.gpus, matrix, d, options)
            })
            .map_err(device)?;
            *kept = Some(KeptSplit {
                pattern: matrix.pattern(),
                values_stamp: matrix.values_stamp(),
                jacobi: options.jacobi,
                backend,
            });
        }
        let k = kept.as_ref().expect("kept above");
        let result = solve_pcg_with(&k.backend, b, x, &solver.controls, field);
        if result.is_err() {
            *kept = None;
        }
        result
    }
}

/// Where a linear solve runs, as the mapping of a solver's settings sees it
/// ([`Device::target`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolveTarget {
    /// The CPU (a distributed run's ranks too): every setting as given.
    Cpu,
    /// One GPU.
    Gpu,
    /// Several GPUs of one process (PCG with Jacobi or none split over them).
    Gpus,
}

impl SolveTarget {
    /// The solver as this target runs it: the CPU runs every setting; a GPU
    /// runs, for PCG given DIC, IC(0) or GAMG without the keys that tune them
    /// for the GPU (`LinearSolver::gpu_keys_given`), the measured default of
    /// `solve::registry::GPU_DEFAULTS` (several GPUs: DIC and IC(0) as
    /// Jacobi, split over them), and maps what it does not have
    /// (`gpu::smooth::gpu_preconditioner`, `gpu_smoother`: natural-order
    /// Gauss–Seidel becomes multicolour, the registry's fallbacks Jacobi, or
    /// none on an equilibrated system, where the scaling takes Jacobi's
    /// place); GMRES and BiCGStab run what the registry answers for them
    /// (`registry::GpuSupport` under `Role::Krylov`: as given, or its
    /// fallback). [`Self::gpu_note`] says what changed and why.
    pub fn adapt(self, solver: &LinearSolver) -> LinearSolver {
        if self == Self::Cpu {
            return *solver;
        }
        if solver.krylov.is_some() {
            // GMRES / PBiCGStab on the device: what the registry answers
            // for them (`GpuSupport` under `Role::Krylov`): the
            // preconditioner as given, or its fallback, whose reason the run
            // logs once ([`Self::gpu_note`]).
            return LinearSolver {
                preconditioner: gpu_krylov_preconditioner(&solver.preconditioner),
                ..*solver
            };
        }
        let mut given = solver.pcg_preconditioner();
        given = match (self, self.gpu_default(solver)) {
            (Self::Gpus, Some(_))
                if matches!(
                    given,
                    Preconditioner::Kind(PreconditionerKind::Dic | PreconditionerKind::Ic0)
                ) =>
            {
                PreconditionerKind::Jacobi.into()
            }
            (_, Some(row)) => row.settings(&given),
            (_, None) => given,
        };
        let mut preconditioner = gpu_preconditioner(&given);
        if preconditioner != solver.preconditioner
            && preconditioner == PreconditionerKind::Jacobi
            && solver.equilibration != EquilibrationKind::None
        {
            preconditioner = PreconditionerKind::None.into();
        }
        LinearSolver {
            preconditioner,
            smoother: solver.smoother.as_ref().map(gpu_smoother),
            // GAMG runs as PCG with its AMG mapped like the preconditioner.
            gamg: None,
            ..*solver
        }
    }

    /// The GPU default (`solve::registry::GPU_DEFAULTS`) that replaces
    /// `solver`'s preconditioner (GAMG: its AMG) here, if one does: PCG or
    /// GAMG on a GPU, given without GPU keys.
    pub fn gpu_default(self, solver: &LinearSolver) -> Option<&'static GpuDefault> {
        if self == Self::Cpu || solver.krylov.is_some() || solver.smoother.is_some() {
            return None;
        }
        registry::gpu_default(
            &solver.pcg_preconditioner(),
            Role::Pcg,
            solver.gpu_keys_given,
        )
    }

    /// What this target runs in place of `field`'s `solver`, and why, for
    /// the run's log (None: as given). A run logs it once
    /// ([`log_gpu_mapping`]), not at each solve.
    pub fn gpu_note(self, solver: &LinearSolver, field: &str) -> Option<String> {
        if self == Self::Cpu {
            return None;
        }
        let used = self.adapt(solver);
        if let Some(row) = self.gpu_default(solver) {
            if self == Self::Gpus && used.preconditioner == PreconditionerKind::Jacobi {
                return Some(format!(
                    "{field}: {} runs on the GPUs as Jacobi-PCG, split over them",
                    row.given
                ));
            }
            return Some(row.message(field));
        }
        if let (Some(given), Some(run)) = (&solver.smoother, &used.smoother) {
            return (given != run).then(|| {
                format!("{field}: smoother {given} is not on the GPU: using {run} there")
            });
        }
        if solver.gamg.is_some() {
            return Some(format!(
                "{field}: GAMG runs on the GPU as PCG with {} (its keys as given)",
                used.preconditioner
            ));
        }
        if used.preconditioner == solver.preconditioner {
            return None;
        }
        let role = match solver.krylov {
            Some(_) => Role::Krylov,
            None => Role::Pcg,
        };
        Some(match registry::gpu_fallback(&solver.preconditioner, role) {
            Some((_, message)) => format!("{field}: {message}"),
            None => format!(
                "{field}: preconditioner {} runs on the GPU as {}",
                solver.preconditioner, used.preconditioner
            ),
        })
    }
}

/// A rank of a distributed run: its transport, the cells' owners and, for
/// `--device gpu`, its GPU (the rank's rows are solved there,
/// `gpu::multi::MultiGpuBackend::for_rank`).
#[derive(Clone, Copy)]
pub struct Ranks<'g> {
    pub comm: &'g dyn Communicator,
    pub decomposition: &'g Decomposition,
    pub gpu: Option<&'g Gpu>,
}

impl<'g> Device<'g> {
    /// `gpu` where there is one, else the CPU.
    pub fn gpu_or_cpu(gpu: Option<&'g Gpu>) -> Self {
        gpu.map_or(Self::Cpu, Self::Gpu)
    }

    /// Enters `phase` on this thread's clock, synchronising the device's
    /// (first) GPU at the phase's ends where it has one.
    pub(crate) fn phase(self, phase: Phase) -> PhaseGuard<'g> {
        match self {
            Device::Gpu(gpu) => timings::enter_synced(phase, gpu),
            Device::Gpus(set) => match set.gpus.first() {
                Some(gpu) => timings::enter_synced(phase, gpu),
                None => timings::enter(phase),
            },
            Device::Distributed(Ranks { gpu: Some(gpu), .. }) => timings::enter_synced(phase, gpu),
            Device::Cpu | Device::Distributed(_) => timings::enter(phase),
        }
    }

    /// Where this device runs a linear solve, as the mapping of settings
    /// sees it.
    pub fn target(self) -> SolveTarget {
        match self {
            Self::Gpu(_) => SolveTarget::Gpu,
            Self::Gpus(_) => SolveTarget::Gpus,
            Self::Cpu | Self::Distributed(_) => SolveTarget::Cpu,
        }
    }

    /// The solver as this device runs it ([`SolveTarget::adapt`]).
    pub(crate) fn adapt(self, solver: &LinearSolver) -> LinearSolver {
        self.target().adapt(solver)
    }

    /// What this device runs in place of `field`'s `solver`, and why
    /// ([`SolveTarget::gpu_note`]).
    pub(crate) fn gpu_note(self, solver: &LinearSolver, field: &str) -> Option<String> {
        self.target().gpu_note(solver, field)
    }

    /// Why the GPU cannot run `solver` (as adapted) on the device-assembled
    /// system, if it cannot: that path has PCG on the unscaled system with
    /// Jacobi, none, a polynomial (Gershgorin bound) or AMG (GAMG), each set
    /// up on the device from the resident matrix.
    pub(crate) fn needs_host_assembly(self, solver: &LinearSolver) -> Option<String> {
        let used = self.adapt(solver);
        if let Some(method) = &used.krylov {
            return Some(format!("{method} runs on a host-assembled matrix"));
        }
        if used.equilibration != EquilibrationKind::None {
            return Some(format!(
                "equilibration {} is applied to a host-assembled matrix",
                used.equilibration
            ));
        }
        match (&used.smoother, &used.preconditioner) {
            (Some(s), _) => Some(format!(
                "smoothSolver with the {s} smoother runs on a host-assembled matrix"
            )),
            (None, Preconditioner::Smoother(s)) => Some(format!(
                "PCG with the {s} smoother as preconditioner runs on a host-assembled matrix"
            )),
            // The resident pressure solve and the laplacian run's device
            // loop set the polynomial up on the device (value-only after
            // each re-assembly); Lanczos's bound needs the matrix on the host.
            (None, Preconditioner::Polynomial(p)) => match p.bound {
                EigenBound::Gershgorin => None,
                EigenBound::Lanczos { .. } => Some(format!(
                    "PCG with the {p} preconditioner (a Lanczos bound) runs on a host-assembled \
                     matrix"
                )),
            },
            // Set up on the device from the resident matrix (value-only
            // after a re-assembly), as the pressure solves of the flow loops.
            (None, Preconditioner::Amg(_)) => None,
            (None, Preconditioner::Kind(PreconditionerKind::EisenstatSgs)) => Some(
                "PCG with eisenstatSGS (its own sweeps and loop) runs on a host-assembled matrix"
                    .into(),
            ),
            (None, Preconditioner::Kind(PreconditionerKind::Jacobi | PreconditionerKind::None)) => {
                None
            }
            (None, Preconditioner::Kind(k)) => Some(format!(
                "PCG with the {k} preconditioner runs on a host-assembled matrix"
            )),
            (None, p @ (Preconditioner::Ilu(_) | Preconditioner::Schwarz(_))) => Some(format!(
                "PCG with the {p} preconditioner runs on a host-assembled matrix"
            )),
            (None, Preconditioner::Fsai(s)) => Some(format!(
                "PCG with the {s} preconditioner runs on a host-assembled matrix"
            )),
            (None, p @ (Preconditioner::MixedIc(_) | Preconditioner::Registered(_))) => Some(
                format!("PCG with the {p} preconditioner runs on a host-assembled matrix"),
            ),
        }
    }
}

/// The VTK cells of a GPU run, built on a thread of their own once told to
/// `start` (the run's set-up is done) and taken by the series at its first
/// step from `coming`.
struct CellsBeside {
    start: std::sync::mpsc::Sender<()>,
    coming: Receiver<PreparedCells>,
}

/// Loads the mesh, assembles and solves the case on `device`, writes its results.
pub fn run_case(setup: &CaseSetup, device: Device) -> Result<RunSummary, CaseError> {
    run_case_with_mesh(setup, None, device)
}

/// [`run_case`] on `mesh`, the mesh of `setup.mesh` already loaded (`None`:
/// load it here), so that a front end that read it does not read it twice.
pub fn run_case_with_mesh(
    setup: &CaseSetup,
    mesh: Option<Mesh>,
    device: Device,
) -> Result<RunSummary, CaseError> {
    let clock = Instant::now();
    log::info!("Case {}", setup.origin);
    let (mesh, timed) = match mesh {
        Some(mesh) => (mesh, "read with the case, geometry in"),
        None => (
            timings::timed(Phase::Mesh, || setup.mesh.load())?,
            "loaded in",
        ),
    };
    let result = std::thread::scope(|scope| {
        // On one GPU the host prepares the case and then waits for the
        // device's solves: the VTK cells of the first step are built in
        // that wait, on every core (a pool of their own, so that the run's
        // host work keeps the global pool), from the moment the run's
        // set-up is done (`CellsBeside::start`). Built during the set-up,
        // they took cores from its phases and added their memory to the
        // set-up's peak.
        let vtk = setup.output.formats.contains(&OutputFormat::Vtk);
        let cells = (vtk && matches!(device, Device::Gpu(_))).then(|| {
            let (send, coming) = std::sync::mpsc::channel();
            let (start, started) = std::sync::mpsc::channel::<()>();
            let mesh = &mesh;
            scope.spawn(move || {
                // A run that ended before its set-up did drops `start`.
                if started.recv().is_err() {
                    return;
                }
                let built = Instant::now();
                let cells = match rayon::ThreadPoolBuilder::new()
                    .num_threads(rayon::current_num_threads())
                    .thread_name(|i| format!("vtk-cells-{i}"))
                    .build()
                {
                    Ok(pool) => pool.install(|| PreparedCells::new(mesh)),
                    // No threads to spare: the first step builds them.
                    Err(_) => return,
                };
                if let Some(rss) = timings::Rss::now() {
                    log::debug!(
                        "VTK cells built beside the run in {:.3} s, {:.3} s after its start \
                         (peak RSS {} MB, RSS {} MB)",
                        built.elapsed().as_secs_f64(),
                        clock.elapsed().as_secs_f64(),
                        rss.peak / 1_000_000,
                        rss.current / 1_000_000
                    );
                }
                // A run that ended before its first step no longer listens.
                let _ = send.send(cells);
            });
            CellsBeside { start, coming }
        });
        // Where the device assembles, the host reads the cells' geometry and
        // the boundary's; the internal faces' is computed where the device
        // set-up gathers it, and never stored whole on the host.
        let device_assembles =
            matches!(device, Device::Gpu(_)) && host_assembly_reason(setup, device).is_none();
        let geometry = timings::timed(Phase::Geometry, || match device_assembles {
            true => mesh.geometry_of_cells_and_boundary(),
            false => mesh.geometry(),
        })?;
        if device_assembles {
            timings::return_freed_memory();
        }
        log::info!(
            "Mesh: {} cells, {} faces ({} internal), {} points, {} patches; {timed} {:.3} s",
            mesh.n_cells(),
            mesh.n_faces(),
            mesh.n_internal_faces(),
            mesh.n_points(),
            mesh.patches().len(),
            clock.elapsed().as_secs_f64()
        );
        if let Device::Gpus(set) = device {
            let names: Vec<String> = set
                .gpus
                .iter()
                .map(|g| format!("{} {}", g.ordinal(), g.name()))
                .collect();
            log::info!(
                "Linear solves on {} GPUs ({}): PCG with Jacobi or none split over them, other \
                 solvers on the first",
                set.gpus.len(),
                names.join(", ")
            );
        }
        let first_gpu = match device {
            Device::Gpu(gpu) => Some(gpu),
            Device::Gpus(set) => set.gpus.first(),
            Device::Cpu | Device::Distributed(_) => None,
        };
        if let Some(gpu) = first_gpu {
            log::info!(
                "Linear solves on the GPU: {}, {} row ordering",
                gpu.name(),
                setup.solver.regular.ordering
            );
            let solvers: Vec<&LinearSolver> = [&setup.solver.regular]
                .into_iter()
                .chain(&setup.solver.final_corrector)
                .collect();
            log_gpu_mapping(device, &setup.field, &solvers);
        }
        // A rank's set-up may fail alone (its output directories): every
        // rank learns it before the first solve.
        let run = agree_ranks(
            device,
            Run::new(setup, &mesh, &geometry, device, clock, cells),
        );
        run.and_then(|run| match setup.time {
            TimeControl::Steady {
                max_iterations,
                residual_tolerance,
            } => run.steady(max_iterations, residual_tolerance),
            TimeControl::Euler { delta_t, end_time } => run.euler(delta_t, end_time),
        })
    });
    // Values evaluated during the run (Γ or a source given as an expression)
    // name the cell; the case file says where they came from.
    result.map_err(|e| match e {
        CaseError::Fvm(e) => CaseError::Invalid(format!("{}: {e}", setup.origin)),
        e => e,
    })
}

/// Why `device` assembles the case's systems on the host (the first of its
/// solvers that needs it, [`Device::needs_host_assembly`]); None where a GPU
/// assembles them.
pub fn host_assembly_reason(setup: &CaseSetup, device: Device<'_>) -> Option<String> {
    [&setup.solver.regular]
        .into_iter()
        .chain(&setup.solver.final_corrector)
        .find_map(|s| device.needs_host_assembly(s))
}

/// Logs once what `device` runs in place of `field`'s `solvers` and why
/// ([`Device::gpu_note`]; a solver and its final corrector's alike, one
/// line).
pub(crate) fn log_gpu_mapping(device: Device<'_>, field: &str, solvers: &[&LinearSolver]) {
    let mut logged: Vec<String> = Vec::new();
    for solver in solvers {
        if let Some(note) = device.gpu_note(solver, field) {
            if !logged.contains(&note) {
                log::info!("{note}");
                logged.push(note);
            }
        }
    }
}

/// `outcome` of a part of a distributed run that one rank may fail alone
/// (its files, its set-up), agreed by every rank: `Err` on every rank when
/// one failed, this rank's own error or one naming the failing rank with its
/// message (`rank 1 failed: ...`), so that no rank goes on to a collective
/// the others never reach. Other devices: `outcome` itself.
fn agree_ranks<T>(device: Device<'_>, outcome: Result<T, CaseError>) -> Result<T, CaseError> {
    match device {
        Device::Distributed(ranks) => agreed(
            ranks.comm,
            outcome,
            |_| 1,
            |failure| CaseError::invalid(failure.to_string()),
        ),
        _ => outcome,
    }
}

/// The implicit source Sp·T split per [`SourceSplit`].
struct SemiImplicitSource {
    /// V·(part of −Sp in the matrix) per cell, added to the diagonal.
    implicit: Vec<f64>,
    /// V·(explicit part of Sp) per cell, times the current T onto the right-hand side.
    explicit: Vec<f64>,
}

impl SemiImplicitSource {
    fn new(
        sp: &Scalar,
        split: SourceSplit,
        geometry: &Geometry,
        time: f64,
    ) -> Result<Self, CaseError> {
        let values = sp.values_at(&geometry.cell_centres, time, "implicit source Sp")?;
        if let Some(c) = values.iter().position(|v| !v.is_finite()) {
            return Err(CaseError::invalid(format!(
                "implicit source Sp in cell {c} is {}; it must be finite",
                values[c]
            )));
        }
        let part = |f: fn(f64) -> f64| -> Vec<f64> {
            values
                .iter()
                .zip(&geometry.cell_volumes)
                .map(|(&s, v)| v * f(s))
                .collect()
        };
        Ok(match split {
            SourceSplit::Stable => Self {
                implicit: part(|s| (-s).max(0.0)),
                explicit: part(|s| s.max(0.0)),
            },
            SourceSplit::OpenFoam => Self {
                implicit: part(|s| -s.max(0.0)),
                explicit: part(|s| s.min(0.0)),
            },
        })
    }
}

/// The system on the GPU: assembled there, its field kept there between
/// solves (the host copy is refreshed for output only).
struct OnDevice<'a> {
    laplacian: DeviceLaplacian<'a>,
    /// The field in the device's row order.
    field: GpuVector,
    /// V·(explicit part of Sp) in row order, when any is nonzero.
    sp_explicit: Option<CudaSlice<f64>>,
    /// Polynomial-PCG's preconditioner, set up on the device from the
    /// resident matrix; lent to the PCG backend while the matrix holds.
    polynomial: Option<Rc<DevicePolynomial<'a>>>,
    /// AMG-PCG's hierarchy (GAMG, or PCG with AMG) with its settings, set
    /// up on the device from the resident matrix; lent to the PCG backend
    /// while the matrix holds.
    amg: Option<(AmgSettings, Rc<DeviceAmg<'a>>)>,
}

impl<'a> OnDevice<'a> {
    /// The system assembled on `gpu`, or `None` (logged) where the device
    /// assembly does not handle the mesh. The values a deferred `system`
    /// kept of `problem` are taken for the upload (not evaluated again).
    fn new(
        gpu: &'a Gpu,
        system: &mut LaplacianSystem,
        problem: &LaplacianProblem,
        field: &[f64],
        ordering: RowOrdering,
    ) -> Result<Option<Self>, CaseError> {
        let slice_height = GpuSolveOptions::default().slice_height;
        let n = system.mesh().n_cells();
        let permutation = timings::timed(Phase::Ordering, || {
            system.row_permutation(ordering, slice_height)
        })
        .map_err(CaseError::Invalid)?;
        let order = match &permutation {
            Some(_) => format!("{ordering} order"),
            None => "mesh order".to_string(),
        };
        let permutation = permutation.unwrap_or_else(|| Permutation::identity(n));
        let _setup = timings::enter_synced(Phase::DeviceSetup, gpu);
        let values = system.take_or_evaluate(problem)?;
        match DeviceLaplacian::with_ordering_evaluated(
            gpu,
            system,
            values,
            permutation,
            slice_height,
        ) {
            Ok(laplacian) => {
                log::info!(
                    "Assembly, non-orthogonal correction and linear solves on the GPU \
                     (rows in {order}, mod-SELL slices of {slice_height})"
                );
                let field = GpuVector::from(laplacian.to_device_order(field)?);
                Ok(Some(Self {
                    laplacian,
                    field,
                    sp_explicit: None,
                    polynomial: None,
                    amg: None,
                }))
            }
            Err(AssemblyError::Unsupported(msg)) => {
                log::warn!("{msg}: assembling on the CPU, solving each system on the GPU");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The non-orthogonal corrector loop on the device (`LaplacianSystem::solve`
    /// with the right-hand side, the solve and the zero-mean shift there).
    fn solve(
        &mut self,
        setup: &CaseSetup,
        device: Device,
        transient: bool,
    ) -> Result<Vec<SolverPerformance>, CaseError> {
        let n_correctors = setup.n_non_orth_correctors;
        let gpu = self.laplacian.gpu();
        let old = if transient {
            let mut old = gpu.zeros(self.laplacian.n())?;
            gpu.copy(self.field.dev()?, &mut old)?;
            Some(old)
        } else {
            None
        };
        let options = GpuSolveOptions::default();
        let mut performances = Vec::with_capacity(n_correctors + 1);
        for corrector in 0..=n_correctors {
            let assembly = timings::enter_synced(Phase::Assembly, gpu);
            self.laplacian.update_rhs(self.field.dev()?, old.as_ref())?;
            if let Some(sp) = &self.sp_explicit {
                self.laplacian.add_product_to_rhs(sp, self.field.dev()?)?;
            }
            drop(assembly);
            let _solve = timings::enter_synced(Phase::Solve, gpu);
            let solver = setup.solver.for_corrector(corrector, n_correctors);
            let (backend, b) = match device.adapt(solver).preconditioner {
                Preconditioner::Polynomial(settings) => {
                    let polynomial = Rc::clone(self.polynomial_for(&settings)?);
                    self.laplacian
                        .preconditioned_solver(&polynomial, &options)?
                }
                Preconditioner::Amg(settings) => {
                    let amg = Rc::clone(self.amg_for(&settings)?);
                    self.laplacian.preconditioned_solver(&amg, &options)?
                }
                p => self
                    .laplacian
                    .solver(p == PreconditionerKind::Jacobi, &options)?,
            };
            let perf = pcg(backend, b, &mut self.field, &solver.controls, &setup.field)
                .map_err(|e| e.solving(&setup.field))?;
            performances.push(perf);
            if let Some(policy) = self.laplacian.singular_policy() {
                if policy.reference == Reference::ZeroMean {
                    self.laplacian.shift_to_zero_mean(self.field.dev()?)?;
                }
            }
        }
        Ok(performances)
    }
}

impl<'a> OnDevice<'a> {
    /// The polynomial preconditioner of `settings` for the resident matrix:
    /// set up on the device the first time; while a PCG backend still has it
    /// on loan the matrix has not changed since (each re-assembly takes it
    /// back from the backend) and it is used as it is; else its values are
    /// re-set-up on the device from the matrix, which may have changed.
    fn polynomial_for(
        &mut self,
        settings: &PolynomialSettings,
    ) -> Result<&Rc<DevicePolynomial<'a>>, GpuError> {
        let matrix = self.laplacian.shared_matrix()?;
        match &mut self.polynomial {
            Some(p) if p.settings() == settings => {
                if let Some(unlent) = Rc::get_mut(p) {
                    unlent.update_values(matrix)?;
                }
            }
            slot => {
                let p = DevicePolynomial::on_device(self.laplacian.gpu(), matrix, settings)?;
                log::info!(
                    "GPU {settings}: upper eigenvalue bound {:.6} (Gershgorin, on the device)",
                    p.recurrence().hi
                );
                *slot = Some(Rc::new(p));
            }
        }
        Ok(self.polynomial.as_ref().expect("set above"))
    }

    /// The AMG hierarchy of `settings` for the resident matrix, as
    /// [`Self::polynomial_for`] keeps the polynomial: built on the device the
    /// first time (and for other settings); used as it is while a PCG
    /// backend has it on loan (the matrix has not changed since); else its
    /// values re-set-up in place (aggregates and patterns kept).
    fn amg_for(&mut self, settings: &AmgSettings) -> Result<&Rc<DeviceAmg<'a>>, GpuError> {
        let matrix = self.laplacian.shared_matrix()?;
        match &mut self.amg {
            Some((given, amg)) if given == settings => {
                if let Some(unlent) = Rc::get_mut(amg) {
                    unlent.update_values(matrix)?;
                }
            }
            slot => {
                let amg = DeviceAmg::new(self.laplacian.gpu(), matrix, settings)?;
                log::info!("GPU {settings}: {}", amg.describe());
                *slot = Some((*settings, Rc::new(amg)));
            }
        }
        Ok(&self.amg.as_ref().expect("set above").1)
    }
}

/// The state of one run: mesh, system, field, writers.
struct Run<'a> {
    setup: &'a CaseSetup,
    mesh: &'a Mesh,
    geometry: &'a Geometry,
    /// The CPU system (on the GPU path: the static data the device system was
    /// built from, assembled once).
    system: LaplacianSystem<'a>,
    on_device: Option<OnDevice<'a>>,
    problem: LaplacianProblem,
    sp: Option<SemiImplicitSource>,
    /// The field in mesh order (on the GPU path: as of the last output).
    field: Vec<f64>,
    vtk: Option<VtkSeries<'a>>,
    foam_fields: Vec<PathBuf>,
    device: Device<'a>,
    /// The linear solves on `device`: the GPU's, which compute each row
    /// ordering once per run, and GAMG's face weights and cached
    /// agglomeration.
    linear_solves: LinearSolves<'a>,
    clock: Instant,
    /// Corrector loops solved so far: tells whether the field changed since
    /// `written_error`.
    solves: usize,
    /// The error norms of the last field written with its error (after
    /// `solves` loops, at that physical time), so that the run's end does not
    /// evaluate the exact solution again for the same field.
    written_error: Option<(usize, f64, ErrorNorms)>,
    /// `solves` when `field` was last read from the device: a field read
    /// for the output is not read again at the run's end.
    field_read_at: Option<usize>,
}

impl<'a> Run<'a> {
    fn new(
        setup: &'a CaseSetup,
        mesh: &'a Mesh,
        geometry: &'a Geometry,
        device: Device<'a>,
        clock: Instant,
        vtk_cells: Option<CellsBeside>,
    ) -> Result<Self, CaseError> {
        let time = match setup.time {
            TimeControl::Steady { .. } => TimeScheme::SteadyState,
            TimeControl::Euler { delta_t, end_time } => {
                if !(end_time.is_finite() && end_time > 0.0) {
                    return Err(CaseError::invalid(format!(
                        "{}: endTime is {end_time}; it must be finite and positive",
                        setup.origin
                    )));
                }
                TimeScheme::Euler { dt: delta_t }
            }
        };
        let assembly = timings::enter(Phase::Assembly);
        let problem = LaplacianProblem {
            gamma: setup.gamma.cell_field(0.0),
            source: setup.source.cell_field(0.0),
            boundary: timings::span("boundary values", || {
                setup.boundary_conditions(mesh, geometry, 0.0)
            })?,
            time,
            singular: setup.singular,
        };
        let host_assembly = host_assembly_reason(setup, device);
        // Where the device assembles, the host only checks the problem and
        // keeps its values for the device's first assembly: evaluated once.
        let device_assembles = matches!(device, Device::Gpu(_)) && host_assembly.is_none();
        let mut system = if device_assembles {
            LaplacianSystem::deferred_without_pattern(mesh, geometry, setup.schemes, &problem)?
        } else {
            LaplacianSystem::new(mesh, geometry, setup.schemes, &problem)?
        };
        drop(assembly);
        let field = timings::span("initial field", || {
            setup
                .initial
                .values_at(&geometry.cell_centres, 0.0, "initial field")
        })?;
        // A distributed run's ranks write their cells as pieces of the VTK
        // series (rank 0 the .pvtu, the boundary and the series files).
        let output = timings::enter(Phase::Output);
        let vtk = if setup.output.formats.contains(&OutputFormat::Vtk) {
            let dir = setup.case_dir.join(&setup.output.directory);
            let name = series_name(setup);
            Some(match device {
                Device::Distributed(ranks) => {
                    let (rank, size) = (ranks.comm.rank(), ranks.comm.size());
                    let cells = cells_of(ranks.decomposition, rank);
                    VtkSeries::distributed(mesh, dir, &name, rank, size, cells)?
                }
                _ => timings::span("VTK patches", || VtkSeries::new(mesh, dir, &name))?,
            })
        } else {
            None
        };
        let (vtk, start_cells) = match (vtk, vtk_cells) {
            (Some(series), cells) => {
                let series = series.with_encoding(setup.output.vtk_encoding);
                match cells {
                    Some(CellsBeside { start, coming }) => {
                        (Some(series.with_cells_from(coming)), Some(start))
                    }
                    None => (Some(series), None),
                }
            }
            (None, _) => (None, None),
        };
        drop(output);
        let on_device = match (device, host_assembly) {
            (Device::Gpu(_), Some(reason)) => {
                log::info!("{reason}: assembling on the CPU, solving each system on the GPU");
                None
            }
            (Device::Gpu(gpu), None) => {
                let on_device = OnDevice::new(
                    gpu,
                    &mut system,
                    &problem,
                    &field,
                    setup.solver.regular.ordering,
                )?;
                if on_device.is_none() {
                    timings::timed(Phase::Assembly, || system.ensure_assembled())?;
                }
                timings::return_freed_memory();
                on_device
            }
            (Device::Cpu | Device::Distributed(_), _) => None,
            (Device::Gpus(_), _) => {
                log::info!("several GPUs: assembling on the CPU, solving split over the GPUs");
                None
            }
        };
        let mut run = Self {
            setup,
            mesh,
            geometry,
            system,
            on_device,
            problem,
            sp: None,
            field,
            vtk,
            foam_fields: Vec::new(),
            device,
            linear_solves: LinearSolves::new(
                device,
                GpuSolves::of(device),
                gamg_cache(
                    mesh,
                    geometry,
                    &[&setup.solver.regular]
                        .into_iter()
                        .chain(&setup.solver.final_corrector)
                        .collect::<Vec<_>>(),
                ),
            ),
            clock,
            solves: 0,
            written_error: None,
            field_read_at: None,
        };
        timings::timed(Phase::Assembly, || run.apply_implicit_source(0.0))?;
        if let Some(start) = start_cells {
            // The set-up is done: the VTK cells are built while the device
            // solves. Nobody waits for them if the thread is gone.
            let _ = start.send(());
        }
        Ok(run)
    }

    /// Adds the implicit part of Sp to the freshly assembled matrix.
    fn apply_implicit_source(&mut self, time: f64) -> Result<(), CaseError> {
        let Some(sp) = &self.setup.implicit_source else {
            return Ok(());
        };
        let sp = SemiImplicitSource::new(sp, self.setup.source_split, self.geometry, time)?;
        if self.is_singular() && sp.implicit.iter().any(|&v| v != 0.0) {
            // The system would treat the matrix as singular (consistency check,
            // reference level) although the implicit Sp changes that.
            return Err(CaseError::invalid(format!(
                "{}: an implicit source Sp in a steady case without any fixedValue \
                 boundary is not supported; give a fixedValue patch or move Sp into the \
                 explicit source",
                self.setup.origin
            )));
        }
        match &mut self.on_device {
            Some(dev) => {
                dev.laplacian.add_to_diagonal(&sp.implicit)?;
                dev.sp_explicit = if sp.explicit.iter().any(|&v| v != 0.0) {
                    Some(dev.laplacian.to_device_order(&sp.explicit)?)
                } else {
                    None
                };
            }
            None => {
                let diagonal = &self.system.slots().diagonal.clone();
                let values = self.system.matrix.values_mut();
                for (&slot, add) in diagonal.iter().zip(&sp.implicit) {
                    values[slot as usize] += add;
                }
            }
        }
        self.sp = Some(sp);
        Ok(())
    }

    /// Whether the matrix of the last assembly is singular (all-Neumann steady).
    fn is_singular(&self) -> bool {
        match &self.on_device {
            Some(dev) => dev.laplacian.is_singular(),
            None => self.system.is_singular(),
        }
    }

    /// The boundary coefficients of the last assembly.
    fn boundary_coeffs(&self) -> &BoundaryCoeffs {
        match &self.on_device {
            Some(dev) => dev.laplacian.boundary_coeffs(),
            None => self.system.boundary_coeffs(),
        }
    }

    /// Reads the field back from the device (GPU path) for output.
    fn sync_field(&mut self) -> Result<(), CaseError> {
        if let Some(dev) = &self.on_device {
            if self.field_read_at != Some(self.solves) {
                // Into the host field in place: no second copy of it.
                self.field.resize(self.mesh.n_cells(), 0.0);
                dev.laplacian
                    .to_mesh_order_into(dev.field.dev()?, &mut self.field)?;
                self.field_read_at = Some(self.solves);
            }
        }
        Ok(())
    }

    /// Cell gradient of the field (for output).
    fn gradient(&self) -> Result<Vec<Vec3>, CaseError> {
        Ok(match &self.on_device {
            Some(dev) => {
                dev.laplacian.gradient(dev.field.dev()?)?;
                dev.laplacian.download_gradient()?
            }
            None => self.system.gradient(&self.field),
        })
    }

    /// Re-evaluates time-dependent data at `time` with time step `dt` and re-assembles.
    fn reassemble(&mut self, time: f64, dt: f64) -> Result<(), CaseError> {
        let reassembled = self.reassemble_here(time, dt);
        agree_ranks(self.device, reassembled)
    }

    /// [`Self::reassemble`] on this rank.
    fn reassemble_here(&mut self, time: f64, dt: f64) -> Result<(), CaseError> {
        let _assembly = self.device.phase(Phase::Assembly);
        let setup = self.setup;
        self.problem.gamma = setup.gamma.cell_field(time);
        self.problem.source = setup.source.cell_field(time);
        if setup.boundary_is_time_dependent() {
            self.problem.boundary = setup.boundary_conditions(self.mesh, self.geometry, time)?;
        }
        self.problem.time = TimeScheme::Euler { dt };
        match &mut self.on_device {
            Some(dev) => dev.laplacian.reassemble(&self.system, &self.problem)?,
            None => self.system.reassemble(&self.problem)?,
        }
        self.apply_implicit_source(time)
    }

    /// Whether anything but the time step changes with time.
    fn is_time_dependent(&self) -> bool {
        let setup = self.setup;
        [&setup.gamma, &setup.source]
            .into_iter()
            .chain(&setup.implicit_source)
            .any(Scalar::is_function)
            || setup.boundary_is_time_dependent()
    }

    /// The non-orthogonal corrector loop: `nNonOrthogonalCorrectors + 1`
    /// solves; `transient`: the field before them is the old time level.
    fn solve(&mut self, transient: bool) -> Result<Vec<SolverPerformance>, CaseError> {
        let solved = self.solve_here(transient);
        agree_ranks(self.device, solved)
    }

    /// [`Self::solve`] on this rank (the ranks of a distributed run meet in
    /// its linear solves).
    fn solve_here(&mut self, transient: bool) -> Result<Vec<SolverPerformance>, CaseError> {
        let setup = self.setup;
        self.solves += 1;
        if let Some(dev) = &mut self.on_device {
            return dev.solve(setup, self.device, transient);
        }
        let _assembly = self.device.phase(Phase::Assembly);
        let old = transient.then(|| self.field.clone());
        let old = old.as_deref();
        let n_correctors = setup.n_non_orth_correctors;
        let sp_explicit = self.sp.as_ref().map(|sp| &sp.explicit);
        let mut performances = Vec::with_capacity(n_correctors + 1);
        let mut failure = None;
        let mut rhs_with_sp = Vec::new();
        self.system
            .solve_in_place(&mut self.field, old, n_correctors, |matrix, rhs, x| {
                if failure.is_some() {
                    return;
                }
                let solver = setup.solver.for_corrector(performances.len(), n_correctors);
                let b = match sp_explicit {
                    Some(sp) if sp.iter().any(|&v| v != 0.0) => {
                        rhs_with_sp.clear();
                        rhs_with_sp
                            .extend(rhs.iter().zip(sp).zip(&*x).map(|((b, s), t)| b + s * t));
                        &rhs_with_sp
                    }
                    _ => rhs,
                };
                let _solve = self.device.phase(Phase::Solve);
                let result = self
                    .linear_solves
                    .solve_in_place(solver, matrix, b, x, &setup.field);
                match result {
                    Ok(perf) => performances.push(perf),
                    Err(e) => failure = Some(e),
                }
            })?;
        match failure {
            Some(e) => Err(e.solving(&setup.field).into()),
            None => Ok(performances),
        }
    }

    /// Steady iterations until the residual control is met or `max_iterations`.
    fn steady(
        mut self,
        max_iterations: usize,
        residual_tolerance: f64,
    ) -> Result<RunSummary, CaseError> {
        if max_iterations == 0 {
            return Err(CaseError::invalid(format!(
                "{}: the maximum number of iterations must be at least 1",
                self.setup.origin
            )));
        }
        let interval = self.setup.output.interval.max(1);
        let mut converged = false;
        let mut iteration = 0;
        while iteration < max_iterations && !converged {
            iteration += 1;
            let step = timings::step_start();
            log::info!("Time = {iteration}");
            let performances = self.solve(false)?;
            let initial = performances[0].initial_residual;
            converged = residual_tolerance > 0.0 && initial < residual_tolerance;
            super::log_execution_time(self.clock);
            if converged || iteration == max_iterations || iteration % interval == 0 {
                self.write(iteration as f64, 0.0)?;
            }
            timings::log_step(step, format_args!("iteration {iteration}"));
        }
        let mut not_converged = None;
        if converged {
            log::info!("SIMPLE solution converged in {iteration} iterations");
        } else if residual_tolerance > 0.0 {
            let why = format!(
                "{}: residualControl {} not reached in {max_iterations} iterations",
                self.setup.field,
                format_g(residual_tolerance)
            );
            log::warn!("{why}");
            not_converged = Some(why);
        }
        self.finish(iteration, iteration as f64, 0.0, converged, not_converged)
    }

    /// Implicit Euler steps from t = 0 to `end_time`.
    fn euler(mut self, delta_t: f64, end_time: f64) -> Result<RunSummary, CaseError> {
        // ceil with a relative slack: endTime/deltaT = 10 + 1e-15 is 10 steps.
        let n_steps = ((end_time / delta_t) * (1.0 - 1e-12)).ceil().max(1.0) as usize;
        let time_dependent = self.is_time_dependent();
        let interval = self.setup.output.interval.max(1);
        if self.vtk.is_some() {
            timings::timed(Phase::Output, || {
                let boundary_values = self.boundary_values();
                self.write_vtk(0.0, 0.0, &boundary_values)
            })?;
        }
        let mut all_converged = true;
        let (mut solves, mut short) = (0, 0);
        let mut time = 0.0;
        for step in 1..=n_steps {
            let new_time = if step == n_steps {
                end_time
            } else {
                step as f64 * delta_t
            };
            let dt = new_time - time;
            time = new_time;
            let step_timings = timings::step_start();
            log::info!("Time = {}", format_g(time));
            if time_dependent || dt != delta_t {
                self.reassemble(time, dt)?;
            }
            let performances = self.solve(true)?;
            all_converged &= performances.iter().all(|p| p.converged);
            let n_correctors = self.setup.n_non_orth_correctors;
            for (corrector, p) in performances.iter().enumerate() {
                let controls = &self
                    .setup
                    .solver
                    .for_corrector(corrector, n_correctors)
                    .controls;
                solves += 1;
                short += usize::from(!p.converged && !controls.fixed_iterations());
            }
            super::log_execution_time(self.clock);
            if step == n_steps || step % interval == 0 {
                self.write(time, time)?;
            }
            timings::log_step(step_timings, format_args!("time step {step}"));
        }
        let not_converged = (short > 0).then(|| {
            format!(
                "{short} of {solves} linear solves of {} stopped at maxIter short of their \
                 tolerance",
                self.setup.field
            )
        });
        self.finish(n_steps, time, time, all_converged, not_converged)
    }

    /// Error against the exact solution at `time`, when there is one.
    fn error(&self, time: f64) -> Result<Option<Vec<f64>>, CaseError> {
        let Some(exact) = &self.setup.exact else {
            return Ok(None);
        };
        let mut error = exact.values_at(&self.geometry.cell_centres, time, "exact solution")?;
        error
            .par_iter_mut()
            .zip(self.field.par_iter())
            .for_each(|(e, t)| *e = t - *e);
        Ok(Some(error))
    }

    /// Writes every output format at `time` (`physical_time` for time-dependent data).
    fn write(&mut self, time: f64, physical_time: f64) -> Result<(), CaseError> {
        let _output = self.device.phase(Phase::Output);
        timings::span("field to the host", || self.sync_field())?;
        let foam = self.setup.output.formats.contains(&OutputFormat::Foam);
        // One evaluation of the boundary values serves both formats.
        let boundary_values = (self.vtk.is_some()
            || (foam && !matches!(self.device, Device::Distributed(_))))
        .then(|| self.boundary_values());
        if let Some(values) = boundary_values.as_deref().filter(|_| self.vtk.is_some()) {
            self.write_vtk(time, physical_time, values)?;
        }
        if foam {
            self.write_foam(time, boundary_values.as_deref())?;
        }
        Ok(())
    }

    /// The field's values on the boundary faces (for output).
    fn boundary_values(&self) -> Vec<f64> {
        timings::span("boundary values", || {
            self.boundary_coeffs().face_values(self.mesh, &self.field)
        })
    }

    /// Writes the VTK step at `time`; `boundary_values` are
    /// [`Self::boundary_values`] of the field written.
    fn write_vtk(
        &mut self,
        time: f64,
        physical_time: f64,
        boundary_values: &[f64],
    ) -> Result<(), CaseError> {
        let field = &self.setup.field;
        // The cells built beside the run come in before the gradient and the
        // error take their memory, so that their build's temporaries (the
        // mesh's cell-face lists) are gone by then.
        if let Some(vtk) = self.vtk.as_mut() {
            vtk.take_cells();
        }
        let gradient = timings::span("gradient", || self.gradient())?;
        let mut gamma_values = Vec::new();
        let gamma = timings::span("gamma", || {
            self.setup.gamma.vtk_field(
                "Gamma",
                &self.geometry.cell_centres,
                physical_time,
                &mut gamma_values,
            )
        })?;
        let error = timings::span("error", || self.error(physical_time))?;
        self.written_error = error.as_ref().map(|e| {
            let norms = ErrorNorms::new(e, &self.geometry.cell_volumes);
            (self.solves, physical_time, norms)
        });
        let grad_name = format!("grad({field})");
        let mut cell_fields = vec![
            Field::scalar(field, &self.field),
            Field::vector(&grad_name, &gradient),
            gamma,
            Field::scalar("cellVolume", &self.geometry.cell_volumes),
            Field::index("cellId", self.mesh.n_cells()),
        ];
        if let Some(error) = &error {
            cell_fields.push(Field::scalar("error", error));
        }
        let Some(vtk) = self.vtk.as_mut() else {
            return Ok(());
        };
        let written = timings::span("VTK files", || {
            vtk.write_step(time, &cell_fields, &[Field::scalar(field, boundary_values)])
        });
        if let Device::Distributed(ranks) = self.device {
            // The step is listed only once every rank's piece is on disk; a
            // rank that failed still takes part, so that none waits forever.
            let pvd = vtk.pvd_path();
            agreed(
                ranks.comm,
                written.map_err(CaseError::from),
                |_| 1,
                |failure| {
                    CaseError::invalid(format!(
                        "{failure}; the VTK step at {} is not listed in {}",
                        format_g(time),
                        pvd.display()
                    ))
                },
            )?;
            agree_ranks(self.device, vtk.publish_step().map_err(CaseError::from))?;
        } else {
            written?;
        }
        Ok(())
    }

    /// Writes `<case>/<time>/<field>` with the conditions in force and the
    /// boundary face values (OpenFOAM time directory layout);
    /// `boundary_values` are [`Self::boundary_values`], evaluated here where
    /// `None` (a distributed run's rank writes its own piece).
    fn write_foam(&mut self, time: f64, boundary_values: Option<&[f64]>) -> Result<(), CaseError> {
        if let Device::Distributed(ranks) = self.device {
            let written = super::decompose::write_rank_field(self.setup, &ranks, time, &self.field);
            // No rank lists its piece, or goes on, before every piece is on disk.
            let path = agree_ranks(self.device, written)?;
            log::info!("Writing {} (and the other ranks theirs)", path.display());
            self.foam_fields.push(path);
            return Ok(());
        }
        let evaluated;
        let boundary_values = match boundary_values {
            Some(values) => values,
            None => {
                evaluated = self.boundary_values();
                &evaluated
            }
        };
        let path = write_time_field(
            &self.setup.case_dir,
            time,
            self.mesh,
            &ScalarFieldOutput {
                name: &self.setup.field,
                cells: &self.field,
                boundary: &self.problem.boundary,
                boundary_values,
            },
            &self.setup.output.foam,
        )?;
        log::info!("Writing {}", path.display());
        self.foam_fields.push(path);
        Ok(())
    }

    /// Names what the run wrote and where (the last lines of its log).
    fn log_written(&self) {
        if let Some(vtk) = &self.vtk {
            log::info!(
                "Wrote {} VTK step(s), {:.1} MB ({}) in {:.2} s{}: {}",
                vtk.n_steps(),
                vtk.bytes_written() as f64 / 1e6,
                self.setup.output.vtk_encoding,
                vtk.write_time().as_secs_f64(),
                match self.device {
                    Device::Distributed(_) => ", this rank",
                    _ => "",
                },
                vtk.pvd_path().display()
            );
        }
        if let (Some(first), Some(last)) = (self.foam_fields.first(), self.foam_fields.last()) {
            let count = self.foam_fields.len();
            match count {
                1 => log::info!("Wrote the OpenFOAM field {}", first.display()),
                _ => log::info!(
                    "Wrote {count} OpenFOAM field files, {} to {}",
                    first.display(),
                    last.display()
                ),
            }
        }
        if self.vtk.is_none() && self.foam_fields.is_empty() {
            log::info!("Wrote no result files (no output format is on)");
        }
    }

    fn finish(
        mut self,
        steps: usize,
        time: f64,
        physical_time: f64,
        converged: bool,
        not_converged: Option<String>,
    ) -> Result<RunSummary, CaseError> {
        timings::span("field to the host", || self.sync_field())?;
        let written = self
            .written_error
            .filter(|&(solves, at, _)| solves == self.solves && at == physical_time)
            .map(|(_, _, norms)| norms);
        let error = match written {
            Some(norms) => Some(norms),
            None => timings::span("error", || self.error(physical_time))?
                .map(|e| ErrorNorms::new(&e, &self.geometry.cell_volumes)),
        }
        .inspect(|norms| {
            log::info!(
                "Error against the exact solution: L1 = {}, L2 = {}, Linf = {}",
                format_g(norms.l1),
                format_g(norms.l2),
                format_g(norms.linf)
            );
        });
        self.log_written();
        log::info!("End");
        Ok(RunSummary {
            n_cells: self.mesh.n_cells(),
            steps,
            time,
            converged,
            not_converged,
            field: self.field,
            error,
            vtk_series: self.vtk.as_ref().map(VtkSeries::pvd_path),
            foam_fields: self.foam_fields,
        })
    }
}

/// What OpenFOAM's GAMG keeps between the solves of `solvers` where one of
/// them is GAMG, nothing otherwise: the mesh's internal faces with their
/// `faceAreaPair` weights (16 bytes a face: the weight is all the
/// agglomeration reads of a face's area vector).
pub(crate) fn gamg_cache(mesh: &Mesh, geometry: &Geometry, solvers: &[&LinearSolver]) -> GamgCache {
    if solvers.iter().all(|s| s.gamg.is_none()) {
        return GamgCache::default();
    }
    let n = mesh.n_internal_faces();
    GamgCache::for_mesh(MeshFaces {
        owner: mesh.owner()[..n].to_vec(),
        neighbour: mesh.neighbour()[..n].to_vec(),
        weight: (0..n)
            .into_par_iter()
            .map(|f| {
                let s = geometry.area_vector(mesh, f);
                face_area_pair_weight([s.x, s.y, s.z])
            })
            .collect(),
    })
}

/// What a case's linear solves keep between solves: where they run, what
/// the GPUs keep ([`GpuSolves`]; None off the GPU) and GAMG's face weights
/// and cached agglomeration ([`gamg_cache`]).
pub(crate) struct LinearSolves<'g> {
    device: Device<'g>,
    gpu: Option<GpuSolves<'g>>,
    gamg_cache: GamgCache,
}

impl<'g> LinearSolves<'g> {
    pub(crate) fn new(
        device: Device<'g>,
        gpu: Option<GpuSolves<'g>>,
        gamg_cache: GamgCache,
    ) -> Self {
        Self {
            device,
            gpu,
            gamg_cache,
        }
    }

    /// Where the solves run.
    pub(crate) fn device(&self) -> Device<'g> {
        self.device
    }

    /// Solves one linear system with `solver` as the device runs it
    /// ([`Device::adapt`]): PCG or smoothSolver, on the CPU or, with a GPU
    /// solver, on the GPU (the matrix uploaded, x the initial guess).
    pub(crate) fn solve(
        &mut self,
        solver: &LinearSolver,
        matrix: &Csr,
        b: &[f64],
        x: &mut [f64],
        field: &str,
    ) -> Result<SolverPerformance, SolveError> {
        if let Device::Distributed(ranks) = self.device {
            return solve_distributed(&ranks, solver, matrix, b, x, field);
        }
        if solver.deflation != Deflation::None {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                log::warn!(
                    "deflation {}: a serial run is one subdomain, nothing to deflate; the key acts \
                     on distributed runs (run -np N)",
                    solver.deflation
                )
            });
        }
        let solver = self.device.adapt(solver);
        if let Device::Gpus(set) = self.device {
            let mut unkept = None;
            let kept = match self.gpu.as_mut() {
                Some(solves) => &mut solves.split,
                None => &mut unkept,
            };
            if let Some(result) = set.solve(kept, &solver, matrix, b, x, field) {
                return result;
            }
        }
        let gpu_solver = self.gpu.as_mut().map(|solves| &mut solves.solver);
        let (equilibration, controls) = (&solver.equilibration, &solver.controls);
        let options = GpuSolveOptions {
            ordering: solver.ordering,
            ..GpuSolveOptions::default()
        };
        if let Some(method) = &solver.krylov {
            return match (gpu_solver, solver.preconditioner) {
                (Some(gpu), p) => gpu.solve_krylov_preconditioned(
                    method,
                    &p,
                    DeviceSolve::new(matrix, b, x, controls, &options).named(field),
                ),
                (None, preconditioner) => {
                    solve_krylov(matrix, method, preconditioner, b, x, controls, field)
                }
            };
        }
        match (gpu_solver, &solver.smoother) {
            (Some(gpu), Some(smoother)) => gpu.solve_smooth(
                smoother,
                DeviceSolve::new(matrix, b, x, controls, &options).named(field),
            ),
            (Some(gpu), None) => gpu.solve_with(
                &solver.preconditioner,
                DeviceSolve::new(matrix, b, x, controls, &options)
                    .equilibrated(equilibration)
                    .named(field),
            ),
            (None, Some(smoother)) => solve_smooth(matrix, smoother, b, x, controls, field),
            (None, None) => match &solver.gamg {
                Some(settings) => {
                    solve_gamg(matrix, settings, b, x, controls, field, &self.gamg_cache)
                }
                None => solve_pcg_scaled(
                    matrix,
                    solver.preconditioner,
                    equilibration,
                    b,
                    x,
                    controls,
                    field,
                ),
            },
        }
    }

    /// [`Self::solve`] where the solve may take the matrix's values for its
    /// time: a CPU run's plain PCG (no GPU, no other method, no deflation) is
    /// [`solve_pcg_in_place`]'s, which holds the matrix in one layout while
    /// PCG iterates; every other solve is [`Self::solve`]'s.
    fn solve_in_place(
        &mut self,
        solver: &LinearSolver,
        matrix: &mut Csr,
        b: &[f64],
        x: &mut [f64],
        field: &str,
    ) -> Result<SolverPerformance, SolveError> {
        let plain_pcg = solver.is_pcg() && solver.deflation == Deflation::None;
        if matches!(self.device, Device::Cpu) && self.gpu.is_none() && plain_pcg {
            let solver = self.device.adapt(solver);
            return solve_pcg_in_place(
                matrix,
                solver.preconditioner,
                &solver.equilibration,
                b,
                x,
                &solver.controls,
                field,
            );
        }
        self.solve(solver, matrix, b, x, field)
    }
}

/// One linear solve of a distributed run: PCG over the ranks with `solver`'s
/// preconditioner (GAMG: its AMG) as block Jacobi, deflated by one vector per
/// rank with `deflation subdomains`; x, the whole field, is gathered back on
/// every rank.
fn solve_distributed(
    ranks: &Ranks,
    solver: &LinearSolver,
    matrix: &Csr,
    b: &[f64],
    x: &mut [f64],
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    // PBiCGStab runs over CPU ranks (OpenFOAM's `-parallel` steps, block
    // preconditioner), not deflated.
    let bicgstab = solver.krylov == Some(KrylovMethod::BiCgStab)
        && ranks.gpu.is_none()
        && solver.deflation == Deflation::None;
    let unsupported = if bicgstab {
        None
    } else if let Some(method) = &solver.krylov {
        Some(format!(
            "{method}{}",
            match (method, ranks.gpu) {
                (KrylovMethod::BiCgStab, Some(_)) => " on GPU ranks",
                (KrylovMethod::BiCgStab, None) => " with deflation",
                _ => "",
            }
        ))
    } else if let Some(smoother) = &solver.smoother {
        Some(format!("smoothSolver ({smoother})"))
    } else if solver.equilibration != EquilibrationKind::None {
        Some(format!("equilibration {}", solver.equilibration))
    } else {
        None
    };
    if let Some(what) = unsupported {
        return Err(SolveError::InvalidControls(format!(
            "{what} does not run distributed; use solver PCG with a preconditioner such as \
             DIC, FDIC or diagonal (block Jacobi over the ranks), GAMG, PBiCGStab on CPU \
             ranks, or run on one rank"
        )));
    }
    // GAMG runs as PCG with block-Jacobi AMG: each rank's hierarchy of its
    // owned block, one cycle as its block preconditioner.
    let block_preconditioner = solver.pcg_preconditioner();
    if let Some(gpu) = ranks.gpu {
        let solver = LinearSolver {
            preconditioner: block_preconditioner,
            ..*solver
        };
        return solve_distributed_gpu(gpu, ranks, &solver, matrix, b, x, field);
    }
    let local = ranks
        .decomposition
        .local(matrix, ranks.comm.rank())
        .map_err(SolveError::InvalidControls)?;
    let b_local = local.scatter(b);
    let mut x_local = local.scatter(x);
    let perf = match bicgstab {
        true => solve_bicgstab_distributed(
            &local,
            ranks.comm,
            block_preconditioner,
            &b_local,
            &mut x_local,
            &solver.controls,
            field,
        )?,
        false => solve_pcg_distributed(
            &local,
            ranks.comm,
            block_preconditioner,
            solver.deflation,
            &b_local,
            &mut x_local,
            &solver.controls,
            field,
        )?,
    };
    x.copy_from_slice(&gather_global(ranks.comm, &local, &x_local));
    Ok(perf)
}

/// [`solve_distributed`] on the rank's GPU: PCG over the ranks' GPUs with
/// Jacobi, none, block DIC/IC0/DILU or block AMG (the GPU AMG of
/// `gpu_amg_settings`), deflated by one vector per rank with `deflation
/// subdomains` (`gpu::multi::pcg_over_ranks`, the CPU ranks' steps),
/// halos and sums through the communicator; x is gathered back on every
/// rank.
fn solve_distributed_gpu(
    gpu: &Gpu,
    ranks: &Ranks,
    solver: &LinearSolver,
    matrix: &Csr,
    b: &[f64],
    x: &mut [f64],
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    // Jacobi, none, or block Jacobi over the ranks with an incomplete
    // factorisation of the rank's owned block (as on the CPU).
    let (jacobi, blocks) = match solver.preconditioner {
        Preconditioner::Kind(PreconditionerKind::Jacobi) => (true, None),
        Preconditioner::Kind(PreconditionerKind::None) => (false, None),
        Preconditioner::Kind(PreconditionerKind::Dic) => (false, Some(RankBlock::Ic(IcKind::Dic))),
        Preconditioner::Kind(PreconditionerKind::Ic0) => (false, Some(RankBlock::Ic(IcKind::Ic0))),
        Preconditioner::Kind(PreconditionerKind::Dilu) => {
            (false, Some(RankBlock::Ic(IcKind::Dilu)))
        }
        Preconditioner::Amg(s) => {
            let mut s = gpu_amg_settings(&s);
            if s.cycle == CycleKind::K {
                // The K-cycle's step lengths depend on r; the multi-GPU PCG
                // takes fixed linear preconditioners only.
                log::info!("GAMG on GPU ranks: V-cycles instead of the K-cycle (linear)");
                s.cycle = CycleKind::V;
            }
            s.validate().map_err(SolveError::InvalidControls)?;
            (false, Some(RankBlock::Amg(s)))
        }
        other => {
            return Err(SolveError::InvalidControls(format!(
                "preconditioner {other:?} does not run distributed on GPUs; use diagonal, \
                 none, DIC/FDIC, IC0, DILU or GAMG there, or run with --device cpu"
            )))
        }
    };
    crate::solve::cpu::check_system(matrix, b, x, &solver.controls)?;
    let device = |e: GpuError| SolveError::Device(e.to_string());
    let options = MultiGpuOptions {
        jacobi,
        // Block preconditioners run the host-driven steps.
        device_loop: blocks.is_none(),
        ..MultiGpuOptions::default()
    };
    let d = ranks.decomposition;
    // All ranks set up or all fail (for_rank, then `agree`): none waits in a
    // collective for a rank that gave up.
    let mut backend =
        MultiGpuBackend::for_rank(gpu, matrix, d, ranks.comm, &options).map_err(device)?;
    let mut built = Ok(());
    if let Some(block) = blocks {
        built = backend.set_preconditioners(matrix, d, |gpu, a_oo| {
            Ok(match block {
                RankBlock::Ic(kind) => Box::new(DeviceIncompleteCholesky::new(gpu, a_oo, kind)?)
                    as Box<dyn DevicePreconditioner>,
                RankBlock::Amg(settings) => {
                    let m = ModSell::from_csr(a_oo, options.slice_height)
                        .map_err(SolveError::Device)?;
                    let fine = DeviceModSell::upload(gpu, &m).map_err(device)?;
                    let amg = DeviceAmg::new(gpu, Rc::new(fine), &settings).map_err(device)?;
                    log::debug!("rank block GPU {settings}: {}", amg.describe());
                    Box::new(amg)
                }
            })
        });
    }
    let prepared = built.and_then(|()| {
        let b_dev = backend.upload(b).map_err(device)?;
        Ok((b_dev, backend.upload(x).map_err(device)?))
    });
    let (b_dev, mut x_dev) = backend.agree(prepared)?;
    let deflation = MultiGpuDeflation::of_setting(&backend, matrix, d, solver.deflation)?;
    let controls = &solver.controls;
    let (perf, whole) =
        backend.solve_agreed(deflation.as_ref(), &b_dev, &mut x_dev, controls, field)?;
    x.copy_from_slice(&whole);
    Ok(perf)
}

/// A GPU rank's block preconditioner on its owned block.
#[derive(Clone, Copy)]
enum RankBlock {
    Ic(IcKind),
    Amg(AmgSettings),
}

/// Writes `<case>/<time>/<field>` of `field` (the whole field, e.g.
/// reconstructed from the ranks' parts) with the case's boundary conditions,
/// as the serial run writes it.
pub(crate) fn write_reconstructed(
    setup: &CaseSetup,
    mesh: &Mesh,
    time: f64,
    field: Vec<f64>,
) -> Result<PathBuf, CaseError> {
    let geometry = mesh.geometry()?;
    let mut setup = setup.clone();
    setup.output.formats.retain(|f| *f != OutputFormat::Vtk);
    let mut run = Run::new(&setup, mesh, &geometry, Device::Cpu, Instant::now(), None)?;
    run.field = field;
    run.write_foam(time, None)?;
    Ok(run.foam_fields.pop().expect("write_foam records its file"))
}

/// The VTK series is named after the case directory (as foamToVTK does),
/// reduced to file-name characters.
fn series_name(setup: &CaseSetup) -> String {
    crate::io::vtk::series_name_for(&setup.case_dir)
}
