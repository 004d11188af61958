//! OpenFOAM laplacianFoam cases read as they are: the shipped parity cases
//! run and compared with OpenFOAM v1912's results, the dictionary values
//! they map to, errors in case files, and no panic on corrupted case files.

mod common;

use fvpoisson::case::openfoam::{read_case, OpenFoamCase};
use fvpoisson::case::{
    run_case, run_case_with_mesh, BoundarySpec, CaseSetup, Device, Scalar, TimeControl,
};
use fvpoisson::fvm::{GradScheme, SnGradScheme};
use fvpoisson::io::foam_field::{FieldValues, ScalarFieldFile};
use fvpoisson::solve::amg::{AmgSmootherKind, CycleKind};
use fvpoisson::solve::gamg::GamgSmoother;
use fvpoisson::solve::{
    BlockJacobiSettings, EigenBound, InnerSolver, PolynomialKind, PolynomialSettings, Precision,
    Preconditioner, PreconditionerKind, SmootherKind, SmootherSettings, Sweep,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch copy of shipped case `name`'s inputs (runs write into the case
/// directory, and a user's runs may have written there already).
fn copy_case(name: &str, tag: &str) -> PathBuf {
    common::case_inputs_copy(&format!("cases/{name}"), tag)
}

fn read(dir: &Path) -> OpenFoamCase {
    read_case(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// Runs `setup` and compares the final T with OpenFOAM's `reference` file;
/// returns the largest difference relative to the field's range.
fn max_difference_to_openfoam(setup: &CaseSetup, reference: &str) -> f64 {
    let mut setup = setup.clone();
    setup.output.formats.clear();
    let summary = run_case(&setup, Device::Cpu).unwrap_or_else(|e| panic!("{reference}: {e}"));
    let foam = ScalarFieldFile::read(&common::repo(reference), summary.n_cells).unwrap();
    let FieldValues::NonUniform(want) = foam.internal else {
        panic!("{reference}: expected a nonuniform field");
    };
    let (lo, hi) = want
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let max = summary
        .field
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    eprintln!("{reference}: max |T - T_OpenFOAM| = {max:e} (range {lo} .. {hi})");
    max / (hi - lo)
}

#[test]
fn skew_case_maps_and_matches_openfoam() {
    let dir = copy_case("laplacian_foam_skew", "read_skew");
    let case = read(&dir);
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let s = &case.setup;
    assert!(matches!(s.gamma, Scalar::Uniform(g) if g == 0.5));
    assert!(matches!(s.initial, Scalar::Uniform(v) if v == 273.0));
    assert_eq!(
        s.time,
        TimeControl::Euler {
            delta_t: 0.01,
            end_time: 0.05
        }
    );
    assert_eq!(s.n_non_orth_correctors, 2);
    assert_eq!(s.schemes.sn_grad, SnGradScheme::Corrected);
    assert_eq!(s.schemes.grad, GradScheme::GaussLinear);
    let solver = s.solver.regular;
    assert_eq!(solver.preconditioner, PreconditionerKind::Dic);
    assert_eq!(
        (solver.controls.tolerance, solver.controls.rel_tol),
        (1e-12, 0.0)
    );
    assert_eq!(s.output.interval, 5);
    assert_eq!(s.output.foam.precision, 17);
    assert_eq!(s.output.foam.dimensions.0[3], 1.0);
    let specs: Vec<_> = s
        .boundary
        .iter()
        .map(|b| (b.patch.as_str(), &b.spec))
        .collect();
    assert!(
        matches!(specs[0], ("hot", BoundarySpec::FixedValue(Scalar::Uniform(v))) if *v == 573.0)
    );
    // `value $internalField;`
    assert!(
        matches!(specs[1], ("cold", BoundarySpec::FixedValue(Scalar::Uniform(v))) if *v == 273.0)
    );
    assert!(matches!(specs[2], ("sides", BoundarySpec::ZeroGradient)));
    let rel = max_difference_to_openfoam(s, "tests/data/laplacian_foam_skew/0.05/T");
    assert!(rel < 1e-12, "relative difference {rel:e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn source_case_maps_and_matches_openfoam() {
    let dir = copy_case("laplacian_foam_source", "read_source");
    let case = read(&dir);
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let s = &case.setup;
    assert!(matches!(s.gamma, Scalar::Uniform(g) if g == 0.01));
    // `#include "include/initialConditions"` and `$initialT`.
    assert!(matches!(s.initial, Scalar::Uniform(v) if v == 20.0));
    assert_eq!(s.schemes.sn_grad, SnGradScheme::Limited(0.5));
    assert_eq!(s.schemes.grad, GradScheme::LeastSquares);
    assert_eq!(s.output.interval, 4);
    assert!(s.output.foam.compress);
    // Su and Sp per unit volume in the 96 cells of the zone, 0 elsewhere.
    let (Scalar::Values(su), Some(Scalar::Values(sp))) = (&s.source, &s.implicit_source) else {
        panic!(
            "expected per-cell sources, got {:?} {:?}",
            s.source, s.implicit_source
        );
    };
    let zone_volume = 0.000_115_5;
    assert_eq!(su.iter().filter(|&&v| v != 0.0).count(), 96);
    let su_max = su.iter().copied().fold(0.0, f64::max);
    assert!(
        (su_max * zone_volume / 2e-3 - 1.0).abs() < 1e-12,
        "{su_max}"
    );
    let sp_min = sp.iter().copied().fold(0.0, f64::min);
    assert!(
        (sp_min * zone_volume / -2e-5 - 1.0).abs() < 1e-12,
        "{sp_min}"
    );
    let kinds: Vec<_> = s.boundary.iter().map(|b| b.spec.foam_name()).collect();
    assert_eq!(
        kinds,
        [
            "fixedValue",
            "mixed",
            "fixedGradient",
            "zeroGradient",
            "empty"
        ]
    );
    let rel = max_difference_to_openfoam(s, "tests/data/laplacian_foam_source/0.4/T");
    assert!(rel < 1e-12, "relative difference {rel:e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn steady_case_maps_and_matches_openfoam() {
    let dir = copy_case("laplacian_foam_steady", "read_steady");
    let case = read(&dir);
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let s = &case.setup;
    assert_eq!(
        s.time,
        TimeControl::Steady {
            max_iterations: 200,
            residual_tolerance: 1e-7
        }
    );
    assert_eq!(s.n_non_orth_correctors, 1);
    assert_eq!(s.solver.regular.preconditioner, PreconditionerKind::Dic);
    assert_eq!(s.solver.regular.controls.max_iter, 1000);
    assert!(
        matches!(&s.boundary[2].spec, BoundarySpec::FixedGradient(Scalar::Uniform(g)) if *g == 100.0)
    );
    // OpenFOAM's residualControl stopped after 10 iterations and wrote time 10.
    let mut quiet = s.clone();
    quiet.output.formats.clear();
    let summary = run_case(&quiet, Device::Cpu).unwrap();
    assert!(summary.converged);
    assert_eq!(summary.steps, 10);
    let rel = max_difference_to_openfoam(s, "tests/data/laplacian_foam_steady/10/T");
    assert!(rel < 1e-12, "relative difference {rel:e}");
    fs::remove_dir_all(&dir).unwrap();
}

/// Runs the skew case in a scratch copy: the time directory it writes holds
/// the final field to the last bit and a `value` on every patch.
#[test]
fn run_writes_openfoam_time_directories() {
    let dir = copy_case("laplacian_foam_skew", "write");
    let OpenFoamCase {
        setup,
        mesh: read_mesh,
        ..
    } = read(&dir);
    // The mesh read with the case is the one the runner would load.
    let loaded = setup.mesh.load().unwrap();
    assert!(read_mesh == loaded);
    let summary = run_case_with_mesh(&setup, Some(read_mesh), Device::Cpu).unwrap();
    let loading = run_case(&setup, Device::Cpu).unwrap();
    assert_eq!(summary.field, loading.field);
    assert_eq!(summary.foam_fields, [dir.join("0.05/T")]);
    let written = ScalarFieldFile::read(&dir.join("0.05/T"), summary.n_cells).unwrap();
    assert_eq!(
        written.internal,
        FieldValues::NonUniform(summary.field.clone())
    );
    assert_eq!(written.dimensions.0, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    let mesh = loaded;
    let hot = written.patch(&mesh.patches()[0]).unwrap();
    assert_eq!(hot.get_word("type").unwrap(), "fixedValue");
    assert_eq!(
        FieldValues::read(hot, "value", 24).unwrap(),
        FieldValues::Uniform(573.0)
    );
    let sides = written.patch(&mesh.patches()[2]).unwrap();
    assert_eq!(sides.get_word("type").unwrap(), "zeroGradient");
    assert!(
        matches!(FieldValues::read(sides, "value", 220).unwrap(), FieldValues::NonUniform(v) if v.len() == 220)
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// OpenFOAM (when installed, as on the development machine; CI has none)
/// reads the binary, gzip-compressed fields a run of the source case writes:
/// `foamFormatConvert` rewrites them as ascii with 17 digits, which must give
/// back the run's values exactly.
#[test]
fn openfoam_reads_the_written_fields() {
    let foam_dir = std::env::var("WM_PROJECT_DIR").unwrap_or_else(|_| "/usr/share/openfoam".into());
    let available = Path::new(&foam_dir).join("etc/controlDict").is_file()
        && Command::new("foamFormatConvert")
            .arg("-help")
            .env("WM_PROJECT_DIR", &foam_dir)
            .output()
            .is_ok_and(|o| o.status.success());
    if !available {
        eprintln!("OpenFOAM not installed: skipped");
        return;
    }
    let dir = copy_case("laplacian_foam_source", "openfoam_reads");
    let setup = read(&dir).setup;
    let summary = run_case(&setup, Device::Cpu).unwrap();
    assert!(dir.join("0.4/T.gz").is_file());
    let control = dir.join("system/controlDict");
    let text = fs::read_to_string(&control)
        .unwrap()
        .replace("writeFormat     binary;", "writeFormat     ascii;")
        .replace("writeCompression on;", "writeCompression off;");
    fs::write(&control, text).unwrap();
    let out = Command::new("foamFormatConvert")
        .args(["-case", dir.to_str().unwrap(), "-time", "0.4"])
        .env("WM_PROJECT_DIR", &foam_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(dir.join("0.4/T")).unwrap();
    assert!(
        text.contains("format      ascii;"),
        "OpenFOAM did not rewrite 0.4/T"
    );
    let converted = ScalarFieldFile::read(&dir.join("0.4/T"), summary.n_cells).unwrap();
    assert_eq!(converted.internal, FieldValues::NonUniform(summary.field));
    fs::remove_dir_all(&dir).unwrap();
}

/// Edits `rel` in a scratch copy of shipped case `name` and reads the case.
fn read_edited(
    name: &str,
    rel: &str,
    edit: impl Fn(String) -> String,
    tag: &str,
) -> (PathBuf, Result<OpenFoamCase, String>) {
    let dir = copy_case(name, tag);
    let path = dir.join(rel);
    let text = fs::read_to_string(&path).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "{tag}: the edit changed nothing");
    fs::write(&path, edited).unwrap();
    let result = read_case(&dir).map_err(|e| e.to_string());
    (dir, result)
}

/// The error of reading the edited case; it must start with `file:line` of `rel`.
fn edited_error(name: &str, rel: &str, edit: impl Fn(String) -> String, tag: &str) -> String {
    let (dir, result) = read_edited(name, rel, edit, tag);
    let err = match result {
        Ok(_) => panic!("{tag}: the edited case should be refused"),
        Err(e) => e,
    };
    let _ = fs::remove_dir_all(&dir);
    let prefix = dir.join(rel).display().to_string();
    err.strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{tag}: {err}"))
        .to_string()
}

#[test]
fn bad_case_files_are_named_with_file_and_line() {
    let skew = "laplacian_foam_skew";
    let e = edited_error(
        skew,
        "0/T",
        |t| t.replace("zeroGradient", "codedFixedValue"),
        "coded",
    );
    assert_eq!(e, ":34: patch 'sides': boundary condition type 'codedFixedValue' is not supported (fixedValue, zeroGradient, fixedGradient, mixed, empty)");
    let e = edited_error(
        skew,
        "constant/transportProperties",
        |t| t.replace("DT [0 2 -1 0 0 0 0] 0.5;", "#calc \"0.25*2\";"),
        "calc",
    );
    assert_eq!(e, ":14: #calc is not supported: it needs OpenFOAM's run-time C++ compilation; write the value it computes instead");
    let e = edited_error(
        skew,
        "0/T",
        |t| t.replace("$internalField", "$initialT"),
        "unknown_var",
    );
    assert!(e.starts_with(":29: unknown variable '$initialT'"), "{e}");
    let e = edited_error(
        skew,
        "system/fvSolution",
        |t| t.replace("maxIter         1000;\n    }", "maxIter         1000;"),
        "unclosed",
    );
    assert!(
        e.starts_with(":29: expected '}' to close the dictionary opened on line 15"),
        "{e}"
    );
    let e = edited_error(
        skew,
        "system/fvSolution",
        |t| t.replace("relTol          0;", "relTol          0"),
        "semicolon",
    );
    assert_eq!(
        e,
        ":21: 'relTol' in solvers/T: expected one number, found 3 values starting with number 0"
    );
    let e = edited_error(
        skew,
        "system/fvSchemes",
        |t| {
            t.replace(
                "default         Euler;",
                "default         CrankNicolson 0.9;",
            )
        },
        "ddt",
    );
    assert_eq!(
        e,
        ":16: ddt scheme 'CrankNicolson 0.9' is not supported (Euler or steadyState)"
    );
    let e = edited_error(
        skew,
        "system/fvSchemes",
        |t| t.replace("Gauss linear corrected", "Gauss upwind corrected"),
        "lap",
    );
    assert!(
        e.starts_with(
            ":32: laplacian scheme 'Gauss upwind corrected': unsupported interpolation 'upwind'"
        ),
        "{e}"
    );
    let e = edited_error(
        skew,
        "system/controlDict",
        |t| t.replace("writeInterval   5;", "writeInterval   2.5;"),
        "interval",
    );
    assert!(
        e.starts_with(":28: writeInterval 2.5 with writeControl timeStep is not a whole number"),
        "{e}"
    );
    let e = edited_error(
        skew,
        "constant/transportProperties",
        |t| t.replace("0.5;", "-1;"),
        "dt",
    );
    assert_eq!(e, ":14: DT is -1; it must be positive");
    let e = edited_error(
        "laplacian_foam_source",
        "system/fvOptions",
        |t| t.replace("cellZone        heater;", "cellZone        cooler;"),
        "zone",
    );
    assert!(
        e.starts_with(":22: cellZone cooler: ")
            && e.ends_with("constant/polyMesh/cellZones has no zone 'cooler' (its zones: heater)"),
        "{e}"
    );
}

#[test]
fn solvers_are_mapped_and_unused_entries_warned() {
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace("solver          PCG;\n        preconditioner  DIC;", "solver          GAMG;\n        smoother        DICGaussSeidel;\n        nCellsInCoarsestLevel 10;")
        },
        "gamg",
    );
    let case = case.unwrap();
    // GAMG: OpenFOAM's GAMG with its keys; its AMG for the GPU takes
    // DICGaussSeidel as multicolour Gauss-Seidel, OpenFOAM's 0 pre- and 2
    // post-sweeps as 1 sweep on each side.
    let gamg = case.setup.solver.regular.gamg.expect("GAMG solver");
    assert_eq!(gamg.smoother, GamgSmoother::DicGaussSeidel);
    assert_eq!(
        (gamg.n_cells_in_coarsest_level, gamg.n_post_sweeps),
        (10, 2)
    );
    assert_eq!(gamg.amg.smoother, AmgSmootherKind::MulticolourGaussSeidel);
    assert_eq!((gamg.amg.coarsest_rows, gamg.amg.sweeps), (10, 1));
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "solver          PCG;\n        preconditioner  DIC;",
                "solver          smoothSolver;\n        smoother        symGaussSeidel;",
            )
        },
        "smooth",
    );
    let case = case.unwrap();
    let smoother = case.setup.solver.regular.smoother.expect("smoothSolver");
    assert_eq!(
        smoother,
        SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric))
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    // Our smoother keys, and a smoother as PCG's preconditioner.
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "solver          PCG;\n        preconditioner  DIC;",
                "solver          smoothSolver;\n        smoother blockJacobi;\n        \
                 nSweeps 3;\n        inner symGaussSeidel;\n        innerTolerance 0;\n        \
                 innerMaxIter 4;\n        blockSize 128;\n        asynchronous yes;",
            )
        },
        "smooth_block",
    );
    let case = case.unwrap();
    let s = case.setup.solver.regular.smoother.expect("smoothSolver");
    assert_eq!((s.kind, s.sweeps), (SmootherKind::BlockJacobi, 3));
    assert_eq!(
        s.block,
        BlockJacobiSettings {
            block_size: 128,
            inner: InnerSolver::SymGaussSeidel,
            inner_tolerance: 0.0,
            inner_max_iter: 4,
            asynchronous: true
        }
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner Jacobi; omega 0.8; nSweeps 2; }",
            )
        },
        "smoother_precond",
    );
    let p = case.unwrap().setup.solver.regular.preconditioner;
    let mut expected = SmootherSettings::new(SmootherKind::Jacobi);
    expected.omega = 0.8;
    expected.sweeps = 2;
    assert_eq!(p, Preconditioner::Smoother(expected));
    let _ = fs::remove_dir_all(&dir);
    // A polynomial preconditioner with its keys.
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner leastSquares; degree 6; lanczosSteps 12; \
                 precision mixed; }",
            )
        },
        "polynomial_precond",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        Preconditioner::Polynomial(PolynomialSettings {
            degree: 6,
            bound: EigenBound::Lanczos { steps: 12 },
            precision: Precision::Mixed,
            ..PolynomialSettings::new(PolynomialKind::LeastSquares, 4)
        })
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    // Block-IC with its keys.
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner blockDIC; blockSize 256; precision mixed; }",
            )
        },
        "block_ic_precond",
    );
    let mut expected = SmootherSettings::named("blockDIC").unwrap();
    expected.block.block_size = 256;
    expected.polynomial.precision = Precision::Mixed;
    assert_eq!(
        case.unwrap().setup.solver.regular.preconditioner,
        Preconditioner::Smoother(expected)
    );
    let _ = fs::remove_dir_all(&dir);
    // Block Jacobi and DIC take precision mixed (f32 sweeps on the GPU).
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner blockJacobi; inner CG; precision mixed; }",
            )
        },
        "block_jacobi_mixed",
    );
    let mut expected = SmootherSettings::named("blockJacobi").unwrap();
    expected.block.inner = InnerSolver::Cg;
    expected.polynomial.precision = Precision::Mixed;
    assert_eq!(
        case.unwrap().setup.solver.regular.preconditioner,
        Preconditioner::Smoother(expected)
    );
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner DIC; precision mixed; }",
            )
        },
        "dic_mixed",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        Preconditioner::MixedIc(PreconditionerKind::Dic)
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    let err = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner DIC; precision half; }",
            )
        },
        "dic_half",
    );
    assert!(err.contains("unknown precision 'half'"), "{err}");
    let err = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner DICGaussSeidel; precision mixed; }",
            )
        },
        "sgs_mixed",
    );
    assert!(err.contains("precision mixed is available for"), "{err}");
    // Refused at the line of fvSolution (`edited_error` checks the file).
    let err = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner Chebyshev; eigenRatio 0.5; }",
            )
        },
        "polynomial_bad",
    );
    assert!(err.contains("eigenRatio"), "{err}");
    // A forward Gauss-Seidel preconditioner is refused at its line.
    let err = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| t.replace("preconditioner  DIC;", "preconditioner  GaussSeidel;"),
        "gs_precond",
    );
    assert!(err.contains("not symmetric"), "{err}");
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/controlDict",
        |t| {
            t.replace("runTimeModifiable true;", "runTimeModifiable true;\nadjustTimeStep  yes;\nfunctions { probes { type probes; } }")
        },
        "unused",
    );
    let warnings = case.unwrap().warnings;
    let control = dir.join("system/controlDict").display().to_string();
    assert_eq!(
        warnings,
        [
            format!("{control}:43: adjustTimeStep: not used by fvpoisson's laplacianFoam, ignored"),
            format!("{control}:44: functions: not used by fvpoisson's laplacianFoam, ignored"),
        ]
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn other_dictionary_forms_map_too() {
    // `startFrom latestTime` starts from 0 while 0 is the only time; a later
    // time directory is refused rather than silently ignored.
    let (dir, case) = read_edited(
        "laplacian_foam_steady",
        "system/controlDict",
        |t| t.replace("startFrom       startTime;", "startFrom       latestTime;"),
        "latest",
    );
    case.unwrap();
    fs::create_dir_all(dir.join("10")).unwrap();
    let e = read_case(&dir).unwrap_err().to_string();
    assert!(
        e.contains("would start at time 10 (startFrom latestTime)"),
        "{e}"
    );
    let _ = fs::remove_dir_all(&dir);
    // laplacianFoam stops at the last whole step before endTime − deltaT/2
    // (checked with laplacianFoam: endTime 0.045 writes 0.04 last).
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/controlDict",
        |t| t.replace("endTime         0.05;", "endTime         0.045;"),
        "end_time",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.time,
        TimeControl::Euler {
            delta_t: 0.01,
            end_time: 0.04
        }
    );
    assert_eq!(case.warnings.len(), 1, "{:?}", case.warnings);
    assert!(case.warnings[0].contains("stops after 4 steps"));
    let _ = fs::remove_dir_all(&dir);
    // `DT [dims] value`, and a preconditioner given as a dictionary.
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "constant/transportProperties",
        |t| {
            t.replace(
                "DT              DT [0 2 -1 0 0 0 0] 0.5;",
                "DT [0 2 -1 0 0 0 0] 0.25;",
            )
        },
        "dims",
    );
    assert!(matches!(case.unwrap().setup.gamma, Scalar::Uniform(g) if g == 0.25));
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner GAMG; smoother Jacobi; nPreSweeps 2; \
                 nPostSweeps 2; cycle K; precision mixed; agglomerator faceAreaPair; \
                 mergeLevels 1; }",
            )
        },
        "gamg_preconditioner",
    );
    let case = case.unwrap();
    let Preconditioner::Amg(amg) = case.setup.solver.regular.preconditioner else {
        panic!("{:?}", case.setup.solver.regular.preconditioner);
    };
    assert_eq!(amg.smoother, AmgSmootherKind::Jacobi);
    assert_eq!((amg.cycle, amg.sweeps), (CycleKind::K, 2));
    assert_eq!(amg.precision, fvpoisson::solve::amg::Precision::Mixed);
    assert!(case.setup.solver.regular.gamg.is_none());
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    // `selectionMode all` with `volumeMode specific`: Su and Sp as given, everywhere.
    let (dir, case) = read_edited(
        "laplacian_foam_source",
        "system/fvOptions",
        |t| {
            t.replace("cellZone;", "all;")
                .replace("cellZone        heater;", "")
                .replace("absolute", "specific")
        },
        "specific",
    );
    let s = case.unwrap().setup;
    assert!(
        matches!(s.source, Scalar::Uniform(v) if v == 2e-3),
        "{:?}",
        s.source
    );
    assert!(matches!(s.implicit_source, Some(Scalar::Uniform(v)) if v == -2e-5));
    let _ = fs::remove_dir_all(&dir);
    // fvOptions may live in constant/ too.
    let dir = copy_case("laplacian_foam_source", "constant_fv_options");
    fs::rename(dir.join("system/fvOptions"), dir.join("constant/fvOptions")).unwrap();
    let s = read(&dir).setup;
    assert!(
        matches!(s.source, Scalar::Values(ref su) if su.iter().filter(|&&v| v > 0.0).count() == 96)
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Corrupted case files (truncated, bytes replaced) give errors, never panics.
#[test]
fn corrupted_case_files_never_panic() {
    for (name, files) in [
        (
            "laplacian_foam_skew",
            &[
                "system/controlDict",
                "system/fvSchemes",
                "system/fvSolution",
                "constant/transportProperties",
                "0/T",
            ][..],
        ),
        (
            "laplacian_foam_source",
            &[
                "system/fvOptions",
                "0/T",
                "0/include/initialConditions",
                "constant/polyMesh/cellZones",
            ][..],
        ),
    ] {
        let dir = copy_case(name, "fuzz");
        for rel in files {
            let path = dir.join(rel);
            let original = fs::read(&path).unwrap();
            for corrupted in common::corruptions(&original, 40) {
                fs::write(&path, &corrupted).unwrap();
                let _ = read_case(&dir);
            }
            fs::write(&path, &original).unwrap();
        }
        read_case(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn ilu_dilu_and_schwarz_preconditioners_from_fv_solution() {
    use fvpoisson::solve::schwarz::{SchwarzKind, SchwarzSettings};
    let additive = SchwarzSettings {
        subdomains: 16,
        overlap: 1,
        nested: 4,
        ..SchwarzSettings::new(SchwarzKind::Additive)
    };
    let restricted = SchwarzSettings {
        subdomains: 64,
        overlap: 2,
        fill_level: 1,
        nested: 8,
        inner_overlap: 0,
        ..SchwarzSettings::new(SchwarzKind::Restricted)
    };
    for (tag, text, expected) in [
        (
            "dilu",
            "preconditioner  DILU;",
            Preconditioner::Kind(PreconditionerKind::Dilu),
        ),
        (
            "ilu1",
            "preconditioner { preconditioner ILU; fillLevel 1; }",
            Preconditioner::Ilu(1),
        ),
        (
            "as",
            "preconditioner { preconditioner AS; subdomains 16; overlap 1; nested 4; }",
            Preconditioner::Schwarz(additive),
        ),
        (
            "ras",
            "preconditioner { preconditioner RAS; subdomains 64; overlap 2; fillLevel 1; \
             nested 8; innerOverlap 0; }",
            Preconditioner::Schwarz(restricted),
        ),
    ] {
        let (dir, case) = read_edited(
            "laplacian_foam_skew",
            "system/fvSolution",
            |t| t.replace("preconditioner  DIC;", text),
            tag,
        );
        let case = case.unwrap();
        assert_eq!(case.setup.solver.regular.preconditioner, expected, "{tag}");
        assert!(case.warnings.is_empty(), "{tag}: {:?}", case.warnings);
        let _ = fs::remove_dir_all(&dir);
    }
    for (tag, text, word) in [
        (
            "ras_bad",
            "preconditioner { preconditioner RAS; subdomains 0; }",
            "sub-domain",
        ),
        (
            "ilu_bad",
            "preconditioner { preconditioner ILU; fillLevel 20; }",
            "too high",
        ),
    ] {
        let err = edited_error(
            "laplacian_foam_skew",
            "system/fvSolution",
            |t| t.replace("preconditioner  DIC;", text),
            tag,
        );
        assert!(err.contains(word), "{tag}: {err}");
    }
}

#[test]
fn pbicgstab_and_gmres_are_read_from_fv_solution() {
    use fvpoisson::solve::{GmresSettings, KrylovMethod, Orthogonalization, PreconditioningSide};
    let pcg = "solver          PCG;\n        preconditioner  DIC;";
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                pcg,
                "solver          PBiCGStab;\n        preconditioner  diagonal;",
            )
        },
        "pbicgstab",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.krylov,
        Some(KrylovMethod::BiCgStab)
    );
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        PreconditionerKind::Jacobi
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let summary = run_case(&case.setup, Device::Cpu).unwrap();
    assert!(summary.converged);
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                pcg,
                "solver          GMRES;\n        preconditioner  none;\n        nKrylov 30;\n        \
                 orthogonalisation CGS2;\n        preconditioningSide right;\n        flexible yes;",
            )
        },
        "gmres",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.krylov,
        Some(KrylovMethod::Gmres(GmresSettings {
            restart: 30,
            orthogonalization: Orthogonalization::Cgs2,
            side: PreconditioningSide::Right,
            flexible: true,
        }))
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                pcg,
                "solver          PBiCGStab;\n        preconditioner  DILU;",
            )
        },
        "dilu",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        Preconditioner::Kind(PreconditionerKind::Dilu)
    );
    let _ = fs::remove_dir_all(&dir);
    let e = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| t.replace(pcg, "solver          GMRES;\n        nKrylov 0;"),
        "gmres_zero",
    );
    assert!(e.contains("nKrylov") && e.contains("between 1 and"), "{e}");
}

