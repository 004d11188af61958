//! The `fieldMinMax` and `probes` function objects of transient cases against
//! OpenFOAM v1912: `tests/data/function_objects` holds the `functions` block
//! and what icoFoam wrote with it over five steps of the cavity tutorial
//! (made by `scripts/function_objects_reference.sh`). The numbers print
//! identically at the case's 6 significant digits (fvpoisson's fields agree
//! with icoFoam's to about 1e-14), so the files are compared byte for byte.

mod common;

use std::path::PathBuf;

/// `cases/cavity_ico` for five steps with `functions` appended to its controlDict.
fn cavity_with(tag: &str, functions: &str) -> PathBuf {
    let dir = common::case_inputs_copy("cases/cavity_ico", tag);
    let control = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    let text = text.replace("endTime         0.5;", "endTime         0.025;");
    assert!(text.contains("0.025"), "cavity_ico's endTime line changed");
    std::fs::write(&control, text + "\n" + functions).unwrap();
    dir
}

/// The fieldMinMax blocks of a log: from each `fieldMinMax NAME write:` line
/// to the blank line after it.
fn min_max_blocks(log: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in log.lines() {
        inside |= line.starts_with("fieldMinMax ");
        if inside {
            lines.push(line.to_string());
        }
        inside &= !line.is_empty();
    }
    lines
}

