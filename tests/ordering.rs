//! Row orderings (natural, Cuthill–McKee, reverse CM, METIS slices) on random
//! matrices, disconnected graphs and FVM matrices of real meshes: each is a
//! permutation, the solve's permute-in/permute-out round-trips, and the METIS
//! ordering raises λ (the share of off-diagonals read from shared memory under
//! mod-SELL) over RCM; (reverse) Cuthill–McKee is its queue definition on
//! meshes of every kind and on disconnected graphs, whatever the thread
//! count. λ and the orderings are host computations, so these run in CI.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::sparse::ordering::{bandwidth, cuthill_mckee, reverse_cuthill_mckee, Graph};
use fvpoisson::sparse::testing::{cuthill_mckee_by_queue, random_symmetric, SplitMix};
use fvpoisson::sparse::{Csr, ModSell, Reordered, RowOrdering};

const H: usize = 512;

/// Block-diagonal matrix of the given blocks, rows then shuffled.
fn disconnected(blocks: &[Csr], seed: u64) -> (Csr, Vec<usize>) {
    let n: usize = blocks.iter().map(Csr::n_rows).sum();
    let mut rng = SplitMix(seed);
    let mut shuffle: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        shuffle.swap(i, rng.below(i + 1));
    }
    // component[new row] and the entries of each new row.
    let mut component = vec![0; n];
    let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    let mut offset = 0;
    for (b, block) in blocks.iter().enumerate() {
        for r in 0..block.n_rows() {
            let new_r = shuffle[offset + r];
            component[new_r] = b;
            let (cols, vals) = block.row(r);
            rows[new_r] = cols
                .iter()
                .zip(vals)
                .map(|(&c, &v)| (shuffle[offset + c as usize] as u32, v))
                .collect();
        }
        offset += block.n_rows();
    }
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for mut row in rows {
        row.sort_unstable_by_key(|e| e.0);
        cols.extend(row.iter().map(|e| e.0));
        vals.extend(row.iter().map(|e| e.1));
        row_ptr.push(cols.len());
    }
    (Csr::new(n, row_ptr, cols, vals).unwrap(), component)
}

