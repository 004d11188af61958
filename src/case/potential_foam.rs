//! OpenFOAM potentialFoam case directories (`application potentialFoam;`),
//! read as they are and run by [`crate::flow::potential`].
//!
//! | file | entries | becomes |
//! |---|---|---|
//! | `system/controlDict` | `application potentialFoam`, `startFrom` (`startTime`, `latestTime`, `firstTime`), `startTime`, `writeFormat`, `writePrecision`, `writeCompression`, `timePrecision` (the time loop and function objects are not run, as potentialFoam without `-withFunctionObjects`) | the time directory read and written |
//! | `system/fvSchemes` | `laplacianSchemes` `laplacian(1,Phi)`, `gradSchemes` `grad(Phi)` (or `default`); with `-writep` also `laplacian(p)`, `grad(p)`, `divSchemes` `div(phi,U)` (`Gauss linear`/`upwind`, optionally `bounded`) and `div(div(phi,U))` (`Gauss linear`) | the Φ (and p) equation's schemes |
//! | `system/fvSolution` | `solvers { Phi {...} }`; `potentialFlow { nNonOrthogonalCorrectors; PhiRefCell; PhiRefValue; }`; with `-writep` `solvers { p {...} }` and `pRefCell`, `pRefValue` | Φ (p) solver, correctors, reference |
//! | `<time>/U` | `fixedValue`, `uniformFixedValue` (constant), `movingWallVelocity`, `noSlip` (the initial boundary flux), `zeroGradient`, `symmetry`, `symmetryPlane`, `slip`, `empty` | boundary flux, written U's boundary values |
//! | `<time>/p` (optional; required by `-writep`) | `fixedValue` patches fix Φ (at 0), others leave it zero-gradient; without the file, Φ is fixed where U is not; `-writep`: p's conditions (`fixedValue`, `zeroGradient`, `symmetry`, `symmetryPlane`, `empty`) and initial field | Φ's and p's conditions |
//!
//! Writes `<time>/U` (`fvc::reconstruct(φ)`), with `-writephi` `<time>/phi`,
//! with `-writePhi` `<time>/Phi` and with `-writep` `<time>/p` (the
//! approximate pressure of [`crate::flow::potential::approximate_pressure`],
//! its patch types as `<time>/p` gave them), as potentialFoam does; on
//! constraint patches every field takes the patch's type, as OpenFOAM
//! requires to read it back.

use super::openfoam::{at, at_key, scheme, Reader};
use super::run::{gamg_cache, log_gpu_mapping, Device, GpuSolves, LinearSolves};
use super::setup::LinearSolver;
use super::simple_foam::{pressure_condition, velocity_condition};
use super::CaseError;
use crate::flow::output::{write_flux, written_patch_types, P_DIMENSIONS, U_DIMENSIONS};
use crate::flow::potential::{
    approximate_pressure, potential_flow, ApproximatePressure, PotentialSettings,
    VelocityConvection, VelocityField,
};
use crate::flow::simple::PressureSolve;
use crate::flow::{FlowError, VectorValues, VelocityCondition};
use crate::foam::FoamDict;
use crate::fvm::{BoundaryCondition, PatchValues, Schemes};
use crate::io::foam_field::{
    time_name, Dimensions, FoamWriteOptions, ScalarFieldFile, TimeDirectory, VectorFieldFile,
};
use crate::mesh::{Geometry, Mesh, MeshSource, PatchKind, Vec3};
use crate::solve::SolverPerformance;
use crate::timings::{self, Phase};
use std::path::{Path, PathBuf};

/// The application these cases are read as.
const APPLICATION: &str = "potentialFoam";

const POTENTIAL_DIMENSIONS: Dimensions = Dimensions([0.0, 2.0, -1.0, 0.0, 0.0, 0.0, 0.0]);

