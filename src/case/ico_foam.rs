//! OpenFOAM icoFoam and laminar pimpleFoam case directories (transient,
//! incompressible), read as they are and run by [`crate::flow::piso`].
//!
//! | file | entries | becomes |
//! |---|---|---|
//! | `system/controlDict` | `application icoFoam\|pimpleFoam`; `startFrom startTime\|latestTime\|firstTime`, `startTime` (a restart reads `U`, `p` and `phi` of that time, and with backward `U_0` and `phi_0`), `endTime`, `deltaT`, `writeControl timeStep\|runTime\|adjustableRunTime`, `writeInterval`, `adjustTimeStep`, `maxCo`, `maxDeltaT` (pimpleFoam), `writeFormat`, `writePrecision`, `writeCompression`, `timePrecision`; `functions { residuals {...} }` or `#includeFunc residuals`; `fieldMinMax` and `probes` ([`super::function_objects`]) | time loop, writes of `<time>/U`, `p`, `phi`, `uniform/time` (with backward also `U_0`, `phi_0`) and of a step of the VTK series `VTK/NAME.pvd` at each (`run --vtk`) |
//! | `system/fvSchemes` | `ddtSchemes` `Euler\|backward`; `div(phi,U)` `Gauss linear\|upwind\|linearUpwind grad(U)\|limitedLinear(V) k`, optionally `bounded`; `div((nuEff*dev2(T(grad(U)))))` `Gauss linear` (pimpleFoam); Laplacian and gradient schemes of U and p (one scheme for both) | [`TransientSettings`], [`Schemes`] |
//! | `system/fvSolution` | `solvers { p; pFinal; U; UFinal (pimpleFoam) }`; `PISO` (icoFoam) or `PIMPLE` (pimpleFoam) `{ nOuterCorrectors; nCorrectors; nNonOrthogonalCorrectors; momentumPredictor; pRefCell; pRefValue; outerCorrectorResidualControl { U { tolerance; } p { tolerance; } } }`; `relaxationFactors` (`p`, `pFinal`, `U`, `UFinal`; flat or `fields`/`equations`) | [`TransientSettings`], pressure solvers |
//! | `constant/transportProperties` | `nu` | ν |
//! | `constant/momentumTransport` or `turbulenceProperties` (pimpleFoam) | `simulationType laminar` (anything else refused by name) | — |
//! | `<start>/U`, `<start>/p`, `<start>/phi` (optional) | the simpleFoam reader's conditions | initial fields |
//! | `<start>/U_0`, `<start>/phi_0`, `<start>/uniform/time` (optional; backward) | the time before the start: its U and φ, and `deltaT` between the two | backward's older level (else the first step is an Euler one) |
//!
//! The final outer corrector relaxes with `UFinal`/`pFinal` factors, else
//! with those of `U`/`p` (OpenFOAM v1912); the last pressure solve of every
//! outer corrector uses the `pFinal` solver (v1912's `finalInnerIter`). The
//! pimpleFoam momentum equation carries the laminar model's explicit stress
//! (`div((nuEff*dev2(T(grad(U)))))`), icoFoam's does not. A restart at time T numbers its steps from
//! round(T/Δt), so `writeControl timeStep` writes where an uninterrupted run
//! writes. Entries nobody read are named in warnings.
//!
//! On `--device gpu` the whole step runs on the device
//! ([`crate::gpu::simple::piso::DevicePiso`]) where it runs the case's
//! solvers (U and UFinal by PBiCGStab or GMRES, p and pFinal by PCG with
//! one preconditioner after the device's mapping); otherwise the step runs
//! on the CPU with the pressure systems solved on the GPU, and the log says
//! why. Either way the run ends with the time per step by part
//! ([`StepTiming`]).

use super::flow_case::{
    device_pressure_solver, momentum_solver, patch_conditions, timed_pressure_solves,
};
use super::function_objects::{
    append_file, create_file, data_file, read_functions, Format, FunctionObjects, SolverInfo,
};
use super::openfoam::{at, at_key, scheme, Reader};
use super::run::{gamg_cache, log_gpu_mapping, GpuSolves, LinearSolves};
use super::setup::{check_steps_of, LinearSolver};
use super::simple_foam::{
    check_laminar, check_stress_scheme, read_boundary, read_correctors_and_reference,
    read_viscosity, velocity_pressure_schemes, warn_unread_flow,
};
use super::{CaseError, Device};
use crate::flow::piso::{
    write_index, DdtScheme, OldTime, Piso, StepReport, TimeStepControl, TransientConvection,
    TransientSettings,
};
use crate::flow::simple::{MomentumSolver, PressureSolve, SimpleSettings};
use crate::flow::{FlowError, VelocityCondition};
use crate::foam::write::{format_general, format_log, format_scientific};
use crate::foam::FoamDict;
use crate::fvm::{BoundaryCondition, Schemes};
use crate::gpu::assembly::AssemblyError;
use crate::gpu::simple::piso::DevicePiso;
use crate::gpu::simple::{DeviceFlowError, DevicePhaseSeconds};
use crate::gpu::Gpu;
use crate::io::foam_field::{
    distinct_time_precision, time_name, FieldValues, FoamWriteOptions, ScalarFieldFile,
    UniformTime, VectorFieldFile,
};
use crate::io::vtk::{VtkEncoding, VtkSeries};
use crate::mesh::{Geometry, Mesh, MeshSource, PatchKind, Vec3};
use crate::timings::{self, Phase};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The transient solvers whose cases are read here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Application {
    /// PISO, no relaxation, no turbulence model file.
    IcoFoam,
    /// PIMPLE, laminar.
    PimpleFoam,
}

impl Application {
    pub fn name(self) -> &'static str {
        match self {
            Self::IcoFoam => "icoFoam",
            Self::PimpleFoam => "pimpleFoam",
        }
    }

    /// The fvSolution dictionary of its algorithm.
    fn algorithm(self) -> &'static str {
        match self {
            Self::IcoFoam => "PISO",
            Self::PimpleFoam => "PIMPLE",
        }
    }
}

