//! Distributed runs against OpenFOAM v1912's own parallel runs
//! (tests/data/openfoam_parallel, made by its make_reference.sh with
//! decomposePar and `mpirun -np N laplacianFoam -parallel`):
//! - `decompose --method simple[:NXxNYxNZ]` gives decomposePar's `simple`
//!   decomposition cell for cell (its `-cellDist` map), on a 32³ box and a
//!   graded 30x17x11 box whose counts do not divide;
//! - a run reads decomposePar's own `processorK/.../cellProcAddressing`;
//! - `run -np N` on thread ranks with PCG and block DIC/FDIC takes OpenFOAM's
//!   iterations with its residual history, iteration by iteration.

use std::path::Path;

use fvpoisson::case::decompose::{decompose_mesh, read_decomposition, DecomposeMethod};
use fvpoisson::mesh::block_mesh::read_block_mesh_dict;

mod common;
use common::{copy_dir, fvpoisson, repo, NamedScratch};

const DATA: &str = "tests/data/openfoam_parallel";

/// OpenFOAM's cell → processor map `cellDist.<case>.<n>` (one digit a cell).
fn cell_dist(case: &str, n: &str) -> Vec<u32> {
    let path = repo(DATA).join(format!("cellDist.{case}.{n}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| c.to_digit(10).expect("a processor digit"))
        .collect()
}

fn mesh_of(case: &str) -> fvpoisson::mesh::Mesh {
    read_block_mesh_dict(&repo(DATA).join(case).join("system/blockMeshDict")).unwrap()
}

/// The number of cells whose part differs, and the first of them.
fn differences(ours: &[u32], theirs: &[u32]) -> (usize, Option<usize>) {
    assert_eq!(ours.len(), theirs.len(), "cell counts");
    let differ: Vec<usize> = (0..ours.len()).filter(|&c| ours[c] != theirs[c]).collect();
    (differ.len(), differ.first().copied())
}

#[test]
fn simple_decomposition_is_openfoams_cell_for_cell() {
    for (case, divisions) in [
        ("box32", ["2x1x1", "4x1x1"].as_slice()),
        (
            "graded",
            ["4x1x1", "3x1x1", "7x1x1", "2x2x1", "3x1x2", "2x2x2"].as_slice(),
        ),
    ] {
        let mesh = mesh_of(case);
        for &n in divisions {
            let theirs = cell_dist(case, n);
            let parts: Vec<usize> = n.split('x').map(|k| k.parse().unwrap()).collect();
            let ranks = parts.iter().product();
            // `simple` is n (N 1 1); other divisions are named.
            let method = if parts[1] * parts[2] == 1 {
                "simple".to_string()
            } else {
                format!("simple:{n}")
            };
            let method: DecomposeMethod = method.parse().unwrap();
            let d = decompose_mesh(&mesh, ranks, method).unwrap();
            let (count, first) = differences(d.owners(), &theirs);
            assert_eq!(count, 0, "{case} {method}: first differing cell {first:?}");
        }
    }
}

#[test]
fn a_run_reads_the_addressing_decompose_par_writes() {
    let dir = NamedScratch::new("graded");
    copy_dir(&repo(DATA).join("graded"), &dir);
    copy_dir(&repo(DATA).join("graded_2x2x1"), &dir);
    let mesh = mesh_of("graded");
    let d = read_decomposition(&dir, mesh.n_cells()).unwrap().unwrap();
    let (count, first) = differences(d.owners(), &cell_dist("graded", "2x2x1"));
    assert_eq!(count, 0, "first differing cell {first:?}");
    // And a distributed run on it goes through.
    let o = fvpoisson(&["run", dir.to_str().unwrap(), "-np", "4", "--vtk", "none"]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{log}");
    assert!(log.contains("processor0..3"), "{log}");
}

/// A number after `key` in `line`.
fn number_after(line: &str, key: &str) -> f64 {
    let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
    rest.split([',', ' ', '\n'])
        .next()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("a number after {key} in {line}"))
}

/// OpenFOAM's (residual after each iteration, iterations) of reference `name`.
fn openfoam_history(ranks: usize, name: &str) -> (Vec<f64>, usize) {
    let read = |file: String| std::fs::read_to_string(repo(DATA).join(file)).unwrap();
    let log = read(format!("log.np{ranks}.{name}"));
    let iterations = number_after(&log, "No Iterations ") as usize;
    let mut history: Vec<f64> = read(format!("history.np{ranks}.{name}"))
        .lines()
        .enumerate()
        .map(|(k, line)| {
            let (iteration, residual) = line.split_once(' ').expect("k residual");
            assert_eq!(iteration, (k + 1).to_string());
            residual.parse().unwrap()
        })
        .collect();
    history.push(number_after(&log, "Final residual = "));
    assert_eq!(history.len(), iterations);
    (history, iterations)
}

/// `decompose --method simple -n ranks` and `run -np ranks --log debug` of
/// the 32³ box with T's solver entry `solver`: (residual after each
/// iteration, the solver line).
fn run_box32(ranks: usize, solver: &str) -> (Vec<f64>, String) {
    let dir = NamedScratch::new("box32");
    copy_dir(&repo(DATA).join("box32"), &dir);
    let fv_solution = dir.join("system/fvSolution");
    let text = std::fs::read_to_string(&fv_solution).unwrap();
    std::fs::write(
        &fv_solution,
        text.replace("solver PCG; preconditioner DIC;", solver),
    )
    .unwrap();
    let case = dir.to_str().unwrap();
    let n = ranks.to_string();
    let o = fvpoisson(&["decompose", case, "-n", &n, "--method", "simple"]);
    assert!(o.status.success(), "{o:?}");
    let o = fvpoisson(&["run", case, "-np", &n, "--vtk", "none", "--log", "debug"]);
    let log = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    assert!(Path::new(&dir.join("processor0/1/T")).exists());
    let history = log
        .lines()
        .filter(|l| l.contains(": T iteration "))
        .map(|l| number_after(l, "residual = "))
        .collect();
    let summary = log
        .lines()
        .find(|l| l.contains("Solving for T"))
        .expect("a solver line")
        .to_string();
    (history, summary)
}

/// The largest |ours − theirs| / theirs over the first `count` iterations.
fn largest_difference(ours: &[f64], theirs: &[f64], count: usize) -> f64 {
    ours.iter()
        .zip(theirs)
        .take(count)
        .map(|(o, t)| (o - t).abs() / t)
        .fold(0.0, f64::max)
}

#[test]
fn thread_ranks_take_openfoams_parallel_iterations_and_residuals() {
    for ranks in [2, 4] {
        for precond in ["DIC", "FDIC"] {
            let (ours, summary) =
                run_box32(ranks, &format!("solver PCG; preconditioner {precond};"));
            let (theirs, iterations) = openfoam_history(ranks, precond);
            println!(
                "{ranks} ranks, {precond}: {} iterations (OpenFOAM {iterations}); {summary}",
                ours.len()
            );
            assert_eq!(
                number_after(&summary, "No Iterations ") as usize,
                iterations
            );
            assert_eq!(ours.len(), iterations, "{summary}");
            // The same iterates: equal up to the round-off of the sums'
            // order (OpenFOAM prints 6 digits by default, 17 here).
            let rel = largest_difference(&ours, &theirs, iterations);
            assert!(rel < 1e-9, "{ranks} ranks, {precond}: {rel:e}");
            // The solver line, to its printed digits.
            let printed = number_after(&summary, "Final residual = ");
            let last = theirs[iterations - 1];
            assert!((printed - last).abs() <= 5e-6 * last, "{summary} vs {last}");
        }
    }
}

/// PBiCGStab over the ranks runs OpenFOAM's `-parallel` steps: the same
/// residuals while round-off is small. BiCGStab amplifies the round-off of
/// the sums' order (the serial solver against OpenFOAM's serial one does
/// too), so the histories drift apart by about 1 % near convergence and the
/// count may differ by one (39 here against OpenFOAM's 38, whose last
/// residual is 9.94e-7 against the tolerance 1e-6).
#[test]
fn thread_ranks_run_pbicgstab_with_openfoams_parallel_steps() {
    let (ours, summary) = run_box32(2, "solver PBiCGStab; preconditioner DIC;");
    let (theirs, iterations) = openfoam_history(2, "PBiCGStab.DIC");
    let early = largest_difference(&ours, &theirs, 20);
    let all = largest_difference(&ours, &theirs, iterations);
    let ours_iterations = number_after(&summary, "No Iterations ") as usize;
    println!(
        "2 ranks, PBiCGStab DIC: {ours_iterations} iterations (OpenFOAM {iterations}); first \
         20 iterations within {early:.1e}, all within {all:.1e}; {summary}"
    );
    assert!(ours_iterations.abs_diff(iterations) <= 1, "{summary}");
    assert!(ours.len() >= 20, "{summary}");
    assert!(early < 1e-8, "{early:e}");
    assert!(all < 3e-2, "{all:e}");
}
