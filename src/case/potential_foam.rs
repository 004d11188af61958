//! OpenFOAM potentialFoam case directories (`application potentialFoam;`),
//! read as they are and run by [`crate::flow::potential`].
//!
//! | file | entries | becomes |
//! |---|---|---|
//! | `system/controlDict` | `application potentialFoam`, `startFrom` (`startTime`, `latestTime`, `firstTime`), `startTime`, `writeFormat`, `writePrecision`, `writeCompression`, `timePrecision` (the time loop and function objects are not run, as potentialFoam without `-withFunctionObjects`) | the time directory read and written |
//! | `system/fvSchemes` | `laplacianSchemes` `laplacian(1,Phi)`, `gradSchemes` `grad(Phi)` (or `default`) | the Φ equation's schemes |
//! | `system/fvSolution` | `solvers { Phi {...} }`; `potentialFlow { nNonOrthogonalCorrectors; PhiRefCell; PhiRefValue; }` | Φ solver, correctors, reference |
//! | `<time>/U` | `fixedValue`, `uniformFixedValue` (constant), `movingWallVelocity`, `noSlip` (the initial boundary flux), `zeroGradient`, `symmetry`, `symmetryPlane`, `slip`, `empty` | boundary flux, written U's boundary values |
//! | `<time>/p` (optional) | `fixedValue` patches fix Φ (at 0), others leave it zero-gradient; without the file, Φ is fixed where U is not | Φ's conditions |
//!
//! Writes `<time>/U` (`fvc::reconstruct(φ)`), with `-writephi` `<time>/phi`
//! and with `-writePhi` `<time>/Phi`, as potentialFoam does.

use super::openfoam::{at_key, scheme, Reader};
use super::run::{gamg_cache, log_gpu_mapping, solve_linear, Device};
use super::simple_foam::{pressure_condition, velocity_condition};
use super::CaseError;
use crate::flow::output::{flux_patch_types, PHI_DIMENSIONS, U_DIMENSIONS};
use crate::flow::potential::{potential_flow, PotentialSettings};
use crate::flow::simple::PressureSolve;
use crate::flow::{FlowError, VectorValues, VelocityCondition};
use crate::foam::FoamDict;
use crate::fvm::{BoundaryCondition, PatchValues, Schemes};
use crate::gpu::pcg::GpuSolver;
use crate::io::foam_field::{
    time_name, write_time_field, write_time_field_of, Dimensions, FieldOutput, ScalarFieldFile,
    ScalarFieldOutput, VectorFieldFile,
};
use crate::mesh::{MeshSource, PatchKind, Vec3};
use crate::solve::SolverPerformance;
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
}

