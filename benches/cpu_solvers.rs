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
//!
//! `--ranks 1,2,4,8,16` (a list, or one count) adds a table of distributed
//! runs, as OpenFOAM scales with cores: for PCG DIC, PCG FDIC and PBiCGStab
//! DIC and each rank count N, `fvpoisson run -np N` (thread ranks, block DIC over the ranks)
//! on `fvpoisson decompose --method simple -n N`, and, when `mpirun` and
//! `decomposePar` are on PATH, `mpirun -np N laplacianFoam -parallel` on
//! decomposePar's `simple` with n (N 1 1): the same decomposition, cell for
//! cell (one rank: OpenFOAM's serial run, which `-parallel` refuses). Times
//! are wall clock, per iteration by the same difference of a `maxIter 1`
//! run and a converged one; both tools' iterations are printed.
//! `--ranks-only` leaves out the first table.

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
    let ranks: Vec<usize> = match args.iter().position(|a| a == "--ranks") {
        None => Vec::new(),
        Some(i) => match args.get(i + 1).map(|list| rank_list(list)) {
            Some(Ok(ranks)) => ranks,
            Some(Err(e)) => {
                eprintln!("--ranks: {e}");
                std::process::exit(2);
            }
            None => {
                eprintln!("--ranks: give the rank counts, e.g. --ranks 1,2,4,8,16");
                std::process::exit(2);
            }
        },
    };
    let ranks_only = args.iter().any(|a| a == "--ranks-only");
    if ranks_only && ranks.is_empty() {
        eprintln!("--ranks-only needs --ranks LIST");
        std::process::exit(2);
    }
    // Cargo passes `--bench` to every bench target; options take a value.
    let specs: Vec<&str> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with("--")
                && (*i == 0
                    || !matches!(args[i - 1].as_str(), "--threads" | "--repeat" | "--ranks"))
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
    let openfoam_parallel = openfoam && !ranks.is_empty() && {
        let found = |program: &str, arg: &str| {
            Command::new(program)
                .arg(arg)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        found("mpirun", "--version") && found("decomposePar", "-help")
    };
    if openfoam && !ranks.is_empty() && !openfoam_parallel {
        eprintln!("mpirun or decomposePar is not on PATH: the OpenFOAM -parallel column reads n/a");
    }
    for spec in specs {
        let result = match ranks_only {
            true => Ok(()),
            false => bench(spec, threads, repeat, openfoam),
        }
        .and_then(|()| match ranks.is_empty() {
            true => Ok(()),
            false => bench_ranks(spec, &ranks, repeat, openfoam_parallel),
        });
        if let Err(e) = result {
            eprintln!("{spec}: {e}");
            std::process::exit(1);
        }
    }
}

/// `1,2,4` → [1, 2, 4] (positive counts).
fn rank_list(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|n| match n.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "'{n}' in '{list}' is not a positive rank count (e.g. --ranks 1,2,4,8,16)"
            )),
        })
        .collect()
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
    Fvpoisson {
        threads: usize,
    },
    OpenFoam,
    /// `fvpoisson run -np N` (thread ranks) on the case's decomposition.
    FvpoissonRanks(usize),
    /// `mpirun -np N laplacianFoam -parallel` on decomposePar's.
    OpenFoamParallel(usize),
}