/// A transient case, read.
#[derive(Clone, Debug)]
pub struct TransientSetup {
    pub case_dir: PathBuf,
    /// `system/controlDict`, for messages.
    pub origin: String,
    pub application: Application,
    pub mesh: MeshSource,
    pub settings: SimpleSettings,
    pub transient: TransientSettings,
    pub boundary: Vec<(String, VelocityCondition, BoundaryCondition, String)>,
    /// The `p` and `pFinal` solvers.
    pub pressure_solver: LinearSolver,
    pub pressure_final: LinearSolver,
    pub start: f64,
    pub end: f64,
    /// `deltaT`: the time step, or the first one's start with `adjustTimeStep`.
    pub delta_t: f64,
    /// Write every this many steps (counted from time 0).
    pub write_every: usize,
    /// pimpleFoam's `adjustTimeStep yes`.
    pub adjust_time_step: Option<TimeStepControl>,
    /// `writeControl runTime`/`adjustableRunTime` with `adjustTimeStep`:
    /// write every this long (a time; `write_every` is not used then).
    pub write_time_interval: Option<f64>,
    pub foam: FoamWriteOptions,
    /// The encoding of the VTK series `VTK/NAME.pvd` written at every write
    /// time with the time directories (`None`: no VTK, `run --vtk none`).
    pub vtk: Option<VtkEncoding>,
    /// U, p (per cell) and φ (every face, when the start time has `phi`).
    pub initial: (Vec<Vec3>, Vec<f64>, Option<Vec<f64>>),
    /// Backward's level before the start time, where the start time has
    /// `U_0` and `phi_0` (with the Δt between the two from `uniform/time`):
    /// the first step is then a second-order one, as the run that wrote them
    /// would have made.
    pub initial_old: Option<OldTime>,
    /// With `adjustTimeStep`, a restart whose `uniform/time` gave the Δt and
    /// a step index past 0: pimpleFoam's first-step adjustment
    /// (`setInitialDeltaT.H`, which runs at time index 0 only) is skipped.
    pub resumes_time_step: bool,
    /// `fieldMinMax` and `probes` function objects.
    pub functions: FunctionObjects,
    /// The U and p solvers as OpenFOAM names them (`smoothSolver`, `DICPCG`).
    pub solver_names: [String; 2],
}

/// A case read, its mesh and the warnings about what it holds that is not used.
#[derive(Debug)]
pub struct TransientCase {
    pub setup: TransientSetup,
    pub mesh: Mesh,
    pub warnings: Vec<String>,
}

/// The transient application `case_dir`'s controlDict names, if any.
pub fn transient_application(case_dir: &Path) -> Option<Application> {
    let control = FoamDict::read(&case_dir.join("system/controlDict")).ok()?;
    match control.get_opt::<String>("application").ok()??.as_str() {
        "icoFoam" => Some(Application::IcoFoam),
        "pimpleFoam" => Some(Application::PimpleFoam),
        _ => None,
    }
}

/// Reads the icoFoam or pimpleFoam case in `case_dir` (see the module documentation).
pub fn read_transient_case(case_dir: &Path) -> Result<TransientCase, CaseError> {
    let application = transient_application(case_dir).ok_or_else(|| {
        CaseError::invalid(format!(
            "{}: not an icoFoam or pimpleFoam case (system/controlDict names no such \
             application)",
            case_dir.display()
        ))
    })?;
    let mut reader = Reader::new(case_dir, application.name());
    let (setup, mesh) = read(&mut reader, application)?;
    Ok(TransientCase {
        setup,
        mesh,
        warnings: reader.warnings,
    })
}

fn read(r: &mut Reader, application: Application) -> Result<(TransientSetup, Mesh), CaseError> {
    let control = r.dict("system/controlDict")?;
    let schemes_dict = r.dict("system/fvSchemes")?;
    let solution = r.dict("system/fvSolution")?;
    control.ignore("application");
    control.ignore("runTimeModifiable");
    control.ignore("purgeWrite");
    let timing = r.timing_any_start(&control)?;
    let foam = r.write_options(&control)?;
    let adjust_time_step = read_time_step_control(&control, application)?;
    // A fixed deltaT fixes the step count, and maxDeltaT bounds it from
    // below: a typo (1e-300) would run for ever, time directory after time
    // directory.
    let span = timing.end - timing.start;
    let (key, step, bound) = match &adjust_time_step {
        None => ("deltaT", timing.delta_t, ""),
        Some(c) => ("maxDeltaT", c.max_delta_t, "at least "),
    };
    check_steps_of(key, step, span, span / step, bound)
        .map_err(|msg| at_key(&control, key, msg))?;
    let write_time_interval = match (&adjust_time_step, control.get_word("writeControl")) {
        (Some(_), Ok(w)) if w == "runTime" || w == "adjustableRunTime" => {
            Some(control.get_scalar("writeInterval")?)
        }
        _ => timing.write_time,
    };
    // Objects that run at the write times count them in steps: with writes
    // by time there is no such count, and they are refused.
    let write_steps = write_time_interval.is_none().then_some(timing.write_every);
    let functions = read_functions(r, &control, write_steps, timing.delta_t)?;

    let mesh_source = MeshSource::PolyMesh(r.dir.clone());
    let mesh = mesh_source.load()?;
    let n = mesh.n_cells();

    let nu = read_viscosity(r)?;
    if application == Application::PimpleFoam {
        check_laminar(r)?;
    }
    let mut settings = SimpleSettings::new(nu);
    // pimpleFoam's laminar model carries −∇·(ν dev2((∇U)ᵀ)) in UEqn; icoFoam's
    // UEqn has the Laplacian alone.
    settings.explicit_stress = application == Application::PimpleFoam;
    let (ddt, convection, schemes) = read_schemes(&schemes_dict, application)?;
    settings.set_schemes(schemes);
    let pressure_solver = r.solver_for(&solution, "p", true)?;
    let pressure_final = r.solver_for(&solution, "pFinal", true)?;
    settings.momentum = momentum(r, &solution, "U")?;
    let solver_names = [
        solver_type_name(&solution, "U")?,
        solver_type_name(&solution, "p")?,
    ];
    let momentum_final = match application {
        Application::IcoFoam => settings.momentum,
        Application::PimpleFoam => momentum(r, &solution, "UFinal")?,
    };
    let mut transient = TransientSettings::piso(1, convection, settings.momentum);
    transient.ddt = ddt;
    transient.momentum_final = momentum_final;
    read_algorithm(&solution, application, &mut settings, &mut transient)?;
    if application == Application::PimpleFoam {
        read_pimple_relaxation(r, &solution, &mut transient)?;
    }

    let start_dir = r.time_directory(timing.start, foam.time_precision);
    let start_name = start_dir
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    let u_file = VectorFieldFile::read(&start_dir.join("U"), n)?;
    let p_file = ScalarFieldFile::read(&start_dir.join("p"), n)?;
    let boundary = read_boundary(r, &mesh, &u_file, &p_file)?;
    let phi = read_phi(&start_dir.join("phi"), &mesh)?;
    // The Δt of the step that reached the start (`deltaT` of `uniform/time`):
    // with adjustTimeStep a restart goes on from it, as OpenFOAM's
    // Time::setControls (controlDict's deltaT only where none is written),
    // and backward's older level lies that far before the start.
    let written = match (adjust_time_step, transient.ddt) {
        (None, DdtScheme::Euler) => None,
        _ => UniformTime::read(&start_dir, timing.start, timing.delta_t)?,
    };
    let written_dt = written.map(|time| time.delta_t);
    let (delta_t, resumes_time_step) = match (adjust_time_step, written) {
        (Some(_), Some(time)) => (time.delta_t, time.index > 0),
        _ => (timing.delta_t, false),
    };
    let initial_old = match transient.ddt {
        DdtScheme::Backward => read_old_level(r, &start_dir, &mesh, written_dt.unwrap_or(delta_t))?,
        DdtScheme::Euler => None,
    };
    if timing.start > 0.0 {
        log::info!(
            "Restarting from time {start_name}: U, p{}{} read",
            if phi.is_some() { ", phi" } else { "" },
            if initial_old.is_some() {
                ", U_0, phi_0 (backward's older level)"
            } else {
                ""
            }
        );
    }
    let initial = (
        u_file.internal.clone().expand(n),
        p_file.internal.clone().expand(n),
        phi,
    );
    warn_unread_flow(r, [&control, &schemes_dict, &solution], &u_file, &p_file);
    let setup = TransientSetup {
        case_dir: r.dir.clone(),
        origin: r.dir.join("system/controlDict").display().to_string(),
        application,
        mesh: mesh_source,
        settings,
        transient,
        boundary,
        pressure_solver,
        pressure_final,
        start: timing.start,
        end: timing.end,
        delta_t,
        write_every: timing.write_every,
        adjust_time_step,
        write_time_interval,
        foam,
        vtk: Some(VtkEncoding::default()),
        initial,
        initial_old,
        resumes_time_step,
        functions,
        solver_names,
    };
    Ok((setup, mesh))
}

