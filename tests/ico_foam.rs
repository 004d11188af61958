//! icoFoam cases run as they are: the cavity tutorial against OpenFOAM v1912's
//! result (`tests/data/ico_foam_cavity`, made by `scripts/ico_foam_reference.sh`),
//! its mesh built from `system/blockMeshDict`, and restarts from a written time.

mod common;

use fvpoisson::case::ico_foam::{read_transient_case, run_transient_case, TransientSummary};
use fvpoisson::case::Device;
use fvpoisson::io::foam_field::{FieldValues, ScalarFieldFile, VectorFieldFile};
use fvpoisson::mesh::Vec3;
use std::path::{Path, PathBuf};

/// A copy of `cases/<case>` in a fresh temp dir, with `edits` applied to its
/// controlDict (whole lines starting with the key replaced).
fn case_copy(case: &str, tag: &str, edits: &[(&str, &str)]) -> PathBuf {
    let dir = common::case_inputs_copy(&format!("cases/{case}"), tag);
    edit_control(&dir, edits);
    dir
}

fn edit_control(dir: &Path, edits: &[(&str, &str)]) {
    let path = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            match edits
                .iter()
                .find(|(key, _)| line.split_whitespace().next() == Some(key))
            {
                Some((key, value)) => format!("{key} {value};"),
                None => line.to_string(),
            }
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
}

