//! OpenFOAM simpleFoam case directories (steady, incompressible, laminar),
//! read as they are, → [`FlowSetup`] and run by the same SIMPLE driver as a
//! `case.toml` flow case ([`super::flow_case::run_flow_case`]).
//!
//! | file | entries | becomes |
//! |---|---|---|
//! | `system/controlDict` | `application simpleFoam` (optional), `startTime 0`, `endTime`/`deltaT` (steady: iterations), `writeControl`, `writeInterval`, `writeFormat`, `writePrecision`, `writeCompression` | maximum outer iterations; write every N iterations |
//! | `system/fvSchemes` | `ddtSchemes` `steadyState`; `divSchemes` `div(phi,U)` `bounded Gauss upwind\|linearUpwind grad(U)\|limitedLinear K`, `div((nuEff*dev2(T(grad(U)))))` `Gauss linear`; `laplacianSchemes`, `gradSchemes` (keys `laplacian(nuEff,U)`, `laplacian((1\|A(U)),p)`, `grad(U)`, `grad(p)` or `default`) | convection, [`Schemes`] |
//! | `system/fvSolution` | `solvers { p {...} U {...} }` (pattern keys such as `"(U\|k\|epsilon)"`; the laplacianFoam reader's solver keys); `SIMPLE { nNonOrthogonalCorrectors; consistent; pRefCell; pRefValue; residualControl { p; U; } }`; `relaxationFactors { fields { p; } equations { U; } }` or the flat `relaxationFactors { p; U; }` | [`SimpleSettings`], pressure solver |
//! | `constant/transportProperties` (`transportModel Newtonian`) or `constant/physicalProperties` (`viscosityModel constant`) | `nu` (plain or dimensioned) | ν |
//! | `constant/momentumTransport` or `constant/turbulenceProperties` | `simulationType laminar` (laminar model `Stokes`) | — |
//! | `0/U` | internal field; `fixedValue`, `movingWallVelocity` (value), `noSlip`, `zeroGradient`, `symmetry`, `symmetryPlane`, `empty`; `slip` as `symmetry` (warned) | initial U, [`VelocityCondition`]s |
//! | `0/p` | internal field; `zeroGradient`, `fixedValue`, `symmetry`, `symmetryPlane`, `empty` | initial p, pressure conditions |
//!
//! A missing relaxation factor means none (1), as in OpenFOAM. Results go to
//! time directories `<iteration>/U`, `p`, `phi` every `writeInterval`
//! iterations and at the end, plus the VTK series `VTK/NAME.pvd` (the last iteration) and the residual plot `VTK/NAME_residuals.png`.
//! Entries nobody read are named in warnings.

use super::flow_case::{momentum_solver, FlowSetup, FoamOutput};
use super::openfoam::{
    at, at_key, dict_schemes, read_positive, scheme, supported_application, Reader,
};
use super::setup::{check_non_orth_correctors, TimeControl};
use super::CaseError;
use crate::flow::simple::{Convection, ResidualControl, SimpleSettings};
use crate::flow::{VectorValues, VelocityCondition};
use crate::foam::{FoamDict, FoamEntry, Value, ValueKind};
use crate::fvm::{BoundaryCondition, PatchValues, Schemes};
use crate::io::foam_field::{FieldValues, ScalarFieldFile, VectorFieldFile, VectorFieldValues};
use crate::mesh::{Mesh, MeshSource, Patch, Vec3};
use std::path::Path;

/// The application these cases are read as.
const APPLICATION: &str = "simpleFoam";

/// The `divSchemes` key of the explicit laminar stress (simpleFoam's `divDevReff`).
const STRESS_DIV: &str = "div((nuEff*dev2(T(grad(U)))))";

/// A simpleFoam case read, and the warnings about what it holds that is not used.
#[derive(Debug)]
pub struct SimpleFoamCase {
    pub setup: FlowSetup,
    /// The mesh of `setup.mesh`, read to read the fields: pass it on to
    /// [`run_flow_case_with_mesh`](super::flow_case::run_flow_case_with_mesh).
    pub mesh: Mesh,
    /// One line per entry nobody read or setting mapped to another; each was also logged.
    pub warnings: Vec<String>,
}