#[test]
fn fsai_preconditioner_from_fv_solution() {
    use fvpoisson::solve::{AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop};
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner FSAI; pattern adaptive; steps 12; stepSize 2; \
                 epsilon 0.01; stop stagnation; postfilter 0.02; precision mixed; }",
            )
        },
        "fsai_precond",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        Preconditioner::Fsai(FsaiSettings {
            pattern: FsaiPattern::Adaptive(AdaptivePattern {
                steps: 12,
                step_size: 2,
                epsilon: 0.01,
                stop: FsaiStop::Stagnation
            }),
            postfilter: 0.02,
            precision: Precision::Mixed,
        })
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    let err = edited_error(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| {
            t.replace(
                "preconditioner  DIC;",
                "preconditioner { preconditioner FSAI; pattern static; power 0; }",
            )
        },
        "fsai_bad",
    );
    assert!(err.contains("FSAI power must be between 1 and 8"), "{err}");
}

#[test]
fn eisenstat_sgs_preconditioner_from_fv_solution() {
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| t.replace("preconditioner  DIC;", "preconditioner eisenstatSGS;"),
        "eisenstat_precond",
    );
    let case = case.unwrap();
    assert_eq!(
        case.setup.solver.regular.preconditioner,
        PreconditionerKind::EisenstatSgs
    );
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    // The same solution as OpenFOAM's DIC-PCG run, to the solver tolerance.
    let rel = max_difference_to_openfoam(&case.setup, "tests/data/laplacian_foam_skew/0.05/T");
    assert!(rel < 1e-9, "relative difference {rel:e}");
    let _ = fs::remove_dir_all(&dir);
}