/// pimpleFoam's `adjustTimeStep yes` with `maxCo` (default 1) and
/// `maxDeltaT` (default: none); Δt fitted to the write times with
/// `writeControl adjustableRunTime`. icoFoam's step is fixed (as in
/// OpenFOAM): `adjustTimeStep yes` there is an error.
fn read_time_step_control(
    control: &FoamDict,
    application: Application,
) -> Result<Option<TimeStepControl>, CaseError> {
    if !control.get_or("adjustTimeStep", false)? {
        control.ignore("maxCo");
        control.ignore("maxDeltaT");
        return Ok(None);
    }
    if application == Application::IcoFoam {
        return Err(at_key(
            control,
            "adjustTimeStep",
            "icoFoam runs the fixed time step deltaT (adjustTimeStep is pimpleFoam's); set \
             'adjustTimeStep no;' or run pimpleFoam",
        ));
    }
    let positive = |key: &str, default: f64| -> Result<f64, CaseError> {
        let value = control.get_or(key, default)?;
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(at_key(
                control,
                key,
                format!("{key} is {value}; it must be a positive number"),
            ))
        }
    };
    let max_co = positive("maxCo", 1.0)?;
    let max_delta_t = positive("maxDeltaT", f64::MAX)?;
    let fit_to_writes = match control
        .get_or("writeControl", "timeStep".to_string())?
        .as_str()
    {
        "adjustableRunTime" => Some(control.get_scalar("writeInterval")?),
        _ => None,
    };
    Ok(Some(TimeStepControl {
        max_co,
        max_delta_t,
        fit_to_writes,
    }))
}

/// The momentum solver of `solvers/<field>`.
fn momentum(r: &mut Reader, solution: &FoamDict, field: &str) -> Result<MomentumSolver, CaseError> {
    let solver = r.solver_for(solution, field, false)?;
    momentum_solver(solver).map_err(|e| {
        let solvers = solution.get_dict("solvers").ok();
        match solvers.and_then(|s| s.get_dict(field).ok()) {
            Some(dict) => at_key(dict, "solver", format!("solvers/{field}: {e}")),
            None => CaseError::Mesh(solution.error(format!("solvers/{field}: {e}"))),
        }
    })
}

/// `ddt(U)`, `div(phi,U)`, the Laplacian and gradient schemes.
fn read_schemes(
    dict: &FoamDict,
    application: Application,
) -> Result<(DdtScheme, TransientConvection, Schemes), CaseError> {
    let (ddt_entry, ddt) = scheme(dict, "ddtSchemes", "ddt(U)")?;
    let ddt = DdtScheme::from_foam(&ddt).map_err(|e| at(ddt_entry, e.to_string()))?;
    let (div_entry, div) = scheme(dict, "divSchemes", "div(phi,U)")?;
    let convection =
        TransientConvection::from_foam(&div).map_err(|e| at(div_entry, e.to_string()))?;
    match application {
        // icoFoam has no stress term: an entry for it is not used.
        Application::IcoFoam => {
            let divs = dict.get_dict("divSchemes")?;
            for e in divs.entries() {
                if e.key().contains("dev2(T(grad(U)))") || e.key().contains("dev(T(grad(U)))") {
                    divs.ignore(e.key());
                }
            }
        }
        Application::PimpleFoam => check_stress_scheme(dict)?,
    }
    let viscous = match application {
        Application::IcoFoam => "laplacian(nu,U)",
        Application::PimpleFoam => "laplacian(nuEff,U)",
    };
    let schemes = velocity_pressure_schemes(dict, viscous)?;
    Ok((ddt, convection, schemes))
}

