//! The phase account of `run` (the table the log ends with, `--timings`)
//! and `bench --end-to-end`, on every kind of run: a case.toml Poisson case,
//! an OpenFOAM laplacianFoam case, a flow (SIMPLE) case and a distributed run.

mod common;

use common::{cavity_case, fvpoisson, mms_case, write_case_toml, Scratch};

/// The Poisson case of these runs, written as VTK.
fn poisson() -> String {
    mms_case("10x10x10", "[output]\nformats = [\"vtk\"]\n")
}

/// The flow case of these runs: 5 SIMPLEC iterations of the cavity.
fn flow() -> String {
    cavity_case(
        "box:12x12x1:2d",
        "[SIMPLE]\nconsistent = true\nmaxIterations = 5\n[relaxationFactors]\nU = 0.9\np = 1.0\n",
    )
}

const PHASES: [&str; 8] = [
    "mesh",
    "geometry",
    "ordering",
    "device_setup",
    "assembly",
    "solve",
    "output",
    "other",
];

/// Checks a JSON account: every phase present, none negative, the phases
/// adding up to the total; returns it.
fn check_account(json: &serde_json::Value) -> &serde_json::Value {
    let total = json["total_s"].as_f64().expect("total_s");
    assert!(total > 0.0, "{json}");
    let phases = &json["phases_s"];
    let mut sum = 0.0;
    for key in PHASES {
        let s = phases[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {json}"));
        assert!(s >= 0.0, "{key} in {json}");
        sum += s;
    }
    assert!(
        (sum - total).abs() <= 1e-6 * total.max(1.0),
        "{sum} vs {total}: {json}"
    );
    check_memory(json);
    json
}

/// The memory of a JSON account: the run's peak RSS and its RSS at the end,
/// and after each phase that ran at least the memory the run had then, at
/// most its peak.
fn check_memory(json: &serde_json::Value) {
    let peak = json["peak_rss_mb"].as_f64().expect("peak_rss_mb");
    let end = json["rss_mb"].as_f64().expect("rss_mb");
    // A process of this crate's binary holds a few MB at least.
    assert!(peak >= 1.0 && end >= 1.0 && end <= peak, "{json}");
    for key in ["mesh", "geometry", "assembly", "solve", "output"] {
        let after = json["phases_peak_rss_after_mb"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("peak RSS after {key} in {json}"));
        let current = json["phases_rss_after_mb"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("RSS after {key} in {json}"));
        assert!(
            current >= 1.0 && current <= after && after <= peak,
            "{key}: {json}"
        );
    }
    // The peak never falls: the mesh was read before the geometry was computed.
    let after = |key: &str| json["phases_peak_rss_after_mb"][key].as_f64().unwrap();
    assert!(after("mesh") <= after("geometry"), "{json}");
}

/// Runs `fvpoisson run` with `args`: the log (stderr) and stdout; the run succeeded.
fn run(args: &[&str]) -> (String, String) {
    let out = fvpoisson(&[&["run", "--device", "cpu"], args].concat());
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    (log, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The log ends with the phase table: every row, the solves nonzero.
fn check_table(log: &str) {
    let table = log
        .split("Wall time by phase:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no phase table in:\n{log}"));
    for row in [
        "mesh read/generate",
        "geometry",
        "ordering",
        "device set-up",
        "assembly",
        "solves",
        "output",
        "other",
        "total",
    ] {
        assert!(table.contains(row), "'{row}' missing from:\n{table}");
    }
    // The solves were timed: their share of the total (one decimal), as the
    // wall seconds (three) of a small case's solve can round to 0.000.
    let solves = table.lines().find(|l| l.starts_with("solves")).unwrap();
    let share: f64 = solves
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.strip_suffix('%'))
        .unwrap_or_else(|| panic!("no share in '{solves}'"))
        .parse()
        .unwrap();
    assert!(share > 0.0, "{table}");
    // The process's memory after each phase: the peak, then the current size.
    let header = table.lines().next().unwrap();
    assert!(header.ends_with("peak RSS after  RSS after"), "{table}");
    let megabytes = |line: &str| -> Vec<f64> {
        let words: Vec<&str> = line.split_whitespace().collect();
        words
            .windows(2)
            .filter(|w| w[1] == "MB")
            .map(|w| w[0].parse().unwrap())
            .collect()
    };
    let total = table.lines().find(|l| l.starts_with("total")).unwrap();
    let [peak, end] = megabytes(total)[..] else {
        panic!("no peak and current RSS in '{total}'")
    };
    assert!(peak >= end && end > 0.0, "{table}");
    let [after, current] = megabytes(solves)[..] else {
        panic!("no peak and current RSS in '{solves}'")
    };
    assert!(current <= after && after <= peak, "{table}");
}

#[test]
fn a_poisson_run_prints_the_table_and_its_json_adds_up() {
    let dir = Scratch::new("poisson");
    write_case_toml(&dir, &poisson());
    let (log, stdout) = run(&[dir.0.to_str().unwrap(), "--timings", "json"]);
    check_table(&log);
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON on stdout");
    let json = check_account(&json);
    for phase in ["mesh", "geometry", "assembly", "solve", "output"] {
        assert!(
            json["phases_s"][phase].as_f64().unwrap() > 0.0,
            "{phase}: {json}"
        );
    }
    let ratio = json["wall_over_solve"].as_f64().unwrap();
    assert!(ratio >= 1.0, "{json}");

    // An unknown destination is refused before anything runs.
    let out = fvpoisson(&["run", dir.0.to_str().unwrap(), "--timings", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ending in .json"), "{err}");
}

#[test]
fn the_debug_level_names_the_steps_of_each_phase() {
    let dir = Scratch::new("spans");
    write_case_toml(&dir, &poisson());
    let (log, _) = run(&["--log", "debug", dir.0.to_str().unwrap()]);
    // Each step under the phase it belongs to, with its wall and CPU time.
    for step in [
        "assembly: face geometry ",
        "assembly: matrix pattern ",
        "assembly: slot map ",
        "assembly: source per cell ",
        "assembly: host matrix and right-hand side ",
        "output: VTK patches ",
        "output: VTK cells ",
        "output: error ",
        "output: VTK files ",
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(step))
            .unwrap_or_else(|| panic!("no '{step}' in:\n{log}"));
        assert!(line.contains(" ms (cpu "), "{line}");
    }
    // At the info level they are not logged.
    let (log, _) = run(&[dir.0.to_str().unwrap()]);
    assert!(!log.contains("assembly: matrix pattern"), "{log}");
}

#[test]
fn a_laplacian_foam_run_writes_its_account_to_a_file() {
    let dir = Scratch::new("foam");
    let case = dir.0.join("case");
    common::copy_case_inputs(&common::repo("cases/laplacian_foam_source"), &case);
    let file = dir.0.join("account.json");
    let (log, stdout) = run(&[case.to_str().unwrap(), "--timings", file.to_str().unwrap()]);
    check_table(&log);
    assert!(!stdout.contains("total_s"), "{stdout}");
    let text = std::fs::read_to_string(&file).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    check_account(&json);
    // The debug level adds one table per time step.
    let out = fvpoisson(&[
        "run",
        "--device",
        "cpu",
        "--log",
        "debug",
        case.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("phases of time step 1:"), "{log}");
}

#[test]
fn flow_and_distributed_runs_print_the_table() {
    let dir = Scratch::new("flow");
    write_case_toml(&dir, &flow());
    let (log, _) = run(&[dir.0.to_str().unwrap()]);
    check_table(&log);

    let dir = Scratch::new("ranks");
    write_case_toml(&dir, &mms_case("10x10x10", "[output]\nformats = []\n"));
    let (log, stdout) = run(&[dir.0.to_str().unwrap(), "--ranks", "2", "--timings", "json"]);
    check_table(&log);
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // Rank 0's solves are in the account of the process.
    let json = check_account(&json);
    assert!(json["phases_s"]["solve"].as_f64().unwrap() > 0.0, "{json}");
}

#[test]
fn bench_end_to_end_puts_the_solve_next_to_the_wall_time() {
    let a = Scratch::new("bench_a");
    let b = Scratch::new("bench_b");
    write_case_toml(&a, &poisson());
    write_case_toml(&b, &flow());
    let out = fvpoisson(&[
        "bench",
        "--device",
        "cpu",
        "--json",
        "--end-to-end",
        a.0.to_str().unwrap(),
        b.0.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(log.matches("wall time by phase:").count(), 2, "{log}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let header = lines.next().unwrap();
    assert!(
        header.contains("wall/solve") && header.contains("mesh"),
        "{stdout}"
    );
    for dir in [&a, &b] {
        let row = lines.next().unwrap();
        assert!(row.starts_with(dir.0.to_str().unwrap()), "{stdout}");
    }
    let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let t = check_account(&row["timings"]);
        assert!(t["wall_over_solve"].as_f64().unwrap() >= 1.0, "{row}");
    }
}
