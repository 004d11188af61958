//! Slice ordering by graph partitioning: the domain-decomposition ordering
//! that Wikberg 2024, §3.3 suggests and leaves untested (Wikberg 2024, §3.2.1:
//! "it would be interesting to consider the effect of different domain
//! decompositions").
//!
//! Under mod-SELL an off-diagonal whose column lies in the row's own slice is
//! read from shared memory; λ is the fraction of such entries (Wikberg 2024, Table 3.1).
//! Cuthill–McKee makes level sets of ~10⁴ cells on 3-D meshes, so a slice of
//! 512 rows holds a fraction of one level and λ is near 0. Here the cells of a
//! slice are instead one compact sub-domain:
//!
//! 1. The graph of the matrix is cut by recursive bisection (METIS,
//!    `METIS_PartGraphRecursive` with two parts and target weights) into parts
//!    of exactly H cells (H the slice height), the last part holding the
//!    remaining n mod H. METIS balances only to within 0.1 %, and a part of
//!    H + 1 cells would shift every later slice boundary off its part; so after
//!    each bisection the surplus cells of the larger side nearest the cut
//!    (breadth first from the cut) move across, which shifts the cut by a thin
//!    layer and makes the sizes exact.
//! 2. The parts are ordered by reverse Cuthill–McKee on the quotient graph
//!    (parts adjacent when a matrix entry joins them), so neighbouring slices
//!    hold neighbouring sub-domains and out-of-slice reads stay close; the short
//!    part stays last so that every part starts on a slice boundary.
//! 3. The cells of each part are ordered by reverse Cuthill–McKee of the part.
//!
//! Cost: log2(n/H) levels of bisections, each level METIS over the whole
//! graph: about 6 s per million cells on one core of this project's CI
//! machine (RCM: 0.2 s). METIS calls run one at a time (see `bisect`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use metis::{Idx, Real};
use rayon::prelude::*;

use super::ordering::{Graph, Permutation};
use super::Csr;

/// Serialises the METIS calls of the process (see `bisect`).
static METIS_LOCK: Mutex<()> = Mutex::new(());

/// The partition ordering of `a` (square) for slices of `slice_height` rows.
/// Errors name what METIS or the input refused; nothing here panics on a
/// matrix that `Csr` accepts.
pub fn slice_partition_order(a: &Csr, slice_height: usize) -> Result<Permutation, String> {
    if slice_height == 0 {
        return Err("the partition ordering needs a slice height of at least 1".into());
    }
    if a.n_rows() != a.n_cols() {
        return Err(format!(
            "the partition ordering needs a square matrix, this one is {} x {}",
            a.n_rows(),
            a.n_cols()
        ));
    }
    let graph = Graph::of_matrix(a);
    if graph.n() >= Idx::MAX as usize || graph.n_targets() >= Idx::MAX as usize {
        return Err(format!(
            "the matrix graph ({} vertices, {} adjacency entries) is too large for METIS's \
             32-bit indices; use the rcm ordering",
            graph.n(),
            graph.n_targets()
        ));
    }
    let scratch = LocalIndex::new(graph.n());
    let parts = split(
        &graph,
        (0..graph.n() as u32).collect(),
        slice_height,
        &scratch,
    )?;
    let order = order_parts(&graph, &parts);
    let ordered_parts: Vec<Vec<u32>> = order
        .par_iter()
        .map(|&p| {
            let cells = &parts[p];
            let inner = scratch.induced(&graph, cells).cuthill_mckee().reversed();
            inner
                .new_to_old()
                .iter()
                .map(|&i| cells[i as usize])
                .collect()
        })
        .collect();
    Permutation::from_new_to_old(ordered_parts.concat())
        .map_err(|e| format!("partition ordering: not a permutation ({e})"))
}

/// METIS k-way partition of `graph` into `n_parts` parts (`METIS_PartGraphKway`,
/// one call; the sub-domains of `solve::schwarz`): the part of each vertex.
/// Parts may come out empty on tiny graphs; one part needs no METIS.
pub fn graph_parts(graph: &Graph, n_parts: usize) -> Result<Vec<u32>, String> {
    let m = graph.n();
    if n_parts == 0 {
        return Err("a partition needs at least one part".into());
    }
    if n_parts == 1 || m <= 1 {
        return Ok(vec![0; m]);
    }
    if n_parts >= m {
        return Ok((0..m as u32).collect());
    }
    if m >= Idx::MAX as usize || graph.n_targets() >= Idx::MAX as usize {
        return Err(format!(
            "the graph ({m} vertices, {} adjacency entries) is too large for METIS's 32-bit \
             indices",
            graph.n_targets()
        ));
    }
    let xadj: Vec<Idx> = graph.offsets().iter().map(|&o| o as Idx).collect();
    let adjncy: Vec<Idx> = graph.targets().iter().map(|&t| t as Idx).collect();
    let mut part: Vec<Idx> = vec![0; m];
    let _one_at_a_time = METIS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    metis::Graph::new(1, n_parts as Idx, &xadj, &adjncy)
        .map_err(|e| format!("METIS refused a graph of {m} vertices: {e}"))?
        .part_kway(&mut part)
        .map_err(|e| format!("METIS could not cut a graph of {m} vertices in {n_parts}: {e}"))?;
    Ok(part.iter().map(|&p| p as u32).collect())
}