/// potentialFoam's command-line options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PotentialOptions {
    /// `-writephi`: write the flux φ.
    pub write_flux: bool,
    /// `-writePhi`: write the velocity potential Φ.
    pub write_potential: bool,
    /// `-writep`: compute and write the approximate pressure p.
    pub write_pressure: bool,
}

impl PotentialOptions {
    /// Parses potentialFoam's options (`-writephi`, `-writePhi`, `-writep`).
    pub fn parse(args: &[String]) -> Result<Self, CaseError> {
        let mut options = Self::default();
        for arg in args {
            match arg.as_str() {
                "-writephi" => options.write_flux = true,
                "-writePhi" => options.write_potential = true,
                "-writep" => options.write_pressure = true,
                other => {
                    return Err(CaseError::invalid(format!(
                        "potentialFoam option '{other}' is not supported (-writephi, -writePhi, \
                         -writep)"
                    )))
                }
            }
        }
        Ok(options)
    }
}

/// What a potentialFoam run did.
#[derive(Clone, Debug)]
pub struct PotentialFoamSummary {
    /// Every Φ solve.
    pub solves: Vec<SolverPerformance>,
    /// Every p solve (`-writep`).
    pub pressure_solves: Vec<SolverPerformance>,
    pub continuity_error: f64,
    /// The time whose directory was read and written.
    pub time: f64,
    /// The files written.
    pub written: Vec<PathBuf>,
    /// One line per entry nobody read or setting mapped to another.
    pub warnings: Vec<String>,
}

/// Whether `case_dir`'s `controlDict` names `application potentialFoam`.
pub fn is_potential_foam_case(case_dir: &Path) -> bool {
    FoamDict::read(&case_dir.join("system/controlDict"))
        .ok()
        .and_then(|control| control.get_opt::<String>("application").ok().flatten())
        .is_some_and(|app| app == APPLICATION)
}

/// Reads and runs the potentialFoam case in `case_dir` (see the module
/// documentation), the Φ (and p) solves on `device`.
pub fn run_potential_foam(
    case_dir: &Path,
    options: PotentialOptions,
    device: Device,
) -> Result<PotentialFoamSummary, CaseError> {
    PotentialFoamCase::read(case_dir, options)?.run(device)
}

/// A potentialFoam case read and checked ([`PotentialFoamCase::read`]),
/// ready to run.
pub struct PotentialFoamCase {
    dir: PathBuf,
    options: PotentialOptions,
    start: f64,
    write: FoamWriteOptions,
    mesh: Mesh,
    geometry: Geometry,
    settings: PotentialSettings,
    solver: LinearSolver,
    /// Φ's conditions, one per patch.
    conditions: Vec<BoundaryCondition>,
    /// The initial flux on every boundary face.
    boundary_flux: Vec<f64>,
    velocity: Vec<VelocityCondition>,
    /// `-writep`'s pressure equation.
    pressure: Option<PressureStep>,
    warnings: Vec<String>,
}

/// What `-writep` reads: the p equation's settings, `0/p`'s conditions,
/// patch types and initial field, the `p` solver.
struct PressureStep {
    settings: PotentialSettings,
    convection: VelocityConvection,
    conditions: Vec<BoundaryCondition>,
    patch_types: Vec<String>,
    initial: Vec<f64>,
    solver: LinearSolver,
}