/// The solver of `T` of shipped case laplacian_foam_skew with its two lines
/// `solver PCG; preconditioner DIC;` replaced by `lines`.
fn skew_solver(lines: &str, tag: &str) -> fvpoisson::case::LinearSolver {
    let (dir, case) = read_edited(
        "laplacian_foam_skew",
        "system/fvSolution",
        |t| t.replace("solver          PCG;\n        preconditioner  DIC;", lines),
        tag,
    );
    let case = case.unwrap_or_else(|e| panic!("{tag}: {e}"));
    assert!(case.warnings.is_empty(), "{tag}: {:?}", case.warnings);
    let _ = fs::remove_dir_all(&dir);
    case.setup.solver.regular
}

#[test]
fn unchanged_dic_and_gamg_run_their_gpu_defaults_and_explicit_keys_win() {
    use fvpoisson::case::SolveTarget;
    // DIC, FDIC and IC(0) without `precision`: the GPU's AMG-PCG (the tuned
    // V-cycle in mixed precision, θ 1.8, on the AMG's other defaults).
    let amg_v_mixed = |p: &Preconditioner| {
        matches!(p, Preconditioner::Amg(s)
            if (s.cycle, s.precision, s.passes, s.omega, s.over_correction)
                == (CycleKind::V, Precision::Mixed, 2, 0.9, 1.8))
    };
    // The shipped dictionary, `PCG; DIC;`, unchanged.
    let dic = read(&common::repo("cases/laplacian_foam_skew"))
        .setup
        .solver
        .regular;
    assert!(!dic.gpu_keys_given);
    assert_eq!(
        SolveTarget::Cpu.adapt(&dic),
        dic,
        "the CPU runs DIC as given"
    );
    let on_gpu = SolveTarget::Gpu.adapt(&dic);
    assert!(
        amg_v_mixed(&on_gpu.preconditioner),
        "{:?}",
        on_gpu.preconditioner
    );
    assert_eq!(on_gpu.controls, dic.controls);
    let note = SolveTarget::Gpu.gpu_note(&dic, "T").unwrap();
    assert_eq!(
        note,
        "T: DIC runs on the GPU as AMG-PCG, V-cycle in mixed precision, 2 matching passes, omega \
         0.9, over-correction 1.8 (faster to the same tolerance than Chebyshev(4) and level-scheduled DIC, its set-up \
         kept while the matrix holds: bench --preconditioners, docs/src/gpu.md)"
    );
    assert_eq!(SolveTarget::Cpu.gpu_note(&dic, "T"), None);
    // Several GPUs split Jacobi-PCG over them, as before.
    assert_eq!(
        SolveTarget::Gpus.adapt(&dic).preconditioner,
        PreconditionerKind::Jacobi
    );
    // FDIC and IC(0) alike.
    for (lines, tag) in [
        ("solver PCG;\n        preconditioner FDIC;", "fdic_default"),
        (
            "solver PCG;\n        preconditioner { preconditioner IC0; }",
            "ic0_default",
        ),
    ] {
        let s = skew_solver(lines, tag);
        assert!(!s.gpu_keys_given, "{tag}");
        let on_gpu = SolveTarget::Gpu.adapt(&s).preconditioner;
        assert!(amg_v_mixed(&on_gpu), "{tag}: {on_gpu:?}");
        assert_eq!(SolveTarget::Cpu.adapt(&s), s, "{tag}");
    }
    // `precision` given: exactly that, flat or in the preconditioner's dictionary.
    let f64_dic = skew_solver(
        "solver PCG;\n        preconditioner DIC;\n        precision double;",
        "dic_double",
    );
    assert!(f64_dic.gpu_keys_given);
    assert_eq!(
        SolveTarget::Gpu.adapt(&f64_dic).preconditioner,
        PreconditionerKind::Dic
    );
    assert_eq!(SolveTarget::Gpu.gpu_note(&f64_dic, "T"), None);
    let mixed_dic = skew_solver(
        "solver PCG;\n        preconditioner { preconditioner DIC; precision mixed; }",
        "dic_mixed",
    );
    assert_eq!(
        SolveTarget::Gpu.adapt(&mixed_dic).preconditioner,
        Preconditioner::MixedIc(PreconditionerKind::Dic)
    );
    // GAMG with OpenFOAM's keys only: the tuned V-cycle in mixed precision,
    // its sweeps from nPreSweeps / nPostSweeps kept; the CPU runs OpenFOAM's
    // GAMG as given.
    let gamg = skew_solver(
        "solver GAMG;\n        smoother GaussSeidel;\n        nPreSweeps 0;\n        \
         nPostSweeps 2;",
        "gamg_default",
    );
    assert!(!gamg.gpu_keys_given);
    assert_eq!(SolveTarget::Cpu.adapt(&gamg), gamg);
    let Preconditioner::Amg(s) = SolveTarget::Gpu.adapt(&gamg).preconditioner else {
        panic!("GAMG runs AMG-PCG on the GPU");
    };
    assert_eq!(
        (s.cycle, s.precision, s.passes, s.omega, s.sweeps),
        (CycleKind::V, Precision::Mixed, 2, 0.9, 1)
    );
    assert_eq!(s.smoother, AmgSmootherKind::L1Jacobi);
    assert!(SolveTarget::Gpu
        .gpu_note(&gamg, "T")
        .unwrap()
        .starts_with("T: GAMG runs on the GPU as AMG-PCG, V-cycle in mixed precision"));
    // GAMG with AMG's own keys, and PCG with a GAMG preconditioner: as given.
    let k_cycle = skew_solver(
        "solver GAMG;\n        smoother GaussSeidel;\n        cycle K;",
        "gamg_k",
    );
    assert!(k_cycle.gpu_keys_given);
    let Preconditioner::Amg(s) = SolveTarget::Gpu.adapt(&k_cycle).preconditioner else {
        panic!("GAMG runs AMG-PCG on the GPU");
    };
    assert_eq!(
        (s.cycle, s.precision, s.passes),
        (CycleKind::K, Precision::Double, 3)
    );
    let pcg_gamg = skew_solver(
        "solver PCG;\n        preconditioner { preconditioner GAMG; smoother DICGaussSeidel; }",
        "pcg_gamg_default",
    );
    let Preconditioner::Amg(s) = SolveTarget::Gpu.adapt(&pcg_gamg).preconditioner else {
        panic!("PCG with GAMG runs AMG-PCG on the GPU");
    };
    assert_eq!((s.cycle, s.precision), (CycleKind::V, Precision::Mixed));
}
