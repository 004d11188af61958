//! OpenFOAM laplacianFoam case directories, read as they are, → [`CaseSetup`].
//!
//! laplacianFoam (v1912) solves, for the field `T`,
//! `fvm::ddt(T) − fvm::laplacian(DT, T) == fvOptions(T)` inside
//! `while (simple.loop())` / `while (simple.correctNonOrthogonal())`. What is
//! read, and what it becomes:
//!
//! | file | entries | becomes |
//! |---|---|---|
//! | `system/controlDict` | `startFrom startTime\|latestTime\|firstTime`, `startTime` (0), `stopAt endTime`, `endTime`, `deltaT` | [`TimeControl`] |
//! | | `writeControl timeStep\|runTime\|adjustableRunTime`, `writeInterval` | `output.interval` (steps) |
//! | | `writeFormat`, `writePrecision`, `writeCompression`, `timeFormat general`, `timePrecision` | `output.foam` |
//! | | (every written time also as a VTK series `VTK/<case>.pvd`, as `foamToVTK` would write it; `run --vtk none` turns it off) | `output.formats`, `output.directory` |
//! | `system/fvSchemes` | `ddtSchemes` `Euler\|steadyState`; `laplacianSchemes` `Gauss linear\|harmonic corrected\|uncorrected\|limited ψ\|orthogonal`; `gradSchemes` `Gauss linear\|leastSquares` (keys `ddt(T)`, `laplacian(DT,T)`, `grad(T)`, else `default`) | [`Schemes`] via `Schemes::from_foam` |
//! | `system/fvSolution` | `solvers { T {...} }`: `PCG` + `DIC\|FDIC\|diagonal\|none` or a symmetric smoother (`symGaussSeidel`, `Jacobi`, `blockJacobi`, … with the smoother keys below; flat or `preconditioner { preconditioner …; }`); `GAMG` solver → OpenFOAM's GAMG on the CPU (`solve::gamg`, its keys `smoother`, `agglomerator`, `nCellsInCoarsestLevel`, `mergeLevels`, `nPreSweeps`, `nPostSweeps`, `nFinestSweeps`, `scaleCorrection`, `interpolateCorrection`, `directSolveCoarsest`, `cacheAgglomeration`, …) and PCG + AMG on the GPU, `preconditioner GAMG` → PCG + one AMG cycle (`solve::amg`; keys `smoother`, `nPreSweeps`, `nPostSweeps`, `nCellsInCoarsestLevel`, ours `cycle`, `passes`, `omega`, `overCorrection`, …); `smoothSolver` with `smoother GaussSeidel\|symGaussSeidel\|DIC\|DICGaussSeidel\|Jacobi\|L1Jacobi\|blockJacobi\|…`, `nSweeps`; ours: `omega`, `colouring`, `inner`, `innerTolerance`, `innerMaxIter`, `blockSize`, `asynchronous` (see `case_toml`); `PBiCG` → PCG (warned); `PBiCGStab` and `GMRES` (`nKrylov`, `orthogonalisation`, `preconditioningSide`, `flexible`) with `diagonal|none` (or any PCG preconditioner; `DILU` refused until ILU exists), `solve::krylov`; `tolerance`, `relTol`, `maxIter`, `minIter` | [`SolverSettings`] |
//! | | `SIMPLE { nNonOrthogonalCorrectors; residualControl { T tol; } }` | correctors; steady stop criterion |
//! | `constant/transportProperties` | `DT` (`DT 1e-3;`, `DT [0 2 -1 0 0 0 0] 1e-3;` or `DT DT [...] 1e-3;`) | Γ |
//! | `<startTime>/T` | internal field; `fixedValue`, `zeroGradient`, `fixedGradient`, `mixed`, `empty` patches | initial field, [`BoundarySpec`]s |
//! | `system/fvOptions` (else `constant/fvOptions`) | `scalarSemiImplicitSource`: `selectionMode all\|cellZone`, `volumeMode absolute\|specific`, `injectionRateSuSp { T (Su Sp); }` | source Su, implicit source Sp |
//!
//! `scalarSemiImplicitSource` adds Su/V' + Sp/V'·T per unit volume to the
//! selected cells, V' the selection's total volume (`absolute`) or 1
//! (`specific`). Entries that cannot matter to laplacianFoam (`divSchemes`,
//! `runTimeModifiable`, GAMG's agglomeration settings, ...) are accepted quietly;
//! every other entry nobody read is named in a warning, never silently ignored.

use super::setup::{
    check_non_orth_correctors, check_step_count, BoundarySpec, CaseSetup, LinearSolver,
    OutputFormat, OutputSettings, PatchCondition, Physics, Scalar, SolverSettings, SourceSplit,
    TimeControl,
};
use super::CaseError;
use crate::foam::dict::ValueKind;
use crate::foam::{FoamDict, FoamEntry, FoamFile, FoamFormat};
use crate::fvm::{Schemes, SingularPolicy};
use crate::io::foam_field::{time_name, FieldValues, FoamWriteOptions, ScalarFieldFile};
use crate::mesh::{Mesh, MeshError, MeshSource};
use crate::solve::amg::AmgSettings;
use crate::solve::distributed::Deflation;
use crate::solve::gamg::GamgSettings;
use crate::solve::krylov::{GmresSettings, KrylovMethod};
use crate::solve::registry::{self, KeyValues, RegistryError};
use crate::solve::{
    EigenBound, PolynomialSettings, Preconditioner, PreconditionerKind, SmootherKind,
    SmootherSettings, SolverControls,
};
use std::path::{Path, PathBuf};

/// The field laplacianFoam solves.
const FIELD: &str = "T";
/// Where OpenFOAM cases get their VTK series (`foamToVTK`'s directory).
pub const VTK_DIRECTORY: &str = "VTK";

/// A case read, and the warnings about what it holds that is not used.
#[derive(Debug)]
pub struct OpenFoamCase {
    pub setup: CaseSetup,
    /// The mesh of `setup.mesh`, read to read the fields: pass it on to
    /// [`run_case_with_mesh`](crate::case::run_case_with_mesh) instead of reading it again.
    pub mesh: Mesh,
    /// One line per entry nobody read (`file:line: scope/key: ...`) or setting
    /// mapped to another; each was also logged.
    pub warnings: Vec<String>,
}

/// Reads the laplacianFoam case in `case_dir` (see the module documentation).
/// Warnings go to the log and into [`OpenFoamCase::warnings`].
pub fn read_case(case_dir: &Path) -> Result<OpenFoamCase, CaseError> {
    let mut reader = Reader::new(case_dir, "laplacianFoam");
    let (setup, mesh) = reader.read()?;
    Ok(OpenFoamCase {
        setup,
        mesh,
        warnings: reader.warnings,
    })
}

