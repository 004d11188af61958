//! The SIMPLE outer iteration of [`crate::flow::simple`] on the device
//! (kernels in `kernels/assembly.cu` and `kernels/simple.cu`).
//!
//! [`DeviceSimple`] keeps a [`DeviceLaplacian`] of the pressure equation
//! (pattern, assembly map and geometry uploaded once per run, rows in reverse
//! Cuthill–McKee order) and the fields, in its row order: U per component, p,
//! the previous p, rAU, HbyA per component, and φ_HbyA and φ in the device face
//! layout ([`DeviceLaplacian::n_face_values`]). One outer iteration:
//!
//! 1. **Momentum predictor and Rhie–Chow**, on the device where the momentum
//!    solver is GMRES or PBiCGStab (Jacobi or none;
//!    [`DeviceSimple::momentum_on_device`]): per component a
//!    [`DeviceLaplacian`] of the viscous term (ν, the component's conditions;
//!    the pressure system's ordering, map and geometry shared, not uploaded
//!    again: [`DeviceLaplacian::sharing_set_up_of`]; its matrix assembled
//!    once, its right-hand side with the non-orthogonal correction updated
//!    each iteration), bounded upwind convection of the
//!    resident φ and the linearUpwind / limitedLinear correction gathered per row, Patankar
//!    relaxation, simpleFoam's explicit laminar stress where the settings
//!    have it (`simple_stress_faces`, `simple_stress_rows`, from the U of the
//!    last iteration) and −V∇p (`simple_momentum_rows`), solved by the Krylov
//!    method on the resident matrix once every component is assembled
//!    (PBiCGStab as the device loop of [`super::bicgstab`], the components
//!    its lanes, solved together; GMRES over `GpuKrylovBackend`, one
//!    component after the other); then a_P, HbyA, rAU, the face flux
//!    φ_HbyA and SIMPLEC's terms. The components share one momentum matrix
//!    and keep only their diagonals: their off-diagonals are equal (one ν,
//!    one φ), so the last component's off-diagonals serve all of them in
//!    HbyA. Otherwise on the host ([`Simple::predict`]),
//!    with rAU, HbyA and φ_HbyA uploaded (and U, p, φ read back at the end of
//!    the iteration).
//! 2. **Pressure**: ∇·φ_HbyA, the source −∇·φ_HbyA/V, re-assembly of the
//!    pressure matrix from the resident Γ = rAU and source
//!    ([`DeviceLaplacian::reassemble_from_device`]; PISO's correctors after
//!    the first keep rAU, so they re-assemble the source alone,
//!    [`DeviceLaplacian::reassemble_source_from_device`]), one right-hand side
//!    update and PCG solve (warm-started from the resident p; Jacobi, none,
//!    AMG ([`DevicePressureSolver::amg`], the hierarchy set up on the
//!    resident matrix once and its values re-set-up in place after each
//!    re-assembly) or a polynomial ([`DevicePressureSolver::polynomial`],
//!    set up on the device from the resident matrix, its inverse diagonal,
//!    Gershgorin bound, coefficients and f32 twin recomputed there after each
//!    re-assembly) per non-orthogonal corrector and one more, φ = φ_HbyA −
//!    the equation's face flux.
//! 3. **Corrections**: continuity errors (two device sums read back), p
//!    relaxation, ∇p and U = HbyA − rAU ∇p.
//!
//! With the momentum on the device, only residual scalars move per iteration;
//! the fields reach the host `Simple` at [`DeviceSimple::download_fields`]
//! (the run's writes and its end).
//!
//! Every device step keeps the CPU's order of operations (gathers, no
//! atomics, round-to-nearest arithmetic): the pressure matrix, the fluxes and
//! the velocity correction equal the CPU's bit for bit for the same inputs.
//! Exceptions, all round-off: the Krylov and PCG reductions are tree sums,
//! the relaxation's Σ|a_nb| and HbyA's row sums run in the device's column
//! order.

use crate::gpu::KernelArgs;
use std::rc::Rc;
use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::amg::DeviceAmg;
use super::assembly::{flatten, AssemblyError, DeviceLaplacian, LaplacianArrays};
use super::bicgstab::DeviceBicgstab;
use super::krylov::GpuKrylovBackend;
use super::matrix::DeviceModSell;
use super::pcg::{GpuSolveOptions, GpuVector};
use super::polynomial::DevicePolynomial;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError, SideWork};
use crate::flow::simple::{face_offsets, MomentumSolver, PhaseSeconds, Predicted, SimpleSettings};
use crate::flow::{Convection, FlowError, IterationReport, Simple};
use crate::mesh::Vec3;
use crate::solve::amg::AmgSettings;
use crate::solve::gmres::gmres;
use crate::solve::krylov::KrylovMethod;
use crate::solve::polynomial::PolynomialSettings;
use crate::solve::{
    pcg, Preconditioner, PreconditionerKind, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::{Csr, Permutation, RowOrdering};
use rayon::prelude::*;

pub mod piso;

/// Iterations of the momentum's PBiCGStab between read-backs: a solve takes
/// about 20 (transient steps) to 100 (steady iterations); a chunk's
/// iterations after convergence still launch their (no-op) kernels, so a
/// short chunk wastes fewer launches for one more read-back per 10
/// iterations.
const MOMENTUM_CHECK_INTERVAL: usize = 10;

/// Why the device loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum DeviceFlowError {
    #[error(transparent)]
    Flow(#[from] FlowError),
    #[error(transparent)]
    Assembly(#[from] AssemblyError),
}

impl From<GpuError> for DeviceFlowError {
    fn from(e: GpuError) -> Self {
        Self::Assembly(e.into())
    }
}

/// The pressure solver of the device loop: PCG on the resident matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePressureSolver {
    /// Jacobi preconditioner (else none; `amg` or `polynomial` replaces both).
    pub jacobi: bool,
    pub controls: SolverControls,
    /// `Some`: AMG-PCG with the GPU AMG of these settings (as the GPU runs
    /// them, `gpu::amg::gpu_amg_settings`): the hierarchy set up on the
    /// resident matrix at the first pressure solve, its values re-set-up in
    /// place after each re-assembly (aggregates kept).
    pub amg: Option<AmgSettings>,
    /// `Some` (and `amg` none): PCG with this polynomial preconditioner
    /// (Gershgorin bound; `gpu::polynomial::DevicePolynomial::on_device`),
    /// set up on the resident matrix at the first pressure solve, its values
    /// re-set-up on the device after each re-assembly.
    pub polynomial: Option<PolynomialSettings>,
}

impl DevicePressureSolver {
    /// The preconditioner, as the log names it.
    pub fn describe(&self) -> String {
        match (&self.amg, &self.polynomial, self.jacobi) {
            (Some(s), ..) => format!("{s}, values re-set-up after each re-assembly"),
            (None, Some(p), _) => format!("{p}, values re-set-up after each re-assembly"),
            (None, None, true) => "Jacobi".into(),
            (None, None, false) => "no preconditioner".into(),
        }
    }

    /// The name of the preconditioner set up on the device (`AMG`, or the
    /// polynomial's kind such as `Chebyshev`), whose set-up and re-set-ups
    /// [`DevicePhaseSeconds`] counts; `None` with Jacobi or none (nothing
    /// to set up).
    pub fn preconditioner_name(&self) -> Option<&'static str> {
        match (&self.amg, &self.polynomial) {
            (Some(_), _) => Some("AMG"),
            (None, Some(p)) => Some(p.kind.name()),
            (None, None) => None,
        }
    }

    /// Whether `self` and `other` precondition alike (the resident solve
    /// keeps one preconditioner for p and pFinal).
    pub fn same_preconditioner(&self, other: &Self) -> bool {
        (self.jacobi, &self.amg, &self.polynomial) == (other.jacobi, &other.amg, &other.polynomial)
    }
}

