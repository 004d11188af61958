//! CPU linear solvers against OpenFOAM on the same mesh and the same
//! dictionaries: `cargo bench --bench cpu_solvers -- [SPEC...] [--threads N]
//! [--repeat N]` where SPEC is a mesh generator spec (default
//! `box:100x100x100`, 1 M hex cells; `box:40x40x40` for a quick run).
//!
//! Each spec becomes a laplacianFoam case (written by `fvpoisson
//! convert-mesh --format binary`; T = 1 on xmin, 0 on xmax, zero gradient
//! elsewhere, steady, tolerance 1e-6) solved with each fvSolution entry of
//! [`SOLVERS`] by `fvpoisson run` with one rayon thread and with N threads
//! (default: the cores), and, when `laplacianFoam` is on PATH
//! (WM_PROJECT_DIR defaults to /usr/share/openfoam), by OpenFOAM on the
//! same mesh files; its column reads "n/a" otherwise. Every run is made
//! twice, with `maxIter 1` and to convergence: the time per iteration is
//! the difference of the two runs' times over the difference of their
//! iterations, so reading the mesh, assembling and setting up (DIC factor,
//! GAMG agglomeration) cancel out. One-thread times are the child's CPU
//! time (user + system, from the shell's `times`), which the other
//! processes of a shared machine do not inflate; N-thread times are wall
//! clock. Each time is the least of `--repeat` runs (default 3).
//! "solve s" is the converged run's time less that of a run with
//! tolerance 1 (no iteration): everything the solve costs, set-up included.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// (label, the fvSolution entry without tolerance, relTol and maxIter).
const SOLVERS: [(&str, &str); 6] = [
    ("PCG DIC", "solver PCG; preconditioner DIC;"),
    ("PCG FDIC", "solver PCG; preconditioner FDIC;"),
    ("PBiCGStab DIC", "solver PBiCGStab; preconditioner DIC;"),
    (
        "smoothSolver GaussSeidel",
        "solver smoothSolver; smoother GaussSeidel; nSweeps 1;",
    ),
    ("GAMG GaussSeidel", "solver GAMG; smoother GaussSeidel;"),
    (
        "GAMG DICGaussSeidel",
        "solver GAMG; smoother DICGaussSeidel;",
    ),
];

/// Iterations at most (the smoothSolver does not converge in them on 1 M cells).
const MAX_ITER: usize = 300;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|t| t.parse::<usize>().ok())
    };
    let threads = option("--threads")
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    let repeat = option("--repeat").unwrap_or(3).max(1);
    // Cargo passes `--bench` to every bench target; options take a value.
    let specs: Vec<&str> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with("--")
                && (*i == 0 || !matches!(args[i - 1].as_str(), "--threads" | "--repeat"))
        })
        .map(|(_, a)| a.as_str())
        .collect();
    let specs = if specs.is_empty() {
        vec!["box:100x100x100"]
    } else {
        specs
    };
    if std::env::var_os("WM_PROJECT_DIR").is_none() {
        std::env::set_var("WM_PROJECT_DIR", "/usr/share/openfoam");
    }
    let openfoam = Command::new("laplacianFoam")
        .arg("-help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !openfoam {
        eprintln!("laplacianFoam is not on PATH: its column reads n/a");
    }
    for spec in specs {
        if let Err(e) = bench(spec, threads, repeat, openfoam) {
            eprintln!("{spec}: {e}");
            std::process::exit(1);
        }
    }
}