/// `file:line: msg` at an entry.
pub(super) fn at(entry: &FoamEntry, msg: impl Into<String>) -> CaseError {
    CaseError::Mesh(entry.error(msg))
}

/// `file:line: msg` at the entry `key` of `dict`, read before; at the
/// dictionary when the key is absent (its default was used).
pub(super) fn at_key(dict: &FoamDict, key: &str, msg: impl Into<String>) -> CaseError {
    match dict.entry(key) {
        Some(entry) => at(entry, msg),
        None => CaseError::Mesh(dict.error(msg)),
    }
}

/// The word of `key` (`default` where the key is absent) as one of two
/// `choices`; another word is an error at the key: `key WORD: expected A
/// or B`.
pub(super) fn one_of<T: Copy>(
    dict: &FoamDict,
    key: &str,
    default: &str,
    choices: [(&str, T); 2],
) -> Result<T, CaseError> {
    let word: String = dict.get_or(key, default.to_string())?;
    match choices.iter().find(|(name, _)| *name == word) {
        Some(&(_, value)) => Ok(value),
        None => Err(at_key(
            dict,
            key,
            format!(
                "{key} {word}: expected {} or {}",
                choices[0].0, choices[1].0
            ),
        )),
    }
}

/// `writeInterval` `interval` under `writeControl` `control` as a whole
/// number of time steps of `delta_t`, else an error at the key: `timeStep`
/// counts steps; `runTime` and `adjustableRunTime` count time (without
/// `adjustTimeStep` the step is fixed, and adjustableRunTime writes at
/// runTime's times); with `write_every`, the case's steps between writes
/// (a function object's interval), `writeTime` and `outputTime` count writes.
pub(super) fn interval_in_steps(
    dict: &FoamDict,
    control: &str,
    interval: f64,
    delta_t: f64,
    write_every: Option<usize>,
) -> Result<usize, CaseError> {
    let steps = match (control, write_every) {
        ("timeStep", _) => interval,
        ("writeTime" | "outputTime", Some(every)) => interval * every as f64,
        ("runTime" | "adjustableRunTime", _) => interval / delta_t,
        (other, _) => {
            let expected = match write_every {
                Some(_) => "timeStep, writeTime, runTime or adjustableRunTime",
                None => "timeStep, runTime or adjustableRunTime",
            };
            return Err(at_key(
                dict,
                "writeControl",
                format!("writeControl {other}: expected {expected}"),
            ));
        }
    };
    let rounded = steps.round();
    if !(rounded >= 1.0 && is_whole(steps)) {
        return Err(at_key(
            dict,
            "writeInterval",
            format!(
                "writeInterval {interval} with writeControl {control} is not a whole number of \
                 time steps of {delta_t}; make it one"
            ),
        ));
    }
    Ok(rounded as usize)
}

/// Whether `steps` is a whole number, to a relative 1e-9 (a time interval
/// over a time step, each written with a few digits).
fn is_whole(steps: f64) -> bool {
    (steps - steps.round()).abs() <= 1e-9 * steps.round()
}

/// The OpenFOAM applications `fvpoisson run` runs, as error messages list them.
pub const SUPPORTED_APPLICATIONS: [&str; 5] = [
    "laplacianFoam",
    "simpleFoam",
    "icoFoam",
    "pimpleFoam",
    "potentialFoam",
];

/// The application `control` (a `controlDict`) names, if any; an error at the
/// entry when it is not one of [`SUPPORTED_APPLICATIONS`].
pub(super) fn supported_application(control: &FoamDict) -> Result<Option<String>, CaseError> {
    let Some((entry, _)) = control.stream_entry("application")? else {
        return Ok(None);
    };
    let app: String = control.get("application")?;
    if !SUPPORTED_APPLICATIONS.contains(&app.as_str()) {
        return Err(at(
            entry,
            format!(
                "application {app} is not supported (supported: {})",
                SUPPORTED_APPLICATIONS.join(", ")
            ),
        ));
    }
    Ok(Some(app))
}

/// Refuses an OpenFOAM case directory that names what fvpoisson does not
/// run, before any other file of it is read, so that the first error is
/// "not supported" rather than a missing file the unsupported application
/// would have needed: an application outside [`SUPPORTED_APPLICATIONS`],
/// or, for a flow case (simpleFoam, pimpleFoam, or no application and a
/// `0/U`), a turbulence model other than laminar Stokes. Directories with
/// a `case.toml` or without `system/controlDict` pass (their readers
/// report what is missing).
pub fn check_supported(case_dir: &Path) -> Result<(), CaseError> {
    let control_path = case_dir.join("system/controlDict");
    let exists = |p: &Path| p.exists() || crate::foam::gz_path(p).exists();
    if case_dir.join(super::case_toml::CASE_FILE).exists() || !exists(&control_path) {
        return Ok(());
    }
    let control = FoamDict::read(&control_path)?;
    let flow = match supported_application(&control)?.as_deref() {
        Some(app) => app == "simpleFoam" || app == "pimpleFoam",
        None => exists(&case_dir.join("0/U")),
    };
    if flow {
        if let Some(dict) = super::simple_foam::momentum_transport(case_dir)? {
            super::simple_foam::check_laminar_model(&dict)?;
        }
    }
    Ok(())
}

/// The time settings of `controlDict`.
pub(super) struct Timing {
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) delta_t: f64,
    /// Write every this many steps (`writeInterval` in steps or in time / deltaT).
    pub(super) write_every: usize,
    /// `writeControl runTime|adjustableRunTime` with a `writeInterval` that
    /// is not a whole number of steps: write at the steps OpenFOAM writes
    /// at ([`crate::flow::piso::write_index`]; `write_every` is not used).
    pub(super) write_time: Option<f64>,
}

/// Reads the files of an OpenFOAM case directory and collects the warnings;
/// shared by the laplacianFoam and the simpleFoam ([`super::simple_foam`]) readers.
pub(super) struct Reader {
    pub(super) dir: PathBuf,
    pub(super) warnings: Vec<String>,
    /// The solver the case is read as (`laplacianFoam`), named in warnings.
    application: &'static str,
}