/// Time of the device loop's parts so far (seconds, each part synchronised
/// at its end).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DevicePhaseSeconds {
    /// Uploads of the host predictor's rAU, HbyA and φ_HbyA (0 with the
    /// momentum on the device).
    pub upload: f64,
    /// Momentum matrices on the device (viscous right-hand sides, gradients,
    /// convection, relaxation).
    pub momentum_assembly: f64,
    /// Momentum solves on the device.
    pub momentum_solve: f64,
    /// a_P, HbyA, rAU, φ_HbyA, SIMPLEC's terms on the device.
    pub fluxes: f64,
    /// Divergence, assembly of the pressure matrix and its right-hand sides.
    pub assembly: f64,
    /// AMG- or polynomial-PCG: the preconditioner's set-up (first
    /// iteration; 0 with Jacobi-PCG or none;
    /// [`DevicePressureSolver::preconditioner_name`] names it).
    pub preconditioner_setup: f64,
    /// AMG- or polynomial-PCG: the preconditioner's value-only re-set-ups
    /// (the later iterations).
    pub preconditioner_update: f64,
    /// PCG solves.
    pub solve: f64,
    /// Flux correction, continuity errors, relaxation, velocity correction.
    pub corrections: f64,
    /// Fields read back.
    pub download: f64,
}

/// Minimum bytes the device loop's solves moved so far, for the floor of
/// each at the copy bandwidth ([`Gpu::copy_bandwidth`]): the momentum
/// solves by [`super::bicgstab::loop_bytes`], the pressure solves by
/// [`super::pcg::iteration_bytes`] with the preconditioner's
/// [`DevicePreconditioner::application_bytes`] per iteration, and an SpMV
/// for each initial residual. `None` once a solver whose bytes are not
/// counted ran (GMRES, a preconditioner without a count).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePhaseBytes {
    pub momentum_solve: Option<f64>,
    pub solve: Option<f64>,
}

impl Default for DevicePhaseBytes {
    fn default() -> Self {
        Self {
            momentum_solve: Some(0.0),
            solve: Some(0.0),
        }
    }
}

/// A momentum solver as the device runs it: GMRES or PBiCGStab on the
/// resident matrix, Jacobi or no preconditioner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceKrylov {
    pub method: KrylovMethod,
    pub jacobi: bool,
    pub controls: SolverControls,
}

impl DeviceKrylov {
    /// `solver` on the device (its preconditioner as Jacobi unless none,
    /// logged for `field`); `Err`: why the device cannot run it.
    pub fn new(solver: &MomentumSolver, field: &str) -> Result<Self, String> {
        let method = solver.krylov.ok_or_else(|| {
            format!(
                "the {field} solver is smoothSolver (the device runs GMRES and PBiCGStab on \
                 the momentum matrix it assembles)"
            )
        })?;
        let jacobi = solver.preconditioner != Preconditioner::Kind(PreconditionerKind::None);
        if jacobi && solver.preconditioner != Preconditioner::Kind(PreconditionerKind::Jacobi) {
            log::info!(
                "{field}: the {} preconditioner runs as Jacobi on the device momentum matrix",
                solver.preconditioner
            );
        }
        Ok(Self {
            method,
            jacobi,
            controls: solver.controls,
        })
    }

    fn describe(&self) -> String {
        let used = if self.jacobi {
            "Jacobi"
        } else {
            "no preconditioner"
        };
        format!("{}, {used}", self.method)
    }
}

/// The explicit stress on the device: per row and per internal face (3
/// doubles each).
struct StressBuffers {
    cells: CudaSlice<f64>,
    faces: CudaSlice<f64>,
}

/// The momentum predictor on the device.
struct DeviceMomentum<'g> {
    /// The solver of the SIMPLE loop (a transient step picks its own).
    krylov: DeviceKrylov,
    /// Per solved component: the viscous system (rows in the pressure
    /// system's order), the diagonal of its momentum matrix, its relaxed
    /// right-hand side without −V∇p.
    viscous: Vec<DeviceLaplacian<'g>>,
    diagonals: Vec<CudaSlice<f64>>,
    sources: Vec<CudaSlice<f64>>,
    /// The momentum matrix, one for all components (`None` while a solve
    /// holds it). The components are assembled one after the other, then
    /// solved, and their matrices differ only on the diagonal: the
    /// off-diagonals are the viscous term's of the one ν plus the
    /// convection of the one φ (the conditions, the time term and the
    /// relaxation touch the diagonal and the right-hand side only). So the
    /// off-diagonal values the last assembly wrote serve every component,
    /// each with its own diagonal (`diagonals`), which is swapped in for
    /// its assembly and a GMRES solve ([`DeviceMomentum::take_matrix`]);
    /// PBiCGStab's lanes take all the diagonals at once. Parked, the
    /// matrix holds a one-value placeholder diagonal.
    matrix: Option<DeviceModSell>,
    /// Per solved component: the right-hand side its assembly wrote (all
    /// of them are assembled before the solves, which run together).
    b: Vec<GpuVector>,
    /// linearUpwind / limitedLinear's deferred correction.
    deferred: Option<Deferred>,
    /// S_f per device face, S_b per device boundary face (3 doubles each).
    sf: CudaSlice<f64>,
    b_sf: CudaSlice<f64>,
    a_p: CudaSlice<f64>,
    /// SIMPLEC: Σ a_nb of the first component, rAtU, rAtU − rAU.
    consistent: Option<[CudaSlice<f64>; 3]>,
    /// The explicit laminar stress, where the equations have it.
    stress: Option<StressBuffers>,
    /// PBiCGStab's device loop, one lane per solved component, set up at
    /// the first PBiCGStab solve; its work vectors and captured chunks
    /// serve every step.
    bicgstab: Option<DeviceBicgstab<'g>>,
}

/// The deferred correction of the convection scheme on the device.
struct Deferred {
    /// limitedLinear's k; −1: linearUpwind.
    k: f64,
    /// F·correction per device face.
    fc: CudaSlice<f64>,
    /// linearUpwind: x_f − x_P and x_f − x_N per device face (3 doubles).
    to_owner: Option<CudaSlice<f64>>,
    to_neighbour: Option<CudaSlice<f64>>,
    /// limitedLinear: x_N − x_P per device face.
    delta: Option<CudaSlice<f64>>,
}

/// The SIMPLE loop on one GPU (see the module documentation).
pub struct DeviceSimple<'g> {
    gpu: &'g Gpu,
    laplacian: DeviceLaplacian<'g>,
    solver: DevicePressureSolver,
    /// The pressure's AMG hierarchy (`solver.amg`), once set up; lent to
    /// the PCG backend during the solves.
    amg: Option<Rc<DeviceAmg<'g>>>,
    /// The pressure's polynomial preconditioner (`solver.polynomial`), once
    /// set up; lent like `amg`.
    polynomial: Option<Rc<DevicePolynomial<'g>>>,
    /// The solved velocity components (0 = x).
    components: Vec<usize>,
    momentum: Option<DeviceMomentum<'g>>,
    p: GpuVector,
    p_old: CudaSlice<f64>,
    r_au: CudaSlice<f64>,
    /// Per component (3; unsolved ones stay zero).
    hbya: Vec<CudaSlice<f64>>,
    u: Vec<GpuVector>,
    phi_hbya: CudaSlice<f64>,
    phi: CudaSlice<f64>,
    div: CudaSlice<f64>,
    source: CudaSlice<f64>,
    seconds: DevicePhaseSeconds,
    bytes: DevicePhaseBytes,
    /// Value re-set-ups of the AMG or polynomial preconditioner so far (the
    /// set-up not counted).
    preconditioner_updates: usize,
    /// The pressure matrix was assembled on the device from a device rAU
    /// (its Γ buffer and its preconditioner made).
    pressure_assembled: bool,
    /// Whether the host `Simple` holds the device's U, p and φ.
    host_current: bool,
}

/// Lap timer: the seconds since the last lap, after the device finished
/// its queued work where `synced`; else the host's time between the laps
/// (the launches, and the waits of the part's own read-backs, which take in
/// the device time of every part queued before them).
struct Lap<'g> {
    gpu: &'g Gpu,
    clock: Instant,
    synced: bool,
}

impl Lap<'_> {
    fn lap(&mut self, part: &mut f64) -> Result<f64, GpuError> {
        if self.synced {
            self.gpu.synchronize()?;
        }
        let s = self.clock.elapsed().as_secs_f64();
        *part += s;
        self.clock = Instant::now();
        Ok(s)
    }
}