/// fvSolution's `PISO` or `PIMPLE` dictionary.
fn read_algorithm(
    solution: &FoamDict,
    application: Application,
    settings: &mut SimpleSettings,
    transient: &mut TransientSettings,
) -> Result<(), CaseError> {
    let dict = solution.get_dict(application.algorithm())?;
    read_correctors_and_reference(dict, settings)?;
    transient.momentum_predictor = dict.get_or("momentumPredictor", true)?;
    let at_least_one = |key: &str| -> Result<usize, CaseError> {
        match dict.get_or(key, 1usize)? {
            0 => Err(at_key(dict, key, format!("{key} must be at least 1"))),
            n => Ok(n),
        }
    };
    transient.n_correctors = at_least_one("nCorrectors")?;
    transient.pimple = application == Application::PimpleFoam;
    if transient.pimple {
        transient.n_outer_correctors = at_least_one("nOuterCorrectors")?;
        if dict.get_or("consistent", false)? {
            return Err(at_key(
                dict,
                "consistent",
                "consistent (SIMPLEC) is not supported in PIMPLE yet; set 'consistent no;'",
            ));
        }
        if let Some(rc) = dict.get_dict_opt("outerCorrectorResidualControl")? {
            let mut tolerances = [0.0; 2];
            for (key, target) in ["U", "p"].into_iter().zip(tolerances.iter_mut()) {
                if let Some(field) = rc.get_dict_opt(key)? {
                    *target = field.get_or("tolerance", 0.0)?;
                    field.ignore("relTol");
                }
            }
            transient.outer_residual_control = Some(tolerances);
        }
        // The time loop's convergence control (steady-state ending) is not used.
        if dict.contains("residualControl") {
            log::warn!(
                "{}: PIMPLE residualControl (ending the run once converged) is not supported; \
                 the run goes on to endTime",
                solution.file().display()
            );
            dict.ignore("residualControl");
        }
        dict.ignore("turbOnFinalIterOnly");
    }
    Ok(())
}

/// pimpleFoam's `relaxationFactors`: `U`, `UFinal` (equations), `p`,
/// `pFinal` (fields); the final ones default to the others, and those to 1.
fn read_pimple_relaxation(
    r: &mut Reader,
    solution: &FoamDict,
    transient: &mut TransientSettings,
) -> Result<(), CaseError> {
    let Some(factors) = solution.get_dict_opt("relaxationFactors")? else {
        return Ok(());
    };
    let fields = factors.get_dict_opt("fields")?;
    let equations = factors.get_dict_opt("equations")?;
    let read = |dict: Option<&FoamDict>, key: &str| -> Result<Option<f64>, CaseError> {
        let Some(dict) = dict.or(Some(factors)) else {
            return Ok(None);
        };
        match dict.get_opt::<f64>(key)? {
            Some(alpha) if !(alpha > 0.0 && alpha <= 1.0) => Err(at_key(
                dict,
                key,
                format!("relaxation factor {key} {alpha}: it must be in (0, 1]"),
            )),
            other => Ok(other),
        }
    };
    let u = read(equations, "U")?.unwrap_or(1.0);
    let p = read(fields, "p")?.unwrap_or(1.0);
    transient.relaxation_u = u;
    transient.relaxation_p = p;
    transient.relaxation_u_final = read(equations, "UFinal")?.unwrap_or(u);
    transient.relaxation_p_final = read(fields, "pFinal")?.unwrap_or(p);
    r.warn_unread(factors);
    Ok(())
}

/// Backward's older level at the start time `dir`, as OpenFOAM writes it
/// with backward: `U_0` and `phi_0` (the velocity and flux of the time
/// before), `dt` before the start. `None` without them (the first step is
/// then an Euler one, as OpenFOAM's); with one of the two files only, a
/// warning says so.
fn read_old_level(
    r: &mut Reader,
    dir: &Path,
    mesh: &Mesh,
    dt: f64,
) -> Result<Option<OldTime>, CaseError> {
    let present = |name: &str| crate::foam::file_or_gz_exists(&dir.join(name));
    match (present("U_0"), present("phi_0")) {
        (false, false) => return Ok(None),
        (true, true) => {}
        (u, _) => {
            let (found, missing) = if u {
                ("U_0", "phi_0")
            } else {
                ("phi_0", "U_0")
            };
            r.warn(format!(
                "{}: {found} without {missing}: the first step is an Euler one (backward needs \
                 both of the time before)",
                dir.display()
            ));
            return Ok(None);
        }
    }
    let n = mesh.n_cells();
    let u = VectorFieldFile::read(&dir.join("U_0"), n)?
        .internal
        .expand(n);
    let phi = read_phi(&dir.join("phi_0"), mesh)?.unwrap_or_default();
    Ok(Some(OldTime { u, phi, dt }))
}

/// `phi` of the start time, when written: internal faces, then every
/// patch's `value` (0 on empty patches).
fn read_phi(path: &Path, mesh: &Mesh) -> Result<Option<Vec<f64>>, CaseError> {
    if !crate::foam::file_or_gz_exists(path) {
        return Ok(None);
    }
    let file = ScalarFieldFile::read_class(path, "surfaceScalarField", mesh.n_internal_faces())?;
    let mut phi = file.internal.clone().expand(mesh.n_internal_faces());
    phi.resize(mesh.n_faces(), 0.0);
    for patch in mesh.patches() {
        if patch.kind == PatchKind::Empty {
            continue;
        }
        let dict = file.patch(patch)?;
        dict.ignore("type");
        let values = FieldValues::read(dict, "value", patch.size)?.expand(patch.size);
        phi[patch.faces()].copy_from_slice(&values);
    }
    Ok(Some(phi))
}

/// What a transient run did.
#[derive(Clone, Debug)]
pub struct TransientSummary {
    pub steps: usize,
    pub time: f64,
    /// U, p per cell and φ per face at the end.
    pub u: Vec<Vec3>,
    pub p: Vec<f64>,
    pub phi: Vec<f64>,
    /// Pressure-solver iterations over the run.
    pub p_iterations: usize,
    /// Whether every part of the steps ran on the GPU ([`DevicePiso`]).
    pub device_step: bool,
    /// Wall time of the steps by part.
    pub timing: StepTiming,
    /// The VTK series written (`VTK/NAME.pvd`), when one was.
    pub vtk_series: Option<PathBuf>,
    /// Why the run counts as not converged (exit code 1): linear solves that
    /// stopped at `maxIter` short of their tolerance (a solve with tolerance
    /// and relTol 0 runs maxIter iterations by design).
    pub not_converged: Option<String>,
}