/// Whether `case_dir` is an OpenFOAM case to run as simpleFoam: its
/// `controlDict` names `application simpleFoam`, or names no application and
/// the case has `0/U`.
pub fn is_simple_foam_case(case_dir: &Path) -> bool {
    let Ok(control) = FoamDict::read(&case_dir.join("system/controlDict")) else {
        return false;
    };
    match control.get_opt::<String>("application") {
        Ok(Some(app)) => app == APPLICATION,
        Ok(None) => case_dir.join("0/U").is_file() || case_dir.join("0/U.gz").is_file(),
        Err(_) => false,
    }
}

/// Reads the simpleFoam case in `case_dir` (see the module documentation).
pub fn read_simple_foam_case(case_dir: &Path) -> Result<SimpleFoamCase, CaseError> {
    let mut reader = Reader::new(case_dir, APPLICATION);
    let (setup, mesh) = read(&mut reader)?;
    Ok(SimpleFoamCase {
        setup,
        mesh,
        warnings: reader.warnings,
    })
}

fn read(r: &mut Reader) -> Result<(FlowSetup, Mesh), CaseError> {
    let control = r.dict("system/controlDict")?;
    if let Some(app) = supported_application(&control)? {
        if app != APPLICATION {
            return Err(at_key(
                &control,
                "application",
                format!(
                    "application {app}: this case is read as a simpleFoam case; set \
                     'application simpleFoam;' (laplacianFoam cases have no 0/U)"
                ),
            ));
        }
    }
    // A turbulence model is refused before the other files are read.
    check_laminar(r)?;
    let schemes_dict = r.dict("system/fvSchemes")?;
    let solution = r.dict("system/fvSolution")?;
    control.ignore("runTimeModifiable");
    let timing = r.timing(&control)?;
    let foam = r.write_options(&control)?;
    let max_iterations = match r.time_control(&timing, true, None, &control)? {
        TimeControl::Steady { max_iterations, .. } => max_iterations,
        TimeControl::Euler { .. } => {
            return Err(CaseError::Mesh(control.error(
                "a simpleFoam case is steady; expected a steady time control",
            )))
        }
    };

    let mesh_source = MeshSource::PolyMesh(r.dir.clone());
    let mesh = mesh_source.load()?;
    let n = mesh.n_cells();

    let nu = read_viscosity(r)?;
    let mut settings = SimpleSettings::new(nu);
    let (convection, schemes) = read_schemes(&schemes_dict)?;
    settings.convection = convection;
    settings.set_schemes(schemes);

    let pressure_solver = r.solver_for(&solution, "p", true)?;
    let u_solver = r.solver_for(&solution, "U", false)?;
    settings.momentum = momentum_solver(u_solver).map_err(|e| {
        let solvers = solution.get_dict("solvers").ok();
        match solvers.and_then(|s| s.get_dict("U").ok()) {
            Some(dict) => at_key(dict, "solver", format!("solvers/U: {e}")),
            None => CaseError::Mesh(solution.error(format!("solvers/U: {e}"))),
        }
    })?;
    read_simple_dict(r, &solution, &mut settings)?;
    read_relaxation(r, &solution, &mut settings)?;

    let start_dir = r.time_directory(timing.start, foam.time_precision);
    let u_file = VectorFieldFile::read(&start_dir.join("U"), n)?;
    let p_file = ScalarFieldFile::read(&start_dir.join("p"), n)?;
    let boundary = read_boundary(r, &mesh, &u_file, &p_file)?;
    let initial = Some((
        u_file.internal.clone().expand(n),
        p_file.internal.clone().expand(n),
    ));

    warn_unread_flow(r, [&control, &schemes_dict, &solution], &u_file, &p_file);
    let setup = FlowSetup {
        origin: r.dir.join("system/controlDict").display().to_string(),
        case_dir: r.dir.clone(),
        mesh: mesh_source,
        settings,
        max_iterations,
        boundary,
        default_boundary: None,
        pressure_solver,
        output_dir: r.dir.join(super::openfoam::VTK_DIRECTORY),
        validation: None,
        initial,
        vtk: true,
        vtk_encoding: crate::io::vtk::VtkEncoding::default(),
        foam_output: Some(FoamOutput {
            interval: timing.write_every,
            options: foam,
        }),
    };
    Ok((setup, mesh))
}