/// Global vertex → index in a vertex set, for many disjoint sets at once
/// (the parts are ordered in parallel). Each set gets a
/// fresh tag; an entry counts only under its set's tag, so entries written
/// for another set (or never written: tag 0) read as "not in the set".
struct LocalIndex {
    entries: Vec<AtomicU64>,
    next_tag: AtomicU32,
}

impl LocalIndex {
    fn new(n: usize) -> Self {
        Self {
            entries: (0..n).map(|_| AtomicU64::new(0)).collect(),
            next_tag: AtomicU32::new(1),
        }
    }

    /// The subgraph of `graph` induced by `cells` (module `Graph::induced`).
    fn induced(&self, graph: &Graph, cells: &[u32]) -> Graph {
        let tag = u64::from(self.next_tag.fetch_add(1, Relaxed)) << 32;
        for (i, &c) in cells.iter().enumerate() {
            self.entries[c as usize].store(tag | i as u64, Relaxed);
        }
        graph.induced(cells, |u| {
            let e = self.entries[u as usize].load(Relaxed);
            (e & !u64::from(u32::MAX) == tag).then_some(e as u32)
        })
    }
}

/// Cuts `cells` into parts of exactly `h` cells (the last one shorter when
/// `h` does not divide their number), in order.
fn split(
    graph: &Graph,
    cells: Vec<u32>,
    h: usize,
    scratch: &LocalIndex,
) -> Result<Vec<Vec<u32>>, String> {
    let m = cells.len();
    if m <= h {
        return Ok(if m > 0 { vec![cells] } else { Vec::new() });
    }
    // Whole parts on the first side; the remainder (if any) goes with the second.
    let first_size = m.div_ceil(h) / 2 * h;
    let sub = scratch.induced(graph, &cells);
    let mut second = bisect(&sub, first_size)?;
    balance(&sub, &mut second, first_size);
    drop(sub);
    let (mut first_cells, mut second_cells) = (
        Vec::with_capacity(first_size),
        Vec::with_capacity(m - first_size),
    );
    for (&c, &s) in cells.iter().zip(&second) {
        if s {
            second_cells.push(c);
        } else {
            first_cells.push(c);
        }
    }
    drop((cells, second));
    let mut parts = split(graph, first_cells, h, scratch)?;
    parts.extend(split(graph, second_cells, h, scratch)?);
    Ok(parts)
}

/// METIS bisection of `g` aiming at `first_size` vertices on the first side;
/// `true` marks the second side.
fn bisect(g: &Graph, first_size: usize) -> Result<Vec<bool>, String> {
    let m = g.n();
    // Checked against Idx::MAX by the caller for the whole graph.
    let xadj: Vec<Idx> = g.offsets().iter().map(|&o| o as Idx).collect();
    let adjncy: Vec<Idx> = g.targets().iter().map(|&t| t as Idx).collect();
    let fraction = first_size as f64 / m as f64;
    let target_weights = [fraction as Real, (1.0 - fraction) as Real];
    let mut part: Vec<Idx> = vec![0; m];
    // METIS is not thread-safe: GKlib's random generator is a global
    // (random.c), so calls from several threads would race on it.
    let _one_at_a_time = METIS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    metis::Graph::new(1, 2, &xadj, &adjncy)
        .map_err(|e| format!("METIS refused a graph of {m} vertices: {e}"))?
        .set_tpwgts(&target_weights)
        .part_recursive(&mut part)
        .map_err(|e| format!("METIS could not bisect a graph of {m} vertices: {e}"))?;
    Ok(part.iter().map(|&p| p != 0).collect())
}

/// Moves vertices across the cut until the first side holds exactly
/// `first_size`: those of the larger side nearest the cut, breadth first from
/// it (a side without a path to the cut is taken from its lowest vertex).
fn balance(g: &Graph, second: &mut [bool], first_size: usize) {
    let m = g.n();
    let first_count = second.iter().filter(|&&s| !s).count();
    // Moving from the side `from` (true: the second side).
    let (from, surplus) = if first_count > first_size {
        (false, first_count - first_size)
    } else {
        (true, first_size - first_count)
    };
    if surplus == 0 {
        return;
    }
    let mut queued = vec![false; m];
    let mut queue = VecDeque::new();
    for v in 0..m {
        if second[v] == from && g.neighbours(v).iter().any(|&u| second[u as usize] != from) {
            queued[v] = true;
            queue.push_back(v);
        }
    }
    let mut moved = Vec::with_capacity(surplus);
    let mut next_seed = 0;
    while moved.len() < surplus {
        let v = match queue.pop_front() {
            Some(v) => v,
            None => {
                // Every queued vertex is moved and fewer than `surplus` (no
                // more than the side holds) were: an unqueued one remains.
                while queued[next_seed] || second[next_seed] != from {
                    next_seed += 1;
                }
                queued[next_seed] = true;
                next_seed
            }
        };
        moved.push(v);
        for &u in g.neighbours(v) {
            let u = u as usize;
            if second[u] == from && !queued[u] {
                queued[u] = true;
                queue.push_back(u);
            }
        }
    }
    for v in moved {
        second[v] = !from;
    }
}