impl Tool {
    /// The time that counts: CPU time of a serial run, wall clock of a
    /// parallel one.
    fn time(self, t: &Timing) -> f64 {
        match self {
            Tool::Fvpoisson { threads: 1 } | Tool::OpenFoam => t.cpu_s,
            _ => t.wall_s,
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
            Tool::FvpoissonRanks(_) | Tool::OpenFoamParallel(_) => {
                unreachable!("rank runs have their own table")
            }
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
                        Tool::OpenFoam | Tool::OpenFoamParallel(_) => "OpenFOAM",
                        Tool::Fvpoisson { .. } | Tool::FvpoissonRanks(_) => "fvpoisson",
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

/// The rank-count table of `--ranks`: PCG DIC, PCG FDIC and PBiCGStab DIC,
/// each rank count.
fn bench_ranks(
    spec: &str,
    ranks: &[usize],
    repeat: usize,
    openfoam_parallel: bool,
) -> Result<(), String> {
    // Own copies of the case: the decompositions live in processorK.
    let ours = case_for_in(spec, "ranks")?;
    let theirs = case_for_in(spec, "openfoam_ranks")?;
    println!(
        "\n{spec}: distributed runs, tolerance 1e-6, `simple` decomposition n (N 1 1), least of \
         {repeat} runs (wall clock; ms per iteration; iterations fvpoisson / OpenFOAM)"
    );
    println!(
        "| solver | ranks | iterations | fvpoisson run -np N (threads) | OpenFOAM mpirun -np N \
         -parallel |"
    );
    println!("|---|---|---|---|---|");
    for &n in ranks {
        decompose(&ours, n, false)?;
        // One rank is OpenFOAM's serial run (`-parallel` needs two or more).
        if openfoam_parallel && n > 1 {
            decompose(&theirs, n, true)?;
        }
        for (label, entry) in &SOLVERS[..3] {
            let mut iterations = Vec::new();
            let mut cells = Vec::new();
            for (dir, tool, available) in [
                (&ours, Tool::FvpoissonRanks(n), true),
                (&theirs, Tool::OpenFoamParallel(n), openfoam_parallel),
            ] {
                if !available {
                    iterations.push("n/a".to_string());
                    cells.push("n/a".to_string());
                    continue;
                }
                let one = fastest(repeat, || run(dir, tool, entry, 1e-6, 1));
                let full = fastest(repeat, || run(dir, tool, entry, 1e-6, MAX_ITER));
                match (one, full) {
                    (Ok(one), Ok(full)) => {
                        let per_iteration = (full.wall_s - one.wall_s)
                            / full.iterations.saturating_sub(one.iterations).max(1) as f64;
                        iterations.push(full.iterations.to_string());
                        cells.push(format!(
                            "{:.2} ms/it, {:.2} s",
                            1e3 * per_iteration,
                            full.wall_s
                        ));
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        iterations.push("-".to_string());
                        cells.push(format!("failed: {}", e.lines().next().unwrap_or("")));
                    }
                }
            }
            println!(
                "| {label} | {n} | {} | {} |",
                iterations.join(" / "),
                cells.join(" | ")
            );
        }
    }
    Ok(())
}

/// Splits the case `dir` over `n` ranks with the `simple` method: by
/// `fvpoisson decompose`, or (`openfoam`) by decomposePar with n (N 1 1).
fn decompose(dir: &Path, n: usize, openfoam: bool) -> Result<(), String> {
    let out = if openfoam {
        std::fs::write(
            dir.join("system/decomposeParDict"),
            format!(
                "FoamFile {{ version 2.0; format ascii; class dictionary; object \
                 decomposeParDict; }}\nnumberOfSubdomains {n};\nmethod simple;\n\
                 simpleCoeffs {{ n ({n} 1 1); delta 0.001; }}\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        Command::new("decomposePar")
            .args(["-force", "-case"])
            .arg(dir)
            .output()
    } else {
        Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
            .arg("decompose")
            .arg(dir)
            .args(["-n", &n.to_string(), "--method", "simple"])
            .output()
    }
    .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "decomposing {} over {n}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
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
    case_for_in(spec, "")
}

/// [`case_for`] in a directory of its own, named with `suffix`.
fn case_for_in(spec: &str, suffix: &str) -> Result<PathBuf, String> {
    let mut name: String = spec
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !suffix.is_empty() {
        name = format!("{name}_{suffix}");
    }
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
    // `run` writes each run's own; `decompose` reads the case before that.
    write(
        "system/fvSolution",
        "FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }\n\
         solvers { T { solver PCG; preconditioner DIC; tolerance 1e-6; relTol 0; } }\n\
         SIMPLE { nNonOrthogonalCorrectors 0; }\n",
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
    // The ranks' time directories of the previous run.
    for rank in 0.. {
        let processor = dir.join(format!("processor{rank}"));
        if !processor.is_dir() {
            break;
        }
        let _ = std::fs::remove_dir_all(processor.join("1"));
    }
    let log = dir.join("log.bench");
    let command = match tool {
        Tool::Fvpoisson { threads } => format!(
            "RAYON_NUM_THREADS={threads} '{}' run . --device cpu --vtk none > log.bench 2>&1",
            env!("CARGO_BIN_EXE_fvpoisson")
        ),
        Tool::OpenFoam | Tool::OpenFoamParallel(1) => "laplacianFoam > log.bench 2>&1".to_string(),
        Tool::FvpoissonRanks(n) => format!(
            "'{}' run . -np {n} --device cpu --vtk none > log.bench 2>&1",
            env!("CARGO_BIN_EXE_fvpoisson")
        ),
        // Open MPI's switches by environment (other MPIs ignore them): more
        // ranks than cores on a small machine, and runs as root in containers.
        Tool::OpenFoamParallel(n) => format!(
            "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 \
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np {n} laplacianFoam -parallel \
             > log.bench 2>&1"
        ),
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