/// `nu` from `constant/physicalProperties` (OpenFOAM ≥ v10, `viscosityModel
/// constant`) or else `constant/transportProperties` (`transportModel Newtonian`).
pub(super) fn read_viscosity(r: &mut Reader) -> Result<f64, CaseError> {
    let physical = "constant/physicalProperties";
    let (dict, model_key, model) = if r.dir.join(physical).is_file()
        || crate::foam::gz_path(&r.dir.join(physical)).is_file()
    {
        (r.dict(physical)?, "viscosityModel", "constant")
    } else {
        (
            r.dict("constant/transportProperties")?,
            "transportModel",
            "Newtonian",
        )
    };
    if let Some(given) = dict.get_opt::<String>(model_key)? {
        if given != model {
            return Err(at_key(
                &dict,
                model_key,
                format!(
                    "{model_key} {given}: only a constant viscosity is supported \
                     ({model_key} {model};)"
                ),
            ));
        }
    }
    let nu = read_positive(&dict, "nu", "the kinematic viscosity")?;
    r.warn_unread(&dict);
    Ok(nu)
}

/// `simulationType laminar` (with the `Stokes` laminar model, if one is named)
/// in `constant/momentumTransport` or `constant/turbulenceProperties`.
pub(super) fn check_laminar(r: &mut Reader) -> Result<(), CaseError> {
    let Some(dict) = momentum_transport(&r.dir)? else {
        return Err(CaseError::invalid(format!(
            "{}: neither constant/momentumTransport nor constant/turbulenceProperties; add one \
             with 'simulationType laminar;' (only laminar flow is supported)",
            r.dir.display()
        )));
    };
    check_laminar_model(&dict)?;
    r.warn_unread(&dict);
    Ok(())
}

/// `constant/momentumTransport` (OpenFOAM ≥ v8), else
/// `constant/turbulenceProperties`, if the case has either.
pub(super) fn momentum_transport(case_dir: &Path) -> Result<Option<FoamDict>, CaseError> {
    let names = [
        "constant/momentumTransport",
        "constant/turbulenceProperties",
    ];
    let found = names
        .iter()
        .map(|rel| case_dir.join(rel))
        .find(|path| crate::foam::file_or_gz_exists(path));
    Ok(match found {
        Some(path) => Some(FoamDict::read(&path)?),
        None => None,
    })
}

/// An error naming the model unless `dict` (a momentumTransport or
/// turbulenceProperties dictionary) says `simulationType laminar` with no
/// laminar model or `Stokes`.
pub(super) fn check_laminar_model(dict: &FoamDict) -> Result<(), CaseError> {
    let kind = dict.get_word("simulationType")?;
    if kind != "laminar" {
        // v1912 names the model `RASModel` / `LESModel`, later versions `model`.
        let model = match dict.get_dict_opt(&kind)? {
            Some(sub) => [format!("{kind}Model"), "model".to_string()]
                .iter()
                .find_map(|key| sub.get_opt::<String>(key).ok().flatten()),
            None => None,
        };
        let named = model.map_or(String::new(), |m| format!("; {kind} model {m} is not"));
        return Err(at_key(
            dict,
            "simulationType",
            format!(
                "simulationType {kind}: only laminar flow is supported (simulationType \
                 laminar;){named}"
            ),
        ));
    }
    if let Some(laminar) = dict.get_dict_opt("laminar")? {
        for key in ["model", "laminarModel"] {
            if let Some(model) = laminar.get_opt::<String>(key)? {
                if model != "Stokes" {
                    return Err(at_key(
                        laminar,
                        key,
                        format!("laminar {key} {model}: only Stokes (Newtonian) is supported"),
                    ));
                }
            }
        }
        laminar.ignore("printCoeffs");
    }
    dict.ignore("printCoeffs");
    Ok(())
}

