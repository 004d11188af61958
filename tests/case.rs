//! Case files and runs: case.toml parsing errors (file, line, key), the shipped
//! cases against their exact solutions, transient and semi-implicit runs, the
//! files a run writes, and `fvpoisson run` on the command line.

mod common;
use common::{mms_case, write_case_toml, Scratch};

use fvpoisson::case::case_toml::parse_case;
use fvpoisson::case::{read_case_dir, run_case, CaseError, CaseSetup, Device, RunSummary};
use fvpoisson::solve::distributed::Deflation;
use fvpoisson::solve::EquilibrationKind;
use fvpoisson::sparse::RowOrdering;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped(name: &str) -> PathBuf {
    common::repo("cases").join(name)
}

/// Parses `text` as `DIR/case.toml`.
fn parse_in(text: &str, dir: &Path) -> Result<CaseSetup, CaseError> {
    parse_case(text, &dir.join("case.toml"), dir)
}

/// Parses `text` as the case file of a directory that does not exist (nothing is written).
fn parse(text: &str) -> Result<CaseSetup, CaseError> {
    parse_in(text, &common::unique_temp_dir("fvpoisson_case_parse_only"))
}

/// Runs `text` as the case file of the scratch directory `tag`.
fn run_text(text: &str, tag: &str) -> RunSummary {
    let dir = Scratch::new(tag);
    run(&parse_in(text, &dir).unwrap())
}

fn parse_err(text: &str, tag: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("case {tag} should be refused"),
        Err(e) => e.to_string(),
    }
}

/// Each `[solver.T]` entry (in a case on a small box) is refused with an
/// error containing its expected text.
fn assert_solver_entries_refused(tag: &str, cases: &[(&str, &str)]) {
    let head = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\n";
    for (entry, expected) in cases {
        let err = parse_err(&format!("{head}{entry}"), tag);
        assert!(err.contains(expected), "{entry}: {err}");
    }
}