/// The pressure preconditioner in `slot` re-set up in place on `matrix` by
/// `update` (back from the PCG backend that had it on loan; an error naming
/// it as `what` while it is still lent), or, the first time, made on
/// `matrix` by `build`.
fn update_or_build<P>(
    slot: &mut Option<Rc<P>>,
    what: &str,
    matrix: Rc<DeviceModSell>,
    update: impl FnOnce(&mut P, Rc<DeviceModSell>) -> Result<(), GpuError>,
    build: impl FnOnce(Rc<DeviceModSell>) -> Result<P, GpuError>,
) -> Result<(), GpuError> {
    match slot {
        Some(lent) => {
            let lent = Rc::get_mut(lent).ok_or_else(|| {
                GpuError::Invalid(format!(
                    "the pressure {what} is still lent to a PCG backend"
                ))
            })?;
            update(lent, matrix)
        }
        None => {
            *slot = Some(Rc::new(build(matrix)?));
            Ok(())
        }
    }
}

/// What the momentum rows of every solved component read alike: the
/// pressure system's row walk (n, its device faces) and arrays, ∇p of the
/// resident p, the face fluxes φ, whether the snGrad is corrected and the
/// relaxation factor of U.
struct ComponentInputs<'a> {
    n: i32,
    n_faces: i32,
    arrays: LaplacianArrays<'a>,
    gradient: &'a CudaSlice<f64>,
    phi: &'a CudaSlice<f64>,
    corrected: bool,
    relaxation: f64,
}

impl<'a> ComponentInputs<'a> {
    /// ∇p of `p` computed on `pressure`, then the inputs around it.
    fn new(
        pressure: &'a DeviceLaplacian,
        p: &CudaSlice<f64>,
        phi: &'a CudaSlice<f64>,
        settings: &SimpleSettings,
        relaxation: f64,
    ) -> Result<Self, GpuError> {
        pressure.gradient(p)?;
        Ok(Self {
            n: pressure.n() as i32,
            n_faces: pressure.device_faces().len() as i32,
            arrays: pressure.arrays()?,
            gradient: pressure.gradient_buffer(),
            phi,
            corrected: settings.schemes.sn_grad.is_corrected(),
            relaxation,
        })
    }
}

/// Launches the row kernel `kernel`, one block per slice of `arrays`'
/// matrix and one thread per row, with the arguments of the row walk first
/// (n, slice_ptr, face_codes, face_slots, boundary_ptr), then what `push` adds.
fn launch_row_walk<'a>(
    gpu: &'a Gpu,
    kernel: &'static str,
    n: &'a i32,
    arrays: &'a LaplacianArrays<'a>,
    push: impl FnOnce(&mut KernelArgs<'a>),
) -> Result<(), GpuError> {
    let m = arrays.matrix;
    gpu.launch(kernel, m.n_slices() as u32, m.slice_height as u32, 0, |a| {
        a.arg(n)
            .arg(&m.slice_ptr)
            .arg(arrays.face_codes)
            .arg(arrays.face_slots)
            .arg(arrays.boundary_ptr);
        push(a);
    })
}

/// Launches the face kernel `kernel`, one thread per internal face (nothing
/// without internal faces), with the arguments of the face walk first
/// (n_faces, owner, neighbour, weights), then what `push` adds.
fn launch_face_walk<'a>(
    gpu: &'a Gpu,
    kernel: &'static str,
    n_faces: &'a i32,
    arrays: &'a LaplacianArrays<'a>,
    push: impl FnOnce(&mut KernelArgs<'a>),
) -> Result<(), GpuError> {
    if *n_faces <= 0 {
        return Ok(());
    }
    gpu.launch_vector(kernel, *n_faces as usize, |a| {
        a.arg(n_faces)
            .arg(arrays.face_owner)
            .arg(arrays.face_neighbour)
            .arg(arrays.weights);
        push(a);
    })
}

impl<'g> DeviceSimple<'g> {
    /// The systems of `simple` on `gpu`, its U, p and φ uploaded; the
    /// momentum predictor on the device where [`Self::momentum_on_device`]
    /// allows it. [`AssemblyError::Unsupported`]: the device assembly does
    /// not handle the mesh (run the host loop instead).
    pub fn new(
        gpu: &'g Gpu,
        simple: &mut Simple,
        solver: DevicePressureSolver,
    ) -> Result<Self, AssemblyError> {
        let mut device = Self::pressure_half(gpu, simple, solver)?;
        device.momentum = match Self::momentum_on_device(simple) {
            Ok(krylov) => match crate::timings::span_synced("momentum systems", gpu, || {
                DeviceMomentum::new(
                    gpu,
                    simple,
                    &device.laplacian,
                    Some(simple.settings().convection),
                    krylov,
                    simple.settings().explicit_stress,
                )
            }) {
                Ok(momentum) => {
                    log::info!(
                        "momentum predictor and Rhie-Chow on the GPU ({}), matrices assembled \
                         there{}",
                        krylov.describe(),
                        if simple.settings().explicit_stress {
                            ", with the explicit laminar stress"
                        } else {
                            ""
                        }
                    );
                    Some(momentum)
                }
                Err(AssemblyError::Unsupported(why)) => {
                    log::info!("momentum predictor on the CPU: {why}");
                    None
                }
                Err(e) => return Err(e),
            },
            Err(why) => {
                log::info!("momentum predictor on the CPU: {why}");
                None
            }
        };
        Ok(device)
    }

    /// The pressure system and the fields of `simple` on `gpu`, without
    /// the momentum systems (which share the pressure system's device
    /// set-up: [`DeviceLaplacian::sharing_set_up_of`]). The host's systems
    /// stay unassembled: the ordering needs only their shared pattern, the
    /// assembly map (built on the device) only the mesh; the values the
    /// host's check evaluated are taken for the upload, not evaluated again.
    fn pressure_half(
        gpu: &'g Gpu,
        simple: &mut Simple,
        solver: DevicePressureSolver,
    ) -> Result<Self, AssemblyError> {
        let (system, _) = simple.pressure_system();
        let slice_height = GpuSolveOptions::default().slice_height;
        // One ordering and assembly map for the pressure and the momentum
        // components: the systems share the mesh and the matrix pattern. A
        // mesh order that is banded already is kept, as a Poisson run keeps
        // it (`RowOrdering::keeps_banded`).
        let ordering = crate::timings::span("row ordering (RCM unless banded)", || {
            let n = system.mesh().n_cells();
            RowOrdering::Rcm
                .permutation_unless_banded(&system.matrix, slice_height)
                .map(|p| p.unwrap_or_else(|| Permutation::identity(n)))
        })
        .map_err(GpuError::Invalid)?;
        let values = simple.take_pressure_values()?;
        let (system, _) = simple.pressure_system();
        let laplacian = crate::timings::span_synced("pressure system", gpu, || {
            DeviceLaplacian::with_ordering_evaluated(gpu, system, values, ordering, slice_height)
        })?;
        let simple = &*simple;
        let n = laplacian.n();
        let faces = laplacian.n_face_values();
        let p = GpuVector::from(laplacian.to_device_order(&simple.p)?);
        let phi = gpu.upload(&laplacian.to_device_faces(&simple.phi)?)?;
        let components = simple.components().to_vec();
        let u = (0..3)
            .map(|c| {
                let values: Vec<f64> = simple.u.iter().map(|u| u[c]).collect();
                Ok(GpuVector::from(laplacian.to_device_order(&values)?))
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        let hbya = (0..3)
            .map(|_| gpu.zeros(n))
            .collect::<Result<Vec<_>, GpuError>>()?;
        let device = Self {
            gpu,
            solver,
            amg: None,
            polynomial: None,
            components,
            momentum: None,
            p,
            p_old: gpu.zeros(n)?,
            r_au: gpu.zeros(n)?,
            hbya,
            u,
            phi_hbya: gpu.zeros(faces)?,
            phi,
            div: gpu.zeros(n)?,
            source: gpu.zeros(n)?,
            laplacian,
            seconds: DevicePhaseSeconds::default(),
            bytes: DevicePhaseBytes::default(),
            preconditioner_updates: 0,
            pressure_assembled: false,
            host_current: true,
        };
        Ok(device)
    }

    /// The device's solver of the momentum predictor of `simple`'s
    /// settings; `Err`: why the device cannot run it (it then runs on the host).
    pub fn momentum_on_device(simple: &Simple) -> Result<DeviceKrylov, String> {
        let settings = simple.settings();
        let krylov = DeviceKrylov::new(&settings.momentum, "U")?;
        let (pressure, _) = simple.pressure_system();
        let non_orthogonal = pressure
            .face_geometry()
            .correction_vectors
            .iter()
            // k = n − d/(n·d) is dimensionless; round-off on orthogonal faces.
            .any(|k| k.norm() > 1e-9);
        if settings.consistent && non_orthogonal {
            return Err(
                "SIMPLEC's snGrad(p) on a non-orthogonal mesh has an explicit correction \
                 the device assembly does not compute"
                    .into(),
            );
        }
        Ok(krylov)
    }

    /// Whether the momentum predictor runs on the device.
    pub fn has_device_momentum(&self) -> bool {
        self.momentum.is_some()
    }

    /// The pressure solver the loop runs.
    pub fn pressure_solver(&self) -> &DevicePressureSolver {
        &self.solver
    }

    /// Time by part of the iterations so far.
    pub fn phase_seconds(&self) -> DevicePhaseSeconds {
        self.seconds
    }

    /// The solves' bytes so far ([`DevicePhaseBytes`]).
    pub fn phase_bytes(&self) -> DevicePhaseBytes {
        self.bytes
    }

    /// Value re-set-ups of the pressure's AMG or polynomial preconditioner so
    /// far, its set-up not counted: one per re-assembly of the pressure
    /// matrix (none with Jacobi or no preconditioner).
    pub fn preconditioner_updates(&self) -> usize {
        self.preconditioner_updates
    }

    /// The pressure matrix as last assembled, rows in the device order
    /// (the order of [`Self::pressure_amg`]'s fine level; for checks).
    pub fn pressure_matrix(&self) -> Result<Csr, GpuError> {
        Ok(self.laplacian.matrix()?.download(self.gpu)?.to_csr())
    }

    /// The pressure's AMG hierarchy, once set up (AMG-PCG only).
    pub fn pressure_amg(&self) -> Option<&DeviceAmg<'g>> {
        self.amg.as_deref()
    }

    /// The pressure's polynomial preconditioner, once set up
    /// (polynomial-PCG only; for checks).
    pub fn pressure_polynomial(&self) -> Option<&DevicePolynomial<'g>> {
        self.polynomial.as_deref()
    }