/// The scheme of `key` in `section`, which must be the same as that of `other`
/// (fvpoisson discretises U and p with one Laplacian and gradient scheme).
fn same_scheme<'a>(
    dict: &'a FoamDict,
    section: &str,
    key: &str,
    other: &str,
) -> Result<(String, &'a FoamEntry), CaseError> {
    let (entry, text) = scheme(dict, section, key)?;
    let (other_entry, other_text) = scheme(dict, section, other)?;
    if other_text != text {
        return Err(at(
            other_entry,
            format!(
                "{section}: {other} is '{other_text}' but {key} is '{text}'; fvpoisson uses one \
                 scheme for both: make them equal"
            ),
        ));
    }
    Ok((text, entry))
}

/// `ddtSchemes` (steadyState), `div(phi,U)`, the Laplacian and gradient schemes.
fn read_schemes(dict: &FoamDict) -> Result<(Convection, Schemes), CaseError> {
    let (ddt_entry, ddt) = scheme(dict, "ddtSchemes", "ddt(U)")?;
    if ddt != "steadyState" {
        return Err(at(
            ddt_entry,
            format!("ddt scheme '{ddt}': simpleFoam is steady; use steadyState"),
        ));
    }
    let (div_entry, div) = scheme(dict, "divSchemes", "div(phi,U)")?;
    let convection = Convection::from_foam(&div).map_err(|e| at(div_entry, e.to_string()))?;
    check_stress_scheme(dict)?;
    let schemes = velocity_pressure_schemes(dict, "laplacian(nuEff,U)")?;
    Ok((convection, schemes))
}

/// The scheme of the laminar model's explicit stress ∇·(ν dev2((∇U)ᵀ)): it is
/// computed as `Gauss linear`, so that (or a default of it) is required.
pub(super) fn check_stress_scheme(dict: &FoamDict) -> Result<(), CaseError> {
    let (stress_entry, stress) = scheme(dict, "divSchemes", STRESS_DIV)?;
    if stress != "Gauss linear" {
        return Err(at(
            stress_entry,
            format!(
                "divergence scheme '{stress}' for {STRESS_DIV} is not supported; \
                 use 'Gauss linear'"
            ),
        ));
    }
    Ok(())
}

/// The Laplacian scheme of `viscous` (`laplacian(nuEff,U)`) and of p, and the
/// gradient schemes of U and p: one of each, as fvpoisson discretises U and p
/// alike; the interpolation and snGrad sections are accepted quietly.
pub(super) fn velocity_pressure_schemes(
    dict: &FoamDict,
    viscous: &str,
) -> Result<Schemes, CaseError> {
    let (laplacian, lap_entry) =
        same_scheme(dict, "laplacianSchemes", viscous, "laplacian((1|A(U)),p)")?;
    let (grad, grad_entry) = same_scheme(dict, "gradSchemes", "grad(U)", "grad(p)")?;
    dict_schemes(
        dict,
        (&laplacian, lap_entry),
        (&grad, grad_entry),
        &[
            "interpolationSchemes",
            "snGradSchemes",
            "fluxRequired",
            "wallDist",
        ],
    )
}

/// `nNonOrthogonalCorrectors`, `pRefCell` and `pRefValue` of a SIMPLE, PISO or
/// PIMPLE dictionary (`pRefPoint` refused).
pub(super) fn read_correctors_and_reference(
    dict: &FoamDict,
    settings: &mut SimpleSettings,
) -> Result<(), CaseError> {
    settings.n_non_orth_correctors =
        check_non_orth_correctors(dict.get_or("nNonOrthogonalCorrectors", 0usize)?)
            .map_err(|e| at_key(dict, "nNonOrthogonalCorrectors", e))?;
    if dict.contains("pRefPoint") {
        return Err(at_key(
            dict,
            "pRefPoint",
            "pRefPoint is not supported: give the reference cell as pRefCell",
        ));
    }
    settings.p_ref_cell = dict.get_or("pRefCell", 0usize)?;
    settings.p_ref_value = dict.get_or("pRefValue", 0.0)?;
    Ok(())
}

