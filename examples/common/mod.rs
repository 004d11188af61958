//! Set-up shared by the host-timing examples (`ordering`, `assembly_map`,
//! `vtk_write`, `host_phases`): their command line, the mesh built from a
//! source string as a run builds it, and wall and CPU clocks.
//!
//! Each example compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use fvpoisson::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, PatchValues, Schemes,
};
use fvpoisson::mesh::{Geometry, Mesh};
use fvpoisson::timings::Rss;
use std::time::Instant;

/// The rows of a device solve's slices (`GpuSolveOptions::default().slice_height`).
pub const SLICE_HEIGHT: usize = 256;

/// The options of a timing example: `--threads 1,2`, `--repeat N`, flags
/// the example names, and the rest as positional arguments (mesh sources
/// first).
pub struct Options {
    /// Sizes of the rayon pools each part is timed on.
    pub threads: Vec<usize>,
    /// Runs per part; the fastest is reported.
    pub repeat: usize,
    /// The flags given, of those the example accepts.
    pub flags: Vec<String>,
    /// The other arguments, in order.
    pub positional: Vec<String>,
}

impl Options {
    /// Parses the process's arguments; `flags` are the example's own
    /// switches (`--bench`, which `cargo bench` passes, is always accepted).
    pub fn parse(flags: &[&str]) -> Result<Self, String> {
        let mut options = Self {
            threads: vec![1, 2],
            repeat: 3,
            flags: Vec::new(),
            positional: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--threads" => {
                    let list = args.next().ok_or("--threads needs a list such as 1,2")?;
                    options.threads = list
                        .split(',')
                        .map(|t| match t.parse::<usize>() {
                            Ok(t) if t > 0 => Ok(t),
                            _ => Err(format!("--threads: {t:?} is not a thread count")),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--repeat" => {
                    let count = args.next().ok_or("--repeat needs a count")?;
                    options.repeat = match count.parse::<usize>() {
                        Ok(n) if n > 0 => n,
                        _ => return Err(format!("--repeat: {count:?} is not a count")),
                    };
                }
                "--bench" => {}
                flag if flags.contains(&flag) => options.flags.push(flag.to_string()),
                flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
                _ => options.positional.push(arg),
            }
        }
        Ok(options)
    }

    /// Whether `flag` was given.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// The mesh sources given, or `default` when none was.
    pub fn specs_or(&self, default: &str) -> Vec<String> {
        if self.positional.is_empty() {
            vec![default.to_string()]
        } else {
            self.positional.clone()
        }
    }
}

/// The mesh of a source string, as `fvpoisson run` loads it, with the
/// seconds it took.
pub fn load_mesh(spec: &str) -> Result<(Mesh, f64), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mesh = fvpoisson::mesh::load(spec)?;
    Ok((mesh, start.elapsed().as_secs_f64()))
}

/// CPU time of the process so far (all threads), in seconds.
pub fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    match unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } {
        0 => ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9,
        _ => f64::NAN,
    }
}

/// Wall and process CPU milliseconds of one piece of work.
#[derive(Clone, Copy, Debug)]
pub struct Elapsed {
    pub wall_ms: f64,
    pub cpu_ms: f64,
}

/// Runs `work` once, with its wall and CPU time.
pub fn timed<T>(work: impl FnOnce() -> T) -> (T, Elapsed) {
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let out = work();
    let elapsed = Elapsed {
        wall_ms: start.elapsed().as_secs_f64() * 1e3,
        cpu_ms: (cpu_seconds() - cpu) * 1e3,
    };
    (out, elapsed)
}

/// The fastest (by wall time) of `repeat` runs of `work` on `pool`.
pub fn best_of(
    pool: &rayon::ThreadPool,
    repeat: usize,
    work: &mut (dyn FnMut() + Send),
) -> Elapsed {
    (0..repeat.max(1))
        .map(|_| timed(|| pool.install(&mut *work)).1)
        .fold(
            Elapsed {
                wall_ms: f64::INFINITY,
                cpu_ms: 0.0,
            },
            |best, e| if e.wall_ms < best.wall_ms { e } else { best },
        )
}

/// A rayon pool of `threads` threads.
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build()
}

/// Runs `work` once on the global pool, printing its wall and CPU time and
/// the process's memory after it (current and peak resident set).
pub fn stage<T>(name: &str, work: impl FnOnce() -> T) -> T {
    let (out, e) = timed(work);
    let memory = Rss::now().map_or(String::new(), |r| {
        format!(
            "  RSS {:>8.0} MB, peak {:>8.0} MB",
            r.current as f64 / 1e6,
            r.peak as f64 / 1e6
        )
    });
    println!(
        "  {name:<36} {:>9.1} ms (cpu {:>9.1} ms){memory}",
        e.wall_ms, e.cpu_ms
    );
    out
}

/// Prints one timed part of a table: thread count, name, wall and CPU.
pub fn print_part(threads: usize, name: &str, e: Elapsed) {
    println!(
        "  {threads} thread(s): {name:<30} {:>9.1} ms (cpu {:>9.1} ms)",
        e.wall_ms, e.cpu_ms
    );
}

/// The Poisson problem the host-timing examples assemble: unit diffusion, no
/// source, zero on every patch.
pub fn problem_of(mesh: &Mesh) -> LaplacianProblem {
    LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::Uniform(0.0),
        BoundaryCondition::on_every_patch(
            mesh,
            BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        ),
    )
}

/// The system a GPU run builds before its device set-up: evaluated
/// conditions, no pattern, no host assembly
/// (`LaplacianSystem::deferred_without_pattern`).
pub fn deferred_system<'m>(
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    problem: &LaplacianProblem,
) -> LaplacianSystem<'m> {
    LaplacianSystem::deferred_without_pattern(mesh, geometry, Schemes::default(), problem)
        .expect("a deferred system")
}

/// Prints a memory account: the heap bytes of each item, per cell, and
/// their total.
pub fn print_account(items: &[(&str, usize)], n_cells: usize) {
    let per_cell = |bytes: usize| bytes as f64 / n_cells.max(1) as f64;
    println!("  memory account ({n_cells} cells):");
    println!("    {:<40} {:>10} {:>10}", "structure", "MB", "B/cell");
    for &(name, bytes) in items {
        println!(
            "    {name:<40} {:>10.1} {:>10.1}",
            bytes as f64 / 1e6,
            per_cell(bytes)
        );
    }
    let total: usize = items.iter().map(|&(_, b)| b).sum();
    println!(
        "    {:<40} {:>10.1} {:>10.1}",
        "total",
        total as f64 / 1e6,
        per_cell(total)
    );
}