impl Reader {
    pub(super) fn new(dir: &Path, application: &'static str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            warnings: Vec::new(),
            application,
        }
    }

    pub(super) fn dict(&self, rel: &str) -> Result<FoamDict, CaseError> {
        Ok(FoamDict::read(&self.dir.join(rel))?)
    }

    pub(super) fn warn(&mut self, msg: String) {
        log::warn!("{msg}");
        self.warnings.push(msg);
    }

    /// Warns about every entry of `dict` nobody read.
    pub(super) fn warn_unread(&mut self, dict: &FoamDict) {
        for e in dict.unread() {
            self.warn(format!(
                "{e}: not used by fvpoisson's {}, ignored",
                self.application
            ));
        }
    }

    /// The case and its mesh.
    fn read(&mut self) -> Result<(CaseSetup, Mesh), CaseError> {
        let control = self.dict("system/controlDict")?;
        if let Some(app) = supported_application(&control)? {
            if app != "laplacianFoam" {
                return Err(at_key(
                    &control,
                    "application",
                    format!(
                        "application {app}: only laplacianFoam cases can be run here (simpleFoam \
                         cases by `fvpoisson run`); set 'application laplacianFoam;' to run this \
                         one as such"
                    ),
                ));
            }
        }
        let schemes_dict = self.dict("system/fvSchemes")?;
        let solution = self.dict("system/fvSolution")?;
        let transport = self.dict("constant/transportProperties")?;
        // Read once at the start: changing files while running has no effect.
        control.ignore("runTimeModifiable");
        let timing = self.timing(&control)?;
        let foam = self.write_options(&control)?;

        let mesh_source = MeshSource::PolyMesh(self.dir.clone());
        let mesh = mesh_source.load()?;

        let steady = is_steady(&schemes_dict)?;
        let schemes = read_schemes(&schemes_dict)?;
        let simple = solution.get_dict_opt("SIMPLE")?;
        let n_non_orth = match simple {
            Some(s) => check_non_orth_correctors(s.get_or("nNonOrthogonalCorrectors", 0usize)?)
                .map_err(|e| at_key(s, "nNonOrthogonalCorrectors", e))?,
            None => 0,
        };
        let residual_tolerance = match simple.map(|s| s.get_dict_opt("residualControl")) {
            Some(control) => match control? {
                Some(rc) => rc.get_opt::<f64>(FIELD)?,
                None => None,
            },
            None => None,
        };
        let time = self.time_control(&timing, steady, residual_tolerance, &control)?;
        let solver = self.solver(&solution)?;
        let gamma = read_diffusivity(&transport)?;

        let start_dir = self.time_directory(timing.start, foam.time_precision);
        let field = ScalarFieldFile::read(&start_dir.join(FIELD), mesh.n_cells())?;
        let boundary = read_boundary(&field, &mesh)?;
        let (source, implicit_source) = self.sources(&mesh)?;

        for dict in [&control, &schemes_dict, &solution, &transport, &field.dict] {
            self.warn_unread(dict);
        }
        let setup = CaseSetup {
            origin: self.dir.join("system/controlDict").display().to_string(),
            case_dir: self.dir.clone(),
            mesh: mesh_source,
            physics: Physics::Laplacian,
            field: FIELD.to_string(),
            gamma: Scalar::Uniform(gamma),
            source,
            implicit_source,
            source_split: SourceSplit::OpenFoam,
            boundary,
            default_boundary: None,
            initial: scalar(field.internal),
            schemes,
            n_non_orth_correctors: n_non_orth,
            time,
            singular: SingularPolicy::default(),
            solver,
            // Time directories as laplacianFoam writes them, and the same
            // times as a VTK series in VTK/ as foamToVTK would convert them.
            output: OutputSettings {
                formats: vec![OutputFormat::Foam, OutputFormat::Vtk],
                interval: timing.write_every,
                directory: PathBuf::from(VTK_DIRECTORY),
                foam: FoamWriteOptions {
                    dimensions: field.dimensions,
                    ..foam
                },
                ..OutputSettings::default()
            },
            exact: None,
        };
        Ok((setup, mesh))
    }

    /// `startFrom`/`startTime`, `stopAt`, `endTime`, `deltaT`, `writeControl`, `writeInterval`.
    pub(super) fn timing(&mut self, control: &FoamDict) -> Result<Timing, CaseError> {
        let timing = self.timing_any_start(control)?;
        if let Some(interval) = timing.write_time {
            // laplacianFoam and simpleFoam count their writes in steps: an
            // interval between steps is refused with the reason.
            let write_control = control.get_word("writeControl")?;
            interval_in_steps(control, &write_control, interval, timing.delta_t, None)?;
        }
        if timing.start != 0.0 {
            let start_from = control.get_or("startFrom", "startTime".to_string())?;
            return Err(CaseError::invalid(format!(
                "{}: the run would start at time {} (startFrom {start_from}); only runs \
                 from time 0 are supported: remove later time directories or set startTime 0",
                control.file().display(),
                timing.start
            )));
        }
        Ok(timing)
    }

    /// The start time of `control`: `startTime`, or the latest or first time
    /// directory (`startFrom latestTime|firstTime`).
    pub(super) fn start_time(&mut self, control: &FoamDict) -> Result<f64, CaseError> {
        let start_from = control.get_or("startFrom", "startTime".to_string())?;
        match start_from.as_str() {
            "startTime" => Ok(control.get_scalar("startTime")?),
            "latestTime" | "firstTime" => {
                control.ignore("startTime");
                let times = self.time_directories()?;
                let pick = if start_from == "latestTime" {
                    times.last()
                } else {
                    times.first()
                };
                pick.copied().ok_or_else(|| {
                    CaseError::invalid(format!(
                        "{}: startFrom {start_from} but the case has no time directory",
                        self.dir.display()
                    ))
                })
            }
            other => Err(at_key(
                control,
                "startFrom",
                format!("startFrom {other}: expected startTime, latestTime or firstTime"),
            )),
        }
    }

    /// [`Self::timing`] for solvers that restart from a written time
    /// (`startFrom latestTime`, `startTime` > 0).
    pub(super) fn timing_any_start(&mut self, control: &FoamDict) -> Result<Timing, CaseError> {
        let start = self.start_time(control)?;
        let stop_at = control.get_or("stopAt", "endTime".to_string())?;
        if stop_at != "endTime" {
            return Err(at_key(
                control,
                "stopAt",
                format!("stopAt {stop_at}: only endTime is supported"),
            ));
        }
        let end = control.get_scalar("endTime")?;
        let delta_t = control.get_scalar("deltaT")?;
        for (key, v) in [("endTime", end), ("deltaT", delta_t)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(at_key(
                    control,
                    key,
                    format!("{key} is {v}; it must be a positive number"),
                ));
            }
        }
        let write_control = control.get_or("writeControl", "timeStep".to_string())?;
        let interval = control.get_scalar("writeInterval")?;
        let by_time = matches!(write_control.as_str(), "runTime" | "adjustableRunTime")
            && interval.is_finite()
            && interval > 0.0
            && !is_whole(interval / delta_t);
        let (write_every, write_time) = match by_time {
            true => (1, Some(interval)),
            false => (
                interval_in_steps(control, &write_control, interval, delta_t, None)?,
                None,
            ),
        };
        if control.get_or("purgeWrite", 0usize)? != 0 {
            self.warn(format!(
                "{}: purgeWrite is not supported: every written time is kept",
                control.file().display()
            ));
        }
        Ok(Timing {
            start,
            end,
            delta_t,
            write_every,
            write_time,
        })
    }

    /// The directory of `time`: a numeric directory of the case whose name
    /// reads as `time` however it was written (`0.000`, `2.7003072` where
    /// this precision names it `2.70031`), else the name of `time` at
    /// `precision` (which may not exist yet).
    pub(super) fn time_directory(&self, time: f64, precision: usize) -> PathBuf {
        let found = std::fs::read_dir(&self.dir).ok().and_then(|entries| {
            entries.filter_map(Result::ok).find(|e| {
                e.path().is_dir()
                    && e.file_name()
                        .to_str()
                        .and_then(|name| name.parse::<f64>().ok())
                        .is_some_and(|t| (t - time).abs() <= 1e-12 * time.abs().max(1.0))
            })
        });
        match found {
            Some(entry) => entry.path(),
            None => self.dir.join(time_name(time, precision)),
        }
    }

    /// Numeric directory names of the case, sorted.
    pub(super) fn time_directories(&self) -> Result<Vec<f64>, CaseError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| MeshError::io(&self.dir, e))?;
        let mut times: Vec<f64> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str()?.parse::<f64>().ok())
            .filter(|t| t.is_finite())
            .collect();
        times.sort_by(f64::total_cmp);
        Ok(times)
    }

    /// `writeFormat`, `writePrecision`, `writeCompression`, `timeFormat`, `timePrecision`.
    pub(super) fn write_options(
        &mut self,
        control: &FoamDict,
    ) -> Result<FoamWriteOptions, CaseError> {
        let format = one_of(
            control,
            "writeFormat",
            "ascii",
            [("ascii", FoamFormat::Ascii), ("binary", FoamFormat::Binary)],
        )?;
        let compress = match control.stream_entry("writeCompression")? {
            None => false,
            Some((entry, _)) => {
                let word: String = control.get("writeCompression")?;
                match word.as_str() {
                    "on" | "yes" | "true" | "compressed" => true,
                    "off" | "no" | "false" | "uncompressed" => false,
                    other => {
                        return Err(at(
                            entry,
                            format!("writeCompression {other}: expected on or off"),
                        ))
                    }
                }
            }
        };
        let time_format = control.get_or("timeFormat", "general".to_string())?;
        if time_format != "general" {
            self.warn(format!(
                "{}: timeFormat {time_format} is not supported: time directories are named \
                 as with timeFormat general",
                control.file().display()
            ));
        }
        let digits = |key: &str| -> Result<usize, CaseError> {
            let n = control.get_or(key, 6usize)?;
            if n == 0 {
                return Err(at_key(control, key, format!("{key} must be at least 1")));
            }
            Ok(n)
        };
        let precision = digits("writePrecision")?;
        // OpenFOAM's log follows the case's writePrecision (`Time::readDict`).
        crate::foam::write::set_log_precision(precision);
        Ok(FoamWriteOptions {
            format,
            precision,
            compress,
            time_precision: digits("timePrecision")?,
            ..FoamWriteOptions::default()
        })
    }

    /// Euler steps or steady iterations, as many as laplacianFoam takes: OpenFOAM's
    /// `Time::run` steps while t < endTime − deltaT/2, so an endTime that is not
    /// a whole number of steps is rounded to the nearest one (never shortened).
    pub(super) fn time_control(
        &mut self,
        timing: &Timing,
        steady: bool,
        residual_tolerance: Option<f64>,
        control: &FoamDict,
    ) -> Result<TimeControl, CaseError> {
        let ratio = (timing.end - timing.start) / timing.delta_t;
        let steps = (ratio + 0.5).ceil() - 1.0;
        if steps < 1.0 {
            return Err(CaseError::Mesh(control.error(format!(
                "endTime {} is less than half a time step (deltaT {}) after the start: nothing \
                 to run",
                timing.end, timing.delta_t
            ))));
        }
        check_step_count(steps, timing.delta_t, timing.end - timing.start)
            .map_err(|msg| CaseError::Mesh(control.error(msg)))?;
        if (ratio - steps).abs() > 1e-9 * steps {
            self.warn(format!(
                "{}: endTime {} is not a whole number of time steps of {}: laplacianFoam, \
                 and so this run, stops after {steps} steps",
                control.file().display(),
                timing.end,
                timing.delta_t
            ));
        }
        if !steady {
            if let Some(tol) = residual_tolerance {
                self.warn(format!(
                    "{}: SIMPLE residualControl {FIELD} {tol} is not supported in a transient \
                     case: it runs to endTime",
                    self.dir.join("system/fvSolution").display()
                ));
            }
            return Ok(TimeControl::Euler {
                delta_t: timing.delta_t,
                end_time: timing.start + steps * timing.delta_t,
            });
        }
        if timing.delta_t != 1.0 {
            self.warn(format!(
                "{}: steady case with deltaT {}: result directories are named by iteration \
                 number",
                control.file().display(),
                timing.delta_t
            ));
        }
        Ok(TimeControl::Steady {
            max_iterations: steps as usize,
            residual_tolerance: residual_tolerance.unwrap_or(0.0),
        })
    }

    /// The linear solver of `T` from `solvers`.
    fn solver(&mut self, solution: &FoamDict) -> Result<SolverSettings, CaseError> {
        Ok(SolverSettings {
            regular: self.solver_for(solution, FIELD, true)?,
            // laplacianFoam's simpleControl never selects a `TFinal` solver.
            final_corrector: None,
        })
    }

    /// The linear solver of `field` from `solvers` (exact key or pattern);
    /// `PBiCG` becomes PCG for a `symmetric` matrix, else PBiCGStab.
    pub(super) fn solver_for(
        &mut self,
        solution: &FoamDict,
        field: &str,
        symmetric: bool,
    ) -> Result<LinearSolver, CaseError> {
        let solvers = solution.get_dict("solvers")?;
        let dict = solvers.get_dict(field)?;
        let name = dict.get_word("solver")?;
        let solver_entry = dict.entry("solver").expect("read above");
        let where_ = format!("{}:{}", solver_entry.file().display(), solver_entry.line());
        let mut gamg = None;
        let mut krylov = KrylovMethod::named(&name);
        if let Some(KrylovMethod::Gmres(settings)) = &mut krylov {
            for key in GmresSettings::KEYS {
                let text = match key {
                    "nKrylov" => dict.get_opt::<usize>(key)?.map(|v| v.to_string()),
                    "flexible" => dict.get_opt::<bool>(key)?.map(|v| v.to_string()),
                    _ => dict.get_opt::<String>(key)?,
                };
                if let Some(text) = text {
                    settings.set(key, &text).map_err(|e| at_key(dict, key, e))?;
                }
            }
        }
        let (preconditioner, smoother) = match name.as_str() {
            "PCG" => (preconditioner(dict)?, None),
            "PBiCGStab" | "GMRES" => (krylov_preconditioner(dict)?, None),
            "PBiCG" if symmetric => {
                self.warn(format!(
                    "{where_}: solver {name} replaced by PCG (the matrix is symmetric)"
                ));
                (preconditioner(dict)?, None)
            }
            "PBiCG" => {
                self.warn(format!("{where_}: solver {name} replaced by PBiCGStab"));
                krylov = Some(KrylovMethod::BiCgStab);
                (krylov_preconditioner(dict)?, None)
            }
            "GAMG" => {
                gamg = Some(gamg_solver_settings(dict)?);
                (LinearSolver::default().preconditioner, None)
            }
            "smoothSolver" => {
                let name = dict.get_word("smoother")?;
                let mut smoother =
                    SmootherSettings::named(&name).map_err(|e| at_key(dict, "smoother", e))?;
                smoother_parameters(dict, &mut smoother)?;
                (LinearSolver::default().preconditioner, Some(smoother))
            }
            other => {
                return Err(at(
                    solver_entry,
                    format!(
                        "solver '{other:.80}' is not supported (PCG, GAMG, smoothSolver, PBiCG, \
                         PBiCGStab, GMRES)"
                    ),
                ))
            }
        };
        let deflation = match dict.get_opt::<String>("deflation")? {
            None => Deflation::None,
            Some(_) if smoother.is_some() || krylov.is_some() => {
                return Err(at_key(
                    dict,
                    "deflation",
                    format!(
                        "deflation applies to PCG and GAMG in distributed runs, not to {name}; \
                         remove the key"
                    ),
                ))
            }
            Some(text) => text
                .parse()
                .map_err(|e: String| at_key(dict, "deflation", e))?,
        };
        let defaults = SolverControls::default();
        let controls = SolverControls {
            tolerance: dict.get_or("tolerance", defaults.tolerance)?,
            rel_tol: dict.get_or("relTol", defaults.rel_tol)?,
            max_iter: dict.get_or("maxIter", defaults.max_iter)?,
            min_iter: dict.get_or("minIter", defaults.min_iter)?,
        };
        controls
            .validate()
            .map_err(|e| CaseError::Mesh(dict.error(format!("solvers/{field}: {e}"))))?;
        Ok(LinearSolver {
            preconditioner,
            smoother,
            gamg,
            controls,
            krylov,
            deflation,
            gpu_keys_given: gpu_keys_given(dict, &name)?,
            ..LinearSolver::default()
        })
    }

    /// Su and Sp from `fvOptions`: per unit volume, summed over the options.
    fn sources(&mut self, mesh: &Mesh) -> Result<(Scalar, Option<Scalar>), CaseError> {
        let path = ["system/fvOptions", "constant/fvOptions"]
            .iter()
            .map(|rel| self.dir.join(rel))
            .find(|p| p.is_file() || crate::foam::gz_path(p).is_file());
        let Some(path) = path else {
            return Ok((Scalar::Uniform(0.0), None));
        };
        let options = FoamDict::read(&path)?;
        let n = mesh.n_cells();
        let (mut su, mut sp) = (vec![0.0; n], vec![0.0; n]);
        let mut volumes = None;
        for entry in options.entries() {
            let Some(option) = entry.as_dict() else {
                continue; // left unread: warned below
            };
            options.entry(entry.key());
            let kind = option.get_word("type")?;
            if kind != "scalarSemiImplicitSource" {
                return Err(at_key(
                    option,
                    "type",
                    format!(
                        "fvOption '{}' of type {kind} is not supported (only \
                         scalarSemiImplicitSource)",
                        entry.key()
                    ),
                ));
            }
            if !option.get_or("active", true)? {
                options.ignore(entry.key());
                continue;
            }
            let coeffs = option
                .get_dict_opt("scalarSemiImplicitSourceCoeffs")?
                .unwrap_or(option);
            for timed in ["timeStart", "duration"] {
                if let Some(e) = coeffs.entry(timed).or(option.entry(timed)) {
                    return Err(at(
                        e,
                        format!("{timed}: time-limited fvOptions are not supported"),
                    ));
                }
            }
            let cells = select_cells(coeffs, &self.dir, n)?;
            let rates = coeffs.get_dict("injectionRateSuSp")?;
            let Some((rate_entry, values)) = rates.stream_entry(FIELD)? else {
                self.warn(format!(
                    "{}:{}: fvOption '{}' has no injectionRateSuSp for {FIELD}; it does nothing",
                    entry.file().display(),
                    entry.line(),
                    entry.key()
                ));
                continue;
            };
            let pair = match values {
                [v] => match &v.kind {
                    ValueKind::List(items) => items
                        .iter()
                        .map(|i| i.number())
                        .collect::<Option<Vec<f64>>>(),
                    _ => None,
                },
                _ => None,
            };
            let Some([rate_su, rate_sp]) =
                pair.as_deref().and_then(|p| <[f64; 2]>::try_from(p).ok())
            else {
                return Err(at(
                    rate_entry,
                    format!("injectionRateSuSp {FIELD}: expected (Su Sp), two numbers"),
                ));
            };
            let volume_mode = coeffs.get_word("volumeMode")?;
            let per_volume = match volume_mode.as_str() {
                "specific" => 1.0,
                "absolute" => {
                    if volumes.is_none() {
                        volumes = Some(mesh.geometry()?.cell_volumes);
                    }
                    let volumes = volumes.as_deref().unwrap_or_default();
                    let selected: f64 = match &cells {
                        None => volumes.iter().sum(),
                        Some(cells) => cells.iter().map(|&c| volumes[c]).sum(),
                    };
                    selected
                }
                other => {
                    return Err(at_key(
                        coeffs,
                        "volumeMode",
                        format!("volumeMode {other}: expected absolute or specific"),
                    ))
                }
            };
            let mut add = |c: usize| {
                su[c] += rate_su / per_volume;
                sp[c] += rate_sp / per_volume;
            };
            match &cells {
                None => (0..n).for_each(&mut add),
                Some(cells) => cells.iter().copied().for_each(add),
            }
        }
        self.warn_unread(&options);
        let implicit = sp.iter().any(|&v| v != 0.0).then(|| uniform_or_values(sp));
        Ok((uniform_or_values(su), implicit))
    }
}