#[test]
fn field_min_max_and_probes_write_as_openfoam() {
    let reference = common::repo("tests/data/function_objects");
    let functions = std::fs::read_to_string(reference.join("functions")).unwrap();
    let dir = cavity_with("fo_parity", &functions);
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    for file in [
        "postProcessing/minMaxMagnitude/0/fieldMinMax.dat",
        "postProcessing/minMaxComponents/0/fieldMinMax.dat",
        "postProcessing/probes/0/p",
        "postProcessing/probes/0/U",
    ] {
        let ours = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}\n{log}"));
        let foam = std::fs::read_to_string(reference.join(file)).unwrap();
        assert_eq!(ours, foam, "{file}");
    }
    // The log's fieldMinMax blocks, line for line, and the warning naming
    // the probe outside the mesh.
    let foam_log = std::fs::read_to_string(reference.join("log.functions")).unwrap();
    assert_eq!(min_max_blocks(&log), min_max_blocks(&foam_log));
    assert!(
        log.lines()
            .any(|l| l.contains("Did not find location (0.2 0.05 0.005)")),
        "{log}"
    );
    assert!(!log.contains("not supported"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rerun from the same start keeps the first run's fieldMinMax.dat and
/// writes fieldMinMax_0.dat beside it; probes' files are written again, as
/// v1912 does.
#[test]
fn a_rerun_keeps_the_earlier_min_max_file_and_rewrites_probes() {
    let reference = common::repo("tests/data/function_objects");
    let functions = std::fs::read_to_string(reference.join("functions")).unwrap();
    let dir = cavity_with("fo_rerun", &functions);
    let first = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    assert!(first.status.success(), "{first:?}");
    let min_max = dir.join("postProcessing/minMaxMagnitude/0");
    std::fs::write(min_max.join("fieldMinMax.dat"), "kept").unwrap();
    std::fs::write(dir.join("postProcessing/probes/0/p"), "old").unwrap();
    let again = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    assert!(again.status.success(), "{again:?}");
    let read = |path: PathBuf| std::fs::read_to_string(&path).unwrap();
    assert_eq!(read(min_max.join("fieldMinMax.dat")), "kept");
    assert_eq!(
        read(min_max.join("fieldMinMax_0.dat")),
        read(reference.join("postProcessing/minMaxMagnitude/0/fieldMinMax.dat"))
    );
    assert_eq!(
        read(dir.join("postProcessing/probes/0/p")),
        read(reference.join("postProcessing/probes/0/p"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As v1912: `#includeFunc residuals(p)` writes under
/// `postProcessing/residuals(p)` with p's columns; a quoted `fields` entry
/// is a regular expression (`(".*")`: U and p); a fieldMinMax that runs at
/// the write times is refused, by its reason, where the run writes by time.
#[test]
fn solver_info_names_and_patterns_and_write_time_objects_as_openfoam() {
    let dir = cavity_with(
        "fo_solver_info",
        "functions\n{\n    #includeFunc residuals(p)\n    \
         all { type solverInfo; fields (\".*\"); }\n}\n",
    );
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let read = |object: &str| {
        let path = dir
            .join("postProcessing")
            .join(object)
            .join("0/solverInfo.dat");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let header = |text: &str| -> Vec<String> {
        let line = text.lines().nth(1).unwrap();
        line.split('\t')
            .skip(1)
            .map(|c| c.trim().to_string())
            .collect()
    };
    assert_eq!(
        header(&read("residuals(p)")),
        ["p_solver", "p_initial", "p_final", "p_iters", "p_converged"]
    );
    let all = header(&read("all"));
    assert_eq!(all.first().map(String::as_str), Some("U_solver"));
    assert_eq!(all.last().map(String::as_str), Some("p_converged"));
    let _ = std::fs::remove_dir_all(&dir);

    let dir = cavity_with(
        "fo_write_time",
        "functions\n{\n    atWrites { type fieldMinMax; fields (p); writeControl writeTime; }\n}\n",
    );
    let control = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("writeControl"))
        .unwrap();
    let text = text.replace(line, "writeControl runTime;");
    let line = text
        .lines()
        .find(|l| l.starts_with("writeInterval"))
        .unwrap();
    std::fs::write(&control, text.replace(line, "writeInterval 0.012;")).unwrap();
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("writeControl writeTime: the run writes by time"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// v1912 runs a fieldMinMax's fields in sorted order: `fields (p U)`
/// writes what `fields (U p)` writes.
#[test]
fn field_min_max_takes_its_fields_in_sorted_order() {
    let reference = common::repo("tests/data/function_objects");
    let functions = std::fs::read_to_string(reference.join("functions")).unwrap();
    let reordered = functions.replace("fields          (U p);", "fields          (p U);");
    assert_ne!(reordered, functions);
    let dir = cavity_with("fo_order", &reordered);
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    for file in [
        "postProcessing/minMaxMagnitude/0/fieldMinMax.dat",
        "postProcessing/minMaxComponents/0/fieldMinMax.dat",
    ] {
        let ours = std::fs::read_to_string(dir.join(file)).unwrap();
        let foam = std::fs::read_to_string(reference.join(file)).unwrap();
        assert_eq!(ours, foam, "{file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn write_interval_in_run_time_and_write_times_chooses_the_steps() {
    // runTime 0.01 = every 2 steps; writeTime 1 with writeInterval 20 of the
    // case = never within 5 steps; both files have their header alone then.
    let dir = cavity_with(
        "fo_interval",
        "functions\n{\n    everyTwo { type fieldMinMax; fields (p); location no; \
         writeControl runTime; writeInterval 0.01; }\n    \
         atWrites { type probes; fields (p); probeLocations ((0.05 0.05 0.005)); \
         writeControl writeTime; }\n}\n",
    );
    let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let min_max =
        std::fs::read_to_string(dir.join("postProcessing/everyTwo/0/fieldMinMax.dat")).unwrap();
    let times: Vec<&str> = min_max
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(times, ["0.01", "0.02"], "{min_max}");
    assert!(min_max.contains("\tmin(p)"), "{min_max}");
    let probes = std::fs::read_to_string(dir.join("postProcessing/atWrites/0/p")).unwrap();
    assert_eq!(probes.lines().count(), 3, "{probes}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_function_object_entries_are_errors_naming_the_entry() {
    for (tag, object, expected) in [
        (
            "fo_field",
            "m { type fieldMinMax; fields (U T); }",
            "'T' is not a field",
        ),
        (
            "fo_mode",
            "m { type fieldMinMax; fields (p); mode largest; }",
            "mode largest",
        ),
        (
            "fo_nolocations",
            "pr { type probes; fields (p); }",
            "probeLocations",
        ),
        (
            "fo_bad_interval",
            "m { type fieldMinMax; fields (p); writeControl runTime; writeInterval 0.0075; }",
            "not a whole number of time steps",
        ),
    ] {
        let dir = cavity_with(tag, &format!("functions\n{{\n    {object}\n}}\n"));
        let out = common::fvpoisson(&["run", dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{tag}: accepted");
        assert!(
            stderr.contains(expected) && stderr.contains("controlDict"),
            "{tag}: {stderr}"
        );
        assert!(!dir.join("postProcessing").exists(), "{tag}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Two tests of this binary that pick the same tag get a case each: they run
/// side by side in one process, and one's controlDict must not reach the
/// other's run.
#[test]
fn copies_of_one_tag_are_separate_cases() {
    let a = cavity_with("same_tag", "");
    let b = cavity_with("same_tag", "// only in b\n");
    assert_ne!(a, b);
    let control =
        |dir: &std::path::Path| std::fs::read_to_string(dir.join("system/controlDict")).unwrap();
    assert!(!control(&a).contains("only in b"));
    assert!(control(&b).contains("only in b"));
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}