/// The case's state at its start time on `mesh` (with its `geometry`): the
/// fields, systems and settings of `setup`, the time and the step count.
pub fn transient_state<'m>(
    setup: &TransientSetup,
    mesh: &'m Mesh,
    geometry: &'m Geometry,
) -> Result<Piso<'m>, CaseError> {
    let (velocity, pressure) = patch_conditions(&setup.origin, &setup.boundary, None, mesh)?;
    let mut piso = Piso::new(
        mesh,
        geometry,
        setup.settings,
        setup.transient,
        &velocity,
        pressure,
        setup.initial.clone(),
        setup.delta_t,
    )
    .map_err(|e| CaseError::from_flow(&setup.origin, e))?;
    piso.time = setup.start;
    piso.step = (setup.start / setup.delta_t).round() as usize;
    piso.old = setup.initial_old.clone();
    Ok(piso)
}

/// Runs a transient case on `mesh` (the pressure solves on `device`),
/// logging as icoFoam / pimpleFoam, writing the time directories.
pub fn run_transient_case(
    setup: &TransientSetup,
    mesh: &Mesh,
    device: Device,
) -> Result<TransientSummary, CaseError> {
    let clock = Instant::now();
    let geometry = timings::timed(Phase::Geometry, || mesh.geometry())?;
    let flow_error = |e: FlowError| CaseError::from_flow(&setup.origin, e);
    // The boundary conditions and the host systems (face geometry, matrix
    // pattern, the fields' systems) are the assembly's set-up.
    let assembly = timings::enter(Phase::Assembly);
    let (velocity, pressure) = patch_conditions(&setup.origin, &setup.boundary, None, mesh)?;
    let mut piso = transient_state(setup, mesh, &geometry)?;
    drop(assembly);
    let device_error = |e: DeviceFlowError| match e {
        DeviceFlowError::Flow(e) => flow_error(e),
        DeviceFlowError::Assembly(e) => CaseError::from(e),
    };
    log_gpu_mapping(
        device,
        "p",
        &[&setup.pressure_solver, &setup.pressure_final],
    );
    let mut device_step = match device {
        Device::Gpu(gpu) => {
            let _setup = device.phase(Phase::DeviceSetup);
            device_piso(gpu, &mut piso, setup, device)?
        }
        _ => None,
    };
    let gpu_solves = match (device, &device_step) {
        (Device::Gpu(_), Some(_)) => None,
        (Device::Gpu(gpu), None) => {
            log::info!(
                "pressure solves on the GPU (host-assembled each corrector); momentum on the CPU"
            );
            Some(GpuSolves::new(gpu))
        }
        (Device::Cpu, _) => {
            log::info!("Linear solves on the CPU");
            None
        }
        (Device::Gpus(_) | Device::Distributed(_), _) => {
            return Err(CaseError::invalid(format!(
                "{}: transient cases run on one device (--device cpu or gpu)",
                setup.origin
            )))
        }
    };
    let (p_solver, p_final) = (setup.pressure_solver, setup.pressure_final);
    let mut p_iterations = 0;
    let mut short_solves = ShortSolves::default();
    let pressure_seconds = Cell::new(0.0);
    let gamg_cache = timings::timed(Phase::DeviceSetup, || match device_step {
        Some(_) => gamg_cache(mesh, &geometry, &[]),
        None => gamg_cache(mesh, &geometry, &[&p_solver, &p_final]),
    });
    let mut solves = LinearSolves::new(device, gpu_solves, gamg_cache);
    let solve_pressure: &mut PressureSolve<'_> =
        &mut timed_pressure_solves(&mut solves, [&p_solver, &p_final], &pressure_seconds);
    let output = timings::enter(Phase::Output);
    let mut residual_logs = (setup.functions.residuals.iter())
        .map(|object| ResidualLog::create(setup, &piso, object))
        .collect::<Result<Vec<_>, _>>()?;
    let format = Format {
        precision: setup.foam.precision,
        time_precision: setup.foam.time_precision,
    };
    let mut functions =
        (setup.functions).start(&setup.case_dir, setup.start, format, mesh, &geometry)?;
    // The series of the run, as simpleFoam runs write theirs: its cells'
    // VTK shapes are derived at the first write and kept for the others.
    let mut vtk = match setup.vtk {
        Some(encoding) => Some(
            VtkSeries::new(
                mesh,
                setup.case_dir.join(super::openfoam::VTK_DIRECTORY),
                &crate::io::vtk::series_name_for(&setup.case_dir),
            )?
            .with_encoding(encoding)
            // A restart lists its steps after the earlier run's.
            .continuing_until(setup.start),
        ),
        None => None,
    };
    drop(output);
    // The time names' precision, raised where a step's time would take the
    // name of the one before (OpenFOAM's Time::operator++), so that no write
    // replaces an earlier time's directory.
    let time_precision = Cell::new(setup.foam.time_precision);
    // Every write time: the time directory, then its step of the series.
    let mut write = |piso: &Piso| -> Result<(), CaseError> {
        let foam = FoamWriteOptions {
            time_precision: time_precision.get(),
            ..setup.foam
        };
        let mut paths = crate::flow::output::write_time_directory_at(
            &setup.case_dir,
            piso.time,
            &piso.simple,
            &velocity,
            &pressure,
            &foam,
        )?;
        // What a restart from this time reads besides the fields: backward's
        // older level (OpenFOAM's U_0, phi_0) and the Δt that reached it.
        if let (DdtScheme::Backward, Some(old)) = (setup.transient.ddt, &piso.old) {
            paths.extend(crate::flow::output::write_old_time_level(
                &setup.case_dir,
                piso.time,
                &piso.simple,
                &velocity,
                old,
                &foam,
            )?);
        }
        // Δt of the step that reached the time (the one before it is not
        // kept: deltaT0 repeats it, which a restart does not read).
        let last_dt = piso.old.as_ref().map_or(piso.dt, |old| old.dt);
        let time = UniformTime {
            time: piso.time,
            index: piso.step,
            delta_t: last_dt,
            delta_t0: last_dt,
        };
        paths.push(time.write(&setup.case_dir, &foam)?);
        for path in paths {
            log::info!("Writing {}", path.display());
        }
        if let Some(series) = &mut vtk {
            let vtm = crate::flow::output::write_step(series, piso.time, &piso.simple)?;
            log::info!("Writing {}", vtm.display());
        }
        Ok(())
    };
    // Write times passed since the start (writes by time with adjustTimeStep).
    let mut writes_passed = 0;
    let pimple = setup.application == Application::PimpleFoam;
    if pimple {
        // pimpleFoam's CourantNo.H and setInitialDeltaT.H, ahead of its loop
        // (the latter at time index 0 only: not where a restart resumes one).
        let courant = logged_courant(&piso, &mut device_step)?;
        if let (Some(control), false) = (setup.adjust_time_step, setup.resumes_time_step) {
            piso.dt = control.initial_delta_t(piso.dt, courant.1, writes_passed);
        }
    }
    log::info!("Starting time loop");
    let start_step = piso.step;
    let mut step_seconds = 0.0;
    // The first step also compiles kernels and allocates: the steady cost
    // per step is the mean of the others.
    let mut first_step_seconds = None;
    while piso.time < setup.end - 0.5 * piso.dt {
        let step_clock = Instant::now();
        // The step is assembly, less its linear solves (their own phase
        // where they run on the host; taken out after the loop where the
        // device step times its parts).
        let stepping = device.phase(Phase::Assembly);
        // icoFoam logs the time, then the Courant number of the step;
        // pimpleFoam the Courant number, the adjusted Δt, then the time.
        let log_time = |piso: &Piso| {
            let (time, precision) = (piso.time + piso.dt, time_precision.get());
            let distinct = distinct_time_precision(piso.time, time, precision);
            if distinct != precision {
                log::warn!(
                    "Increased the timePrecision from {precision} to {distinct} to distinguish \
                     between timeNames at time {}",
                    time_name(time, distinct)
                );
                time_precision.set(distinct);
            }
            log::info!("Time = {}", time_name(time, distinct))
        };
        if !pimple {
            log_time(&piso);
        }
        let courant = logged_courant(&piso, &mut device_step)?;
        if let Some(control) = setup.adjust_time_step {
            piso.dt =
                control.next_delta_t(piso.dt, courant.1, piso.time - setup.start, writes_passed);
            log::info!("deltaT = {}", format_log(piso.dt));
        }
        if pimple {
            log_time(&piso);
        }
        let report = match &mut device_step {
            Some(step) => step.advance(&mut piso, courant).map_err(device_error)?,
            None => piso.advance(courant, solve_pressure).map_err(flow_error)?,
        };
        drop(stepping);
        let this_step = step_clock.elapsed().as_secs_f64();
        step_seconds += this_step;
        first_step_seconds.get_or_insert(this_step);
        p_iterations += report.p_solves.iter().map(|p| p.iterations).sum::<usize>();
        short_solves.count(&report, setup);
        let output = timings::enter(Phase::Output);
        for log in &mut residual_logs {
            log.time_precision = time_precision.get();
            log.append(&report)?;
        }
        let write_now = match setup.write_time_interval {
            Some(interval) => {
                let passed = write_index(piso.time - setup.start, piso.dt, interval);
                let now = passed > writes_passed;
                writes_passed = writes_passed.max(passed);
                now
            }
            None => report.step.is_multiple_of(setup.write_every),
        };
        if write_now {
            if let Some(step) = &mut device_step {
                step.download_fields(&mut piso)?;
            }
            write(&piso)?;
        }
        drop(output);
        super::log_execution_time(clock);
        // v1912 runs the function objects after the step's ExecutionTime line.
        timings::timed(Phase::Output, || {
            functions.execute(&piso.simple, piso.time, report.step)
        })?;
    }
    if let Some(step) = &mut device_step {
        let _output = device.phase(Phase::Output);
        step.download_fields(&mut piso)?;
        // The device step times its parts (synchronised at debug level):
        // its solves and the preconditioner's set-up leave the steps'
        // assembly. (Its read-backs are all for writes, inside the output
        // phase already.)
        let parts = step.seconds().parts;
        timings::reassign(
            Phase::Assembly,
            Phase::Solve,
            parts.momentum_solve + parts.solve + parts.preconditioner_update,
        );
        timings::reassign(
            Phase::Assembly,
            Phase::DeviceSetup,
            parts.preconditioner_setup,
        );
    }
    let steps = piso.step - start_step;
    let timing = match &device_step {
        Some(step) => {
            let s = step.seconds();
            StepTiming {
                steps,
                momentum: s.momentum(),
                pressure_solves: s.pressure_solves(),
                total: s.steps,
            }
        }
        None => StepTiming {
            steps,
            momentum: piso.momentum_seconds(),
            pressure_solves: pressure_seconds.get(),
            total: step_seconds,
        },
    };
    if steps > 0 {
        log::info!(
            "Time per step (mean of {steps}{}): {}",
            match &device_step {
                Some(step) if step.seconds().synchronised => ", GPU, each part synchronised",
                Some(_) => ", GPU, parts as host time between read-backs",
                None => "",
            },
            timing
        );
    }
    if let (Some(step), true) = (&device_step, steps > 0) {
        let parts = step.seconds().parts;
        let ms = |seconds: f64| 1e3 * seconds / steps as f64;
        log::info!(
            "GPU step by part (ms per step): momentum assembly {:.3}, momentum solves {:.3}, \
             Rhie-Chow fluxes {:.3}, pressure assembly {:.3}, preconditioner set-up {:.3} and \
             re-set-ups {:.3}, pressure solves {:.3}, corrections {:.3}",
            ms(parts.momentum_assembly),
            ms(parts.momentum_solve),
            ms(parts.fluxes),
            ms(parts.assembly),
            ms(parts.preconditioner_setup),
            ms(parts.preconditioner_update),
            ms(parts.solve),
            ms(parts.corrections)
        );
        log_solve_floors(step, &step.seconds().parts, steps);
    }
    if let (Some(first), true) = (first_step_seconds, steps > 1) {
        log::info!(
            "Time per step after the first (mean of {}, writes excluded): {:.3} ms; the first \
             step took {:.3} ms",
            steps - 1,
            1e3 * (step_seconds - first) / (steps - 1) as f64,
            1e3 * first
        );
    }
    // A run that wrote no step (its start at or past its end) names no series.
    let vtk = vtk.filter(|series| series.n_steps() > 0);
    if let Some(series) = &vtk {
        log::info!(
            "Wrote {} VTK step(s), {:.1} MB ({}) in {:.2} s: {}",
            series.n_steps(),
            series.bytes_written() as f64 / 1e6,
            setup.vtk.unwrap_or_default(),
            series.write_time().as_secs_f64(),
            series.pvd_path().display()
        );
    }
    log::info!("End");
    Ok(TransientSummary {
        steps,
        time: piso.time,
        u: piso.simple.u.clone(),
        p: piso.simple.p.clone(),
        phi: piso.simple.phi.clone(),
        p_iterations,
        device_step: device_step.is_some(),
        timing,
        vtk_series: vtk.as_ref().map(VtkSeries::pvd_path),
        not_converged: short_solves.why(),
    })
}