impl PotentialFoamCase {
    /// Reads the case in `case_dir` for a run with `options`.
    pub fn read(case_dir: &Path, options: PotentialOptions) -> Result<Self, CaseError> {
        let mut r = Reader::new(case_dir, APPLICATION);
        let control = r.dict("system/controlDict")?;
        let app: String = control.get("application")?;
        if app != APPLICATION {
            return Err(at_key(
                &control,
                "application",
                format!("application {app}: this case is read as a potentialFoam case"),
            ));
        }
        // The time potentialFoam reads and writes.
        let start = r.start_time(&control)?;
        let write = r.write_options(&control)?;
        for key in [
            "stopAt",
            "endTime",
            "deltaT",
            "writeControl",
            "writeInterval",
            "purgeWrite",
            "runTimeModifiable",
            // potentialFoam runs function objects only with -withFunctionObjects.
            "functions",
        ] {
            control.ignore(key);
        }
        let schemes_dict = r.dict("system/fvSchemes")?;
        let (_, laplacian) = scheme(&schemes_dict, "laplacianSchemes", "laplacian(1,Phi)")?;
        let (_, grad) = scheme(&schemes_dict, "gradSchemes", "grad(Phi)")?;
        let schemes = Schemes::from_foam(&laplacian, &grad).map_err(|e| {
            CaseError::Mesh(schemes_dict.error(format!("the Phi equation's schemes: {e}")))
        })?;
        // -writep: the p equation's schemes, then its solver.
        let pressure_inputs = if options.write_pressure {
            Some(read_pressure_schemes(&schemes_dict)?)
        } else {
            schemes_dict.ignore("divSchemes");
            None
        };
        for unused in [
            "ddtSchemes",
            "interpolationSchemes",
            "snGradSchemes",
            "fluxRequired",
        ] {
            schemes_dict.ignore(unused);
        }
        let solution = r.dict("system/fvSolution")?;
        let solver = r.solver_for(&solution, "Phi", true)?;
        let pressure_inputs = match pressure_inputs {
            Some((schemes, convection)) => {
                Some((schemes, convection, r.solver_for(&solution, "p", true)?))
            }
            None => None,
        };
        let flow = solution.get_dict("potentialFlow")?;
        let n_non_orth_correctors = flow.get_or("nNonOrthogonalCorrectors", 0usize)?;

        let mesh_source = MeshSource::PolyMesh(r.dir.clone());
        let mesh = mesh_source.load()?;
        let geometry = timings::timed(Phase::Geometry, || mesh.geometry())?;
        let n = mesh.n_cells();
        let start_dir = case_dir.join(time_name(start, write.time_precision));
        let u_file = VectorFieldFile::read(&start_dir.join("U"), n)?;
        let p_path = start_dir.join("p");
        let p_file = if p_path.is_file() || crate::foam::gz_path(&p_path).is_file() {
            Some(ScalarFieldFile::read(&p_path, n)?)
        } else if pressure_inputs.is_some() {
            return Err(missing_pressure(&p_path));
        } else {
            None
        };
        if start_dir.join("Phi").is_file() || crate::foam::gz_path(&start_dir.join("Phi")).is_file()
        {
            r.warn(format!(
                "{}: not read; Φ starts from 0 with conditions inferred from p",
                start_dir.join("Phi").display()
            ));
        }
        let first = mesh.n_internal_faces();
        let mut velocity = Vec::new();
        let mut conditions = Vec::new();
        let mut boundary_flux = vec![0.0; mesh.n_faces() - first];
        // p's conditions and patch types as the file gives them (-writep).
        let mut pressure_conditions = Vec::new();
        let mut pressure_types = Vec::new();
        for patch in mesh.patches() {
            let (u, _) = velocity_condition(&mut r, patch, &u_file)?;
            let fixes_potential = match &p_file {
                Some(p) => {
                    let condition = pressure_condition(patch, p)?;
                    let fixed = matches!(condition, BoundaryCondition::FixedValue(_));
                    pressure_types.push(p.patch(patch)?.get_word("type")?);
                    pressure_conditions.push(condition);
                    fixed
                }
                None => !matches!(
                    u,
                    VelocityCondition::FixedValue(_) | VelocityCondition::Empty
                ),
            };
            if let VelocityCondition::FixedValue(values) = &u {
                for (i, f) in patch.faces().enumerate() {
                    let value = match values {
                        VectorValues::Uniform(v) => *v,
                        VectorValues::PerFace(v) => v[i],
                    };
                    boundary_flux[f - first] = value.dot(&geometry.face_area_vectors[f]);
                }
            }
            conditions.push(match (&u, patch.kind) {
                (VelocityCondition::Empty, _) | (_, PatchKind::Empty) => BoundaryCondition::Empty,
                _ if fixes_potential => BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
                _ => BoundaryCondition::ZeroGradient,
            });
            velocity.push(u);
        }
        let needs_reference = !conditions
            .iter()
            .any(|c| matches!(c, BoundaryCondition::FixedValue(_)));
        let (reference_cell, reference_value) = if needs_reference {
            if !flow.contains("PhiRefCell") {
                return Err(CaseError::Mesh(flow.error(
                    "no patch fixes the potential Phi (no fixedValue pressure): give \
                     'PhiRefCell N;' (and 'PhiRefValue v;') in potentialFlow",
                )));
            }
            (
                flow.get::<usize>("PhiRefCell")?,
                flow.get_or("PhiRefValue", 0.0)?,
            )
        } else {
            flow.ignore("PhiRefCell");
            flow.ignore("PhiRefValue");
            (0, 0.0)
        };
        let settings = PotentialSettings {
            schemes,
            n_non_orth_correctors,
            reference_cell,
            reference_value,
        };
        let pressure = match (pressure_inputs, &p_file) {
            (Some(_), None) => return Err(missing_pressure(&p_path)),
            (Some((schemes, convection, solver)), Some(p)) => {
                let fixed = pressure_conditions
                    .iter()
                    .any(|c| matches!(c, BoundaryCondition::FixedValue(_)));
                let (reference_cell, reference_value) = if fixed {
                    flow.ignore("pRefCell");
                    flow.ignore("pRefValue");
                    (0, 0.0)
                } else if flow.contains("pRefCell") {
                    (
                        flow.get::<usize>("pRefCell")?,
                        flow.get_or("pRefValue", 0.0)?,
                    )
                } else {
                    return Err(CaseError::Mesh(flow.error(
                        "-writep: no patch fixes the pressure p (no fixedValue in p): give \
                         'pRefCell N;' (and 'pRefValue v;') in potentialFlow",
                    )));
                };
                Some(PressureStep {
                    settings: PotentialSettings {
                        schemes,
                        n_non_orth_correctors,
                        reference_cell,
                        reference_value,
                    },
                    convection,
                    conditions: pressure_conditions,
                    patch_types: pressure_types,
                    initial: p.internal.clone().expand(n),
                    solver,
                })
            }
            (None, _) => {
                // potentialFoam reads them only for -writep.
                flow.ignore("pRefCell");
                flow.ignore("pRefValue");
                None
            }
        };
        for dict in [&control, &schemes_dict, &solution, &u_file.dict] {
            r.warn_unread(dict);
        }
        if let Some(p) = &p_file {
            r.warn_unread(&p.dict);
        }
        Ok(Self {
            dir: case_dir.to_path_buf(),
            options,
            start,
            write,
            mesh,
            geometry,
            settings,
            solver,
            conditions,
            boundary_flux,
            velocity,
            pressure,
            warnings: r.warnings,
        })
    }

    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// U's boundary values for the cell velocities `u`: the fixed values,
    /// the cell's velocity, or its tangential part on symmetry patches (0 on
    /// empty faces).
    pub fn velocity_boundary(&self, u: &[Vec3]) -> Vec<Vec3> {
        let mesh = &self.mesh;
        let first = mesh.n_internal_faces();
        let mut u_boundary = vec![Vec3::zeros(); mesh.n_faces() - first];
        for (patch, condition) in mesh.patches().iter().zip(&self.velocity) {
            for (i, f) in patch.faces().enumerate() {
                let cell = u[mesh.owner()[f] as usize];
                u_boundary[f - first] = match condition {
                    VelocityCondition::FixedValue(VectorValues::Uniform(v)) => *v,
                    VelocityCondition::FixedValue(VectorValues::PerFace(v)) => v[i],
                    VelocityCondition::ZeroGradient => cell,
                    VelocityCondition::Symmetry => {
                        let normal = self.geometry.face_area_vectors[f].normalize();
                        cell - normal * normal.dot(&cell)
                    }
                    VelocityCondition::Empty => Vec3::zeros(),
                };
            }
        }
        u_boundary
    }