/// fvSolution's `SIMPLE` dictionary.
fn read_simple_dict(
    r: &mut Reader,
    solution: &FoamDict,
    settings: &mut SimpleSettings,
) -> Result<(), CaseError> {
    let simple = solution.get_dict("SIMPLE")?;
    read_correctors_and_reference(simple, settings)?;
    settings.consistent = simple.get_or("consistent", false)?;
    if !simple.get_or("momentumPredictor", true)? {
        r.warn(format!(
            "{}: momentumPredictor off is not supported: the momentum equation is always solved",
            simple.entry("momentumPredictor").map_or_else(
                || simple.file().display().to_string(),
                |e| format!("{}:{}", e.file().display(), e.line())
            )
        ));
    }
    if let Some(rc) = simple.get_dict_opt("residualControl")? {
        let mut control = ResidualControl::default();
        for (key, target) in [("U", &mut control.u), ("p", &mut control.p)] {
            if let Some(tol) = rc.get_opt::<f64>(key)? {
                if !(tol.is_finite() && tol >= 0.0) {
                    return Err(at_key(
                        rc,
                        key,
                        format!("residualControl {key} {tol}: expected a tolerance ≥ 0"),
                    ));
                }
                *target = tol;
            }
        }
        settings.residual_control = control;
    }
    Ok(())
}

/// `relaxationFactors`: `fields { p α; } equations { U α; }` or the flat
/// `{ p α; U α; }`; a factor not given is 1 (no relaxation), as in OpenFOAM.
pub(super) fn read_relaxation(
    r: &mut Reader,
    solution: &FoamDict,
    settings: &mut SimpleSettings,
) -> Result<(), CaseError> {
    let factors = solution.get_dict_opt("relaxationFactors")?;
    let read = |holder: Option<&FoamDict>, key: &str| -> Result<Option<f64>, CaseError> {
        let Some(dict) = holder else { return Ok(None) };
        let Some(alpha) = dict.get_opt::<f64>(key)? else {
            return Ok(None);
        };
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(at_key(
                dict,
                key,
                format!("relaxation factor {key} {alpha}: it must be in (0, 1]"),
            ));
        }
        Ok(Some(alpha))
    };
    let (alpha_p, alpha_u) = match factors {
        None => (None, None),
        Some(f) => {
            let fields = f.get_dict_opt("fields")?;
            let equations = f.get_dict_opt("equations")?;
            if fields.is_none() && equations.is_none() {
                (read(Some(f), "p")?, read(Some(f), "U")?)
            } else {
                (read(fields, "p")?, read(equations, "U")?)
            }
        }
    };
    for (name, alpha, target) in [
        ("field p", alpha_p, &mut settings.relaxation_p),
        ("equation U", alpha_u, &mut settings.relaxation_u),
    ] {
        *target = alpha.unwrap_or_else(|| {
            r.warn(format!(
                "{}: no relaxation factor for {name}: none (1), as in OpenFOAM; SIMPLE usually \
                 needs one (p 0.3, U 0.7)",
                solution.file().display()
            ));
            1.0
        });
    }
    Ok(())
}

/// Warns about every entry nobody read in the case's `controlDict`,
/// `fvSchemes` and `fvSolution` and in the U and p files of a flow case.
pub(super) fn warn_unread_flow(
    r: &mut Reader,
    [control, schemes, solution]: [&FoamDict; 3],
    u_file: &VectorFieldFile,
    p_file: &ScalarFieldFile,
) {
    for dict in [control, schemes, solution, &u_file.dict, &p_file.dict] {
        r.warn_unread(dict);
    }
}

/// Velocity and pressure conditions of every patch, from `0/U` and `0/p`.
pub(super) fn read_boundary(
    r: &mut Reader,
    mesh: &Mesh,
    u_file: &VectorFieldFile,
    p_file: &ScalarFieldFile,
) -> Result<Vec<(String, VelocityCondition, BoundaryCondition, String)>, CaseError> {
    let mut boundary = Vec::new();
    for patch in mesh.patches() {
        let (velocity, origin) = velocity_condition(r, patch, u_file)?;
        let pressure = pressure_condition(patch, p_file)?;
        boundary.push((patch.name.clone(), velocity, pressure, origin));
    }
    Ok(boundary)
}