/// The linear solves of a run and those that stopped at `maxIter` short of
/// their tolerance.
#[derive(Default)]
struct ShortSolves {
    solves: usize,
    short: usize,
}

impl ShortSolves {
    /// The step's solves: one counts as short when it did not converge and
    /// its controls (the `p`/`pFinal`, `U`/`UFinal` ones whose `maxIter` it
    /// ran) ask for a tolerance.
    fn count(&mut self, report: &StepReport, setup: &TransientSetup) {
        let p = [
            &setup.pressure_solver.controls,
            &setup.pressure_final.controls,
        ];
        let u = [
            &setup.settings.momentum.controls,
            &setup.transient.momentum_final.controls,
        ];
        let solves = (report.p_solves.iter().map(|perf| (perf, p)))
            .chain(report.u_solves.iter().map(|(_, perf)| (perf, u)));
        for (perf, controls) in solves {
            self.solves += 1;
            let by_design = match controls.iter().find(|c| c.max_iter == perf.iterations) {
                Some(ran) => ran.fixed_iterations(),
                // Ended before maxIter unconverged: a fixed-iteration solve
                // whose residual reached zero.
                None => controls.iter().any(|c| c.fixed_iterations()),
            };
            self.short += usize::from(!perf.converged && !by_design);
        }
    }