/// Whether `ddtSchemes` makes the case steady (`steadyState`) or Euler.
fn is_steady(schemes: &FoamDict) -> Result<bool, CaseError> {
    let (entry, text) = scheme(schemes, "ddtSchemes", &format!("ddt({FIELD})"))?;
    match text.as_str() {
        "steadyState" => Ok(true),
        "Euler" => Ok(false),
        other => Err(at(
            entry,
            format!("ddt scheme '{other:.80}' is not supported (Euler or steadyState)"),
        )),
    }
}

/// One value when all are equal, else the values.
fn uniform_or_values(values: Vec<f64>) -> Scalar {
    match values.first() {
        Some(&v) if values.iter().all(|&x| x == v) => Scalar::Uniform(v),
        _ => Scalar::Values(values),
    }
}

fn scalar(values: FieldValues) -> Scalar {
    match values {
        FieldValues::Uniform(v) => Scalar::Uniform(v),
        FieldValues::NonUniform(v) => Scalar::Values(v),
    }
}

/// `selectionMode all` (`None`) or `cellZone` (its cells).
fn select_cells(
    coeffs: &FoamDict,
    case_dir: &Path,
    n_cells: usize,
) -> Result<Option<Vec<usize>>, CaseError> {
    let mode = coeffs.get_word("selectionMode")?;
    match mode.as_str() {
        "all" => Ok(None),
        "cellZone" => {
            let zone = coeffs.get_word("cellZone")?;
            let zone_entry = coeffs.entry("cellZone").expect("read above");
            read_cell_zone(case_dir, &zone, n_cells)
                .map(Some)
                .map_err(|e| at(zone_entry, format!("cellZone {zone}: {e}")))
        }
        other => Err(at_key(
            coeffs,
            "selectionMode",
            format!("selectionMode {other} is not supported (all or cellZone)"),
        )),
    }
}