    /// One outer iteration of `simple` (the state this loop was built from,
    /// or its continuation): [`Simple::iterate`] on the device. With the
    /// momentum on the host, U, p and φ of `simple` are updated; else
    /// [`Self::download_fields`] brings them.
    pub fn iterate(&mut self, simple: &mut Simple) -> Result<IterationReport, DeviceFlowError> {
        let gpu = self.gpu;
        let mut timer = Lap {
            gpu,
            clock: Instant::now(),
            synced: true,
        };
        let mut seconds = self.seconds;
        let mut host = PhaseSeconds::default();
        let u_initial = if self.momentum.is_some() {
            simple.begin_iteration();
            let u_initial = self.device_predict(simple, &mut timer, &mut seconds, &mut host)?;
            self.host_current = false;
            u_initial
        } else {
            let predicted = simple.predict()?;
            timer.clock = Instant::now();
            let u_initial = self.upload_predicted(predicted)?;
            // The host predictor's uploads belong to its fluxes phase.
            host.fluxes += timer.lap(&mut seconds.upload)?;
            u_initial
        };

        // The pressure equation −∇·(rAU∇p) = −∇·φ_HbyA.
        let n = self.laplacian.n();
        let n_i = n as i32;
        gpu.copy(self.p.dev()?, &mut self.p_old)?;
        let settings = *simple.settings();
        let controls = self.solver.controls;
        let p_solves = self.pressure_equation(
            false,
            settings.n_non_orth_correctors,
            |_| controls,
            &mut timer,
            &mut seconds,
            &mut host.pressure,
        )?;

        // Continuity errors, p relaxation, U = HbyA − rAU ∇p.
        self.laplacian.divergence(&self.phi, &self.div)?;
        let [sum, abs_sum] = self.laplacian.sums(&self.div, None)?;
        let total = self.laplacian.total_volume();
        let continuity = simple.record_continuity(abs_sum / total, sum / total);
        let alpha_p = settings.relaxation_p;
        let p = self.p.dev()?;
        gpu.launch_vector("simple_relax", n, |a| {
            a.arg(&n_i).arg(&alpha_p).arg(&self.p_old).arg(p);
        })?;
        self.correct_velocity()?;
        host.corrections += timer.lap(&mut seconds.corrections)?;
        if self.momentum.is_none() {
            // The host momentum predictor of the next iteration needs them.
            self.download_fields(simple)?;
            host.corrections += timer.lap(&mut seconds.download)?;
        }
        self.seconds = seconds;
        simple.add_seconds(host);
        Ok(simple.report(u_initial, p_solves, continuity))
    }

    /// The pressure equation −∇·(rAU∇p) = −∇·φ_HbyA from the resident rAU
    /// and φ_HbyA: the matrix re-assembled (the AMG or polynomial
    /// preconditioner re-set-up), one right-hand
    /// side update and PCG solve (warm-started from the resident p, with
    /// `controls(last)`, `last` on the final solve) per non-orthogonal
    /// corrector and one more, then φ = φ_HbyA − the equation's face flux.
    /// With `rau_unchanged` (rAU is the one of this system's last assembly)
    /// only the right-hand side is re-assembled: the matrix would be the same
    /// bits, so its preconditioner and the solver's graphs stay.
    /// Times go to `seconds` and, summed, to `host`.
    fn pressure_equation(
        &mut self,
        rau_unchanged: bool,
        n_non_orth_correctors: usize,
        controls: impl Fn(bool) -> SolverControls,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
        host: &mut f64,
    ) -> Result<Vec<SolverPerformance>, DeviceFlowError> {
        let n = self.laplacian.n();
        let n_i = n as i32;
        self.laplacian.divergence(&self.phi_hbya, &self.div)?;
        self.gpu.launch_vector("simple_source", n, |a| {
            a.arg(&n_i)
                .arg(&self.div)
                .arg(self.laplacian.volumes())
                .arg(&self.source);
        })?;
        if rau_unchanged {
            self.laplacian.reassemble_source_from_device(&self.source)?;
            *host += timer.lap(&mut seconds.assembly)?;
        } else {
            self.laplacian
                .reassemble_from_device(&self.r_au, &self.source)?;
            *host += timer.lap(&mut seconds.assembly)?;
            self.update_pressure_preconditioner(timer, seconds, host)?;
            self.pressure_assembled = true;
        }
        let options = GpuSolveOptions::default();
        let mut p_solves = Vec::with_capacity(n_non_orth_correctors + 1);
        for corrector in 0..=n_non_orth_correctors {
            self.laplacian.update_rhs_deferred(self.p.dev()?, None)?;
            *host += timer.lap(&mut seconds.assembly)?;
            let (backend, b) = match (&self.amg, &self.polynomial) {
                (Some(amg), _) => self.laplacian.preconditioned_solver(amg, &options)?,
                (None, Some(p)) => self.laplacian.preconditioned_solver(p, &options)?,
                (None, None) => self.laplacian.solver(self.solver.jacobi, &options)?,
            };
            let controls = controls(corrector == n_non_orth_correctors);
            let perf = pcg(backend, b, &mut self.p, &controls, "p");
            // The preconditioner's bytes per application, and whether PCG
            // applies Jacobi itself, as the backend above was chosen.
            let (preconditioner, jacobi) = match (&self.amg, &self.polynomial) {
                (Some(amg), _) => (amg.application_bytes(), false),
                (None, Some(p)) => (p.application_bytes(), false),
                (None, None) => (Some(0.0), self.solver.jacobi),
            };
            // The AMG value re-set-up's status (deferred: `update_amg`), read
            // now that the solve's residual read-backs have drained the
            // stream; a rejected matrix explains a failed solve, so it is
            // the error reported.
            if let Some(amg) = &self.amg {
                amg.deferred_status()?;
            }
            // So is the right-hand side's consistency check (the CPU's
            // error for an inconsistent singular system).
            self.laplacian.deferred_consistency()?;
            let perf = perf.map_err(|e| FlowError::from(e.solving("p")))?;
            self.bytes.solve = self
                .bytes
                .solve
                .zip(preconditioner)
                .map(|(b, m)| b + self.pressure_solve_bytes(perf.iterations, m, jacobi));
            p_solves.push(perf);
            *host += timer.lap(&mut seconds.solve)?;
        }
        let p = self.p.dev()?;
        self.laplacian
            .subtract_flux(p, &self.r_au, &self.phi_hbya, &self.phi)?;
        *host += timer.lap(&mut seconds.corrections)?;
        Ok(p_solves)
    }

