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

mod common;

use common::SLICE_HEIGHT;
use fvpoisson::mesh::Mesh;
use fvpoisson::sparse::ordering::{relative_bandwidth, Graph, Permutation};
use fvpoisson::sparse::{Csr, RowOrdering};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = common::Options::parse(&[])?;
    let repeat = options.repeat;
    for spec in &options.specs_or("box:110x110x110:tet:perturb=0.2:renumber") {
        let (built, took) = common::timed(|| {
            let (mesh, _) = common::load_mesh(spec)?;
            let pattern = fvm_pattern(&mesh)?;
            Ok::<_, Box<dyn std::error::Error>>((mesh, pattern))
        });
        let (mesh, pattern) = built?;
        println!(
            "{spec}: {} cells, {} matrix entries, relative bandwidth {:.1} n^(2/3) \
             (mesh and pattern in {:.1} s)",
            mesh.n_cells(),
            pattern.nnz(),
            relative_bandwidth(&pattern),
            took.wall_ms / 1e3
        );
        let graph = Graph::of_matrix(&pattern);
        let cm = graph.cuthill_mckee();
        let levels = level_count(&graph, cm.new_to_old());
        println!(
            "  {} graph edges, {} breadth-first levels from the start vertex",
            graph.n_targets() / 2,
            levels
        );
        for &t in &options.threads {
            let pool = common::pool(t)?;
            let best = |f: &mut (dyn FnMut() + Send)| common::best_of(&pool, repeat, f);
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
            for (name, elapsed) in parts {
                common::print_part(t, name, elapsed);
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