/// The velocity condition of `patch` in `u_file`, and where its type is given.
pub(super) fn velocity_condition(
    r: &mut Reader,
    patch: &Patch,
    u_file: &VectorFieldFile,
) -> Result<(VelocityCondition, String), CaseError> {
    let dict = u_file.patch(patch)?;
    let kind = dict.get_word("type")?;
    let type_entry = dict.entry("type").expect("read above");
    let origin = format!("{}:{}", type_entry.file().display(), type_entry.line());
    let velocity = match kind.as_str() {
        "fixedValue" | "movingWallVelocity" => VelocityCondition::FixedValue(
            match VectorFieldValues::read(dict, "value", patch.size)? {
                VectorFieldValues::Uniform(v) => VectorValues::Uniform(v),
                VectorFieldValues::NonUniform(v) => VectorValues::PerFace(v),
            },
        ),
        "uniformFixedValue" => {
            VelocityCondition::FixedValue(VectorValues::Uniform(uniform_value(dict)?))
        }
        "noSlip" => VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::zeros())),
        "zeroGradient" => VelocityCondition::ZeroGradient,
        "symmetry" | "symmetryPlane" => VelocityCondition::Symmetry,
        "empty" => VelocityCondition::Empty,
        "slip" => {
            r.warn(format!(
                "{origin}: U patch '{}': slip is run as symmetry (zero normal velocity, \
                 zero normal gradient of the tangential one)",
                patch.name
            ));
            VelocityCondition::Symmetry
        }
        other => {
            return Err(at(
                type_entry,
                format!(
                    "U patch '{}': condition type '{other:.80}' is not supported (fixedValue, \
                     uniformFixedValue, movingWallVelocity, noSlip, zeroGradient, symmetry, \
                     symmetryPlane, empty, slip)",
                    patch.name
                ),
            ))
        }
    };
    // The current face values: recomputed.
    dict.ignore("value");
    Ok((velocity, origin))
}

/// `uniformValue` of a `uniformFixedValue` velocity: `constant (x y z)` or
/// `(x y z)` (a constant Function1; others are refused).
fn uniform_value(dict: &FoamDict) -> Result<Vec3, CaseError> {
    let (entry, values) = dict.stream_entry("uniformValue")?.ok_or_else(|| {
        CaseError::Mesh(dict.error("uniformFixedValue needs 'uniformValue constant (x y z);'"))
    })?;
    let values = match values {
        [Value {
            kind: ValueKind::Word(w),
            ..
        }, rest @ ..]
            if w == "constant" =>
        {
            rest
        }
        all => all,
    };
    let vector = match values {
        [value] => value.vector(),
        _ => None,
    };
    vector.ok_or_else(|| {
        at(
            entry,
            "uniformValue: only a constant vector is supported ('uniformValue constant (x y z);')",
        )
    })
}

/// The pressure condition of `patch` in `p_file`.
pub(super) fn pressure_condition(
    patch: &Patch,
    p_file: &ScalarFieldFile,
) -> Result<BoundaryCondition, CaseError> {
    let dict = p_file.patch(patch)?;
    let kind = dict.get_word("type")?;
    let type_entry = dict.entry("type").expect("read above");
    let pressure = match kind.as_str() {
        "fixedValue" => {
            BoundaryCondition::FixedValue(match FieldValues::read(dict, "value", patch.size)? {
                FieldValues::Uniform(v) => PatchValues::Uniform(v),
                FieldValues::NonUniform(v) => PatchValues::PerFace(v),
            })
        }
        "zeroGradient" | "symmetry" | "symmetryPlane" => BoundaryCondition::ZeroGradient,
        "empty" => BoundaryCondition::Empty,
        other => {
            return Err(at(
                type_entry,
                format!(
                    "{} patch '{}': condition type '{other:.80}' is not supported (zeroGradient, \
                     fixedValue, symmetry, symmetryPlane, empty)",
                    p_file
                        .path
                        .file_name()
                        .map_or("p".into(), |n| n.to_string_lossy()),
                    patch.name
                ),
            ))
        }
    };
    dict.ignore("value");
    Ok(pressure)
}