    /// `-writep`'s approximate pressure of the cell velocities `u` and the
    /// flux `phi` (every face), the p solves on `device`; an error if the
    /// case was read without `-writep`.
    pub fn approximate_pressure(
        &self,
        u: &[Vec3],
        phi: &[f64],
        device: Device,
    ) -> Result<ApproximatePressure, CaseError> {
        let pressure = self.pressure.as_ref().ok_or_else(|| {
            CaseError::invalid(format!(
                "{}: the approximate pressure needs the case read with -writep",
                self.dir.display()
            ))
        })?;
        let cache = gamg_cache(&self.mesh, &self.geometry, &[&pressure.solver]);
        let mut solves = LinearSolves::new(device, GpuSolves::of(device), cache);
        self.pressure_step(pressure, u, phi, &mut solves)
    }

    fn pressure_step<'g>(
        &self,
        pressure: &PressureStep,
        u: &[Vec3],
        phi: &[f64],
        solves: &mut LinearSolves<'g>,
    ) -> Result<ApproximatePressure, CaseError> {
        if u.len() != self.mesh.n_cells() {
            return Err(CaseError::invalid(format!(
                "{}: {} velocities given for {} cells",
                self.dir.display(),
                u.len(),
                self.mesh.n_cells()
            )));
        }
        let solve: &mut PressureSolve<'_> = &mut |a, b, x, _last| {
            let _solve = solves.device().phase(Phase::Solve);
            solves.solve(&pressure.solver, a, b, x, "p")
        };
        approximate_pressure(
            &self.mesh,
            &self.geometry,
            &pressure.settings,
            pressure.convection,
            pressure.conditions.clone(),
            VelocityField {
                cells: u,
                boundary: &self.velocity_boundary(u),
            },
            phi,
            pressure.initial.clone(),
            solve,
        )
        .map_err(|e| flow_error(&self.dir, e))
    }

    /// Runs the case: Φ, φ and U, with `-writep` p; writes the fields.
    pub fn run(self, device: Device) -> Result<PotentialFoamSummary, CaseError> {
        let (mesh, geometry, case_dir) = (&self.mesh, &self.geometry, self.dir.as_path());
        let (start, write) = (self.start, self.write);
        let n = mesh.n_cells();
        let gpu_solves = GpuSolves::of(device);
        log_gpu_mapping(device, "Phi", &[&self.solver]);
        let mut all_solvers = vec![&self.solver];
        if let Some(pressure) = &self.pressure {
            log_gpu_mapping(device, "p", &[&pressure.solver]);
            all_solvers.push(&pressure.solver);
        }
        // What no inner phase (set-up, solves, output) takes is assembly.
        let _assembly = device.phase(Phase::Assembly);
        let cache = timings::timed(Phase::DeviceSetup, || {
            gamg_cache(mesh, geometry, &all_solvers)
        });
        let mut solves = LinearSolves::new(device, gpu_solves, cache);
        let solve: &mut PressureSolve<'_> = &mut |a, b, x, _last| {
            let _solve = device.phase(Phase::Solve);
            solves.solve(&self.solver, a, b, x, "Phi")
        };
        log::info!("Calculating potential flow");
        let flow_result = potential_flow(
            mesh,
            geometry,
            &self.settings,
            self.conditions.clone(),
            &self.boundary_flux,
            vec![0.0; n],
            solve,
        )
        .map_err(|e| flow_error(case_dir, e))?;
        let u_boundary = self.velocity_boundary(&flow_result.u);
        let mut written = Vec::new();
        let directory = TimeDirectory {
            case_dir,
            time: start,
            mesh,
            options: &write,
        };
        let u_types =
            written_patch_types(mesh, self.velocity.iter().map(VelocityCondition::foam_name));
        written.push(timings::timed(Phase::Output, || {
            directory.write_volume("U", &flow_result.u, &u_types, &u_boundary, U_DIMENSIONS)
        })?);
        if self.options.write_flux {
            written.push(timings::timed(Phase::Output, || {
                write_flux(case_dir, start, mesh, "phi", &flow_result.phi, &write)
            })?);
        }
        if self.options.write_potential {
            let potential_types = written_patch_types(
                mesh,
                self.conditions.iter().map(BoundaryCondition::foam_name),
            );
            written.push(timings::timed(Phase::Output, || {
                directory.write_volume(
                    "Phi",
                    &flow_result.potential,
                    &potential_types,
                    &flow_result.potential_boundary,
                    POTENTIAL_DIMENSIONS,
                )
            })?);
        }
        let mut pressure_solves = Vec::new();
        if let Some(pressure) = &self.pressure {
            log::info!("Calculating approximate pressure field");
            let result =
                self.pressure_step(pressure, &flow_result.u, &flow_result.phi, &mut solves)?;
            let patch_types: Vec<&str> = pressure.patch_types.iter().map(String::as_str).collect();
            written.push(timings::timed(Phase::Output, || {
                directory.write_volume(
                    "p",
                    &result.p,
                    &patch_types,
                    &result.p_boundary,
                    P_DIMENSIONS,
                )
            })?);
            pressure_solves = result.solves;
        }
        for path in &written {
            log::info!("Writing {}", path.display());
        }
        Ok(PotentialFoamSummary {
            solves: flow_result.solves,
            pressure_solves,
            continuity_error: flow_result.continuity_error,
            time: start,
            written,
            warnings: self.warnings,
        })
    }
}