    /// Minimum bytes of a pressure solve of `iterations` iterations whose
    /// preconditioner moves `preconditioner` bytes per application (PCG's
    /// own Jacobi where `jacobi`): the initial residual's SpMV, then per
    /// iteration PCG's own bytes and one application.
    fn pressure_solve_bytes(&self, iterations: usize, preconditioner: f64, jacobi: bool) -> f64 {
        let Ok(m) = self.laplacian.matrix() else {
            return 0.0;
        };
        let iteration = super::pcg::iteration_bytes(m.n, m.codes.len(), jacobi, false);
        m.spmv_bytes() + iterations as f64 * (iteration + preconditioner)
    }

    /// PISO and PIMPLE: rAU of the momentum equation just assembled, the
    /// pressure matrix re-assembled from it and its preconditioner re-set
    /// up, enqueued on the device's side stream, so that they run while the
    /// momentum equation is solved: the matrix depends on the momentum
    /// equation's diagonal only, not on the solved U (Issa 1986). The
    /// right-hand side comes with the correctors' fluxes
    /// ([`Self::pressure_equation`] keeping the matrix); the caller joins
    /// the work before them. `None`, nothing enqueued: before the first
    /// assembly (the preconditioner's set-up allocates and reads back
    /// sizes), or when the parts are timed one by one (`synchronised`).
    fn pressure_matrix_ahead(
        &mut self,
        synchronised: bool,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
    ) -> Result<Option<SideWork>, GpuError> {
        if synchronised || !self.pressure_assembled {
            return Ok(None);
        }
        let gpu = self.gpu;
        let ((), work) = gpu.on_side_stream(|| {
            let m = self.momentum.as_ref().ok_or_else(lost)?;
            m.r_au(gpu, &self.laplacian, &self.components, &self.r_au)?;
            self.laplacian
                .reassemble_from_device(&self.r_au, &self.source)?;
            timer.lap(&mut seconds.assembly)?;
            self.update_pressure_preconditioner(timer, seconds, &mut 0.0)
        })?;
        Ok(Some(work))
    }

    /// The AMG or polynomial preconditioner of p set up on the matrix just
    /// assembled, or its values re-set up in place.
    fn update_pressure_preconditioner(
        &mut self,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
        host: &mut f64,
    ) -> Result<(), GpuError> {
        let amg = self.solver.amg.is_some();
        // Whether the preconditioner is there to update (else it is set up).
        let update = if amg {
            self.amg.is_some()
        } else if self.solver.polynomial.is_some() {
            self.polynomial.is_some()
        } else {
            return Ok(());
        };
        let part = if update {
            &mut seconds.preconditioner_update
        } else {
            &mut seconds.preconditioner_setup
        };
        if amg {
            self.update_amg()?;
        } else {
            self.update_polynomial()?;
        }
        *host += timer.lap(part)?;
        self.preconditioner_updates += usize::from(update);
        Ok(())
    }

