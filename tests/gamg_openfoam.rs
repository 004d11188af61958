//! `solver GAMG` against OpenFOAM v1912's GAMG: the cycle counts of
//! laplacianFoam's solves on the cases of tests/data/openfoam_gamg (a 32³
//! hex box, a perturbed tet box, the flange tutorial's mesh; made by its
//! make_reference.sh) with each smoother, within ±20 % of OpenFOAM's over
//! the case, and the log line in OpenFOAM's form. The same cases run as
//! OpenFOAM cases through `fvpoisson run`, the meshes written by
//! `fvpoisson convert-mesh` as for the reference.

mod common;

use std::path::{Path, PathBuf};

const DATA: &str = "tests/data/openfoam_gamg";
const SMOOTHERS: [&str; 4] = ["GaussSeidel", "symGaussSeidel", "DIC", "DICGaussSeidel"];

/// The binary's log (stderr, then stdout) of a run that must succeed.
fn fvpoisson(args: &[&str]) -> String {
    let out = common::fvpoisson(args);
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "fvpoisson {args:?}:\n{log}");
    log
}

/// The case's template copied to a fresh directory, its mesh generated from
/// `spec` where the case has none committed.
fn case_dir(case: &str, spec: Option<&str>) -> PathBuf {
    let dir = common::unique_temp_dir(&format!("fvpoisson_gamg_{case}"));
    if let Some(spec) = spec {
        fvpoisson(&["convert-mesh", spec, dir.to_str().unwrap()]);
    }
    common::copy_dir(&Path::new(DATA).join("cases").join(case), &dir);
    dir
}

/// "No Iterations N" of every "<solver>:  Solving for T" line.
fn iterations(log: &str, solver: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains(&format!("{solver}:  Solving for T")))
        .map(|l| {
            l.rsplit("No Iterations ")
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no iteration count in '{l}'"))
        })
        .collect()
}

fn check_case(case: &str, spec: Option<&str>, n_non_orth: usize) {
    let dir = case_dir(case, spec);
    let mut table = Vec::new();
    for smoother in SMOOTHERS {
        std::fs::write(
            dir.join("system/fvSolution"),
            format!(
                "FoamFile {{ version 2.0; format ascii; class dictionary; object fvSolution; }}\n\
                 solvers {{ T {{ solver GAMG; smoother {smoother}; tolerance 1e-8; relTol 0; }} }}\n\
                 SIMPLE {{ nNonOrthogonalCorrectors {n_non_orth}; }}\n"
            ),
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(dir.join("1"));
        let log = fvpoisson(&["run", dir.to_str().unwrap()]);
        let ours = iterations(&log, "GAMG");
        let reference_log =
            std::fs::read_to_string(format!("{DATA}/log.{case}.{smoother}")).unwrap();
        let openfoam = iterations(&reference_log, "GAMG");
        assert_eq!(
            ours.len(),
            openfoam.len(),
            "{case} {smoother}: solves\n{log}"
        );
        let (sum_ours, sum_openfoam) = (
            ours.iter().sum::<usize>() as f64,
            openfoam.iter().sum::<usize>() as f64,
        );
        table.push(format!(
            "{case} {smoother}: fvpoisson {ours:?}, OpenFOAM {openfoam:?}"
        ));
        assert!(
            (sum_ours - sum_openfoam).abs() <= 0.2 * sum_openfoam,
            "{case} {smoother}: {sum_ours} cycles against OpenFOAM's {sum_openfoam}\n{}",
            table.join("\n")
        );
    }
    eprintln!("{}", table.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn box32_cycles_match_openfoam() {
    check_case("box32", Some("box:32x32x32"), 0);
}

#[test]
fn perturbed_tet_box_cycles_match_openfoam() {
    check_case("tet", Some("box:16x16x16:tet:perturb=0.2"), 2);
}

#[test]
fn flange_cycles_match_openfoam() {
    check_case("flange", None, 2);
}