/// A flow error of the case in `case_dir` as a case error.
fn flow_error(case_dir: &Path, e: FlowError) -> CaseError {
    CaseError::from_flow(case_dir.display(), e)
}

/// The error of a `-writep` run without the pressure file `p_path`.
fn missing_pressure(p_path: &Path) -> CaseError {
    CaseError::invalid(format!(
        "{}: potentialFoam -writep needs the pressure field (its boundary conditions); add \
         the file or run without -writep",
        p_path.display()
    ))
}

/// The schemes of `-writep`'s pressure equation: `laplacian(p)` and
/// `grad(p)`, `div(phi,U)` and `div(div(phi,U))` (Gauss linear only).
fn read_pressure_schemes(
    schemes_dict: &FoamDict,
) -> Result<(Schemes, VelocityConvection), CaseError> {
    let (_, laplacian) = scheme(schemes_dict, "laplacianSchemes", "laplacian(p)")?;
    let (_, grad) = scheme(schemes_dict, "gradSchemes", "grad(p)")?;
    let schemes = Schemes::from_foam(&laplacian, &grad).map_err(|e| {
        CaseError::Mesh(schemes_dict.error(format!("the p equation's schemes: {e}")))
    })?;
    let (entry, text) = scheme(schemes_dict, "divSchemes", "div(phi,U)")?;
    let convection = VelocityConvection::from_foam(&text).map_err(|e| at(entry, e.to_string()))?;
    let (entry, text) = scheme(schemes_dict, "divSchemes", "div(div(phi,U))")?;
    if text.split_whitespace().collect::<Vec<_>>() != ["Gauss", "linear"] {
        return Err(at(
            entry,
            format!(
                "div(div(phi,U)) scheme '{text}' is not supported for the approximate pressure \
                 (Gauss linear)"
            ),
        ));
    }
    Ok((schemes, convection))
}