fn run(dir: &Path) -> TransientSummary {
    let case = read_transient_case(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    run_transient_case(&case.setup, &case.mesh, Device::Cpu).unwrap()
}

/// max |a − b| / max |b|.
fn relative(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}

fn components(u: &[Vec3]) -> Vec<f64> {
    u.iter().flat_map(|v| [v.x, v.y, v.z]).collect()
}

#[test]
fn cavity_tutorial_matches_icofoam_at_end_time() {
    let dir = case_copy("cavity_ico", "parity", &[]);
    assert!(!dir.join("constant/polyMesh").exists());
    let summary = run(&dir);
    assert_eq!(summary.steps, 100);
    let n = summary.p.len();
    let reference = common::repo("tests/data/ico_foam_cavity/0.5");
    let u = VectorFieldFile::read(&reference.join("U"), n).unwrap();
    let p = ScalarFieldFile::read(&reference.join("p"), n).unwrap();
    let FieldValues::NonUniform(p_ref) = p.internal else {
        panic!("nonuniform p expected")
    };
    let u_ref = u.internal.expand(n);
    let du = relative(&components(&summary.u), &components(&u_ref));
    let dp = relative(&summary.p, &p_ref);
    eprintln!("cavity at t = 0.5: max |ΔU|/max|U| = {du:e}, max |Δp|/max|p| = {dp:e}");
    assert!(du <= 1e-6 && dp <= 1e-6, "U {du:e}, p {dp:e}");
    // Written every 20 steps as OpenFOAM time directories.
    for t in ["0.1", "0.2", "0.3", "0.4", "0.5"] {
        for f in ["U", "p", "phi"] {
            assert!(dir.join(t).join(f).is_file(), "{t}/{f}");
        }
    }
    assert!(!dir.join("0.105").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// U (as its components, one after the other) and p written in `time_dir`.
fn read_fields(time_dir: &Path, n: usize) -> (Vec<f64>, Vec<f64>) {
    let u = VectorFieldFile::read(&time_dir.join("U"), n).unwrap();
    let p = ScalarFieldFile::read(&time_dir.join("p"), n).unwrap();
    (components(&u.internal.expand(n)), p.internal.expand(n))
}

/// pimpleFoam's `adjustTimeStep yes` (maxCo 0.5, maxDeltaT 0.004) with
/// `writeControl adjustableRunTime`: the same 33 steps as pimpleFoam v1912,
/// landing on the write times 0.05 and 0.1, with its U and p there
/// (`scripts/pimple_foam_adjust_reference.sh`); icoFoam refuses it.
#[test]
fn adjusted_time_steps_match_pimplefoam() {
    let dir = pimple_cavity("adjust", 1, "", "laminar");
    edit_control(
        &dir,
        &[
            ("endTime", "0.1"),
            ("writeControl", "adjustableRunTime"),
            ("writeInterval", "0.05"),
        ],
    );
    let control = dir.join("system/controlDict");
    let mut text = std::fs::read_to_string(&control).unwrap();
    text += "\nadjustTimeStep  yes;\nmaxCo           0.5;\nmaxDeltaT       0.004;\n";
    std::fs::write(&control, text).unwrap();
    let summary = run(&dir);
    assert_eq!(summary.steps, 33);
    assert!((summary.time - 0.1).abs() < 1e-12, "{}", summary.time);
    let n = summary.p.len();
    for time in ["0.05", "0.1"] {
        let (u, p) = read_fields(&dir.join(time), n);
        let (u_ref, p_ref) =
            read_fields(&common::repo("tests/data/pimple_foam_adjust").join(time), n);
        let (du, dp) = (relative(&u, &u_ref), relative(&p, &p_ref));
        eprintln!("adjustTimeStep, t = {time}: ΔU {du:e}, Δp {dp:e}");
        assert!(du <= 1e-8 && dp <= 1e-8, "{time}: U {du:e}, p {dp:e}");
    }
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.parse::<f64>().is_ok())
        .collect();
    written.sort();
    assert_eq!(written, ["0", "0.05", "0.1"]);
    // A restart from 0.05 goes on with the Δt that reached 0.05 (its
    // `uniform/time`), whatever controlDict's deltaT now says, as
    // pimpleFoam v1912 does: the same steps to the same fields.
    let whole = read_fields(&dir.join("0.1"), n);
    std::fs::remove_dir_all(dir.join("0.1")).unwrap();
    edit_control(&dir, &[("startFrom", "latestTime"), ("deltaT", "0.0001")]);
    let restarted = run(&dir);
    assert!((restarted.time - 0.1).abs() < 1e-12, "{}", restarted.time);
    // pimpleFoam's steps after 0.05, from its log.
    let log = std::fs::read_to_string(common::repo("tests/data/pimple_foam_adjust/log.pimpleFoam"))
        .unwrap();
    let after: usize = log
        .lines()
        .filter_map(|l| l.strip_prefix("Time = ")?.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.05 + 1e-9)
        .count();
    assert_eq!(restarted.steps, after);
    let again = read_fields(&dir.join("0.1"), n);
    let (du, dp) = (relative(&again.0, &whole.0), relative(&again.1, &whole.1));
    assert!(du <= 1e-10 && dp <= 1e-10, "restart: U {du:e}, p {dp:e}");
    let _ = std::fs::remove_dir_all(&dir);

    let ico = case_copy("cavity_ico", "ico-adjust", &[]);
    let control = ico.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap() + "\nadjustTimeStep yes;\n";
    std::fs::write(&control, text).unwrap();
    let err = read_transient_case(&ico).unwrap_err().to_string();
    assert!(
        err.contains("controlDict") && err.contains("adjustTimeStep"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&ico);
}

/// The shipped 3-D cavity (`cases/cavity3d_ico`, 100³ cells) coarsened to
/// 8³: 4 steps equal icoFoam v1912's (5 PBiCGStab/DILU iterations for U, PCG/DIC
/// for p to 1e-4; `scripts/ico_foam_cavity3d_reference.sh`), and the run logs its
/// time per step by part.
#[test]
fn cavity3d_matches_icofoam_coarsened() {
    let dir = case_copy(
        "cavity3d_ico",
        "cavity3d",
        &[
            ("endTime", "0.002"),
            ("writeInterval", "4"),
            ("writePrecision", "17"),
        ],
    );
    let mesh_dict = dir.join("system/blockMeshDict");
    let text = std::fs::read_to_string(&mesh_dict).unwrap();
    assert!(text.contains("(100 100 100)"), "the shipped case changed");
    std::fs::write(&mesh_dict, text.replace("(100 100 100)", "(8 8 8)")).unwrap();
    let summary = run(&dir);
    assert_eq!(summary.steps, 4);
    assert_eq!(summary.timing.steps, 4);
    assert!(summary.timing.total > 0.0 && summary.timing.pressure_solves > 0.0);
    assert!(summary.timing.momentum + summary.timing.pressure_solves <= summary.timing.total);
    let n = summary.p.len();
    assert_eq!(n, 512);
    let reference = common::repo("tests/data/ico_foam_cavity3d/0.002");
    let u_ref = VectorFieldFile::read(&reference.join("U"), n)
        .unwrap()
        .internal
        .expand(n);
    let p_ref = ScalarFieldFile::read(&reference.join("p"), n)
        .unwrap()
        .internal
        .expand(n);
    let du = relative(&components(&summary.u), &components(&u_ref));
    let dp = relative(&summary.p, &p_ref);
    eprintln!("3-D cavity 8³ at t = 0.002: ΔU {du:e}, Δp {dp:e}");
    assert!(du <= 1e-12 && dp <= 1e-12, "U {du:e}, p {dp:e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fvpoisson run --device cpu DIR` as a user runs it: its log, after
/// checking that it succeeded.
fn run_binary_on_cpu(dir: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(["run", "--device", "cpu"])
        .arg(dir)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    log
}

/// One `<solver>:  Solving for <field>...` line of a log: the solver as
/// OpenFOAM names it (`DICPCG`, `DILUPBiCGStab`), the field, and the initial
/// and final residuals and iterations, or `None` for "solution singularity".
type SolverLine = (String, String, Option<(f64, f64, usize)>);

fn solver_lines(log: &str) -> Vec<SolverLine> {
    log.lines()
        .filter_map(|line| {
            let (solver, rest) = line.split_once(":  Solving for ")?;
            if let Some(field) = rest.strip_suffix(":  solution singularity") {
                return Some((solver.to_string(), field.to_string(), None));
            }
            let (field, rest) = rest.split_once(", Initial residual = ")?;
            let (initial, rest) = rest.split_once(", Final residual = ")?;
            let (last, iterations) = rest.split_once(", No Iterations ")?;
            let numbers = (
                initial.parse().unwrap(),
                last.parse().unwrap(),
                iterations.trim().parse().unwrap(),
            );
            Some((solver.to_string(), field.to_string(), Some(numbers)))
        })
        .collect()
}

/// The 3-D cavity at 8³ on the CPU prints icoFoam v1912's solver lines
/// (`tests/data/ico_foam_cavity3d/log.icoFoam`): the solvers named as
/// OpenFOAM names them, "solution singularity" for the components of U that
/// are zero on the first step, the same iterations, and residuals equal to
/// the log's 6 digits.
#[test]
fn cavity3d_solver_lines_are_icofoams() {
    let dir = case_copy(
        "cavity3d_ico",
        "cavity3d_log",
        &[("endTime", "0.002"), ("writeInterval", "4")],
    );
    let mesh_dict = dir.join("system/blockMeshDict");
    let text = std::fs::read_to_string(&mesh_dict).unwrap();
    std::fs::write(&mesh_dict, text.replace("(100 100 100)", "(8 8 8)")).unwrap();
    let log = run_binary_on_cpu(&dir);
    let ours = solver_lines(&log);
    let reference =
        std::fs::read_to_string(common::repo("tests/data/ico_foam_cavity3d/log.icoFoam")).unwrap();
    let theirs = solver_lines(&reference);
    assert_eq!(ours.len(), 20, "{log}");
    assert_eq!(ours.len(), theirs.len(), "{log}");
    let close = |a: f64, b: f64| {
        // Below 1e-12 a residual is round-off, whose digits need not agree.
        (a < 1e-12 && b < 1e-12) || (a - b).abs() <= 1e-5 * b.abs()
    };
    for (line, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!((&a.0, &a.1), (&b.0, &b.1), "solver line {line}");
        match (a.2, b.2) {
            (None, None) => {}
            (Some((ai, af, an)), Some((bi, bf, bn))) => assert!(
                an == bn && close(ai, bi) && close(af, bf),
                "solver line {line}: {a:?} against icoFoam's {b:?}"
            ),
            _ => panic!("solver line {line}: {a:?} against icoFoam's {b:?}"),
        }
    }
    assert_eq!(ours.iter().filter(|l| l.2.is_none()).count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cases/cavity_ico` (with `prepare` applied) run 20 steps in one go, and
/// 10 steps then restarted from the latest time to the same end: the whole
/// run's summary, U, p and φ of the restart against it (relative), and the
/// two case directories.
fn whole_and_restarted(
    tag: &str,
    prepare: impl Fn(&Path),
) -> (TransientSummary, [f64; 3], [PathBuf; 2]) {
    let precise = [("writePrecision", "17"), ("writeInterval", "10")];
    let whole = case_copy(
        "cavity_ico",
        &format!("{tag}_whole"),
        &[precise[0], precise[1], ("endTime", "0.1")],
    );
    prepare(&whole);
    let reference = run(&whole);
    assert_eq!(reference.steps, 20);
    let halves = case_copy(
        "cavity_ico",
        &format!("{tag}_halves"),
        &[precise[0], precise[1], ("endTime", "0.05")],
    );
    prepare(&halves);
    assert_eq!(run(&halves).steps, 10);
    edit_control(&halves, &[("endTime", "0.1"), ("startFrom", "latestTime")]);
    let restarted = run(&halves);
    assert_eq!(restarted.steps, 10);
    let d = [
        relative(&components(&restarted.u), &components(&reference.u)),
        relative(&restarted.p, &reference.p),
        relative(&restarted.phi, &reference.phi),
    ];
    eprintln!("{tag}: restart at 0.05, relative ΔU, Δp, Δphi {d:?}");
    (reference, d, [whole, halves])
}

#[test]
fn restart_from_latest_time_continues_the_same_trajectory() {
    let (_, d, [whole, halves]) = whole_and_restarted("euler", |_| {});
    assert!(d.iter().all(|&x| x < 1e-12), "{d:?}");
    // The restarted run's VTK step is listed after the first run's, which
    // it keeps: one series over the whole time range.
    let name = fvpoisson::io::vtk::series_name_for(&halves);
    let vtk = halves.join("VTK");
    let pvd = std::fs::read_to_string(vtk.join(format!("{name}.pvd"))).unwrap();
    let listed: Vec<(f64, &str)> = fvpoisson::io::vtk::pvd_datasets(&pvd)
        .unwrap()
        .into_iter()
        .map(|(time, file)| (time.parse().unwrap(), file))
        .collect();
    assert_eq!(listed.len(), 2, "{pvd}");
    for (k, (&(time, file), expected)) in listed.iter().zip([0.05, 0.1]).enumerate() {
        assert!((time - expected).abs() < 1e-12, "{pvd}");
        assert_eq!(file, format!("{name}_{k:06}.vtm"));
        assert!(
            vtk.join(file).is_file() && vtk.join(format!("{name}_{k:06}/internal.vtu")).is_file()
        );
    }
    for dir in [&whole, &halves] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn restart_of_a_backward_run_continues_its_second_order_steps() {
    let (reference, d, [whole, halves]) =
        whole_and_restarted("backward", common::backward_time_steps);
    assert!(d.iter().all(|&x| x < 1e-12), "{d:?}");
    // OpenFOAM's files of a backward time: the older level and the time's record.
    let written = halves.join("0.05");
    for file in ["U", "p", "phi", "U_0", "phi_0", "uniform/time"] {
        assert!(written.join(file).is_file(), "0.05/{file} not written");
    }
    let record = std::fs::read_to_string(written.join("uniform/time")).unwrap();
    for entry in [
        "index           10;",
        "deltaT          0.005;",
        "name            \"0.05\";",
    ] {
        assert!(record.contains(entry), "{entry} not in\n{record}");
    }

    // Without the older level the restart's first step is an Euler one,
    // as OpenFOAM's: the trajectory differs from the run's.
    let euler_start = case_copy(
        "cavity_ico",
        "backward_euler_start",
        &[
            ("writePrecision", "17"),
            ("writeInterval", "10"),
            ("endTime", "0.05"),
        ],
    );
    common::backward_time_steps(&euler_start);
    run(&euler_start);
    for file in ["U_0", "phi_0"] {
        std::fs::remove_file(euler_start.join("0.05").join(file)).unwrap();
    }
    edit_control(
        &euler_start,
        &[("endTime", "0.1"), ("startFrom", "latestTime")],
    );
    let first_order = run(&euler_start);
    let du = relative(&components(&first_order.u), &components(&reference.u));
    eprintln!("backward restart without U_0, phi_0: ΔU {du:e}");
    assert!(du > 1e-8, "{du:e}");
    for dir in [&whole, &halves, &euler_start] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A restart finds its time directory by value, however its name was
/// written (`0.050`); steps whose times the time precision cannot tell
/// apart raise it, as OpenFOAM does, so no write replaces an earlier time.
#[test]
fn restart_directories_are_found_by_value_and_new_times_keep_distinct_names() {
    let dir = case_copy(
        "cavity_ico",
        "time_names",
        &[
            ("endTime", "0.05"),
            ("writeInterval", "10"),
            ("writePrecision", "17"),
        ],
    );
    let first = run(&dir);
    assert_eq!(first.steps, 10);
    std::fs::rename(dir.join("0.05"), dir.join("0.050")).unwrap();
    let start = VectorFieldFile::read(&dir.join("0.050/U"), first.p.len()).unwrap();
    // From 0.05 in steps of 1e-8: at 6 digits every time would be named 0.05.
    edit_control(
        &dir,
        &[
            ("startFrom", "latestTime"),
            ("endTime", "0.05000003"),
            ("deltaT", "1e-8"),
            ("writeInterval", "1"),
        ],
    );
    let summary = run(&dir);
    assert_eq!(summary.steps, 3);
    for name in ["0.05000001", "0.05000002", "0.05000003"] {
        assert!(dir.join(name).join("U").is_file(), "{name}/U not written");
    }
    assert!(
        !dir.join("0.05").exists(),
        "a step wrote over the start time's name"
    );
    let kept = VectorFieldFile::read(&dir.join("0.050/U"), first.p.len()).unwrap();
    assert_eq!(
        kept.internal.expand(first.p.len()),
        start.internal.expand(first.p.len()),
        "the start time's U was rewritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run whose solves stop at maxIter short of their tolerance is not
/// converged (`run` exits 1); fixed-iteration solves (tolerance and relTol
/// 0) are complete by design.
#[test]
fn solves_stopped_at_max_iter_make_the_run_unconverged() {
    let dir = case_copy("cavity_ico", "max_iter", &[("endTime", "0.02")]);
    assert_eq!(run(&dir).not_converged, None);
    let path = dir.join("system/fvSolution");
    let text = std::fs::read_to_string(&path).unwrap();
    let short = text.replacen(
        "        relTol          0;\n    }",
        "        relTol          0;\n        maxIter 1;\n    }",
        1,
    );
    assert_ne!(short, text);
    std::fs::write(&path, &short).unwrap();
    let why = run(&dir).not_converged.expect("pFinal stops at maxIter 1");
    assert!(why.starts_with("4 of ") && why.contains("maxIter"), "{why}");
    let fixed = short.replacen("        $p;\n", "        $p;\n        tolerance 0;\n", 1);
    assert_ne!(fixed, short);
    std::fs::write(&path, fixed).unwrap();
    assert_eq!(run(&dir).not_converged, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `writeControl runTime` (or `adjustableRunTime`, which icoFoam does not
/// adjust) with an interval that is not a whole number of steps writes at
/// the steps icoFoam v1912 writes at: where (t − start + Δt/2) / interval
/// passes a whole number (listed by v1912 on this case, Δt 0.005).
#[test]
fn write_intervals_between_steps_write_where_icofoam_does() {
    for (control, interval, expected) in [
        ("runTime", "0.012", &["0.01", "0.025", "0.035", "0.05"][..]),
        (
            "adjustableRunTime",
            "0.012",
            &["0.01", "0.025", "0.035", "0.05"],
        ),
        (
            "runTime",
            "0.0074",
            &["0.005", "0.015", "0.02", "0.03", "0.035", "0.045", "0.05"],
        ),
    ] {
        let dir = case_copy(
            "cavity_ico",
            "write_between_steps",
            &[
                ("endTime", "0.05"),
                ("writeControl", control),
                ("writeInterval", interval),
            ],
        );
        run(&dir);
        let mut written: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name != "0" && name.parse::<f64>().is_ok())
            .collect();
        written.sort_by(|a, b| a.parse::<f64>().unwrap().total_cmp(&b.parse().unwrap()));
        assert_eq!(written, expected, "{control} {interval}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Patch groups pick a patch's condition as OpenFOAM v1912 does: its exact
/// name first, then the last entry in the file naming one of its groups
/// (`inGroups`, and `wall` for a wall), then patterns; an empty patch that
/// no name or group names is empty whatever the patterns say.
#[test]
fn boundary_conditions_by_patch_group_follow_openfoams_precedence() {
    let dir = case_copy(
        "cavity_ico",
        "patch_groups",
        &[("endTime", "0.005"), ("writeInterval", "1")],
    );
    let mesh_dict = dir.join("system/blockMeshDict");
    let text = std::fs::read_to_string(&mesh_dict).unwrap();
    let text = text
        .replacen("type wall;", "type wall; inGroups (lidGroup);", 1)
        .replacen(
            "fixedWalls\n    {\n        type wall;",
            "fixedWalls\n    {\n        type wall; inGroups 1(wallGroup);",
            1,
        );
    assert_eq!(text.matches("inGroups").count(), 2, "{text}");
    std::fs::write(&mesh_dict, text).unwrap();
    let u_path = dir.join("0/U");
    let text = std::fs::read_to_string(&u_path).unwrap();
    let start = text.find("boundaryField").unwrap();
    let entries = "boundaryField\n{\n    \
        lidGroup { type fixedValue; value uniform (7 0 0); }\n    \
        \".*\" { type fixedValue; value uniform (5 0 0); }\n    \
        movingWall { type fixedValue; value uniform (1 0 0); }\n    \
        wallGroup { type fixedValue; value uniform (8 0 0); }\n    \
        wall { type fixedValue; value uniform (9 0 0); }\n}\n";
    std::fs::write(&u_path, format!("{}{entries}", &text[..start])).unwrap();
    let case = read_transient_case(&dir).unwrap();
    // The entries no patch takes are named.
    let unused: Vec<&str> = ["lidGroup", "\".*\"", "wallGroup"]
        .into_iter()
        .filter(|key| {
            case.warnings
                .iter()
                .any(|w| w.contains(&format!("boundaryField/{key}:")))
        })
        .collect();
    assert_eq!(unused.len(), 3, "{:?}", case.warnings);
    assert_eq!(case.warnings.len(), 3, "{:?}", case.warnings);
    run_transient_case(&case.setup, &case.mesh, Device::Cpu).unwrap();
    let written = std::fs::read_to_string(dir.join("0.005/U")).unwrap();
    let block = |patch: &str| {
        let from = written
            .find(&format!("    {patch}\n"))
            .unwrap_or_else(|| panic!("{written}"));
        let to = from + written[from..].find('}').unwrap();
        written[from..to].to_string()
    };
    assert!(block("movingWall").contains("(1 0 0)"), "{written}");
    assert!(block("fixedWalls").contains("(9 0 0)"), "{written}");
    assert!(block("frontAndBack").contains("empty"), "{written}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A start at or past the end runs no step and names no VTK series.
#[test]
fn a_start_past_the_end_runs_no_step_and_writes_no_series() {
    let dir = case_copy(
        "cavity_ico",
        "start_past_end",
        &[("startTime", "0.5"), ("endTime", "0.1")],
    );
    common::copy_dir(&dir.join("0"), &dir.join("0.5"));
    let summary = run(&dir);
    assert_eq!(summary.steps, 0);
    assert_eq!(summary.vtk_series, None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn residuals_function_object_writes_solver_info_as_openfoam() {
    let dir = case_copy("cavity_ico", "residuals", &[("endTime", "0.015")]);
    let control = dir.join("system/controlDict");
    let mut text = std::fs::read_to_string(&control).unwrap();
    text += "\nfunctions\n{\n    #includeFunc residuals\n    drag { type forces; }\n    \
             off { type fieldMinMax; fields (U); enabled false; }\n    \
             res { type solverInfo; fields (p); }\n}\n";
    std::fs::write(&control, text).unwrap();
    let case = read_transient_case(&dir).unwrap();
    let warned = |what: &[&str]| {
        case.warnings
            .iter()
            .any(|w| what.iter().all(|x| w.contains(x)))
    };
    assert!(warned(&["'drag'", "forces"]), "{:?}", case.warnings);
    assert!(
        !case
            .warnings
            .iter()
            .any(|w| w.contains("'off'") || w.contains("'res'")),
        "{:?}",
        case.warnings
    );
    run_transient_case(&case.setup, &case.mesh, Device::Cpu).unwrap();
    let solver_info = |object: &str, file: &str| {
        let path = dir.join("postProcessing").join(object).join("0").join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let foam =
        std::fs::read_to_string(common::repo("tests/data/ico_foam_cavity/solverInfo.dat")).unwrap();
    assert_eq!(solver_info("residuals", "solverInfo.dat"), foam);
    // An object of another name writes under its name, and `fields (p)`
    // keeps p's columns alone (v1912: the time, then the last five).
    let p_only: String = foam
        .lines()
        .map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            match columns.len() {
                1 => format!("{line}\n"),
                k => format!("{}\t{}\n", columns[0], columns[k - 5..].join("\t")),
            }
        })
        .collect();
    assert_eq!(solver_info("res", "solverInfo.dat"), p_only);
    assert!(
        !dir.join("postProcessing/off").exists(),
        "an object with enabled false ran"
    );
    // A rerun from the same time keeps the first run's files and writes
    // `<name>_<startTime>.dat` beside them, as v1912 does; a third run
    // rewrites that one.
    std::fs::write(
        dir.join("postProcessing/residuals/0/solverInfo.dat"),
        "kept",
    )
    .unwrap();
    for _ in 0..2 {
        run_transient_case(&case.setup, &case.mesh, Device::Cpu).unwrap();
        assert_eq!(solver_info("residuals", "solverInfo.dat"), "kept");
        assert_eq!(solver_info("residuals", "solverInfo_0.dat"), foam);
        assert_eq!(solver_info("res", "solverInfo_0.dat"), p_only);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cavity as a laminar pimpleFoam case with `outer` outer correctors and
/// the given relaxation factors, 10 steps written every 5 with 17 digits (as
/// `scripts/pimple_foam_reference.sh` makes it).
fn pimple_cavity(tag: &str, outer: usize, relaxation: &str, simulation: &str) -> PathBuf {
    let dir = case_copy(
        "cavity_ico",
        tag,
        &[
            ("application", "pimpleFoam"),
            ("endTime", "0.05"),
            ("writeInterval", "5"),
            ("writePrecision", "17"),
        ],
    );
    let solution = format!(
        "FoamFile {{ version 2.0; format ascii; class dictionary; object fvSolution; }}\n\
         solvers\n{{\n    p {{ solver PCG; preconditioner DIC; tolerance 1e-06; relTol 0.05; }}\n    \
         pFinal {{ $p; relTol 0; }}\n    \
         \"(U|UFinal)\" {{ solver smoothSolver; smoother symGaussSeidel; tolerance 1e-05; relTol 0; }}\n}}\n\
         PIMPLE\n{{\n    nOuterCorrectors {outer};\n    nCorrectors 2;\n    \
         nNonOrthogonalCorrectors 0;\n    pRefCell 0;\n    pRefValue 0;\n}}\n{relaxation}\n"
    );
    std::fs::write(dir.join("system/fvSolution"), solution).unwrap();
    common::make_pimple_foam(&dir, simulation);
    dir
}

/// max relative ΔU and Δp of the fields written in `dir` at `time` against
/// `tests/data/pimple_foam_cavity/<reference>/<time>`.
fn written_against_pimple_foam(dir: &Path, reference: &str, time: &str, n: usize) -> (f64, f64) {
    let foam = common::repo("tests/data/pimple_foam_cavity")
        .join(reference)
        .join(time);
    let read = |root: &Path| {
        let u = VectorFieldFile::read(&root.join("U"), n).unwrap();
        let p = ScalarFieldFile::read(&root.join("p"), n).unwrap();
        (components(&u.internal.expand(n)), p.internal.expand(n))
    };
    let (u, p) = read(&dir.join(time));
    let (u_ref, p_ref) = read(&foam);
    (relative(&u, &u_ref), relative(&p, &p_ref))
}

/// pimpleFoam's log frame as v1912 prints it: the Courant number ahead of
/// "Starting time loop", then per step the Courant number, the time and
/// "PIMPLE: iteration 1" (printed with one outer corrector as well).
#[test]
fn pimple_log_frames_its_steps_as_pimplefoam() {
    let dir = pimple_cavity("pimple-log", 1, "", "laminar");
    let frame = |log: &str| -> Vec<String> {
        log.lines()
            .filter_map(|line| {
                let line = line.split_once("] ").map_or(line, |(_, rest)| rest).trim();
                if line.starts_with("Courant Number") {
                    Some("Courant".to_string())
                } else if line.starts_with("Time = ")
                    || line.starts_with("PIMPLE: iteration")
                    || line == "Starting time loop"
                {
                    Some(line.to_string())
                } else {
                    None
                }
            })
            .collect()
    };
    let ours = frame(&run_binary_on_cpu(&dir));
    let reference = std::fs::read_to_string(common::repo(
        "tests/data/pimple_foam_cavity/outer1/log.pimpleFoam",
    ))
    .unwrap();
    let theirs = frame(&reference);
    assert_eq!(theirs.len(), 2 + 3 * 10, "{theirs:?}");
    assert_eq!(ours, theirs);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pimple_cavity_matches_pimplefoam_with_one_and_two_outer_correctors() {
    let relaxed = "relaxationFactors\n{\n    equations { U 0.9; UFinal 1; }\n    fields { p 0.7; pFinal 1; }\n}";
    let mut dirs = Vec::new();
    for (reference, outer, relaxation) in [("outer1", 1, ""), ("outer2", 2, relaxed)] {
        let dir = pimple_cavity(reference, outer, relaxation, "laminar");
        let summary = run(&dir);
        assert_eq!(summary.steps, 10);
        for time in ["0.025", "0.05"] {
            let (du, dp) = written_against_pimple_foam(&dir, reference, time, summary.p.len());
            eprintln!("pimpleFoam cavity, {outer} outer, t = {time}: ΔU {du:e}, Δp {dp:e}");
            assert!(
                du <= 1e-8 && dp <= 1e-8,
                "{reference} {time}: U {du:e}, p {dp:e}"
            );
        }
        dirs.push(dir);
    }

    // icoFoam's momentum equation lacks pimpleFoam's explicit laminar stress:
    // with one outer corrector the two trajectories differ by that term only.
    let ico = case_copy("cavity_ico", "ico-short", &[("endTime", "0.05")]);
    let piso = run(&ico);
    let pimple = run(&dirs[0]);
    let du = relative(&components(&pimple.u), &components(&piso.u));
    assert!(
        du > 1e-4 && du < 1e-1,
        "PIMPLE with 1 outer corrector vs PISO: {du:e}"
    );

    // The stress term is computed as Gauss linear only; another scheme is refused.
    let upwind_dir = pimple_cavity("pimple-upwind-stress", 1, "", "laminar");
    let schemes = upwind_dir.join("system/fvSchemes");
    let text = std::fs::read_to_string(&schemes).unwrap().replace(
        "div((nuEff*dev2(T(grad(U))))) Gauss linear;",
        "div((nuEff*dev2(T(grad(U))))) Gauss upwind;",
    );
    std::fs::write(&schemes, text).unwrap();
    let err = read_transient_case(&upwind_dir).unwrap_err().to_string();
    assert!(
        err.contains("fvSchemes") && err.contains("'Gauss upwind'") && err.contains("Gauss linear"),
        "{err}"
    );

    let ras_dir = pimple_cavity("pimple-ras", 1, "", "RAS");
    let err = read_transient_case(&ras_dir).unwrap_err().to_string();
    assert!(
        err.contains("simulationType RAS") && err.contains("laminar"),
        "{err}"
    );
    for dir in dirs.iter().chain([&ico, &upwind_dir, &ras_dir]) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The values of the raw appended Float64 array `name` of a `.vtu` (one
/// component), read by its offset in the appended data.
fn vtu_f64s(path: &Path, name: &str) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let marker = b"<AppendedData encoding=\"raw\">\n_";
    let data = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("raw appended data")
        + marker.len();
    let xml = String::from_utf8_lossy(&bytes[..data]);
    let tag = xml
        .split("<DataArray ")
        .find(|t| t.contains(&format!("Name=\"{name}\"")))
        .unwrap_or_else(|| panic!("{}: no array {name}", path.display()));
    assert!(tag.contains("type=\"Float64\"") && tag.contains("NumberOfComponents=\"1\""));
    let offset: usize = tag
        .split("offset=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let at = data + offset;
    let n_bytes = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    bytes[at + 8..at + 8 + n_bytes]
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A transient run writes a VTK step at every write time, with the time
/// directories: the `.pvd` lists the steps at the written times, each
/// step's cell p is the p written there (binary fields: the same doubles),
/// and the log's closing lines name the series; `--vtk none` writes none.
#[test]
fn transient_runs_write_a_vtk_step_at_every_write_time() {
    let dir = case_copy(
        "cavity_ico",
        "vtk",
        &[
            ("endTime", "0.1"),
            ("writeInterval", "5"),
            ("writeFormat", "binary"),
        ],
    );
    let o = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{log}");
    let name = fvpoisson::io::vtk::series_name_for(&dir);
    let pvd = dir.join("VTK").join(format!("{name}.pvd"));
    assert!(
        log.contains("Wrote 4 VTK step(s)") && log.contains(&pvd.display().to_string()),
        "{log}"
    );
    let text = std::fs::read_to_string(&pvd).unwrap();
    let listed = fvpoisson::io::vtk::pvd_datasets(&text).unwrap();
    let times: Vec<f64> = listed.iter().map(|(t, _)| t.parse().unwrap()).collect();
    let files: Vec<&str> = listed.iter().map(|&(_, file)| file).collect();
    let written = ["0.025", "0.05", "0.075", "0.1"];
    assert_eq!(times.len(), written.len(), "{text}");
    for (k, ((time, file), name_of_time)) in times.iter().zip(&files).zip(written).enumerate() {
        let expected: f64 = name_of_time.parse().unwrap();
        assert!(
            (time - expected).abs() < 1e-12,
            "step {k} at {time}, written {name_of_time}"
        );
        assert_eq!(*file, format!("{name}_{k:06}.vtm"));
        let vtu = dir.join("VTK").join(format!("{name}_{k:06}/internal.vtu"));
        let p_vtk = vtu_f64s(&vtu, "p");
        let p_file = ScalarFieldFile::read(&dir.join(name_of_time).join("p"), p_vtk.len()).unwrap();
        let FieldValues::NonUniform(p_foam) = p_file.internal else {
            panic!("nonuniform p expected at {name_of_time}")
        };
        assert_eq!(p_vtk, p_foam, "p at {name_of_time}");
        assert!(p_vtk.iter().any(|&p| p != 0.0));
    }

    let quiet = case_copy(
        "cavity_ico",
        "no-vtk",
        &[("endTime", "0.01"), ("writeInterval", "1")],
    );
    let o = common::fvpoisson(&["run", quiet.to_str().unwrap(), "--vtk", "none"]);
    assert!(o.status.success());
    assert!(quiet.join("0.01/p").is_file() && !quiet.join("VTK").exists());
    for dir in [&dir, &quiet] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The numbers of a log line after `prefix` (`Courant Number mean: …`,
/// `time step continuity errors : …`, a solver line), as printed.
fn printed_numbers(log: &str, prefix: &str) -> Vec<Vec<String>> {
    log.lines()
        .filter(|line| line.contains(prefix))
        .map(|line| {
            line.split([' ', ','])
                .filter(|word| word.parse::<f64>().is_ok())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// Significant digits of a printed number (`0.0004665129518` → 10).
fn significant_digits(text: &str) -> usize {
    let mantissa = text.split(['e', 'E']).next().unwrap();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    digits.trim_start_matches('0').len()
}

/// A case with `writePrecision 10` logs with 10 significant digits, as
/// OpenFOAM's `Time::readDict` sets its log's precision: the cavity tutorial's
/// two first steps against icoFoam v1912's log
/// (`tests/data/ico_foam_cavity_precision10`, made by
/// `scripts/ico_foam_precision_reference.sh`). The residuals, Courant numbers
/// and continuity errors print as many digits as icoFoam's and agree to 1e-8.
#[test]
fn log_lines_follow_write_precision_as_icofoams() {
    let dir = case_copy(
        "cavity_ico",
        "cavity_precision10",
        &[("endTime", "0.01"), ("writePrecision", "10")],
    );
    let log = run_binary_on_cpu(&dir);
    let reference = std::fs::read_to_string(common::repo(
        "tests/data/ico_foam_cavity_precision10/log.icoFoam",
    ))
    .unwrap();
    let mut compared = 0;
    let mut with_ten_digits = 0;
    for prefix in [
        "Courant Number mean:",
        "Solving for",
        "time step continuity errors :",
    ] {
        let (ours, theirs) = (
            printed_numbers(&log, prefix),
            printed_numbers(&reference, prefix),
        );
        assert_eq!(ours.len(), theirs.len(), "{prefix} lines\n{log}");
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a.len(), b.len(), "{a:?} against icoFoam's {b:?}");
            for (x, y) in a.iter().zip(b) {
                let (u, v): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                // Below 1e-12 (global continuity errors, residuals of zero
                // fields) a number is round-off, whose digits need not agree.
                if u.abs() < 1e-12 && v.abs() < 1e-12 {
                    continue;
                }
                assert!(
                    (u - v).abs() <= 1e-8 * v.abs(),
                    "{prefix}: {x} against icoFoam's {y}"
                );
                compared += 1;
                if significant_digits(y) == 10 {
                    with_ten_digits += 1;
                    assert_eq!(significant_digits(x), 10, "{x} against icoFoam's {y}");
                }
            }
        }
    }
    assert!(
        compared >= 20 && with_ten_digits >= 15,
        "{compared} {with_ten_digits}\n{log}"
    );
    // Each step ends as icoFoam's does, with the CPU and the clock time.
    let shape = |text: &str| -> Vec<bool> {
        text.lines()
            .filter(|line| line.starts_with("ExecutionTime = "))
            .map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.len() == 8
                    && words[2].parse::<f64>().is_ok()
                    && words[3..6] == ["s", "ClockTime", "="]
                    && words[6].parse::<u64>().is_ok()
                    && words[7] == "s"
            })
            .collect()
    };
    assert_eq!(shape(&log), shape(&reference), "{log}");
    assert_eq!(shape(&log), [true, true]);
    let _ = std::fs::remove_dir_all(&dir);
}