    fn why(&self) -> Option<String> {
        (self.short > 0).then(|| {
            format!(
                "{} of {} linear solves stopped at maxIter short of their tolerance",
                self.short, self.solves
            )
        })
    }
}

/// The device solves' bytes per step and their floor at the copy bandwidth
/// measured now, beside the measured time of each (`bench`'s byte models:
/// [`crate::gpu::simple::DevicePhaseBytes`]). A copy that cannot run (the
/// device too full for its buffers) leaves the line out.
fn log_solve_floors(step: &DevicePiso<'_>, parts: &DevicePhaseSeconds, steps: usize) {
    let bandwidth = match step.copy_bandwidth() {
        Ok(b) => b,
        Err(e) => {
            log::debug!("no byte floors: the copy that measures the bandwidth failed: {e}");
            return;
        }
    };
    let bytes = step.phase_bytes();
    let per_step = |b: f64| b / steps as f64;
    let floor_ms = |b: f64| 1e3 * per_step(b) / (bandwidth * 1e9);
    let part = |name: &str, bytes: Option<f64>, seconds: f64| match bytes {
        // No momentum predictor: nothing solved.
        Some(0.0) => format!("{name} none"),
        Some(b) => {
            let ms = 1e3 * seconds / steps as f64;
            format!(
                "{name} {:.3} GB, floor {:.3} ms, measured {ms:.3} ms ({:.1}x)",
                per_step(b) / 1e9,
                floor_ms(b),
                ms / floor_ms(b)
            )
        }
        _ => format!("{name} not counted"),
    };
    // Unsynchronised, a part's time takes in what ran beside it (the
    // pressure matrix and its preconditioner beside the momentum solve).
    let measured = match step.seconds().synchronised {
        true => "each part synchronised",
        false => "parts as host time between read-backs",
    };
    let momentum = part(
        "momentum solves",
        bytes.momentum_solve,
        parts.momentum_solve,
    );
    log::info!(
        "GPU solves per step, bytes and floor at the copy bandwidth ({bandwidth:.0} GB/s; \
         {measured}): {momentum}; {}",
        part("pressure solves", bytes.solve, parts.solve)
    );
}

/// The Courant number of the current fluxes and Δt (on the device where
/// the step runs there), logged.
fn logged_courant(
    piso: &Piso,
    device_step: &mut Option<DevicePiso<'_>>,
) -> Result<(f64, f64), CaseError> {
    match device_step {
        Some(step) => Ok(step.log_courant(piso.dt)?),
        None => Ok(piso.log_courant()),
    }
}

/// The time steps' wall time by part (seconds, summed over the steps).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTiming {
    pub steps: usize,
    /// Momentum equations: assembly and solves.
    pub momentum: f64,
    /// Pressure solves (with AMG's re-set-ups on the device).
    pub pressure_solves: f64,
    /// Whole steps (writes excluded).
    pub total: f64,
}

impl StepTiming {
    /// What is neither momentum nor pressure solves: Rhie–Chow fluxes,
    /// pressure assembly, corrections, reductions.
    pub fn other(&self) -> f64 {
        (self.total - self.momentum - self.pressure_solves).max(0.0)
    }

    /// Milliseconds per step of `seconds`.
    fn ms(&self, seconds: f64) -> f64 {
        1e3 * seconds / self.steps.max(1) as f64
    }

    /// Milliseconds per step of the whole step.
    pub fn ms_per_step(&self) -> f64 {
        self.ms(self.total)
    }
}

impl std::fmt::Display for StepTiming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} ms = momentum {:.3} ms + pressure solves {:.3} ms + other {:.3} ms",
            self.ms_per_step(),
            self.ms(self.momentum),
            self.ms(self.pressure_solves),
            self.ms(self.other())
        )
    }
}