/// The cells of zone `name` in `constant/polyMesh/cellZones`.
fn read_cell_zone(case_dir: &Path, name: &str, n_cells: usize) -> Result<Vec<usize>, String> {
    let path = case_dir.join("constant/polyMesh/cellZones");
    let file = FoamFile::read(&path).map_err(|e| format!("cannot read the cell zones: {e}"))?;
    let zones = file.value().map_err(|e| e.to_string())?;
    let ValueKind::List(items) = &zones.kind else {
        return Err(format!("{}: expected a list of zones", path.display()));
    };
    let mut names = Vec::new();
    for pair in items.chunks(2) {
        let [key, value] = pair else { break };
        let (ValueKind::Word(zone), ValueKind::Dict(dict)) = (&key.kind, &value.kind) else {
            return Err(format!(
                "{}:{}: expected 'name {{ ... }}' zone entries",
                path.display(),
                key.line
            ));
        };
        if zone != name {
            names.push(zone.as_str());
            continue;
        }
        let labels = dict
            .get("cellLabels")
            .ok_or_else(|| format!("{}: zone {zone} has no cellLabels", path.display()))?;
        let crate::foam::EntryValue::Stream(values) = &labels.value else {
            return Err(format!(
                "{}:{}: expected a cellLabels list",
                path.display(),
                labels.line
            ));
        };
        let list = values
            .last()
            .ok_or_else(|| format!("{}: empty cellLabels", path.display()))?;
        let cells = list.to_scalars(&path).map_err(|e| e.to_string())?;
        return cells
            .into_iter()
            .map(|c| {
                (c.fract() == 0.0 && c >= 0.0 && c < n_cells as f64)
                    .then_some(c as usize)
                    .ok_or_else(|| {
                        format!(
                            "{}: zone {zone} lists cell {c}, but the mesh has {n_cells} cells",
                            path.display()
                        )
                    })
            })
            .collect();
    }
    Err(format!(
        "{} has no zone '{name}' (its zones: {})",
        path.display(),
        names.join(", ")
    ))
}

