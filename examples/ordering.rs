//! Host cost of the row ordering a GPU run computes before its device set-up
//! (`RowOrdering::permutation_unless_banded`, the run's "ordering" phase),
//! and its parts, on the FVM pattern of a mesh built as the run builds it.
//!
//! `cargo run --release --example ordering -- [--threads 1,2] [--repeat 3] SPEC...`
//! where SPEC is any mesh source `mesh::load` takes (default
//! `box:110x110x110:tet:perturb=0.2:renumber`, 7,986,000 shuffled tets).
//! Per thread count, the best of `--repeat` runs of each part is printed in
//! milliseconds, with the process CPU time it took (all threads); the
//! mesh's cell → face lists (`Mesh::cell_faces`) are timed alike.

use fvpoisson::mesh::Mesh;
use fvpoisson::sparse::ordering::{relative_bandwidth, Graph, Permutation};
use fvpoisson::sparse::{Csr, RowOrdering};
use std::time::Instant;

/// The rows of a device solve (`GpuSolveOptions::default().slice_height`).
const SLICE_HEIGHT: usize = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut threads = vec![1, 2];
    let mut repeat = 3;
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => {
                let list = args.next().ok_or("--threads needs a list such as 1,2")?;
                threads = list.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--repeat" => repeat = args.next().ok_or("--repeat needs a count")?.parse()?,
            "--bench" => {}
            spec => specs.push(spec.to_string()),
        }
    }
    if specs.is_empty() {
        specs.push("box:110x110x110:tet:perturb=0.2:renumber".into());
    }
    for spec in &specs {
        let start = Instant::now();
        let mesh = fvpoisson::mesh::load(spec)?;
        let pattern = fvm_pattern(&mesh)?;
        println!(
            "{spec}: {} cells, {} matrix entries, relative bandwidth {:.1} n^(2/3) \
             (mesh and pattern in {:.1} s)",
            mesh.n_cells(),
            pattern.nnz(),
            relative_bandwidth(&pattern),
            start.elapsed().as_secs_f64()
        );
        let graph = Graph::of_matrix(&pattern);
        let cm = graph.cuthill_mckee();
        let levels = level_count(&graph, cm.new_to_old());
        println!(
            "  {} graph edges, {} breadth-first levels from the start vertex",
            graph.n_targets() / 2,
            levels
        );
        for &t in &threads {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
            let best = |f: &mut (dyn FnMut() + Send)| {
                (0..repeat)
                    .map(|_| {
                        let (wall, cpu) = (Instant::now(), cpu_seconds());
                        pool.install(&mut *f);
                        (wall.elapsed().as_secs_f64() * 1e3, cpu_seconds() - cpu)
                    })
                    .fold((f64::INFINITY, 0.0), |a, b| if b.0 < a.0 { b } else { a })
            };
            let parts = [
                ("Mesh::cell_faces", best(&mut || drop(mesh.cell_faces()))),
                (
                    "relative_bandwidth",
                    best(&mut || {
                        std::hint::black_box(relative_bandwidth(&pattern));
                    }),
                ),
                (
                    "Graph::of_matrix",
                    best(&mut || drop(Graph::of_matrix(&pattern))),
                ),
                (
                    "Graph::cuthill_mckee",
                    best(&mut || drop(graph.cuthill_mckee())),
                ),
                (
                    "Permutation::from_new_to_old",
                    best(&mut || {
                        drop(Permutation::from_new_to_old(cm.new_to_old().to_vec()).unwrap())
                    }),
                ),
                ("Permutation::reversed", best(&mut || drop(cm.reversed()))),
                (
                    "RCM ordering (whole)",
                    best(&mut || {
                        drop(
                            RowOrdering::Rcm
                                .permutation_unless_banded(&pattern, SLICE_HEIGHT)
                                .unwrap(),
                        )
                    }),
                ),
            ];
            for (name, (ms, cpu)) in parts {
                println!("  {t} thread(s): {name:<30} {ms:>9.1} ms  {cpu:>6.2} CPU-s");
            }
        }
    }
    Ok(())
}

/// The pattern of the mesh's FVM matrix (a cell and its neighbours across
/// internal faces, sorted), as the Laplacian's; unit values.
fn fvm_pattern(mesh: &Mesh) -> Result<Csr, Box<dyn std::error::Error>> {
    let n = mesh.n_cells();
    let (offsets, faces) = mesh.cell_faces();
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0);
    let mut cols = Vec::with_capacity(n + 2 * neighbour.len());
    for c in 0..n {
        let start = cols.len();
        cols.push(c as u32);
        for &f in &faces[offsets[c] as usize..offsets[c + 1] as usize] {
            if let Some(&nb) = neighbour.get(f as usize) {
                let o = owner[f as usize];
                cols.push(if o as usize == c { nb } else { o });
            }
        }
        cols[start..].sort_unstable();
        row_ptr.push(cols.len());
    }
    let values = vec![1.0; cols.len()];
    Ok(Csr::new(n, row_ptr, cols, values)?)
}

/// The number of breadth-first levels of a Cuthill–McKee order's first
/// component (the eccentricity of its start vertex, plus one).
fn level_count(graph: &Graph, order: &[u32]) -> usize {
    let mut level = vec![usize::MAX; graph.n()];
    let Some(&first) = order.first() else {
        return 0;
    };
    level[first as usize] = 0;
    let mut deepest = 0;
    // In a breadth-first order each vertex's level is known when it is reached.
    for &v in order {
        let l = level[v as usize];
        if l == usize::MAX {
            break;
        }
        deepest = deepest.max(l);
        for &u in graph.neighbours(v as usize) {
            if level[u as usize] == usize::MAX {
                level[u as usize] = l + 1;
            }
        }
    }
    deepest + 1
}

/// User + system CPU time of this process, all threads (/proc/self/stat,
/// in ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(after) = stat.rsplit(')').next() else {
        return f64::NAN;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|s| s.parse::<f64>().ok());
    // After the command name: state is field 3 (index 0 here), utime 14, stime 15.
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
}
