//! Host cost of a GPU run's set-up: the parts of
//! `gpu::assembly::AssemblyMap::new` and of the host structure a GPU run
//! builds (the deferred `LaplacianSystem`: face geometry, matrix pattern,
//! regions; reverse Cuthill–McKee rows), each timed on rayon pools of the
//! thread counts given, and the process's memory after each stage of a GPU
//! run's host side (mesh, geometry, deferred system, ordering, map).
//!
//! `cargo run --release --example assembly_map -- [--threads 1,2] [--repeat 3] SPEC...`
//! where SPEC is any mesh source `mesh::load` takes (e.g.
//! `box:60x60x60:tet:perturb=0.2:renumber`, `box:120x120x120`). The best of
//! `--repeat` runs of each part is printed, in milliseconds (wall and CPU).
//! `--stages` prints only the stages and their memory, once, on the global
//! pool (what a run does); `RUST_LOG=debug` adds the debug spans inside them.

use fvpoisson::fvm::Schemes;
use fvpoisson::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, PatchValues,
};
use fvpoisson::gpu::assembly::AssemblyMap;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::ModSell;
use fvpoisson::timings::Rss;
use std::time::Instant;

/// The rows of a device solve (`GpuSolveOptions::default().slice_height`).
const SLICE_HEIGHT: usize = 256;

/// CPU time of the process so far (all threads), in seconds.
fn cpu_seconds() -> f64 {
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

fn megabytes(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Runs `work`, printing its wall and CPU time and the memory after it.
fn stage<T>(name: &str, work: impl FnOnce() -> T) -> T {
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let out = work();
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let memory = Rss::now().map_or(String::new(), |r| {
        format!(
            "  RSS {:>8.0} MB, peak {:>8.0} MB",
            megabytes(r.current),
            megabytes(r.peak)
        )
    });
    println!(
        "  {name:<36} {:>9.1} ms (cpu {:>9.1} ms){memory}",
        wall * 1e3,
        cpu * 1e3
    );
    out
}

fn problem_of(mesh: &fvpoisson::mesh::Mesh) -> LaplacianProblem {
    LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::Uniform(0.0),
        BoundaryCondition::on_every_patch(
            mesh,
            BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        ),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=debug` prints the spans inside the stages.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut threads = vec![1, 2];
    let mut repeat = 3;
    let mut stages_only = false;
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => {
                let list = args.next().ok_or("--threads needs a list such as 1,2")?;
                threads = list.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--repeat" => repeat = args.next().ok_or("--repeat needs a count")?.parse()?,
            "--stages" => stages_only = true,
            "--bench" => {}
            spec => specs.push(spec.to_string()),
        }
    }
    if specs.is_empty() {
        specs.push("box:60x60x60:tet:perturb=0.2:renumber".into());
    }
    for spec in &specs {
        println!("{spec}: a GPU run's host stages");
        let mesh = stage("mesh", || fvpoisson::mesh::load(spec))?;
        let geometry = stage("geometry", || mesh.geometry())?;
        let problem = problem_of(&mesh);
        let system = stage("deferred system (no slot map)", || {
            LaplacianSystem::deferred(&mesh, &geometry, Schemes::default(), &problem)
        })?;
        let ordering = stage("reverse Cuthill-McKee", || {
            reverse_cuthill_mckee(&system.matrix)
        });
        let map = stage("AssemblyMap::new", || {
            AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT)
        })?;
        let slots = stage("slot map (host assembly only)", || {
            system.slots().diagonal.len()
        });
        println!(
            "  {} cells, {} internal faces, {} matrix entries, {} map slots, {slots} diagonal \
             slots",
            mesh.n_cells(),
            mesh.n_internal_faces(),
            system.matrix.nnz(),
            map.face_slots.len()
        );
        drop(map);
        if stages_only {
            continue;
        }
        let matrix = &system.matrix;
        for &t in &threads {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let best = |f: &mut (dyn FnMut() + Send)| {
                (0..repeat)
                    .map(|_| {
                        let (start, cpu) = (Instant::now(), cpu_seconds());
                        pool.install(&mut *f);
                        (
                            start.elapsed().as_secs_f64() * 1e3,
                            (cpu_seconds() - cpu) * 1e3,
                        )
                    })
                    .fold((f64::INFINITY, 0.0), |a, b| if b.0 < a.0 { b } else { a })
            };
            let permuted = ordering.apply_symmetric(matrix);
            let parts = [
                (
                    "apply_symmetric",
                    best(&mut || drop(ordering.apply_symmetric(matrix))),
                ),
                (
                    "ModSell::from_csr",
                    best(&mut || drop(ModSell::from_csr(&permuted, SLICE_HEIGHT).unwrap())),
                ),
                (
                    "ModSell::from_csr_permuted",
                    best(&mut || {
                        drop(ModSell::from_csr_permuted(matrix, &ordering, SLICE_HEIGHT).unwrap())
                    }),
                ),
                ("Mesh::cell_faces", best(&mut || drop(mesh.cell_faces()))),
                (
                    "AssemblyMap::new",
                    best(&mut || drop(AssemblyMap::new(&mesh, &ordering, SLICE_HEIGHT).unwrap())),
                ),
                (
                    "deferred system",
                    best(&mut || {
                        drop(
                            LaplacianSystem::deferred(
                                &mesh,
                                &geometry,
                                Schemes::default(),
                                &problem,
                            )
                            .unwrap(),
                        )
                    }),
                ),
            ];
            for (name, (ms, cpu)) in parts {
                println!("  {t} thread(s): {name:<26} {ms:>9.1} ms (cpu {cpu:>9.1} ms)");
            }
        }
    }
    Ok(())
}