/// The 1-D Laplacian of n rows (a path graph: connected).
fn path(n: usize) -> Csr {
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for r in 0..n {
        for c in r.saturating_sub(1)..(r + 2).min(n) {
            cols.push(c as u32);
            vals.push(if c == r { 2.0 } else { -1.0 });
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, row_ptr, cols, vals).unwrap()
}

/// λ of mod-SELL with slices of `h` rows.
fn lambda(a: &Csr, h: usize) -> f64 {
    ModSell::from_csr(a, h).unwrap().lambda()
}

/// Checks that every ordering of `a` is a permutation, that solving through
/// `Reordered` is invisible (y = A x computed in the internal order comes back
/// equal), and returns λ per ordering.
fn check_orderings(name: &str, a: &Csr, h: usize) -> Vec<(RowOrdering, f64)> {
    let n = a.n_rows();
    let mut rng = SplitMix(n as u64);
    let x: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
    let mut y = vec![0.0; n];
    a.spmv(&x, &mut y);
    let mut lambdas = Vec::new();
    for ordering in RowOrdering::ALL {
        let ordered = Reordered::new(a, ordering, h).unwrap();
        match ordered.permutation() {
            // `Permutation` checks on construction that it is one; here: its size.
            Some(p) => assert_eq!(p.len(), n, "{name} {ordering}"),
            None => assert_eq!(ordering, RowOrdering::Natural),
        }
        let b = ordered.matrix();
        assert_eq!(b.nnz(), a.nnz(), "{name} {ordering}");
        let x_new = ordered.to_new(&x);
        let mut y_new = vec![0.0; n];
        b.spmv(&x_new, &mut y_new);
        let mut y_back = vec![f64::NAN; n];
        ordered.to_old_into(&y_new, &mut y_back);
        for (i, (u, v)) in y_back.iter().zip(&y).enumerate() {
            assert!(
                (u - v).abs() <= 1e-13 * v.abs().max(1.0),
                "{name} {ordering}: row {i}: {u} vs {v}"
            );
        }
        // The vector round trip alone.
        let mut x_back = vec![f64::NAN; n];
        ordered.to_old_into(&x_new, &mut x_back);
        assert_eq!(x_back, x, "{name} {ordering}");
        let l = lambda(b, h);
        println!(
            "{name}: {ordering:<7} bandwidth {:>7}, lambda {l:.3}",
            bandwidth(b)
        );
        lambdas.push((ordering, l));
    }
    lambdas
}

fn lambda_of(lambdas: &[(RowOrdering, f64)], o: RowOrdering) -> f64 {
    lambdas.iter().find(|e| e.0 == o).unwrap().1
}

#[test]
fn every_ordering_is_a_permutation_on_random_and_fvm_matrices() {
    for (n, seed) in [(1, 1), (2, 2), (100, 3), (3000, 4)] {
        check_orderings(
            &format!("random n = {n}"),
            &random_symmetric(n, 6, seed),
            64,
        );
    }
    for source in [
        "meshes/foam/cavity",
        "meshes/foam/polydual",
        "meshes/gmsh/tet_cube.v41.msh",
        "meshes/gmsh/pyramid_hybrid.v22.msh",
        "box:9x7x1:2d",
    ] {
        let (a, _) = poisson_system(source).unwrap();
        check_orderings(source, &a, 32);
    }
}

#[test]
fn cuthill_mckee_places_each_component_contiguously() {
    // Connected blocks (FVM matrices and paths) and two isolated rows, shuffled.
    let blocks = [
        poisson_system("box:6x5x4").unwrap().0,
        path(1),
        poisson_system("box:3x3x3:tet").unwrap().0,
        path(2),
        path(300),
        path(1),
    ];
    let (a, component) = disconnected(&blocks, 17);
    for p in [cuthill_mckee(&a), reverse_cuthill_mckee(&a)] {
        assert_eq!(p.len(), a.n_rows());
        let visited: Vec<usize> = p
            .new_to_old()
            .iter()
            .map(|&r| component[r as usize])
            .collect();
        // Component changes along the order: exactly one fewer than the components.
        let changes = visited.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(changes, blocks.len() - 1, "{visited:?}");
        // No entry couples two components, so the bandwidth is that of one block.
        let b = p.apply_symmetric(&a);
        assert!(bandwidth(&b) < 162, "bandwidth {}", bandwidth(&b));
    }
    // Cuthill–McKee starts each component from its smallest degree: the
    // isolated rows (degree 0) come first.
    let mut first: Vec<usize> = cuthill_mckee(&a).new_to_old()[..2]
        .iter()
        .map(|&r| component[r as usize])
        .collect();
    first.sort_unstable();
    assert_eq!(first, vec![1, 5]);
    // Every ordering handles the disconnected graph.
    check_orderings("disconnected", &a, 32);
}

#[test]
fn metis_ordering_raises_lambda_on_hex_and_tet_boxes() {
    // Large enough that a level set of RCM (a plane of cells) exceeds a slice.
    for source in ["box:40x40x40", "box:20x20x20:tet:perturb=0.2:renumber"] {
        let (a, _) = poisson_system(source).unwrap();
        let lambdas = check_orderings(source, &a, H);
        let (metis, rcm, natural) = (
            lambda_of(&lambdas, RowOrdering::Metis),
            lambda_of(&lambdas, RowOrdering::Rcm),
            lambda_of(&lambdas, RowOrdering::Natural),
        );
        // Slices of 512 cells as compact sub-domains keep most neighbours
        // inside; RCM level sets span several slices.
        assert!(metis > rcm + 0.3, "{source}: metis {metis}, rcm {rcm}");
        assert!(
            metis > natural,
            "{source}: metis {metis}, natural {natural}"
        );
    }
}

/// The graph of `a`'s pattern from its rows and columns as lists (not by
/// `Graph::of_matrix`, which the orderings use).
fn graph_from_lists(a: &Csr) -> Graph {
    let mut lists = vec![Vec::new(); a.n_rows()];
    for r in 0..a.n_rows() {
        for &c in a.row(r).0 {
            lists[r].push(c);
            lists[c as usize].push(r as u32);
        }
    }
    Graph::from_lists(lists).unwrap()
}

/// The parallel Cuthill–McKee is the one-queue definition, on FVM matrices
/// of tets (shuffled), hexes, a 2-D box, prisms, polyhedra and a
/// disconnected matrix, on 1 to 4 threads; its reverse is the reversed
/// order.
#[test]
fn cuthill_mckee_is_the_queue_order_on_meshes_and_any_thread_count() {
    let mut matrices: Vec<(String, Csr)> = [
        "box:16x15x14:tet:perturb=0.2:renumber",
        "box:30x20x10:renumber",
        "box:24x24x24",
        "box:80x60x1:2d:renumber",
        "box:12x12x12:prism:renumber",
        "meshes/foam/polydual",
        "meshes/gmsh/pyramid_hybrid.v22.msh",
    ]
    .into_iter()
    .map(|source| (source.to_string(), poisson_system(source).unwrap().0))
    .collect();
    let blocks = [
        poisson_system("box:6x5x4:tet:renumber").unwrap().0,
        path(1),
        poisson_system("box:9x9x9:renumber").unwrap().0,
        path(40),
    ];
    matrices.push(("disconnected".to_string(), disconnected(&blocks, 5).0));
    for (name, a) in &matrices {
        let expected = cuthill_mckee_by_queue(&graph_from_lists(a));
        let reversed: Vec<u32> = expected.iter().rev().copied().collect();
        for threads in [1, 2, 3, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (cm, rcm) = pool.install(|| (cuthill_mckee(a), reverse_cuthill_mckee(a)));
            assert_eq!(cm.new_to_old(), expected, "{name}, {threads} threads");
            assert_eq!(rcm.new_to_old(), reversed, "{name}, {threads} threads");
            for (k, &old) in rcm.new_to_old().iter().enumerate() {
                assert_eq!(rcm.old_to_new()[old as usize] as usize, k, "{name}");
            }
        }
    }
}