/// The `GAMG` solver's controls (`solve::gamg`, OpenFOAM's keys and
/// defaults); its aggregation AMG for the GPU and distributed runs is
/// [`gamg_settings`] of the same dictionary.
fn gamg_solver_settings(dict: &FoamDict) -> Result<GamgSettings, CaseError> {
    let mut s = GamgSettings {
        amg: gamg_settings(dict)?,
        ..GamgSettings::default()
    };
    for key in GamgSettings::KEYS {
        let text = match key {
            "smoother" | "agglomerator" => dict.get_opt::<String>(key)?,
            "cacheAgglomeration"
            | "directSolveCoarsest"
            | "scaleCorrection"
            | "interpolateCorrection" => dict.get_opt::<bool>(key)?.map(|v| v.to_string()),
            _ => dict.get_opt::<usize>(key)?.map(|v| v.to_string()),
        };
        if let Some(text) = text {
            s.set(key, &text).map_err(|e| at_key(dict, key, e))?;
        }
    }
    s.validate().map_err(|e| CaseError::Mesh(dict.error(e)))?;
    Ok(s)
}

/// The AMG settings of a `GAMG` solver or preconditioner dictionary
/// (`solve::amg`): `smoother` (the Gauss–Seidel and DIC family runs as
/// multicolour Gauss–Seidel; also Jacobi, L1Jacobi, Chebyshev), `nPreSweeps`
/// and `nPostSweeps` (the cycle is symmetric: ν = max(1, (pre + post) / 2)
/// sweeps on each side, the same smoothing work), `nCellsInCoarsestLevel`,
/// and our `cycle`, `passes`, `matchingRounds`, `maxLevels`, `omega`,
/// `overCorrection`, `precision` (double, mixed). OpenFOAM's agglomeration
/// (`agglomerator faceAreaPair`, `mergeLevels`: pairs by face weight,
/// merged) is what the pairwise matching does, so those keys are accepted; the rest of GAMG's keys have
/// no counterpart and are ignored.
fn gamg_settings(dict: &FoamDict) -> Result<AmgSettings, CaseError> {
    match registered_preconditioner(dict, "GAMG") {
        Ok(Preconditioner::Amg(s)) => Ok(s),
        Ok(other) => Err(CaseError::Mesh(dict.error(format!(
            "GAMG's keys gave the preconditioner {other}, not AMG"
        )))),
        Err(RegistryOrCase::Registry(e)) => Err(CaseError::Mesh(dict.error(e.to_string()))),
        Err(RegistryOrCase::Case(e)) => Err(e),
    }
}