    /// U = HbyA − rAU ∇p per solved component, ∇p of the resident p (one
    /// launch for the components).
    fn correct_velocity(&mut self) -> Result<(), GpuError> {
        let n = self.laplacian.n();
        let n_i = n as i32;
        let p = self.p.dev()?;
        self.laplacian.gradient(p)?;
        let solved = |c: usize| self.components.contains(&c);
        let u = (0..3)
            .map(|c| solved(c).then(|| self.u[c].dev()).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        self.gpu.launch_vector("simple_correct_velocities", n, |a| {
            a.arg(&n_i);
            for c in 0..3 {
                arg_or_null(a, solved(c).then_some(&self.hbya[c]));
            }
            a.arg(&self.r_au).arg(self.laplacian.gradient_buffer());
            for u_c in &u {
                arg_or_null(a, *u_c);
            }
        })
    }

    /// AMG-PCG: sets the hierarchy up on the pressure matrix just
    /// assembled, or re-sets its values up in place (the re-assembly took it
    /// back from the PCG backend that had it on loan; the backend lends it
    /// again at the next solve and replays the graphs it captured with it).
    /// The re-set-up does not wait for the device: its status is read after
    /// the next solve ([`DeviceAmg::deferred_status`]), whose residual
    /// read-backs synchronise anyway.
    fn update_amg(&mut self) -> Result<(), GpuError> {
        let Some(settings) = &self.solver.amg else {
            return Ok(());
        };
        let gpu = self.gpu;
        update_or_build(
            &mut self.amg,
            "AMG",
            self.laplacian.shared_matrix()?,
            |amg, fine| amg.update_values_deferred(fine),
            |fine| {
                let amg = DeviceAmg::new(gpu, fine, settings)?;
                log::info!("p: GPU {settings}: {}", amg.describe());
                Ok(amg)
            },
        )
    }

    /// Polynomial-PCG: sets the preconditioner up on the pressure matrix
    /// just assembled, or re-sets its values up on the device (the
    /// re-assembly took it back from the PCG backend that had it on loan).
    fn update_polynomial(&mut self) -> Result<(), GpuError> {
        let Some(settings) = &self.solver.polynomial else {
            return Ok(());
        };
        let gpu = self.gpu;
        update_or_build(
            &mut self.polynomial,
            "polynomial",
            self.laplacian.shared_matrix()?,
            |p, matrix| p.update_values(matrix),
            |matrix| {
                let p = DevicePolynomial::on_device(gpu, matrix, settings)?;
                log::info!(
                    "p: GPU {settings}, upper eigenvalue bound {:.6} (Gershgorin, on the device)",
                    p.recurrence().hi
                );
                Ok(p)
            },
        )
    }

    /// Uploads the host predictor's rAU, HbyA and φ_HbyA; its residuals.
    fn upload_predicted(&mut self, predicted: Predicted) -> Result<Vec<(String, f64)>, GpuError> {
        let gpu = self.gpu;
        let ordering = self.laplacian.ordering();
        gpu.write(&ordering.to_new(&predicted.r_au), &mut self.r_au)?;
        for (c, h) in self.hbya.iter_mut().enumerate() {
            let values: Vec<f64> = predicted.hbya.iter().map(|v| v[c]).collect();
            gpu.write(&ordering.to_new(&values), h)?;
        }
        gpu.write(
            &self.laplacian.to_device_faces(&predicted.phi_hbya)?,
            &mut self.phi_hbya,
        )?;
        Ok(predicted.u_initial)
    }

    /// Steps 1 and 2 on the device: momentum matrices and solves, a_P, HbyA,
    /// rAU, φ_HbyA (and SIMPLEC's terms) into the resident fields.
    fn device_predict(
        &mut self,
        simple: &Simple,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
        host: &mut PhaseSeconds,
    ) -> Result<Vec<(String, f64)>, DeviceFlowError> {
        let gpu = self.gpu;
        let m = self.momentum.as_mut().expect("checked by the caller");
        let settings = simple.settings();
        let pressure = &self.laplacian;
        let n = pressure.n();
        let n_i = n as i32;
        let p = self.p.dev()?;
        let inputs = ComponentInputs::new(pressure, p, &self.phi, settings, settings.relaxation_u)?;
        // The explicit stress from the U of the last iteration (all
        // components, before any is solved).
        if settings.explicit_stress {
            m.compute_stress(gpu, pressure, &self.components, &self.u, settings.nu)?;
        }
        for (k, &c) in self.components.iter().enumerate() {
            let c_i = c as i32;
            m.assemble_component(
                gpu,
                "simple_momentum_rows",
                k,
                &c_i,
                self.u[c].dev()?,
                &inputs,
                |a| {
                    a.arg(&self.phi);
                },
                |_| {},
            )?;
            host.momentum += timer.lap(&mut seconds.momentum_assembly)?;
        }
        let krylov = m.krylov;
        let solved = m.solve_components(
            gpu,
            &self.components,
            &mut self.u,
            &krylov,
            &mut self.bytes.momentum_solve,
        )?;
        let u_initial: Vec<(String, f64)> = solved
            .into_iter()
            .map(|(field, perf)| (field, perf.initial_residual))
            .collect();
        host.momentum += timer.lap(&mut seconds.momentum_solve)?;

        // a_P, HbyA, rAU and the face flux φ_HbyA.
        let simplec = m.consistent.as_ref().map(|[off, r_atu, _]| (off, r_atu));
        m.h_by_a(
            gpu,
            pressure,
            &self.components,
            &self.u,
            &self.hbya,
            &self.r_au,
            simplec,
        )?;
        let hbya = [&self.hbya[0], &self.hbya[1], &self.hbya[2]];
        m.face_flux(gpu, pressure, &self.components, hbya, &self.phi_hbya)?;
        if let Some([_, r_atu, diff]) = &m.consistent {
            gpu.launch_vector("simple_difference", n, |a| {
                a.arg(&n_i).arg(r_atu).arg(&self.r_au).arg(diff);
            })?;
            pressure.add_gradient_flux(p, diff, &self.phi_hbya)?;
            for &c in &self.components {
                let c_i = c as i32;
                gpu.launch_vector("simple_simplec_hbya", n, |a| {
                    a.arg(&n_i)
                        .arg(&c_i)
                        .arg(&self.r_au)
                        .arg(r_atu)
                        .arg(pressure.gradient_buffer())
                        .arg(&self.hbya[c]);
                })?;
            }
            gpu.copy(r_atu, &mut self.r_au)?;
        }
        host.fluxes += timer.lap(&mut seconds.fluxes)?;
        Ok(u_initial)
    }

    /// U, p and φ of the device into `simple` (mesh order; U's unsolved
    /// components stay).
    pub fn download_fields(&mut self, simple: &mut Simple) -> Result<(), GpuError> {
        simple.p = self.laplacian.to_mesh_order(self.p.dev()?)?;
        simple.phi = self.laplacian.to_mesh_faces(&self.phi)?;
        for &c in &self.components {
            let values = self.laplacian.to_mesh_order(self.u[c].dev()?)?;
            for (u, x) in simple.u.iter_mut().zip(values) {
                u[c] = x;
            }
        }
        self.host_current = true;
        Ok(())
    }

    /// [`Simple::run`] with [`Self::iterate`]: outer iterations (logged as
    /// `Time = N`) until the residual control is met or `max_iterations` are
    /// done. `simple` gets the device fields before `after_each` where
    /// `wants_fields(iteration)` says so, and at the end.
    pub fn run(
        &mut self,
        simple: &mut Simple,
        max_iterations: usize,
        wants_fields: impl Fn(usize) -> bool,
        mut after_each: impl FnMut(&Simple, &IterationReport) -> Result<(), FlowError>,
    ) -> Result<Vec<IterationReport>, DeviceFlowError> {
        let mut reports = Vec::new();
        for _ in 0..max_iterations {
            log::info!("Time = {}", simple.iteration() + 1);
            let report = self.iterate(simple)?;
            if !self.host_current && wants_fields(report.iteration) {
                self.timed_download(simple)?;
            }
            after_each(simple, &report)?;
            let converged = report.converged;
            reports.push(report);
            if converged {
                log::info!(
                    "SIMPLE solution converged in {} iterations",
                    simple.iteration()
                );
                break;
            }
        }
        if !self.host_current {
            self.timed_download(simple)?;
        }
        Ok(reports)
    }

    fn timed_download(&mut self, simple: &mut Simple) -> Result<(), GpuError> {
        let clock = Instant::now();
        self.download_fields(simple)?;
        self.seconds.download += clock.elapsed().as_secs_f64();
        Ok(())
    }
}

fn lost() -> GpuError {
    GpuError::Invalid("a momentum matrix was lost in an earlier device failure".into())
}

impl<'g> DeviceMomentum<'g> {
    /// The momentum systems of `simple` on the device, sharing `pressure`'s
    /// device set-up (ordering, assembly map, geometry: one upload for all
    /// equations, only their values their own); `convection`'s deferred
    /// correction (`None` or upwind: none), solved by `krylov`, with
    /// buffers for the explicit stress where `stress`.
    fn new(
        gpu: &'g Gpu,
        simple: &mut Simple,
        pressure: &DeviceLaplacian<'g>,
        convection: Option<Convection>,
        krylov: DeviceKrylov,
        stress: bool,
    ) -> Result<Self, AssemblyError> {
        let settings = *simple.settings();
        let n = pressure.n();
        let mut viscous = Vec::new();
        let mut diagonals = Vec::new();
        let mut sources = Vec::new();
        for k in 0..simple.components().len() {
            let values = simple.take_viscous_values(k)?;
            let (system, _) = simple.viscous_system(k);
            viscous.push(DeviceLaplacian::sharing_set_up_evaluated(
                pressure, system, values,
            )?);
            diagonals.push(gpu.zeros(n)?);
            sources.push(gpu.zeros(n)?);
        }
        let simple = &*simple;
        // The pattern and the padding's zero values of the viscous matrix;
        // every off-diagonal value is written by each assembly.
        let mut matrix = viscous
            .first()
            .ok_or_else(|| GpuError::Invalid("a flow case without velocity components".into()))?
            .matrix()?
            .device_copy(gpu)?;
        matrix.diag = gpu.zeros(1)?;
        let mesh = simple.mesh();
        let geometry = simple.geometry();
        let first = mesh.n_internal_faces();
        let (faces, boundary) = (pressure.device_faces(), pressure.device_boundary());
        let sf = &geometry.face_area_vectors;
        let deferred = match convection {
            None | Some(Convection::Upwind) => None,
            Some(Convection::LinearUpwind) => {
                // In device face order straight from the geometry: the host's
                // own offsets (`Simple::face_offsets`) are never built.
                let mut to_owner = vec![0.0; 3 * faces.len()];
                let mut to_neighbour = vec![0.0; 3 * faces.len()];
                to_owner
                    .par_chunks_mut(3)
                    .zip(to_neighbour.par_chunks_mut(3))
                    .zip(faces.par_iter())
                    .for_each(|((o, nb), &f)| {
                        let (to_o, to_n) = face_offsets(mesh, geometry, f as usize);
                        o.copy_from_slice(to_o.as_slice());
                        nb.copy_from_slice(to_n.as_slice());
                    });
                Some(Deferred {
                    k: -1.0,
                    fc: gpu.zeros(faces.len())?,
                    to_owner: Some(gpu.upload(&to_owner)?),
                    to_neighbour: Some(gpu.upload(&to_neighbour)?),
                    delta: None,
                })
            }
            Some(Convection::LimitedLinear(k)) => {
                let centres = &geometry.cell_centres;
                let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
                let delta: Vec<Vec3> = (0..first)
                    .map(|f| centres[neighbour[f] as usize] - centres[owner[f] as usize])
                    .collect();
                Some(Deferred {
                    k,
                    fc: gpu.zeros(faces.len())?,
                    to_owner: None,
                    to_neighbour: None,
                    delta: Some(gpu.upload(&flatten(&delta, faces, 0))?),
                })
            }
        };
        let consistent = if settings.consistent {
            Some([gpu.zeros(n)?, gpu.zeros(n)?, gpu.zeros(n)?])
        } else {
            None
        };
        let stress = if stress {
            Some(StressBuffers {
                cells: gpu.zeros(3 * n)?,
                faces: gpu.zeros(3 * faces.len().max(1))?,
            })
        } else {
            None
        };
        Ok(Self {
            krylov,
            viscous,
            diagonals,
            sources,
            matrix: Some(matrix),
            b: (0..simple.components().len())
                .map(|_| gpu.zeros(n).map(GpuVector::from))
                .collect::<Result<_, _>>()?,
            deferred,
            sf: gpu.upload(&flatten(sf, faces, 0))?,
            b_sf: gpu.upload(&flatten(sf, boundary, first))?,
            a_p: gpu.zeros(n)?,
            consistent,
            stress,
            bicgstab: None,
        })
    }