/// One run's iterations (summed over the solves) and times.
#[derive(Clone, Copy)]
struct Timing {
    iterations: usize,
    cpu_s: f64,
    wall_s: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Tool {
    Fvpoisson { threads: usize },
    OpenFoam,
}

impl Tool {
    /// The time that counts: CPU time of a serial run, wall clock of a
    /// parallel one.
    fn time(self, t: &Timing) -> f64 {
        match self {
            Tool::Fvpoisson { threads } if threads > 1 => t.wall_s,
            _ => t.cpu_s,
        }
    }
}

fn bench(spec: &str, threads: usize, repeat: usize, openfoam: bool) -> Result<(), String> {
    let dir = case_for(spec)?;
    println!(
        "\n{spec}: CPU solvers, tolerance 1e-6, least of {repeat} runs (ms per iteration; \
         solve s = set-up + iterations)"
    );
    let mut tools = vec![Tool::Fvpoisson { threads: 1 }];
    if threads > 1 {
        tools.push(Tool::Fvpoisson { threads });
    }
    tools.push(Tool::OpenFoam);
    let available = |tool: &Tool| *tool != Tool::OpenFoam || openfoam;
    let baselines: Vec<Option<Timing>> = tools
        .iter()
        .map(|tool| match available(tool) {
            true => fastest(repeat, || {
                run(
                    &dir,
                    *tool,
                    "solver PCG; preconditioner DIC;",
                    10.0,
                    MAX_ITER,
                )
            })
            .map(Some),
            false => Ok(None),
        })
        .collect::<Result<_, _>>()?;
    let mut header = vec!["solver".to_string(), "iterations".to_string()];
    for tool in &tools {
        header.push(match tool {
            Tool::Fvpoisson { threads: 1 } => "fvpoisson 1 thread (CPU)".to_string(),
            Tool::Fvpoisson { threads } => format!("fvpoisson {threads} threads (wall)"),
            Tool::OpenFoam => "OpenFOAM v1912 (CPU)".to_string(),
        });
    }
    println!("| {} |", header.join(" | "));
    println!("|{}", "---|".repeat(header.len()));
    for (label, entry) in SOLVERS {
        let mut iterations = Vec::new();
        let mut cells = Vec::new();
        for (tool, baseline) in tools.iter().zip(&baselines) {
            let Some(baseline) = baseline else {
                cells.push("n/a".to_string());
                continue;
            };
            let one = fastest(repeat, || run(&dir, *tool, entry, 1e-6, 1));
            let full = fastest(repeat, || run(&dir, *tool, entry, 1e-6, MAX_ITER));
            let cell = match (one, full) {
                (Ok(one), Ok(full)) => {
                    let per_iteration = (tool.time(&full) - tool.time(&one))
                        / (full.iterations.saturating_sub(one.iterations)).max(1) as f64;
                    let name = match tool {
                        Tool::OpenFoam => "OpenFOAM",
                        Tool::Fvpoisson { .. } => "fvpoisson",
                    };
                    if !iterations.iter().any(|(n, _)| *n == name) {
                        iterations.push((name, full.iterations));
                    }
                    format!(
                        "{:.2} ms/it, solve {:.2} s",
                        1e3 * per_iteration,
                        tool.time(&full) - tool.time(baseline)
                    )
                }
                (Err(e), _) | (_, Err(e)) => format!("failed: {}", e.lines().next().unwrap_or("")),
            };
            cells.push(cell);
        }
        let iterations: Vec<String> = iterations
            .iter()
            .map(|(name, n)| format!("{n} ({name})"))
            .collect();
        println!(
            "| {label} | {} | {} |",
            iterations.join(", "),
            cells.join(" | ")
        );
    }
    Ok(())
}

/// The run of `repeat` with the least time (CPU and wall clock each their
/// least); every run must take the same iterations.
fn fastest(
    repeat: usize,
    mut run: impl FnMut() -> Result<Timing, String>,
) -> Result<Timing, String> {
    let mut best = run()?;
    for _ in 1..repeat {
        let t = run()?;
        if t.iterations != best.iterations {
            return Err(format!(
                "iterations differ between repetitions: {} and {}",
                best.iterations, t.iterations
            ));
        }
        best.cpu_s = best.cpu_s.min(t.cpu_s);
        best.wall_s = best.wall_s.min(t.wall_s);
    }
    Ok(best)
}

/// The laplacianFoam case of `spec` under target/, made once.
fn case_for(spec: &str) -> Result<PathBuf, String> {
    let name: String = spec
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cpu_solvers_{name}"));
    if !dir.join("constant/polyMesh").exists() {
        let out = Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
            .args(["convert-mesh", spec])
            .arg(&dir)
            .args(["--format", "binary"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in the case"))
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    write(
        "0/T",
        "FoamFile { version 2.0; format ascii; class volScalarField; object T; }\n\
         dimensions [0 0 0 1 0 0 0];\ninternalField uniform 0;\nboundaryField\n{\n\
         xmin { type fixedValue; value uniform 1; }\n\
         xmax { type fixedValue; value uniform 0; }\n\
         \"(ymin|ymax|zmin|zmax)\" { type zeroGradient; }\n}\n",
    )?;
    write(
        "constant/transportProperties",
        "FoamFile { version 2.0; format ascii; class dictionary; object transportProperties; }\n\
         DT DT [0 2 -1 0 0 0 0] 1;\n",
    )?;
    write(
        "system/controlDict",
        "FoamFile { version 2.0; format ascii; class dictionary; object controlDict; }\n\
         application laplacianFoam; startFrom startTime; startTime 0; stopAt endTime;\n\
         endTime 1; deltaT 1; writeControl timeStep; writeInterval 1; writeFormat binary;\n\
         writePrecision 17; writeCompression off; timeFormat general; timePrecision 6;\n\
         runTimeModifiable false;\n",
    )?;
    write(
        "system/fvSchemes",
        "FoamFile { version 2.0; format ascii; class dictionary; object fvSchemes; }\n\
         ddtSchemes { default steadyState; }\ngradSchemes { default Gauss linear; }\n\
         divSchemes { default none; }\nlaplacianSchemes { default Gauss linear corrected; }\n\
         interpolationSchemes { default linear; }\nsnGradSchemes { default corrected; }\n",
    )?;
    Ok(dir)
}

/// Runs the case with the solver `entry` and its controls; the iterations
/// summed over the log's "Solving for T" lines and the child's times.
fn run(
    dir: &Path,
    tool: Tool,
    entry: &str,
    tolerance: f64,
    max_iter: usize,
) -> Result<Timing, String> {
    std::fs::write(
        dir.join("system/fvSolution"),
        format!(
            "FoamFile {{ version 2.0; format ascii; class dictionary; object fvSolution; }}\n\
             solvers {{ T {{ {entry} tolerance {tolerance:e}; relTol 0; maxIter {max_iter}; }} }}\n\
             SIMPLE {{ nNonOrthogonalCorrectors 0; }}\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(dir.join("1"));
    let log = dir.join("log.bench");
    let command = match tool {
        Tool::Fvpoisson { threads } => format!(
            "RAYON_NUM_THREADS={threads} '{}' run . --device cpu --vtk none > log.bench 2>&1",
            env!("CARGO_BIN_EXE_fvpoisson")
        ),
        Tool::OpenFoam => "laplacianFoam > log.bench 2>&1".to_string(),
    };
    let start = Instant::now();
    // `times` prints the shell's and then its children's user and system time.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{command}; status=$?; times; exit $status"))
        .current_dir(dir)
        .output()
        .map_err(|e| e.to_string())?;
    let wall_s = start.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if !out.status.success() {
        return Err(text.lines().rev().take(5).collect::<Vec<_>>().join(" / "));
    }
    let times = String::from_utf8_lossy(&out.stdout);
    let cpu_s = times
        .lines()
        .nth(1)
        .map(|l| l.split_whitespace().map(seconds).sum())
        .ok_or_else(|| format!("no child times in '{times}'"))?;
    let iterations = text
        .lines()
        .filter(|l| l.contains("Solving for T"))
        .filter_map(|l| {
            l.rsplit("No Iterations ")
                .next()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .sum();
    Ok(Timing {
        iterations,
        cpu_s,
        wall_s,
    })
}

/// `1m2.500s` → 62.5.
fn seconds(text: &str) -> f64 {
    let text = text.trim_end_matches('s');
    match text.split_once('m') {
        Some((m, s)) => m.parse::<f64>().unwrap_or(0.0) * 60.0 + s.parse::<f64>().unwrap_or(0.0),
        None => text.parse().unwrap_or(0.0),
    }
}