/// The PCG preconditioner: `preconditioner DIC;` or `preconditioner { preconditioner GAMG; ... }`;
/// a symmetric smoother takes its keys (`nSweeps`, …) from the same dictionary.
/// The preconditioner of PBiCGStab / GMRES: `diagonal`, `none` or anything
/// PCG takes (M⁻¹ need not be symmetric there: DILU, ILU, RAS); none given
/// is `none`, as in OpenFOAM.
fn krylov_preconditioner(dict: &FoamDict) -> Result<Preconditioner, CaseError> {
    if !matches!(dict.get_dict_opt("preconditioner"), Ok(Some(_)))
        && dict.get_opt::<String>("preconditioner")?.is_none()
    {
        return Ok(PreconditionerKind::None.into());
    }
    preconditioner(dict)
}

pub(super) fn preconditioner(dict: &FoamDict) -> Result<Preconditioner, CaseError> {
    let (holder, name) = match dict.get_dict_opt("preconditioner") {
        Ok(Some(inner)) => (inner, inner.get_word("preconditioner")?),
        _ => (dict, dict.get_word("preconditioner")?),
    };
    let entry = holder.entry("preconditioner").expect("read above");
    registered_preconditioner(holder, &name).map_err(|e| match e {
        RegistryOrCase::Registry(e) => at(entry, e.to_string()),
        RegistryOrCase::Case(e) => e,
    })
}

enum RegistryOrCase {
    Registry(RegistryError),
    Case(CaseError),
}

impl From<CaseError> for RegistryOrCase {
    fn from(e: CaseError) -> Self {
        Self::Case(e)
    }
}

/// The preconditioner `name` with the keys its registration takes from
/// `dict` (`solve::registry`: the parser the command line and case.toml use
/// too). In a flat solver dictionary the solver's own keys sit beside them,
/// so only the registration's keys are read.
fn registered_preconditioner(
    dict: &FoamDict,
    name: &str,
) -> Result<Preconditioner, RegistryOrCase> {
    let keys = registered_keys(dict, name)?;
    registry::parse(name, &keys).map_err(RegistryOrCase::Registry)
}

/// The keys of `dict` that the registration of `name` takes.
fn registered_keys(dict: &FoamDict, name: &str) -> Result<KeyValues, RegistryOrCase> {
    let registration = registry::find(name).map_err(RegistryOrCase::Registry)?;
    let mut keys = KeyValues::new();
    for key in registration.keys {
        let text = match dict.get_opt::<String>(key) {
            Ok(Some(word)) => Some(word),
            Ok(None) => None,
            Err(_) => dict
                .get_opt::<f64>(key)
                .map_err(|e| RegistryOrCase::Case(e.into()))?
                .map(|v| v.to_string()),
        };
        if let Some(text) = text {
            keys.push(*key, text);
        }
    }
    Ok(keys)
}

/// Whether the solver dictionary `dict` (solver `name`) gives its
/// preconditioner (GAMG: its AMG) keys that tune it for the GPU
/// (`registry::explicit_gpu_keys`): the GPU then runs it as given, else its
/// measured default.
fn gpu_keys_given(dict: &FoamDict, name: &str) -> Result<bool, CaseError> {
    let (holder, preconditioner) = match name {
        "GAMG" => (dict, "GAMG".to_string()),
        "PCG" | "PBiCG" => match dict.get_dict_opt("preconditioner") {
            Ok(Some(inner)) => (inner, inner.get_word("preconditioner")?),
            _ => (dict, dict.get_word("preconditioner")?),
        },
        _ => return Ok(false),
    };
    match registered_keys(holder, &preconditioner) {
        Ok(keys) => Ok(registry::explicit_gpu_keys(&preconditioner, &keys)),
        Err(RegistryOrCase::Case(e)) => Err(e),
        // Named in the error of the preconditioner's own parse.
        Err(RegistryOrCase::Registry(_)) => Ok(false),
    }
}

/// The polynomial preconditioner keys of `dict` (`degree`, `eigenBound
/// Gershgorin|Lanczos`, `lanczosSteps`, `eigenRatio`, `precision
/// double|mixed`, see `solve::polynomial`).
fn polynomial_parameters(dict: &FoamDict, p: &mut PolynomialSettings) -> Result<(), CaseError> {
    p.degree = dict.get_or("degree", p.degree)?;
    if let Some(b) = dict.get_opt::<String>("eigenBound")? {
        p.bound = b.parse().map_err(|e| at_key(dict, "eigenBound", e))?;
    }
    if let Some(steps) = dict.get_opt::<usize>("lanczosSteps")? {
        p.bound = EigenBound::Lanczos { steps };
    }
    p.eigen_ratio = dict.get_or("eigenRatio", p.eigen_ratio)?;
    if let Some(v) = dict.get_opt::<String>("precision")? {
        p.precision = v.parse().map_err(|e| at_key(dict, "precision", e))?;
    }
    Ok(())
}

/// The smoother keys of `dict` (OpenFOAM's `nSweeps`, default 1; ours:
/// `omega`, `colouring`, `inner`, `innerTolerance`, `innerMaxIter`,
/// `blockSize`, `asynchronous`, and the polynomial smoothers' keys, see
/// `case_toml`).
fn smoother_parameters(dict: &FoamDict, s: &mut SmootherSettings) -> Result<(), CaseError> {
    s.sweeps = dict.get_or("nSweeps", s.sweeps)?;
    s.omega = dict.get_or("omega", s.omega)?;
    if let Some(c) = dict.get_opt::<String>("colouring")? {
        s.colouring = c.parse().map_err(|e| at_key(dict, "colouring", e))?;
    }
    if let Some(c) = dict.get_opt::<String>("inner")? {
        s.block.inner = c.parse().map_err(|e| at_key(dict, "inner", e))?;
    }
    s.block.inner_tolerance = dict.get_or("innerTolerance", s.block.inner_tolerance)?;
    s.block.inner_max_iter = dict.get_or("innerMaxIter", s.block.inner_max_iter)?;
    s.block.block_size = dict.get_or("blockSize", s.block.block_size)?;
    s.block.asynchronous = dict.get_or("asynchronous", s.block.asynchronous)?;
    if matches!(s.kind, SmootherKind::Polynomial(_)) {
        polynomial_parameters(dict, &mut s.polynomial)?;
    } else if let Some(v) = dict.get_opt::<String>("precision")? {
        // Block-IC's (validate refuses mixed for the other smoothers).
        s.polynomial.precision = v.parse().map_err(|e| at_key(dict, "precision", e))?;
    }
    s.validate().map_err(|e| CaseError::Mesh(dict.error(e)))
}