impl PotentialOptions {
    /// Parses potentialFoam's options (`-writephi`, `-writePhi`).
    pub fn parse(args: &[String]) -> Result<Self, CaseError> {
        let mut options = Self::default();
        for arg in args {
            match arg.as_str() {
                "-writephi" => options.write_flux = true,
                "-writePhi" => options.write_potential = true,
                "-writep" => {
                    return Err(CaseError::invalid(
                        "potentialFoam -writep (the approximate Euler pressure) is not \
                         supported; run without it",
                    ))
                }
                other => {
                    return Err(CaseError::invalid(format!(
                        "potentialFoam option '{other}' is not supported (-writephi, -writePhi)"
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
    pub continuity_error: f64,
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
/// documentation), the Φ solves on `device`.
pub fn run_potential_foam(
    case_dir: &Path,
    options: PotentialOptions,
    device: Device,
) -> Result<PotentialFoamSummary, CaseError> {
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
    let start = start_time(&mut r, &control)?;
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
    for unused in [
        "ddtSchemes",
        "divSchemes",
        "interpolationSchemes",
        "snGradSchemes",
        "fluxRequired",
    ] {
        schemes_dict.ignore(unused);
    }
    let solution = r.dict("system/fvSolution")?;
    let solver = r.solver_for(&solution, "Phi", true)?;
    let flow = solution.get_dict("potentialFlow")?;
    let n_non_orth_correctors = flow.get_or("nNonOrthogonalCorrectors", 0usize)?;

    let mesh_source = MeshSource::PolyMesh(r.dir.clone());
    let mesh = mesh_source.load()?;
    let geometry = mesh.geometry()?;
    let n = mesh.n_cells();
    let start_dir = case_dir.join(time_name(start, write.time_precision));
    let u_file = VectorFieldFile::read(&start_dir.join("U"), n)?;
    let p_path = start_dir.join("p");
    let p_file = if p_path.is_file() || crate::foam::gz_path(&p_path).is_file() {
        Some(ScalarFieldFile::read(&p_path, n)?)
    } else {
        None
    };
    if start_dir.join("Phi").is_file() || crate::foam::gz_path(&start_dir.join("Phi")).is_file() {
        r.warn(format!(
            "{}: not read; Φ starts from 0 with conditions inferred from p",
            start_dir.join("Phi").display()
        ));
    }
    let first = mesh.n_internal_faces();
    let mut velocity = Vec::new();
    let mut conditions = Vec::new();
    let mut boundary_flux = vec![0.0; mesh.n_faces() - first];
    for patch in mesh.patches() {
        let (u, _) = velocity_condition(&mut r, patch, &u_file)?;
        let fixes_potential = match &p_file {
            Some(p) => matches!(
                pressure_condition(patch, p)?,
                BoundaryCondition::FixedValue(_)
            ),
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
    for dict in [&control, &schemes_dict, &solution, &u_file.dict] {
        r.warn_unread(dict);
    }
    if let Some(p) = &p_file {
        r.warn_unread(&p.dict);
    }

    let mut gpu_solver = match device {
        Device::Gpu(gpu) => Some(GpuSolver::new(gpu)),
        Device::Gpus(set) => set.gpus.first().map(GpuSolver::new),
        Device::Cpu | Device::Distributed(_) => None,
    };
    log_gpu_mapping(device, "Phi", &[&solver]);
    let gamg_cache = gamg_cache(&mesh, &geometry, &[&solver]);
    let solve: &mut PressureSolve<'_> = &mut |a, b, x, _last| {
        solve_linear(
            device,
            gpu_solver.as_mut(),
            &gamg_cache,
            &solver,
            a,
            b,
            x,
            "Phi",
        )
    };
    log::info!("Calculating potential flow");
    let flow_result = potential_flow(
        &mesh,
        &geometry,
        &settings,
        conditions.clone(),
        &boundary_flux,
        vec![0.0; n],
        solve,
    )
    .map_err(|e| match e {
        FlowError::Fvm(e) => CaseError::Fvm(e),
        FlowError::Solve { field, source } => CaseError::Solve { field, source },
        FlowError::Invalid(msg) => CaseError::invalid(format!("{}: {msg}", case_dir.display())),
    })?;

    // U's boundary values: the fixed values, the cell's velocity, or its
    // tangential part on symmetry patches.
    let mut u_boundary = vec![Vec3::zeros(); mesh.n_faces() - first];
    for (patch, u) in mesh.patches().iter().zip(&velocity) {
        for (i, f) in patch.faces().enumerate() {
            let cell = flow_result.u[mesh.owner()[f] as usize];
            u_boundary[f - first] = match u {
                VelocityCondition::FixedValue(VectorValues::Uniform(v)) => *v,
                VelocityCondition::FixedValue(VectorValues::PerFace(v)) => v[i],
                VelocityCondition::ZeroGradient => cell,
                VelocityCondition::Symmetry => {
                    let normal = geometry.face_area_vectors[f].normalize();
                    cell - normal * normal.dot(&cell)
                }
                VelocityCondition::Empty => Vec3::zeros(),
            };
        }
    }
    let mut written = Vec::new();
    let u_types: Vec<&str> = velocity.iter().map(VelocityCondition::foam_name).collect();
    written.push(write_time_field_of(
        case_dir,
        start,
        &mesh,
        &FieldOutput {
            name: "U",
            internal: &flow_result.u,
            patch_types: &u_types,
            boundary_values: &u_boundary,
        },
        false,
        &crate::io::foam_field::FoamWriteOptions {
            dimensions: U_DIMENSIONS,
            ..write
        },
    )?);
    if options.write_flux {
        let phi_types = flux_patch_types(&mesh);
        written.push(write_time_field_of(
            case_dir,
            start,
            &mesh,
            &FieldOutput {
                name: "phi",
                internal: &flow_result.phi[..first],
                patch_types: &phi_types,
                boundary_values: &flow_result.phi[first..],
            },
            true,
            &crate::io::foam_field::FoamWriteOptions {
                dimensions: PHI_DIMENSIONS,
                ..write
            },
        )?);
    }
    if options.write_potential {
        written.push(write_time_field(
            case_dir,
            start,
            &mesh,
            &ScalarFieldOutput {
                name: "Phi",
                cells: &flow_result.potential,
                boundary: &conditions,
                boundary_values: &flow_result.potential_boundary,
            },
            &crate::io::foam_field::FoamWriteOptions {
                dimensions: POTENTIAL_DIMENSIONS,
                ..write
            },
        )?);
    }
    for path in &written {
        log::info!("Writing {}", path.display());
    }
    Ok(PotentialFoamSummary {
        solves: flow_result.solves,
        continuity_error: flow_result.continuity_error,
        written,
        warnings: r.warnings,
    })
}

/// The time potentialFoam reads and writes: `startTime`, or the latest or
/// first time directory (`startFrom latestTime|firstTime`).
fn start_time(r: &mut Reader, control: &FoamDict) -> Result<f64, CaseError> {
    let start_from = control.get_or("startFrom", "startTime".to_string())?;
    match start_from.as_str() {
        "startTime" => Ok(control.get_scalar("startTime")?),
        "latestTime" | "firstTime" => {
            control.ignore("startTime");
            let times = r.time_directories()?;
            let pick = if start_from == "latestTime" {
                times.last()
            } else {
                times.first()
            };
            pick.copied().ok_or_else(|| {
                CaseError::invalid(format!(
                    "{}: startFrom {start_from} but the case has no time directory",
                    r.dir.display()
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