    /// The explicit laminar stress −∇·(ν dev2((∇U)ᵀ)) per row
    /// ([`Simple::explicit_stress`]) of the resident U (all three
    /// components; unsolved ones are zero) into the stress buffer.
    fn compute_stress(
        &mut self,
        gpu: &Gpu,
        pressure: &DeviceLaplacian<'g>,
        components: &[usize],
        u: &[GpuVector],
        nu: f64,
    ) -> Result<(), GpuError> {
        let Some(stress) = &self.stress else {
            return Err(GpuError::Invalid(
                "the momentum systems were built without the explicit stress".into(),
            ));
        };
        for (k, &c) in components.iter().enumerate() {
            self.viscous[k].gradient(u[c].dev()?)?;
        }
        let arrays = pressure.arrays()?;
        let n_faces = pressure.device_faces().len() as i32;
        let k_of = |c: usize| components.iter().position(|&s| s == c);
        let gradient = |c: usize| k_of(c).map(|k| self.viscous[k].gradient_buffer());
        launch_face_walk(gpu, "simple_stress_faces", &n_faces, &arrays, |a| {
            a.arg(&self.sf).arg(&nu);
            for c in 0..3 {
                arg_or_null(a, gradient(c));
            }
            a.arg(&stress.faces);
        })?;
        let per_component = (0..3)
            .map(|c| match k_of(c) {
                Some(k) => Ok(Some((
                    self.viscous[k].gradient_buffer(),
                    u[c].dev()?,
                    self.viscous[k].arrays()?,
                ))),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        let n_i = pressure.n() as i32;
        launch_row_walk(gpu, "simple_stress_rows", &n_i, &arrays, |a| {
            a.arg(&stress.faces).arg(&self.b_sf).arg(&nu);
            for entry in &per_component {
                arg_or_null(a, entry.as_ref().map(|(g, _, _)| *g));
                arg_or_null(a, entry.as_ref().map(|(_, u, _)| *u));
                arg_or_null(a, entry.as_ref().map(|(_, _, v)| v.b_gradient_internal));
                arg_or_null(a, entry.as_ref().map(|(_, _, v)| v.b_gradient_boundary));
            }
            a.arg(&stress.cells);
        })
    }

    /// The deferred correction of component `k` (none for upwind and Gauss
    /// linear) for the fluxes `phi` and the component's values `u_c`; the
    /// gradient is the one `update_rhs` left where the snGrad is corrected.
    fn deferred_correction(
        &self,
        gpu: &Gpu,
        k: usize,
        arrays: &LaplacianArrays<'_>,
        phi: &CudaSlice<f64>,
        u_c: &CudaSlice<f64>,
        corrected: bool,
    ) -> Result<(), GpuError> {
        let Some(deferred) = &self.deferred else {
            return Ok(());
        };
        let viscous = &self.viscous[k];
        if !corrected {
            viscous.gradient(u_c)?;
        }
        let n_faces = viscous.device_faces().len() as i32;
        if n_faces == 0 {
            return Ok(());
        }
        gpu.launch_vector("simple_deferred_correction", n_faces as usize, |a| {
            a.arg(&n_faces)
                .arg(&deferred.k)
                .arg(arrays.face_owner)
                .arg(arrays.face_neighbour)
                .arg(arrays.weights)
                .arg(phi)
                .arg(u_c)
                .arg(viscous.gradient_buffer());
            arg_or_null(a, deferred.to_owner.as_ref());
            arg_or_null(a, deferred.to_neighbour.as_ref());
            arg_or_null(a, deferred.delta.as_ref());
            a.arg(&deferred.fc);
        })
    }

    /// The momentum matrix with component `k`'s diagonal in it, for the
    /// component's assembly or solve; [`Self::park_matrix`] gives it back.
    fn take_matrix(&mut self, k: usize) -> Result<DeviceModSell, GpuError> {
        let mut matrix = self.matrix.take().ok_or_else(lost)?;
        std::mem::swap(&mut matrix.diag, &mut self.diagonals[k]);
        Ok(matrix)
    }

    /// Parks the matrix [`Self::take_matrix`] lent for component `k`, the
    /// component's diagonal swapped back out.
    fn park_matrix(&mut self, k: usize, mut matrix: DeviceModSell) {
        std::mem::swap(&mut matrix.diag, &mut self.diagonals[k]);
        self.matrix = Some(matrix);
    }

    /// Assembles component `k` (`c` its index: x, y or z) around its
    /// resident values `u_c`: the viscous right-hand side from `u_c`, the
    /// deferred correction, then the momentum-row kernel `kernel`, one block
    /// per slice of the momentum matrix (its values, with the component's
    /// diagonal) and one thread per row, with the arguments every such
    /// kernel takes in its order: the row walk of the viscous system (n and
    /// the number of device faces), what `convection` pushes (the fluxes),
    /// the deferred correction, the viscous matrix, right-hand side and
    /// boundary values, what `transient` pushes (the time terms; nothing
    /// when steady), U_c and the relaxation factor, the volumes, the
    /// explicit stress, ∇p, c, then the outputs: the matrix's values and the
    /// component's diagonal, the source and b.
    #[allow(clippy::too_many_arguments)]
    fn assemble_component<'a>(
        &'a mut self,
        gpu: &'a Gpu,
        kernel: &'static str,
        k: usize,
        c: &'a i32,
        u_c: &'a CudaSlice<f64>,
        inputs: &'a ComponentInputs<'a>,
        convection: impl FnOnce(&mut KernelArgs<'a>),
        transient: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), DeviceFlowError> {
        self.viscous[k].update_rhs(u_c, None)?;
        let this: &'a Self = self;
        let arrays = &inputs.arrays;
        this.deferred_correction(gpu, k, arrays, inputs.phi, u_c, inputs.corrected)?;
        let matrix = this.matrix.as_ref().ok_or_else(lost)?;
        let diag = &this.diagonals[k];
        let v = this.viscous[k].arrays()?;
        let b = this.b.get(k).ok_or_else(lost)?.dev()?;
        let (grid, block) = (matrix.n_slices() as u32, matrix.slice_height as u32);
        gpu.launch(kernel, grid, block, 0, |a| {
            a.arg(&inputs.n)
                .arg(&matrix.slice_ptr)
                .arg(v.face_codes)
                .arg(v.face_slots)
                .arg(v.boundary_ptr)
                .arg(&inputs.n_faces);
            convection(a);
            arg_or_null(a, this.deferred.as_ref().map(|d| &d.fc));
            a.arg(&v.matrix.values)
                .arg(&v.matrix.diag)
                .arg(v.rhs)
                .arg(v.b_value_internal)
                .arg(v.b_value_boundary);
            transient(a);
            a.arg(u_c).arg(&inputs.relaxation).arg(v.volumes);
            arg_or_null(a, this.stress.as_ref().map(|s| &s.cells));
            a.arg(inputs.gradient)
                .arg(c)
                .arg(&matrix.values)
                .arg(diag)
                .arg(&this.sources[k])
                .arg(b);
        })?;
        Ok(())
    }

    /// Solves the momentum equations of the solved components (`components`
    /// their indices, x = 0; as their assemblies left the resident matrix,
    /// diagonals and right-hand sides) for `u` (warm start) by `krylov`:
    /// PBiCGStab solves them together as the lanes of one device loop (the
    /// matrix read once per product for all of them, one launch per step;
    /// each component's iterates those of its solve alone), GMRES one after
    /// the other. Each component's report, named U_x, U_y, U_z; the first
    /// failure in component order.
    fn solve_components(
        &mut self,
        gpu: &'g Gpu,
        components: &[usize],
        u: &mut [GpuVector],
        krylov: &DeviceKrylov,
        bytes: &mut Option<f64>,
    ) -> Result<Vec<(String, SolverPerformance)>, DeviceFlowError> {
        let fields: Vec<String> = components
            .iter()
            .map(|&c| format!("U{}", ["x", "y", "z"][c]))
            .collect();
        let solved: Vec<Result<SolverPerformance, SolveError>> = match &krylov.method {
            KrylovMethod::Gmres(settings) => {
                let mut solved = Vec::with_capacity(components.len());
                for (k, &c) in components.iter().enumerate() {
                    let matrix = self.take_matrix(k)?;
                    let backend = GpuKrylovBackend::from_resident(gpu, matrix, krylov.jacobi)?;
                    let b = self.b.get(k).ok_or_else(lost)?;
                    let perf = gmres(
                        &backend,
                        b,
                        &mut u[c],
                        &krylov.controls,
                        settings,
                        &fields[k],
                    );
                    self.park_matrix(k, backend.into_matrix());
                    let failed = perf.is_err();
                    solved.push(perf);
                    if failed {
                        break;
                    }
                }
                // GMRES's bytes are not counted.
                *bytes = None;
                solved
            }
            KrylovMethod::BiCgStab => {
                let matrix = self.matrix.as_mut().ok_or_else(lost)?;
                let size = (matrix.n, matrix.codes.len());
                if self.bicgstab.is_none() {
                    let options = GpuSolveOptions {
                        slice_height: matrix.slice_height,
                        check_interval: MOMENTUM_CHECK_INTERVAL,
                        ..GpuSolveOptions::default()
                    };
                    let lanes = components.len();
                    self.bicgstab =
                        Some(DeviceBicgstab::with_lanes(gpu, matrix.n, lanes, &options)?);
                }
                let solver = self.bicgstab.as_ref().ok_or_else(lost)?;
                let b = self
                    .b
                    .iter()
                    .map(GpuVector::dev)
                    .collect::<Result<Vec<_>, _>>()?;
                let x = components
                    .iter()
                    .map(|&c| u[c].dev())
                    .collect::<Result<Vec<_>, _>>()?;
                let names: Vec<&str> = fields.iter().map(String::as_str).collect();
                let k = components.len();
                let solved = solver.solve_lanes(
                    matrix,
                    &mut self.diagonals[..k],
                    krylov.jacobi,
                    &b[..k],
                    &x,
                    &krylov.controls,
                    &names,
                );
                let iterations: Vec<usize> = solved
                    .iter()
                    .filter_map(|perf| perf.as_ref().ok().map(|p| p.iterations))
                    .collect();
                *bytes = bytes.map(|b| {
                    b + super::bicgstab::loop_bytes(size.0, size.1, &iterations, krylov.jacobi)
                });
                solved
            }
        };
        let mut reports = Vec::with_capacity(solved.len());
        for (field, perf) in fields.into_iter().zip(solved) {
            match perf {
                Ok(perf) => reports.push((field, perf)),
                Err(e) => return Err(FlowError::from(e.solving(field)).into()),
            }
        }
        Ok(reports)
    }

    /// rAU = V / a_P alone into `r_au` (the bits of [`Self::h_by_a`]),
    /// from the diagonals of the components just assembled.
    fn r_au(
        &self,
        gpu: &Gpu,
        pressure: &DeviceLaplacian<'g>,
        components: &[usize],
        r_au: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = pressure.n();
        let n_i = n as i32;
        gpu.launch_vector("simple_r_au", n, |a| {
            a.arg(&n_i).arg(pressure.volumes());
            for k in 0..3 {
                arg_or_null(a, (k < components.len()).then(|| &self.diagonals[k]));
            }
            a.arg(r_au);
        })
    }

    /// a_P (the mean of the components' diagonals), HbyA per solved
    /// component with the current `u` and rAU = V / a_P into `r_au`, in one
    /// launch (the matrix read once for the components); `simplec`: the
    /// first component's signed off-diagonal sums and rAtU go to its two
    /// buffers.
    #[allow(clippy::too_many_arguments)]
    fn h_by_a(
        &self,
        gpu: &Gpu,
        pressure: &DeviceLaplacian<'g>,
        components: &[usize],
        u: &[GpuVector],
        hbya: &[CudaSlice<f64>],
        r_au: &CudaSlice<f64>,
        simplec: Option<(&CudaSlice<f64>, &CudaSlice<f64>)>,
    ) -> Result<(), GpuError> {
        let n_i = pressure.n() as i32;
        // Parked: every component's diagonal is its own.
        let matrix = self.matrix.as_ref().ok_or_else(lost)?;
        if components.is_empty() || components.len() > 3 {
            return Err(GpuError::Invalid(format!(
                "HbyA of {} velocity components (1 to 3)",
                components.len()
            )));
        }
        // Lane k: solved component components[k].
        let lane = |k: usize| components.get(k).map(|&c| (k, c));
        let u = (0..3)
            .map(|k| lane(k).map(|(_, c)| u[c].dev()).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let volumes = pressure.volumes();
        let h = matrix.slice_height as u32;
        gpu.launch("simple_hbya_r_au", matrix.n_slices() as u32, h, 0, |a| {
            a.arg(&n_i)
                .arg(&matrix.slice_ptr)
                .arg(&matrix.codes)
                .arg(&matrix.values)
                .arg(volumes);
            for k in 0..3 {
                arg_or_null(a, lane(k).map(|(k, _)| &self.diagonals[k]));
            }
            for k in 0..3 {
                arg_or_null(a, lane(k).map(|(k, _)| &self.sources[k]));
            }
            for u_k in &u {
                arg_or_null(a, *u_k);
            }
            for k in 0..3 {
                arg_or_null(a, lane(k).map(|(_, c)| &hbya[c]));
            }
            a.arg(&self.a_p).arg(r_au);
            arg_or_null(a, simplec.map(|(off, _)| off));
            arg_or_null(a, simplec.map(|(_, r_atu)| r_atu));
        })
    }

    /// The face flux (x_f)·S_f of the cell vector field `x` (per component,
    /// row order; unsolved components count as zero) into `out` (device
    /// face layout): [`Simple::face_flux`], the boundary values by the
    /// velocity conditions.
    fn face_flux(
        &self,
        gpu: &Gpu,
        pressure: &DeviceLaplacian<'g>,
        components: &[usize],
        x: [&CudaSlice<f64>; 3],
        out: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let arrays = pressure.arrays()?;
        let n = pressure.n();
        let n_i = n as i32;
        let n_faces = pressure.device_faces().len() as i32;
        let solved = |c: usize| components.contains(&c).then_some(x[c]);
        launch_face_walk(gpu, "simple_face_flux", &n_faces, &arrays, |a| {
            a.arg(&self.sf);
            for c in 0..3 {
                arg_or_null(a, solved(c));
            }
            a.arg(out);
        })?;
        let viscous_of = |c: usize| {
            components
                .iter()
                .position(|&s| s == c)
                .map(|k| self.viscous[k].arrays())
                .transpose()
        };
        let b_values = [viscous_of(0)?, viscous_of(1)?, viscous_of(2)?];
        gpu.launch_vector("simple_boundary_face_flux", n, |a| {
            a.arg(&n_i)
                .arg(arrays.boundary_ptr)
                .arg(&n_faces)
                .arg(&self.b_sf);
            for (c, values) in b_values.iter().enumerate() {
                arg_or_null(a, solved(c));
                arg_or_null(a, values.as_ref().map(|v| v.b_value_internal));
                arg_or_null(a, values.as_ref().map(|v| v.b_value_boundary));
            }
            a.arg(out);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::polynomial::PolynomialKind;

    #[test]
    fn the_timed_preconditioner_is_named_by_what_runs() {
        let jacobi = DevicePressureSolver {
            jacobi: true,
            controls: SolverControls::default(),
            amg: None,
            polynomial: None,
        };
        assert_eq!(jacobi.preconditioner_name(), None);
        let amg = DevicePressureSolver {
            amg: Some(AmgSettings::default()),
            ..jacobi
        };
        assert_eq!(amg.preconditioner_name(), Some("AMG"));
        for kind in PolynomialKind::ALL {
            let polynomial = DevicePressureSolver {
                polynomial: Some(PolynomialSettings::new(kind, 4)),
                ..jacobi
            };
            assert_eq!(polynomial.preconditioner_name(), Some(kind.name()));
        }
    }
}