/// The scheme entry for `key` in `section` (falling back to `default`) and its text.
pub(super) fn scheme<'a>(
    schemes: &'a FoamDict,
    section: &str,
    key: &str,
) -> Result<(&'a FoamEntry, String), CaseError> {
    let dict = schemes.get_dict(section)?;
    let entry = match dict.entry(key) {
        Some(e) => {
            // The fallback for other keys.
            dict.ignore("default");
            e
        }
        None => dict.entry("default").ok_or_else(|| {
            CaseError::Mesh(dict.error(format!("{section} has no entry for {key} and no default")))
        })?,
    };
    let text = scheme_text(entry)?;
    if text == "none" {
        return Err(at(
            entry,
            format!("{section}: no scheme for {key} (default none); add '{key} ...;'"),
        ));
    }
    Ok((entry, text))
}

/// The words and numbers of a scheme entry as one string (`Gauss linear limited 0.33`).
fn scheme_text(entry: &FoamEntry) -> Result<String, CaseError> {
    let values = entry.as_stream().ok_or_else(|| {
        at(
            entry,
            format!("'{}' must be a scheme, not a dictionary", entry.key()),
        )
    })?;
    values
        .iter()
        .map(|v| match &v.kind {
            ValueKind::Word(w) => Ok(w.clone()),
            ValueKind::Int(i) => Ok(i.to_string()),
            ValueKind::Float(x) => Ok(x.to_string()),
            other => Err(at(
                entry,
                format!(
                    "'{}': unexpected {} in a scheme",
                    entry.key(),
                    other.describe()
                ),
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|words| words.join(" "))
}

/// `laplacianSchemes` and `gradSchemes`; the sections laplacianFoam does not use are accepted.
fn read_schemes(dict: &FoamDict) -> Result<Schemes, CaseError> {
    let (lap_entry, laplacian) =
        scheme(dict, "laplacianSchemes", &format!("laplacian(DT,{FIELD})"))?;
    let (grad_entry, grad) = scheme(dict, "gradSchemes", &format!("grad({FIELD})"))?;
    // No convection; DT is uniform, so its interpolation and snGrad do not matter.
    dict_schemes(
        dict,
        (&laplacian, lap_entry),
        (&grad, grad_entry),
        &[
            "divSchemes",
            "interpolationSchemes",
            "snGradSchemes",
            "fluxRequired",
            "wallDist",
        ],
    )
}

/// The [`Schemes`] of the Laplacian and gradient scheme texts read at their
/// entries of the `fvSchemes` dictionary `dict` (an unsupported one is
/// reported at its entry); the sections `unused` are accepted quietly.
pub(super) fn dict_schemes(
    dict: &FoamDict,
    (laplacian, lap_entry): (&str, &FoamEntry),
    (grad, grad_entry): (&str, &FoamEntry),
    unused: &[&str],
) -> Result<Schemes, CaseError> {
    for section in unused {
        dict.ignore(section);
    }
    Schemes::from_foam(laplacian, grad).map_err(|e| {
        let entry = if e.to_string().contains("gradient scheme") {
            grad_entry
        } else {
            lap_entry
        };
        at(entry, e.to_string())
    })
}

/// `DT` as a plain or dimensioned scalar; it must be positive.
fn read_diffusivity(transport: &FoamDict) -> Result<f64, CaseError> {
    read_positive(transport, "DT", "the diffusivity")
}

/// The entry `key` (`what`, for messages) as a plain or dimensioned scalar
/// (`key v;`, `key [dims] v;`, `key key [dims] v;`); it must be positive.
pub(super) fn read_positive(dict: &FoamDict, key: &str, what: &str) -> Result<f64, CaseError> {
    let Some((entry, values)) = dict.stream_entry(key)? else {
        return Err(CaseError::Mesh(
            dict.error(format!("missing entry '{key}' ({what})")),
        ));
    };
    let number = match values {
        [v] => v.number(),
        [dims, v] if matches!(dims.kind, ValueKind::Bracket(_)) => v.number(),
        [name, dims, v]
            if matches!(name.kind, ValueKind::Word(_))
                && matches!(dims.kind, ValueKind::Bracket(_)) =>
        {
            v.number()
        }
        _ => None,
    };
    match number {
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(at(entry, format!("{key} is {v}; it must be positive"))),
        None => Err(at(
            entry,
            format!(
                "{key}: expected a number, '{key} [0 2 -1 0 0 0 0] value' or '{key} {key} \
                 [0 2 -1 0 0 0 0] value'"
            ),
        )),
    }
}

/// The condition of every patch from the field file's `boundaryField`.
fn read_boundary(field: &ScalarFieldFile, mesh: &Mesh) -> Result<Vec<PatchCondition>, CaseError> {
    mesh.patches()
        .iter()
        .map(|patch| {
            let dict = field.patch(patch)?;
            let kind = dict.get_word("type")?;
            let type_entry = dict.entry("type").expect("read above");
            let values = |key: &str| -> Result<Scalar, CaseError> {
                Ok(scalar(FieldValues::read(dict, key, patch.size)?))
            };
            let spec = match kind.as_str() {
                "fixedValue" => BoundarySpec::FixedValue(values("value")?),
                "zeroGradient" => BoundarySpec::ZeroGradient,
                "fixedGradient" => BoundarySpec::FixedGradient(values("gradient")?),
                "mixed" => BoundarySpec::Mixed {
                    ref_value: values("refValue")?,
                    ref_gradient: values("refGradient")?,
                    value_fraction: values("valueFraction")?,
                },
                "empty" => BoundarySpec::Empty,
                other => {
                    return Err(at(
                        type_entry,
                        format!(
                            "patch '{}': boundary condition type '{other:.80}' is not supported \
                             (fixedValue, zeroGradient, fixedGradient, mixed, empty)",
                            patch.name
                        ),
                    ))
                }
            };
            // The current face values: laplacianFoam recomputes them.
            dict.ignore("value");
            Ok(PatchCondition {
                patch: patch.name.clone(),
                spec,
                origin: format!("{}:{}", type_entry.file().display(), type_entry.line()),
            })
        })
        .collect()
}