/// The device step of `piso` where the GPU runs every part of it (p and
/// pFinal as PCG with one preconditioner, U by GMRES or PBiCGStab, a mesh the
/// device assembles); else `None`, and the log says why.
fn device_piso<'g>(
    gpu: &'g Gpu,
    piso: &mut Piso,
    setup: &TransientSetup,
    device: Device,
) -> Result<Option<DevicePiso<'g>>, CaseError> {
    let host = |why: String| {
        log::info!("time step on the CPU, pressure solves on the GPU: {why}");
        Ok(None)
    };
    let p = match device_pressure_solver(&setup.pressure_solver, device) {
        Ok(p) => p,
        Err(why) => return host(format!("p: {why}")),
    };
    let p_final = match device_pressure_solver(&setup.pressure_final, device) {
        Ok(p) => p,
        Err(why) => return host(format!("pFinal: {why}")),
    };
    if !p.same_preconditioner(&p_final) {
        return host(
            "p and pFinal have different preconditioners on the device (the resident \
             pressure solve keeps one)"
                .into(),
        );
    }
    match DevicePiso::new(gpu, piso, p, p_final.controls) {
        Ok(step) => Ok(Some(step)),
        Err(AssemblyError::Unsupported(why)) => host(why),
        Err(e) => Err(e.into()),
    }
}

/// `postProcessing/<name>/<startTime>/solverInfo.dat` as OpenFOAM v1912's
/// `solverInfo` function object (`#includeFunc residuals`) writes it: per
/// time step the time, then for U (when listed and solved) its solver, each
/// solved component's initial and final residual and iterations and its
/// `converged` flag, then the same for p (when listed); the first solve of
/// each field in the step. v1912's flag for U is always `false`: the
/// performance of a segregated vector solve takes each component's
/// residuals and iterations but not its convergence. A rerun that finds the
/// file of an earlier run writes `solverInfo_<startTime>.dat` beside it.
struct ResidualLog {
    path: PathBuf,
    /// The time column's precision (raised with the time directories').
    time_precision: usize,
    /// `writePrecision`.
    precision: usize,
    /// Solver type names of U and p as OpenFOAM prints them (`smoothSolver`, `DICPCG`).
    solvers: [String; 2],
    /// Whether U's columns are written (listed, and solved: momentum
    /// predictor).
    with_u: bool,
    with_p: bool,
}

/// Width OpenFOAM pads the time column and the header names to: the write
/// precision and 8 (14 at the default 6).
fn column_width(precision: usize) -> usize {
    precision + 8
}

/// `x` as OpenFOAM's solverInfo writes it: rounded to the write precision's
/// significant digits, then in scientific notation with as many decimals
/// (`8.905110e-06` at the default 6).
fn format_e(x: f64, precision: usize) -> String {
    let rounded: f64 = format_general(x, precision).parse().unwrap_or(x);
    format_scientific(rounded, precision)
}

impl ResidualLog {
    fn create(setup: &TransientSetup, piso: &Piso, object: &SolverInfo) -> Result<Self, CaseError> {
        let start_name = time_name(setup.start, setup.foam.time_precision);
        let dir = (setup.case_dir.join("postProcessing"))
            .join(&object.name)
            .join(&start_name);
        let with_u = object.u && setup.transient.momentum_predictor;
        let with_p = object.p;
        let mut names = Vec::new();
        if with_u {
            names.push("U_solver".to_string());
            for &c in piso.simple.components() {
                let x = ["Ux", "Uy", "Uz"][c];
                names.extend(["initial", "final", "iters"].map(|k| format!("{x}_{k}")));
            }
            names.push("U_converged".into());
        }
        if with_p {
            names.extend(
                ["p_solver", "p_initial", "p_final", "p_iters", "p_converged"].map(String::from),
            );
        }
        let width = column_width(setup.foam.precision);
        let mut text = format!("# Solver information\n{:<width$}", "# Time");
        for name in names {
            text += &format!("\t{name:<width$}");
        }
        text.push('\n');
        let path = data_file(&dir, "solverInfo", &start_name);
        create_file(&path, &text)?;
        Ok(Self {
            path,
            time_precision: setup.foam.time_precision,
            precision: setup.foam.precision,
            solvers: setup.solver_names.clone(),
            with_u,
            with_p,
        })
    }

    /// Appends the step's line (the file is not rewritten: a long run's
    /// steps cost the same, and a run stopped midway leaves its lines).
    fn append(&mut self, report: &StepReport) -> Result<(), CaseError> {
        let width = column_width(self.precision);
        let mut line = format!("{:<width$}", time_name(report.time, self.time_precision));
        if self.with_u {
            line += &format!("\t{}", self.solvers[0]);
            for (_, perf) in &report.u_solves {
                line += &format!(
                    "\t{}\t{}\t{}",
                    format_e(perf.initial_residual, self.precision),
                    format_e(perf.final_residual, self.precision),
                    perf.iterations
                );
            }
            line += "\tfalse";
        }
        if let Some(p) = report.p_solves.first().filter(|_| self.with_p) {
            line += &format!(
                "\t{}\t{}\t{}\t{}\t{}",
                self.solvers[1],
                format_e(p.initial_residual, self.precision),
                format_e(p.final_residual, self.precision),
                p.iterations,
                p.converged
            );
        }
        line.push('\n');
        Ok(append_file(&self.path, &line)?)
    }
}

/// The solver of `solvers/<field>` as OpenFOAM names it in its performance
/// reports: `smoothSolver`, `GAMG`, or the preconditioner's name before
/// `PCG`, `PBiCG`, `PBiCGStab` (`DICPCG`).
fn solver_type_name(solution: &FoamDict, field: &str) -> Result<String, CaseError> {
    let dict = solution.get_dict("solvers")?.get_dict(field)?;
    let solver = dict.get_word("solver")?;
    if !matches!(solver.as_str(), "PCG" | "PBiCG" | "PBiCGStab") {
        return Ok(solver);
    }
    let preconditioner = match dict.get_dict_opt("preconditioner") {
        Ok(Some(p)) => p.get_word("preconditioner")?,
        _ => dict.get_or("preconditioner", "none".to_string())?,
    };
    Ok(format!("{preconditioner}{solver}"))
}