#[test]
fn errors_name_file_line_and_key() {
    let err = parse_err(
        "[mesh]\nsource = \"box:2x2x2\"\n[physics]\nfoo = 1\n",
        "unknown",
    );
    assert!(err.contains("case.toml:4:1:"), "{err}");
    assert!(err.contains("unknown field `foo`"), "{err}");

    for gamma in ["0", "-1"] {
        let text = format!("[mesh]\nsource = \"box:2x2x2\"\n[physics]\ngamma = {gamma}\n");
        let err = parse_err(&text, "negative_gamma");
        assert!(
            err.contains(&format!(
                "case.toml:4:9: physics.gamma is {gamma}; the diffusivity must be positive"
            )),
            "{err}"
        );
    }

    let err = parse_err(
        "[mesh]\nsource = \"box:2x2x2\"\n[physics]\ngamma = true\n",
        "type",
    );
    assert!(err.contains("case.toml:4:9:"), "{err}");
    assert!(
        err.contains(
            "physics.gamma must be a finite number or an expression string, not a boolean"
        ),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[schemes]\nnNonOrthogonalCorrectors = \"two\"\n";
    let err = parse_err(text, "type2");
    assert!(
        err.contains("case.toml:4:28: schemes.nNonOrthogonalCorrectors: invalid type"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[physics]\nsource = \"sin(pi*x\"\n";
    let err = parse_err(text, "expr");
    assert!(
        err.contains("case.toml:4:10: physics.source: cannot parse expression 'sin(pi*x'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[physics]\nsource = \"x + w\"\n";
    let err = parse_err(text, "var");
    assert!(
        err.contains("physics.source") && err.contains("unknown variable 'w'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[boundary.xmin]\ntype = \"fixedValue\"\nvalue = \"exact\"\n";
    let err = parse_err(text, "noexact");
    assert!(
        err.contains("case.toml:5:9: boundary.xmin.value = \"exact\" needs physics.exact"),
        "{err}"
    );

    let text =
        "[mesh]\nsource = \"box:2x2x2\"\n[boundary.xmin]\ntype = \"zeroGradient\"\nvalue = 1\n";
    let err = parse_err(text, "extra");
    assert!(
        err.contains(
            "case.toml:5:9: boundary.xmin.value: a zeroGradient condition takes no 'value'"
        ),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[boundary.xmin]\ntype = \"fixedValue\"\n";
    let err = parse_err(text, "missing");
    assert!(
        err.contains("case.toml:4:8: fixedValue needs 'value'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[time]\nscheme = \"Euler\"\nendTime = 1\n\
                deltaT = 1e-300\n";
    let err = parse_err(text, "tiny_dt");
    assert!(
        err.contains("case.toml:6:10: deltaT 1e-300 over 1 of time makes 1e+300 steps"),
        "{err}"
    );

    // A key of the other time scheme is refused at its value; of two, the
    // one checked first.
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[time]\nendTime = 1\n";
    let err = parse_err(text, "steady_end_time");
    assert!(
        err.contains("case.toml:4:11: time.endTime does not apply to the steadyState scheme"),
        "{err}"
    );
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[time]\nscheme = \"Euler\"\n\
                residualControl = 0.1\nmaxIterations = 5\n";
    let err = parse_err(text, "euler_max_iterations");
    assert!(
        err.contains("case.toml:6:17: time.maxIterations does not apply to the Euler scheme"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[time]\nscheme = \"Euler\"\ndeltaT = 0.1\n";
    let err = parse_err(text, "euler");
    assert!(
        err.contains("case.toml:4:10: the Euler scheme needs time.endTime"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.p]\ntolerance = 1e-6\n";
    let err = parse_err(text, "solver");
    assert!(
        err.contains("case.toml:3:1: solver.p: no field 'p'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\npreconditioner = \"SPAI\"\n";
    let err = parse_err(text, "precond");
    assert!(
        err.contains("case.toml:4:18: solver.T.preconditioner: unknown preconditioner 'SPAI'"),
        "{err}"
    );
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\npreconditioner = \"iluk:x\"\n";
    let err = parse_err(text, "precond_ilu");
    assert!(
        err.contains(
            "case.toml:4:18: solver.T.preconditioner: preconditioner iluk: ILU fill level must be"
        ),
        "{err}"
    );
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\namg = { cycle = \"K\" }\n";
    let err = parse_err(text, "amg");
    assert!(err.contains("solver.T.amg: only AMG uses it"), "{err}");
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\nsolver = \"GAMG\"\n\
                amg = { cycle = \"X\" }\n";
    let err = parse_err(text, "amg cycle");
    assert!(
        err.contains("solver.T.amg.cycle: unknown AMG cycle 'X'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\nequilibration = \"ruz\"\n";
    let err = parse_err(text, "equilibration");
    assert!(
        err.contains("case.toml:4:17: solver.T.equilibration: unknown equilibration 'ruz'"),
        "{err}"
    );

    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\nordering = \"amd\"\n";
    let err = parse_err(text, "ordering");
    assert!(
        err.contains(
            "case.toml:4:12: solver.T.ordering: unknown row ordering 'amd' \
             (use natural, cm, rcm or metis)"
        ),
        "{err}"
    );

    let err = parse_err("[mesh]\nsource = \"no_such_mesh\"\n", "mesh");
    assert!(
        err.contains("case.toml:2:10: mesh.source:") && err.contains("no_such_mesh"),
        "{err}"
    );

    let err = parse_err(
        "[mesh]\nsource = \"box:2x2x2\"\n[output]\nformats = [\"vtk\", \"csv\"]\n",
        "format",
    );
    assert!(
        err.contains("case.toml:4:19: output.formats: unknown format 'csv'"),
        "{err}"
    );

    let err = parse_err("[mesh\n", "syntax");
    assert!(err.contains("case.toml:1:"), "{err}");
}

#[test]
fn values_evaluated_during_the_run_name_the_case_file_and_cell() {
    let text = mms().replace("[physics]\n", "[physics]\ngamma = \"sqrt(x - 0.5)\"\n");
    let setup = parse(&text).unwrap();
    let err = run_case(&setup, Device::Cpu).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}: gamma in cell ", setup.origin)),
        "{err}"
    );
    assert!(
        err.contains("is NaN; it must be finite and positive"),
        "{err}"
    );
}

#[test]
fn case_directories_that_are_not_are_named() {
    let err = |dir: &Path| read_case_dir(dir).unwrap_err().to_string();
    let scratch = Scratch::new("not_a_case");
    let missing = scratch.join("missing");
    assert_eq!(
        err(&missing),
        format!("{}: no such directory", missing.display())
    );
    let file = scratch.join("file");
    fs::write(&file, "").unwrap();
    assert!(err(&file).ends_with("file: not a directory; give the case directory"));
    assert!(err(&scratch).contains("not a case directory: it has neither case.toml"));
    // A directory where a case file should be is named as one, not as missing.
    fs::create_dir(scratch.join("case.toml")).unwrap();
    let e = err(&scratch);
    assert!(
        e.contains("case.toml: a directory, not a regular file"),
        "{e}"
    );
    fs::remove_dir(scratch.join("case.toml")).unwrap();
    fs::create_dir_all(scratch.join("system/controlDict")).unwrap();
    let e = err(&scratch);
    assert!(
        e.contains("controlDict: a directory, not a regular file"),
        "{e}"
    );
}

#[test]
fn boundary_patches_must_match_the_mesh() {
    let missing = mms().replace("[boundary.default]", "[boundary.xmin]");
    let setup = parse(&missing).unwrap();
    let err = run_case(&setup, Device::Cpu).unwrap_err().to_string();
    assert!(
        err.contains("case.toml: patch 'xmax' has no boundary condition"),
        "{err}"
    );

    let unknown = format!("{}[boundary.top]\ntype = \"zeroGradient\"\n", mms());
    let setup = parse(&unknown).unwrap();
    let err = run_case(&setup, Device::Cpu).unwrap_err().to_string();
    assert!(
        err.contains(
            "case.toml:14:1: boundary condition for patch 'top', but the mesh has no such patch"
        ),
        "{err}"
    );
    assert!(err.contains("xmin, xmax, ymin, ymax, zmin, zmax"), "{err}");
}

#[test]
fn two_dimensional_meshes_get_empty_front_and_back() {
    // T = x + 2y is exact for the scheme on a uniform 2-D mesh.
    let text = r#"
[mesh]
source = "box:6x5x1:2d"
[physics]
exact = "x + 2*y"
[boundary.default]
type = "fixedValue"
value = "exact"
[solver.T]
tolerance = 1e-12
[output]
formats = []
"#;
    let summary = run_text(text, "two_d");
    assert_eq!(summary.n_cells, 30);
    assert!(summary.error.unwrap().linf < 1e-10);
}

fn run(setup: &CaseSetup) -> RunSummary {
    run_case(setup, Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", setup.origin))
}

/// Runs a shipped case with its VTK output in a scratch directory and checks
/// the written files: the series, one .vtu per step with every cell, no .tmp.
fn run_shipped(name: &str) -> RunSummary {
    let mut setup = read_case_dir(&shipped(name)).unwrap();
    let out = Scratch::new(name);
    setup.output.directory = out.to_path_buf();
    let summary = run(&setup);
    let pvd = summary.vtk_series.clone().expect("VTK output is on");
    assert_eq!(pvd, out.join(format!("{name}.pvd")));
    let pvd_text = fs::read_to_string(&pvd).unwrap();
    // Steady cases without an interval: the last iteration only.
    assert_eq!(pvd_text.matches("<DataSet").count(), 1);
    let last = out.join(format!("{name}_000000"));
    let vtu = fs::read(last.join("internal.vtu")).unwrap();
    let header = String::from_utf8_lossy(&vtu[..vtu.len().min(2000)]).into_owned();
    assert!(
        header.contains(&format!("NumberOfCells=\"{}\"", summary.n_cells)),
        "{header}"
    );
    for name in ["error", "Gamma", "cellVolume", "cellId", "grad("] {
        assert!(
            header.contains(&format!("Name=\"{name}")),
            "{name} missing: {header}"
        );
    }
    assert_no_tmp(&out);
    summary
}

fn assert_no_tmp(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        assert!(
            path.extension().is_none_or(|e| e != "tmp"),
            "half-written file {}",
            path.display()
        );
        if path.is_dir() {
            assert_no_tmp(&path);
        }
    }
}

fn assert_l2_between(summary: &RunSummary, low: f64, high: f64, what: &str) {
    let l2 = summary.error.expect("exact solution given").l2;
    assert!(
        low <= l2 && l2 <= high,
        "{what}: L2 error {l2}, expected in [{low}, {high}]"
    );
}

#[test]
fn shipped_cases_match_their_exact_solutions() {
    let mms = run_shipped("mms_cube");
    assert_eq!(mms.n_cells, 24 * 24 * 24);
    assert!(mms.converged);
    assert_l2_between(&mms, 4e-4, 6e-4, "mms_cube");

    let tet = run_shipped("nonorth_tet");
    assert_eq!(tet.n_cells, 6000);
    assert!(tet.converged);
    assert_l2_between(&tet, 0.04, 0.09, "nonorth_tet");

    let neumann = run_shipped("neumann_box");
    assert_l2_between(&neumann, 5e-4, 1e-3, "neumann_box");
    let mean: f64 = neumann.field.iter().sum::<f64>() / neumann.n_cells as f64;
    assert!(mean.abs() < 1e-12, "zero mean on a uniform mesh: {mean}");

    // The same with OpenFOAM's reference cell: cell 0 (centre 0.025 (1, 1, 1))
    // held at the exact value there.
    let case = fs::read_to_string(shipped("neumann_box").join("case.toml")).unwrap();
    let exact_0 = (0.025 * std::f64::consts::PI).cos().powi(3);
    let with_cell = case.replace(
        "type = \"zeroMean\"",
        &format!("type = \"cell\"\ncell = 0\nvalue = {exact_0:?}"),
    );
    let pinned = run_text(&with_cell, "neumann_cell");
    assert!(
        (pinned.field[0] - exact_0).abs() < 1e-9,
        "{}",
        pinned.field[0]
    );
    assert_l2_between(&pinned, 5e-4, 4e-3, "neumann_box with a reference cell");
    let err = parse_err(
        &case.replace("type = \"zeroMean\"", "type = \"zeroMean\"\nvalue = 1"),
        "zm",
    );
    assert!(
        err.contains("reference.cell and reference.value need type = \"cell\""),
        "{err}"
    );

    let layers = run_shipped("two_material");
    assert_l2_between(&layers, 0.0, 1e-10, "two_material");
}

#[test]
fn equilibrated_solves_give_the_unscaled_solution() {
    let reference = run_text(&mms(), "equilibration_none");
    for (setting, tag) in [
        (
            "preconditioner = \"none\"\nequilibration = \"jacobi\"",
            "eq_jacobi",
        ),
        ("equilibration = \"ruiz:norm=2:tol=1e-8\"", "eq_ruiz2"),
        // A smoother preconditioner (flexible PCG: inner CG) on S A S.
        (
            "preconditioner = \"blockJacobi\"\ninner = \"CG\"\ninnerTolerance = 1e-2\n\
             blockSize = 64\nequilibration = \"ruiz\"",
            "eq_bj_ruiz",
        ),
    ] {
        let text = mms().replace(
            "tolerance = 1e-10",
            &format!("tolerance = 1e-10\n{setting}"),
        );
        let setup = parse(&text).unwrap();
        assert_ne!(setup.solver.regular.equilibration, EquilibrationKind::None);
        let summary = run_text(&text, tag);
        let d = summary
            .field
            .iter()
            .zip(&reference.field)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(d < 1e-8, "{setting}: field differs by {d}");
        let (l2, l2_ref) = (summary.error.unwrap().l2, reference.error.unwrap().l2);
        assert!(
            (l2 / l2_ref - 1.0).abs() < 1e-6,
            "{setting}: L2 {l2} vs {l2_ref}"
        );
    }
}

#[test]
fn deflation_key_parses_and_bad_values_are_named() {
    let text = mms().replace(
        "tolerance = 1e-10",
        "tolerance = 1e-10\ndeflation = \"subdomains\"",
    );
    let setup = parse(&text).unwrap();
    assert_eq!(setup.solver.regular.deflation, Deflation::Subdomains);
    assert_eq!(
        parse(&mms()).unwrap().solver.regular.deflation,
        Deflation::None
    );
    let err = parse_err(
        &mms().replace(
            "tolerance = 1e-10",
            "tolerance = 1e-10\ndeflation = \"ranks\"",
        ),
        "deflation_bad",
    );
    assert!(
        err.contains("solver.T.deflation: unknown deflation 'ranks' (one of: none, subdomains)"),
        "{err}"
    );
    // A serial run ignores it (one subdomain) and gives the same answer.
    let plain = run_text(&mms(), "deflation_none");
    let deflated = run_text(&text, "deflation_serial");
    assert_eq!(plain.field, deflated.field);
}

#[test]
fn second_order_on_hexahedra_and_correction_on_tetrahedra() {
    let l2 = |text: &str, tag: &str| run_text(text, tag).error.unwrap().l2;
    let coarse = l2(&mms(), "order8");
    let fine = l2(&mms().replace("box:8x8x8", "box:16x16x16"), "order16");
    let order = (coarse / fine).log2();
    assert!((1.9..2.1).contains(&order), "order {order}");

    let tet = fs::read_to_string(shipped("nonorth_tet").join("case.toml")).unwrap();
    let tet = tet.replace("box:10x10x10", "box:5x5x5");
    let corrected = l2(&tet, "tet_corrected");
    let uncorrected = l2(
        &tet.replace("linear corrected", "linear uncorrected"),
        "tet_uncorrected",
    );
    assert!(
        corrected < 0.75 * uncorrected,
        "{corrected} vs {uncorrected}"
    );
}

#[test]
fn implicit_euler_decay_and_semi_implicit_sources() {
    // T = exp(-3 pi^2 t) sin(pi x) sin(pi y) sin(pi z): the heat equation, no source.
    let transient = r#"
[mesh]
source = "box:8x8x8"
[physics]
initial = "sin(pi*x)*sin(pi*y)*sin(pi*z)"
exact = "exp(-3*pi^2*t)*sin(pi*x)*sin(pi*y)*sin(pi*z)"
[boundary.default]
type = "fixedValue"
value = 0
[time]
scheme = "Euler"
deltaT = DT
endTime = 0.03
[solver.T]
tolerance = 1e-12
[output]
formats = []
"#;
    let error = |dt: &str, tag: &str| {
        let summary = run_text(&transient.replace("DT", dt), tag);
        assert!((summary.time - 0.03).abs() < 1e-15, "{}", summary.time);
        (summary.steps, summary.error.unwrap().linf)
    };
    let (steps, coarse) = error("0.004", "euler_coarse"); // 8 steps, the last shortened
    assert_eq!(steps, 8);
    let (_, fine) = error("0.001", "euler_fine");
    // Euler's O(dt) error dominates at this mesh: it falls with dt, toward the
    // spatial error (about 2e-3 times the amplitude exp(-0.89) = 0.41).
    assert!(fine < 0.5 * coarse && fine < 1e-2, "{coarse} {fine}");

    // -lap(T) = Su + Sp T with Sp = -1 (implicit) and Sp = +1 (explicit, lagged).
    let reference = run_text(&mms(), "sp_reference").error.unwrap().l2;
    for (sp, su, tag) in [
        ("-1", "(3*pi^2 + 1)", "sp_implicit"),
        ("1", "(3*pi^2 - 1)", "sp_explicit"),
    ] {
        let text = mms()
            .replace(
                "source = \"3*pi^2*",
                &format!("implicitSource = {sp}\nsource = \"{su}*"),
            )
            .replace("[output]", "[time]\nresidualControl = 1e-9\n[output]");
        let summary = run_text(&text, tag);
        assert!(summary.converged, "{tag}");
        let l2 = summary.error.unwrap().l2;
        assert!(
            (l2 / reference - 1.0).abs() < 0.2,
            "{tag}: {l2} vs {reference}"
        );
    }
}

#[test]
fn foam_output_writes_time_directories() {
    // Steady: the last iteration only, unless an interval is given (as
    // OpenFOAM's writeInterval), then every interval-th and the last.
    let every = mms().replace("formats = []", "formats = [\"foam\"]\ninterval = 1");
    let scratch = Scratch::new("foam_every");
    let setup = parse_in(&every, &scratch).unwrap();
    let summary = run(&setup);
    let dir = &setup.case_dir;
    assert_eq!(
        summary.foam_fields,
        vec![dir.join("1").join("T"), dir.join("2").join("T")]
    );
    let text = mms().replace("formats = []", "formats = [\"foam\"]\nprecision = 12");
    let scratch = Scratch::new("foam_out");
    let setup = parse_in(&text, &scratch).unwrap();
    let summary = run(&setup);
    let dir = &setup.case_dir;
    assert_eq!(summary.foam_fields, vec![dir.join("2").join("T")]);
    assert!(!dir.join("1").exists(), "no time directory before the last");
    assert!(summary.vtk_series.is_none());
    let written = fs::read_to_string(dir.join("2").join("T")).unwrap();
    assert!(
        written.contains("internalField   nonuniform List<scalar>"),
        "{written}"
    );
    // The centre cell of 8^3 hexes is not at the centre: compare the file's
    // first value with the solution, at the 12 digits asked for.
    let first: f64 = written
        .split("List<scalar>")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no first value in {written}"));
    assert!((first - summary.field[0]).abs() <= 1e-11 * summary.field[0].abs());
    for patch in ["xmin", "zmax"] {
        assert!(written.contains(patch), "{patch} missing");
    }
    assert!(written.contains("type            fixedValue;"), "{written}");
    assert_no_tmp(dir);

    let binary = mms().replace(
        "formats = []",
        "formats = [\"foam\"]\nwriteFormat = \"binary\"\nwriteCompression = true",
    );
    let scratch = Scratch::new("foam_binary");
    let summary = run(&parse_in(&binary, &scratch).unwrap());
    assert_eq!(
        summary.foam_fields.last(),
        Some(&scratch.join("2").join("T.gz"))
    );
    let err = parse_err(
        &mms().replace("formats = []", "writeFormat = \"hdf5\""),
        "hdf5",
    );
    assert!(
        err.contains("case.toml:13:15: output.writeFormat 'hdf5'"),
        "{err}"
    );
}

#[test]
fn gpu_row_ordering_is_read_per_solver_and_set_by_the_command_line() {
    let base = "[mesh]\nsource = \"box:2x2x2\"\n";
    let setup = parse(base).unwrap();
    assert_eq!(setup.solver.regular.ordering, RowOrdering::Rcm);
    let text =
        format!("{base}[solver.T]\nordering = \"metis\"\n[solver.TFinal]\ntolerance = 1e-9\n");
    let mut setup = parse(&text).unwrap();
    assert_eq!(setup.solver.regular.ordering, RowOrdering::Metis);
    // TFinal entries default to the T entry's.
    assert_eq!(
        setup.solver.final_corrector.unwrap().ordering,
        RowOrdering::Metis
    );
    setup.solver.set_ordering(RowOrdering::Cm);
    assert_eq!(setup.solver.regular.ordering, RowOrdering::Cm);
    assert_eq!(
        setup.solver.final_corrector.unwrap().ordering,
        RowOrdering::Cm
    );

    // On the command line; an unknown name is refused before anything runs.
    let bin = env!("CARGO_BIN_EXE_fvpoisson");
    let dir = Scratch::new("cli_ordering");
    write_case_toml(&dir, &mms_case("8x8x8", "[output]\nformats = []\n"));
    let out = Command::new(bin)
        .args(["run", "--ordering", "amd"])
        .arg(&*dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown row ordering 'amd'"), "{err}");
    if fvpoisson::gpu::Gpu::new().is_ok() {
        let out = Command::new(bin)
            .args(["run", "--device", "gpu", "--ordering", "metis"])
            .arg(&*dir)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        assert!(log.contains(", metis row ordering"), "{log}");
    }
}

#[test]
fn command_line_runs_a_case_directory() {
    let bin = env!("CARGO_BIN_EXE_fvpoisson");
    let dir = Scratch::new("cli");
    write_case_toml(&dir, &mms_case("8x8x8", "[output]\nformats = [\"vtk\"]\n"));
    let out = Command::new(bin).args(["run"]).arg(&*dir).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    for line in [
        "Linear solves on the ",
        "Mesh: 512 cells",
        "PCG:  Solving for T, Initial residual = 1, Final residual = ",
        "ExecutionTime = ",
        "SIMPLE solution converged in 2 iterations",
        "Error against the exact solution: L1 = ",
    ] {
        assert!(log.contains(line), "'{line}' missing from:\n{log}");
    }
    let series = dir.join("results").join(format!(
        "{}.pvd",
        dir.file_name().unwrap().to_string_lossy()
    ));
    assert!(series.is_file(), "{}", series.display());

    let out = Command::new(bin)
        .args(["run", "--device", "gpu"])
        .arg(&*dir)
        .output()
        .unwrap();
    if fvpoisson::gpu::Gpu::new().is_ok() {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        // An explicit --device gpu without a device is an error, never a silent CPU run.
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no CUDA device"));
    }

    let empty = Scratch::new("cli_empty");
    let out = Command::new(bin)
        .args(["run", "--device", "cpu"])
        .arg(&*empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("neither case.toml nor system/controlDict"),
        "{err}"
    );
}

/// The manufactured-solution case of these tests: 8³ cells, no output.
fn mms() -> String {
    mms_case("8x8x8", "[output]\nformats = []\n")
}

/// The MMS case with `entry` (TOML lines) added to its `[solver.T]` table.
fn mms_with_solver_entry(entry: &str) -> String {
    mms().replace(
        "tolerance = 1e-10\n",
        &format!("tolerance = 1e-10\n{entry}"),
    )
}

#[test]
fn smoothers_from_case_toml_solve_like_pcg() {
    use fvpoisson::solve::{InnerSolver, Preconditioner, SmootherKind, Sweep};
    let smooth = mms_with_solver_entry(
        "solver = \"smoothSolver\"\nsmoother = \"symGaussSeidel\"\nnSweeps = 2\nmaxIter = 5000\n",
    );
    let setup = parse(&smooth).unwrap();
    let s = setup.solver.regular.smoother.unwrap();
    assert_eq!(
        (s.kind, s.sweeps),
        (SmootherKind::GaussSeidel(Sweep::Symmetric), 2)
    );
    let block = mms_with_solver_entry(
        "preconditioner = \"blockJacobi\"\ninner = \"symGaussSeidel\"\ninnerTolerance = 0\n\
         innerMaxIter = 2\nblockSize = 64\n",
    );
    let setup = parse(&block).unwrap();
    let Preconditioner::Smoother(b) = setup.solver.regular.preconditioner else {
        panic!("a smoother preconditioner")
    };
    assert_eq!(
        (b.block.inner, b.block.block_size),
        (InnerSolver::SymGaussSeidel, 64)
    );
    assert!(setup.solver.regular.smoother.is_none());
    // Every solver converges to the same discrete solution.
    let reference = run_text(&mms(), "smooth_ref").field;
    for (text, tag) in [(smooth, "smooth_sgs"), (block, "smooth_bj")] {
        let field = run_text(&text, tag).field;
        let diff = field
            .iter()
            .zip(&reference)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 1e-7, "{tag}: {diff}");
    }
}

#[test]
fn polynomial_preconditioners_from_case_toml_solve_like_pcg() {
    use fvpoisson::solve::{
        EigenBound, PolynomialKind, PolynomialSettings, Precision, Preconditioner,
    };
    let text = mms_with_solver_entry(
        "preconditioner = \"Chebyshev\"\ndegree = 3\neigenBound = \"Lanczos\"\n\
         eigenRatio = 20.0\nprecision = \"mixed\"\n",
    );
    let setup = parse(&text).unwrap();
    assert_eq!(
        setup.solver.regular.preconditioner,
        Preconditioner::Polynomial(PolynomialSettings {
            degree: 3,
            bound: EigenBound::Lanczos { steps: 10 },
            eigen_ratio: 20.0,
            precision: Precision::Mixed,
            ..PolynomialSettings::new(PolynomialKind::Chebyshev, 4)
        })
    );
    let reference = run_text(&mms(), "poly_ref").field;
    let field = run_text(&text, "poly_cheb").field;
    let diff = field
        .iter()
        .zip(&reference)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-7, "{diff}");
    assert_solver_entries_refused(
        "polynomial_keys",
        &[
            (
                "degree = 4\n",
                "case.toml:4:10: solver.T.degree: only a polynomial preconditioner or smoother uses it",
            ),
            (
                "preconditioner = \"Neumann\"\ndegree = 0\n",
                "solver.T: invalid solver controls: degree must be between 1 and 32",
            ),
            (
                "preconditioner = \"leastSquares\"\nprecision = \"half\"\n",
                "case.toml:5:13: solver.T.precision: unknown precision 'half'",
            ),
        ],
    );
}

#[test]
fn block_ic_from_case_toml_solves_like_pcg() {
    use fvpoisson::solve::{InnerSolver, Precision, Preconditioner};
    let text = mms_with_solver_entry(
        "preconditioner = \"blockIC\"\nblockSize = 64\nprecision = \"mixed\"\n",
    );
    let setup = parse(&text).unwrap();
    let Preconditioner::Smoother(s) = setup.solver.regular.preconditioner else {
        panic!("block-IC is a smoother preconditioner")
    };
    assert_eq!(
        (s.block.inner, s.block.block_size, s.polynomial.precision),
        (InnerSolver::Ic0, 64, Precision::Mixed)
    );
    assert_eq!(s.block_ic_name(), Some("blockIC"));
    let reference = run_text(&mms(), "block_ic_ref").field;
    for (text, tag) in [
        (text, "block_ic"),
        (
            mms_with_solver_entry("preconditioner = \"blockDIC\"\nblockSize = 128\n"),
            "block_dic",
        ),
    ] {
        let field = run_text(&text, tag).field;
        let diff = field
            .iter()
            .zip(&reference)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 1e-7, "{tag}: {diff}");
    }
    assert_solver_entries_refused(
        "block_ic_keys",
        &[
            (
                "preconditioner = \"blockIC\"\ndegree = 4\n",
                "case.toml:5:10: solver.T.degree: only a polynomial preconditioner or smoother uses \
                 it (DIC, IC0, block Jacobi, block-IC and Jacobi take precision only)",
            ),
            (
                "preconditioner = \"blockDIC\"\nprecision = \"half\"\n",
                "case.toml:5:13: solver.T.precision: unknown precision 'half'",
            ),
            (
                "solver = \"smoothSolver\"\nsmoother = \"blockIC\"\nasynchronous = true\n",
                "block-IC (inner IC0) is synchronous only",
            ),
            (
                "solver = \"smoothSolver\"\nsmoother = \"DIC\"\nprecision = \"mixed\"\n",
                "case.toml:6:13: solver.T.precision: only a polynomial preconditioner or smoother \
                 uses it",
            ),
        ],
    );
}

#[test]
fn smoother_keys_are_checked() {
    assert_solver_entries_refused(
        "smoother_keys",
        &[
            (
                "omega = 0.5\n",
                "case.toml:4:9: solver.T.omega: only a smoother uses it",
            ),
            (
                "solver = \"smoothSolver\"\n",
                "case.toml:4:10: solver.T: smoothSolver needs a smoother",
            ),
            (
                "smoother = \"GaussSeidel\"\n",
                "case.toml:4:12: solver.T.smoother: only smoothSolver has a smoother",
            ),
            (
                "solver = \"smoothSolver\"\nsmoother = \"blockJacobi\"\ninner = \"ILU\"\n",
                "case.toml:6:9: solver.T.inner: unknown inner solver 'ILU'",
            ),
            (
                "preconditioner = \"GaussSeidel\"\n",
                "solver.T.preconditioner: preconditioner GaussSeidel: the GaussSeidel smoother is not \
                 symmetric",
            ),
            (
                "solver = \"smoothSolver\"\nsmoother = \"Jacobi\"\nomega = 3\n",
                "solver.T: omega (Jacobi damping) must be in (0, 2]",
            ),
            (
                "solver = \"smoothSolver\"\nsmoother = \"Jacobi\"\nequilibration = \"jacobi\"\n",
                "case.toml:6:17: solver.T.equilibration: only PCG equilibrates its system",
            ),
        ],
    );
}

#[test]
fn amg_from_case_toml_solves_like_pcg() {
    use fvpoisson::solve::amg::{AmgSmootherKind, CycleKind};
    use fvpoisson::solve::Preconditioner;
    let pcg_amg = mms_with_solver_entry(
        "preconditioner = \"AMG\"\namg = { cycle = \"K\", smoother = \"Chebyshev\", sweeps = 2, \
         coarsestRows = 20 }\n",
    );
    let setup = parse(&pcg_amg).unwrap();
    let Preconditioner::Amg(s) = setup.solver.regular.preconditioner else {
        panic!("an AMG preconditioner")
    };
    assert_eq!(
        (s.cycle, s.smoother, s.sweeps, s.coarsest_rows),
        (CycleKind::K, AmgSmootherKind::Chebyshev, 2, 20)
    );
    let mixed = mms_with_solver_entry(
        "preconditioner = \"AMG\"\namg = { cycle = \"V\", precision = \"mixed\" }\n",
    );
    let Preconditioner::Amg(m) = parse(&mixed).unwrap().solver.regular.preconditioner else {
        panic!("an AMG preconditioner")
    };
    assert_eq!(m.precision, fvpoisson::solve::amg::Precision::Mixed);
    let bad = mms_with_solver_entry("preconditioner = \"AMG\"\namg = { precision = \"half\" }\n");
    assert!(parse(&bad)
        .unwrap_err()
        .to_string()
        .contains("double, mixed"));
    let gamg =
        mms_with_solver_entry("solver = \"GAMG\"\namg = { coarsestRows = 20 }\nmaxIter = 200\n");
    let setup = parse(&gamg).unwrap();
    assert_eq!(
        setup.solver.regular.gamg.map(|s| s.amg.coarsest_rows),
        Some(20)
    );
    let with_keys = mms_with_solver_entry(
        "solver = \"GAMG\"\ngamg = { smoother = \"DICGaussSeidel\", nPostSweeps = 3 }\n",
    );
    let gamg_keys = parse(&with_keys).unwrap().solver.regular.gamg.unwrap();
    assert_eq!(
        (gamg_keys.smoother, gamg_keys.n_post_sweeps),
        (fvpoisson::solve::gamg::GamgSmoother::DicGaussSeidel, 3)
    );
    let bad = mms_with_solver_entry("solver = \"GAMG\"\ngamg = { nPostSweeps = \"two\" }\n");
    assert!(parse(&bad)
        .unwrap_err()
        .to_string()
        .contains("solver.T.gamg.nPostSweeps: GAMG nPostSweeps must be a whole number"));
    let reference = run_text(&mms(), "amg_ref").field;
    for (text, tag) in [(pcg_amg, "pcg_amg"), (gamg, "gamg")] {
        let field = run_text(&text, tag).field;
        let diff = field
            .iter()
            .zip(&reference)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 1e-7, "{tag}: {diff}");
    }
}

/// GAMG on an all-Neumann case (zero-mean reference, tolerance 1e-10): the
/// coarsest level is singular like the fine matrix and its right-hand side
/// is made consistent, so the solve converges (it used to stop with p·Ap < 0
/// in the coarsest PCG) to the field of the case's DIC-PCG.
#[test]
fn gamg_solves_an_all_neumann_case() {
    use fvpoisson::solve::gamg::GamgSettings;
    let shipped = read_case_dir(&shipped("neumann_box")).unwrap();
    let mut gamg = shipped.clone();
    gamg.solver.regular.gamg = Some(GamgSettings::default());
    let out = Scratch::new("neumann_gamg");
    gamg.output.directory = out.to_path_buf();
    let mut dic = shipped;
    let out_dic = Scratch::new("neumann_dic");
    dic.output.directory = out_dic.to_path_buf();
    let with_gamg = run(&gamg);
    let with_dic = run(&dic);
    assert!(with_gamg.converged && with_dic.converged);
    let d = common::range_difference(&with_dic.field, &with_gamg.field);
    assert!(d < 1e-7, "GAMG against DIC-PCG: {d:e} of the range");
}

#[test]
fn gmres_and_bicgstab_from_case_toml_solve_like_pcg() {
    use fvpoisson::solve::{
        GmresSettings, KrylovMethod, Orthogonalization, PreconditionerKind, PreconditioningSide,
    };
    let gmres = mms_with_solver_entry(
        "solver = \"GMRES\"\npreconditioner = \"diagonal\"\nnKrylov = 12\n\
         orthogonalisation = \"CGS2\"\npreconditioningSide = \"left\"\n",
    );
    let setup = parse(&gmres).unwrap();
    let regular = setup.solver.regular;
    assert_eq!(
        regular.krylov,
        Some(KrylovMethod::Gmres(GmresSettings {
            restart: 12,
            orthogonalization: Orthogonalization::Cgs2,
            side: PreconditioningSide::Left,
            flexible: false,
        }))
    );
    assert_eq!(regular.preconditioner, PreconditionerKind::Jacobi);
    let bicg = mms_with_solver_entry("solver = \"PBiCGStab\"\npreconditioner = \"none\"\n");
    assert_eq!(
        parse(&bicg).unwrap().solver.regular.krylov,
        Some(KrylovMethod::BiCgStab)
    );
    let flexible = mms_with_solver_entry("solver = \"GMRES\"\nflexible = true\n");
    let Some(KrylovMethod::Gmres(s)) = parse(&flexible).unwrap().solver.regular.krylov else {
        panic!("GMRES")
    };
    assert!(s.flexible && s.restart == 20);
    let reference = run_text(&mms(), "krylov_ref").field;
    for (text, tag) in [
        (gmres, "krylov_gmres"),
        (bicg, "krylov_bicg"),
        (flexible, "krylov_fgmres"),
    ] {
        let field = run_text(&text, tag).field;
        let diff = field
            .iter()
            .zip(&reference)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff < 1e-7, "{tag}: {diff}");
    }
    assert_solver_entries_refused(
        "krylov_bad",
        &[
            ("solver = \"PCG\"\nnKrylov = 10\n", "only GMRES uses it"),
            (
                "solver = \"PBiCGStab\"\nflexible = true\n",
                "only GMRES uses it",
            ),
            ("solver = \"GMRES\"\nnKrylov = 0\n", "between 1 and"),
            (
                "solver = \"GMRES\"\northogonalisation = \"QR\"\n",
                "MGS or CGS2",
            ),
            (
                "solver = \"GMRES\"\npreconditioningSide = \"both\"\n",
                "left or right",
            ),
            (
                "solver = \"GMRES\"\npreconditioningSide = \"left\"\nflexible = true\n",
                "flexible",
            ),
            (
                "solver = \"PBiCGStab\"\nequilibration = \"jacobi\"\n",
                "only PCG",
            ),
            ("solver = \"BiCG\"\n", "PBiCGStab or GMRES"),
        ],
    );
}

#[test]
fn fsai_from_case_toml_solves_like_pcg() {
    use fvpoisson::solve::{
        AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop, Precision, Preconditioner,
    };
    let text = mms_with_solver_entry(
        "preconditioner = \"FSAI\"\nfsai = { steps = 20, epsilon = 0.001, stop = \"reduction\", \
         precision = \"mixed\" }\n",
    );
    let setup = parse(&text).unwrap();
    assert_eq!(
        setup.solver.regular.preconditioner,
        Preconditioner::Fsai(FsaiSettings {
            pattern: FsaiPattern::Adaptive(AdaptivePattern {
                steps: 20,
                step_size: 1,
                epsilon: 0.001,
                stop: FsaiStop::Reduction
            }),
            postfilter: 0.0,
            precision: Precision::Mixed,
        })
    );
    let reference = run_text(&mms(), "fsai_ref").field;
    let field = run_text(&text, "fsai_run").field;
    let diff = field
        .iter()
        .zip(&reference)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-7, "{diff}");
    let static_text = mms_with_solver_entry(
        "preconditioner = \"FSAI\"\nfsai = { pattern = \"static\", power = 2, prefilter = 0.05, \
         postfilter = 0.01 }\n",
    );
    assert_eq!(
        parse(&static_text).unwrap().solver.regular.preconditioner,
        Preconditioner::Fsai(FsaiSettings {
            pattern: FsaiPattern::Static {
                power: 2,
                prefilter: 0.05
            },
            postfilter: 0.01,
            precision: Precision::Double,
        })
    );
    assert_solver_entries_refused(
        "fsai_keys",
        &[
            (
                "fsai = { steps = 5 }\n",
                "solver.T.fsai: only the FSAI preconditioner uses it",
            ),
            (
                "preconditioner = \"FSAI\"\nfsai = { steps = 16, stepSize = 2 }\n",
                "case.toml:5:8: solver.T.fsai: FSAI steps * stepSize must be at most 31",
            ),
            (
                "preconditioner = \"FSAI\"\nfsai = { power = 2 }\n",
                "FSAI power applies to pattern static, but the pattern is adaptive",
            ),
            (
                "preconditioner = \"FSAI\"\nfsai = { colour = 2 }\n",
                "unknown FSAI parameter 'colour'",
            ),
        ],
    );
}

/// `precision` reaches DIC / IC(0) (`Preconditioner::MixedIc`, the GPU's
/// f32 level-scheduled sweeps) and block Jacobi (`smooth_block_f32`); on the
/// CPU both solve as in f64.
#[test]
fn precision_reaches_dic_ic0_and_block_jacobi_from_case_toml() {
    use fvpoisson::solve::{InnerSolver, Precision, Preconditioner, PreconditionerKind};
    let preconditioner = |entry: &str| {
        parse(&mms_with_solver_entry(entry))
            .unwrap()
            .solver
            .regular
            .preconditioner
    };
    assert_eq!(
        preconditioner("preconditioner = \"DIC\"\nprecision = \"mixed\"\n"),
        Preconditioner::MixedIc(PreconditionerKind::Dic)
    );
    assert_eq!(
        preconditioner("preconditioner = \"ic0\"\nprecision = \"mixed\"\n"),
        Preconditioner::MixedIc(PreconditionerKind::Ic0)
    );
    assert_eq!(
        preconditioner("preconditioner = \"DIC\"\nprecision = \"double\"\n"),
        Preconditioner::Kind(PreconditionerKind::Dic)
    );
    let Preconditioner::Smoother(s) = preconditioner(
        "preconditioner = \"blockJacobi\"\ninner = \"CG\"\ninnerTolerance = 1e-3\nprecision = \"mixed\"\n",
    ) else {
        panic!("block Jacobi is a smoother preconditioner")
    };
    assert_eq!(
        (s.block.inner, s.polynomial.precision),
        (InnerSolver::Cg, Precision::Mixed)
    );
    let reference = run_text(&mms(), "mixed_dic_ref").field;
    let field = run_text(
        &mms_with_solver_entry("preconditioner = \"DIC\"\nprecision = \"mixed\"\n"),
        "mixed_dic",
    )
    .field;
    let diff = field
        .iter()
        .zip(&reference)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-7, "{diff}");
    assert_solver_entries_refused(
        "mixed_dic_keys",
        &[
            (
                "preconditioner = \"DIC\"\ndegree = 4\n",
                "case.toml:5:10: solver.T.degree: only a polynomial preconditioner or smoother uses \
                 it",
            ),
            (
                "preconditioner = \"DIC\"\nprecision = \"half\"\n",
                "case.toml:5:13: solver.T.precision: unknown precision 'half'",
            ),
            (
                "preconditioner = \"diagonal\"\nprecision = \"mixed\"\n",
                "case.toml:5:13: solver.T.precision: only a polynomial preconditioner or smoother \
                 uses it",
            ),
        ],
    );
}

#[test]
fn eisenstat_sgs_from_case_toml() {
    use fvpoisson::solve::PreconditionerKind;
    let text = "[mesh]\nsource = \"box:2x2x2\"\n[solver.T]\npreconditioner = \"eisenstatSGS\"\n";
    let setup = parse(text).unwrap();
    assert_eq!(
        setup.solver.regular.preconditioner,
        PreconditionerKind::EisenstatSgs
    );
}