/// The order of the parts: reverse Cuthill–McKee of the quotient graph, the
/// last part kept last when it is shorter than the others.
fn order_parts(graph: &Graph, parts: &[Vec<u32>]) -> Vec<usize> {
    let k = parts.len();
    let mut part_of = vec![0u32; graph.n()];
    for (p, cells) in parts.iter().enumerate() {
        for &c in cells {
            part_of[c as usize] = p as u32;
        }
    }
    let lists: Vec<Vec<u32>> = parts
        .par_iter()
        .map(|cells| {
            cells
                .iter()
                .flat_map(|&c| graph.neighbours(c as usize))
                .map(|&u| part_of[u as usize])
                .collect()
        })
        .collect();
    let quotient = Graph::from_lists(lists).expect("part numbers are in range");
    let mut order: Vec<usize> = quotient
        .cuthill_mckee()
        .reversed()
        .new_to_old()
        .iter()
        .map(|&p| p as usize)
        .collect();
    let short_last = k > 1 && parts[k - 1].len() < parts[0].len();
    if short_last {
        order.retain(|&p| p != k - 1);
        order.push(k - 1);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    fn path_graph(n: usize) -> Graph {
        let lists = (0..n)
            .map(|v| {
                [v.wrapping_sub(1), v + 1]
                    .into_iter()
                    .filter(|&u| u < n)
                    .map(|u| u as u32)
                    .collect()
            })
            .collect();
        Graph::from_lists(lists).unwrap()
    }

    #[test]
    fn balance_moves_the_vertices_nearest_the_cut() {
        // Path 0..10 cut after vertex 5; the first side must shrink to 4.
        let g = path_graph(10);
        let mut second: Vec<bool> = (0..10).map(|v| v > 5).collect();
        balance(&g, &mut second, 4);
        assert_eq!(second, (0..10).map(|v| v > 3).collect::<Vec<_>>());
        // And grow to 8, taking 6 and 7.
        balance(&g, &mut second, 8);
        assert_eq!(second, (0..10).map(|v| v > 7).collect::<Vec<_>>());
    }

    #[test]
    fn balance_reaches_vertices_without_a_path_to_the_cut() {
        // No edges at all: every vertex of the first side is its own component.
        let g = Graph::from_lists(vec![Vec::new(); 6]).unwrap();
        let mut second = vec![false, false, false, false, true, true];
        balance(&g, &mut second, 1);
        assert_eq!(second.iter().filter(|&&s| !s).count(), 1);
    }

    #[test]
    fn parts_have_exactly_the_slice_height() {
        for (n, h) in [(1000, 64), (1024, 32), (77, 32), (5, 32), (0, 32)] {
            let a = random_symmetric(n, 6, n as u64);
            let g = Graph::of_matrix(&a);
            let parts = split(&g, (0..n as u32).collect(), h, &LocalIndex::new(n)).unwrap();
            let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert_eq!(parts.len(), n.div_ceil(h), "{n} rows, H {h}: {sizes:?}");
            for (i, &s) in sizes.iter().enumerate() {
                let expected = if i + 1 == sizes.len() { n - i * h } else { h };
                assert_eq!(s, expected, "{n} rows, H {h}: {sizes:?}");
            }
            let p = slice_partition_order(&a, h).unwrap();
            assert_eq!(p.len(), n);
        }
    }

    #[test]
    fn the_short_part_stays_last() {
        let a = random_symmetric(1000, 6, 9);
        let p = slice_partition_order(&a, 64).unwrap();
        let g = Graph::of_matrix(&a);
        let parts = split(&g, (0..1000).collect(), 64, &LocalIndex::new(1000)).unwrap();
        let mut last: Vec<u32> = p.new_to_old()[15 * 64..].to_vec();
        let mut short = parts[15].clone();
        last.sort_unstable();
        short.sort_unstable();
        assert_eq!(last, short);
    }

    #[test]
    fn bad_input_is_an_error() {
        let a = random_symmetric(10, 3, 1);
        assert!(slice_partition_order(&a, 0).is_err());
        let rect = Csr::new(3, vec![0, 1], vec![2], vec![1.0]).unwrap();
        assert!(slice_partition_order(&rect, 32).is_err());
    }
}
