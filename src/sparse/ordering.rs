//! Bandwidth-reducing row orderings (Cuthill–McKee and its reverse) and
//! symmetric permutations of matrices and vectors.
//!
//! Cuthill–McKee as in Wikberg 2024, §3.2 (Wikberg 2024, after Cuthill & McKee
//! 1969): start from a node of smallest degree, visit breadth first, append
//! each node's unvisited neighbours by ascending degree (ties by index). Unlike
//! Wikberg's (2024) code, a graph with several components restarts from the
//! smallest-degree unvisited node, so every row is placed.
//!
//! The start is the smallest (degree, index), not a pseudo-peripheral vertex
//! (George & Liu 1979): no breadth-first sweeps before the visit, and the
//! order is the one the solvers' iteration counts were measured with.
//!
//! Every pass runs in parallel except the walk from level to level: the
//! graph of a structurally symmetric matrix is its pattern less the diagonal
//! (no transpose), each neighbour list is sorted by (degree, index) once,
//! and each breadth-first level is placed in two parallel passes that give
//! the queue's order exactly ([`Graph::cuthill_mckee`]).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use rayon::prelude::*;

use super::Csr;
use crate::slices::split_lengths;

/// Rows (vertices) per parallel task in the passes over a whole graph.
const ROWS_PER_TASK: usize = 1 << 12;

/// A row ordering: `new_to_old[k]` is the original row placed at position k.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permutation {
    new_to_old: Vec<u32>,
    old_to_new: Vec<u32>,
}

impl Permutation {
    /// Builds a permutation from `new_to_old`, checking that it is one.
    pub fn from_new_to_old(new_to_old: Vec<u32>) -> Result<Self, String> {
        let n = new_to_old.len();
        let mut old_to_new = vec![u32::MAX; n];
        for (new, &old) in new_to_old.iter().enumerate() {
            let slot = old_to_new
                .get_mut(old as usize)
                .ok_or_else(|| format!("permutation entry {new} is {old}, out of range 0..{n}"))?;
            if *slot != u32::MAX {
                return Err(format!("row {old} appears twice in the permutation"));
            }
            *slot = new as u32;
        }
        Ok(Self {
            new_to_old,
            old_to_new,
        })
    }

    pub fn identity(n: usize) -> Self {
        let ids: Vec<u32> = (0..n as u32).collect();
        Self {
            new_to_old: ids.clone(),
            old_to_new: ids,
        }
    }

    pub fn len(&self) -> usize {
        self.new_to_old.len()
    }
    pub fn is_empty(&self) -> bool {
        self.new_to_old.is_empty()
    }
    pub fn new_to_old(&self) -> &[u32] {
        &self.new_to_old
    }
    pub fn old_to_new(&self) -> &[u32] {
        &self.old_to_new
    }

    /// A permutation from both directions, built inverse to each other by
    /// the caller (not checked but in debug builds).
    fn from_parts(new_to_old: Vec<u32>, old_to_new: Vec<u32>) -> Self {
        debug_assert!(new_to_old
            .iter()
            .enumerate()
            .all(|(k, &o)| old_to_new[o as usize] as usize == k));
        Self {
            new_to_old,
            old_to_new,
        }
    }

    /// The reversed ordering (Cuthill–McKee → reverse Cuthill–McKee), both
    /// directions in parallel.
    pub fn reversed(&self) -> Self {
        let last = self.len().saturating_sub(1) as u32;
        Self::from_parts(
            self.new_to_old.par_iter().rev().copied().collect(),
            self.old_to_new.par_iter().map(|&k| last - k).collect(),
        )
    }

    /// The inverse ordering: its `new_to_old` is this one's `old_to_new`, so
    /// `p.inverse().apply_symmetric(&p.apply_symmetric(a)) == a`.
    pub fn inverse(&self) -> Self {
        Self {
            new_to_old: self.old_to_new.clone(),
            old_to_new: self.new_to_old.clone(),
        }
    }

    /// v in the new order: out[k] = v[new_to_old[k]].
    pub fn to_new<T: Copy + Send + Sync>(&self, v: &[T]) -> Vec<T> {
        assert_eq!(v.len(), self.len(), "permutation: vector length");
        self.new_to_old.par_iter().map(|&o| v[o as usize]).collect()
    }

    /// v back in the original order (the inverse of `to_new`).
    pub fn to_old<T: Copy + Send + Sync>(&self, v: &[T]) -> Vec<T> {
        assert_eq!(v.len(), self.len(), "permutation: vector length");
        self.old_to_new.par_iter().map(|&k| v[k as usize]).collect()
    }

    /// P A Pᵀ: row and column k of the result are row and column
    /// new_to_old[k] of `a` (square), columns sorted in each row. Rows are
    /// filled in parallel.
    pub fn apply_symmetric(&self, a: &Csr) -> Csr {
        assert_eq!(a.n_rows(), self.len(), "permutation: matrix rows");
        assert_eq!(a.n_cols(), self.len(), "permutation: matrix columns");
        let mut row_ptr = Vec::with_capacity(a.n_rows() + 1);
        row_ptr.push(0);
        for &old in &self.new_to_old {
            let (c, _) = a.row(old as usize);
            row_ptr.push(row_ptr.last().unwrap() + c.len());
        }
        let mut cols = vec![0u32; a.nnz()];
        let mut values = vec![0.0f64; a.nnz()];
        let mut rows = Vec::with_capacity(a.n_rows());
        let (mut c_rest, mut v_rest) = (cols.as_mut_slice(), values.as_mut_slice());
        for k in 0..a.n_rows() {
            let len = row_ptr[k + 1] - row_ptr[k];
            let (c_row, c_tail) = c_rest.split_at_mut(len);
            let (v_row, v_tail) = v_rest.split_at_mut(len);
            rows.push((c_row, v_row));
            (c_rest, v_rest) = (c_tail, v_tail);
        }
        // Visit the rows in the old order (streaming reads of `a`), each
        // writing its own new row.
        let mut by_new: Vec<Option<_>> = rows.into_iter().map(Some).collect();
        let by_old: Vec<_> = self
            .old_to_new
            .iter()
            .map(|&k| {
                by_new[k as usize]
                    .take()
                    .expect("a permutation hits each row once")
            })
            .collect();
        by_old
            .into_par_iter()
            .enumerate()
            .for_each(|(old, (c_row, v_row))| {
                let (c, v) = a.row(old);
                // Insertion sort by new column: rows are short.
                for (k, (&c, &v)) in c.iter().zip(v).enumerate() {
                    let c = self.old_to_new[c as usize];
                    let mut at = k;
                    while at > 0 && c_row[at - 1] > c {
                        c_row[at] = c_row[at - 1];
                        v_row[at] = v_row[at - 1];
                        at -= 1;
                    }
                    c_row[at] = c;
                    v_row[at] = v;
                }
            });
        Csr::new(a.n_cols(), row_ptr, cols, values)
            .expect("a symmetric permutation of a valid matrix is valid")
    }
}

/// An undirected graph in compressed adjacency form: no self-loops, each
/// neighbour list sorted and without repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Graph {
    /// The graph of a square matrix's pattern, symmetrised (the pattern of
    /// A + Aᵀ, so a matrix that is not structurally symmetric still gives an
    /// undirected graph), diagonal dropped.
    ///
    /// A structurally symmetric pattern (every FVM matrix) is its own
    /// symmetrisation: its rows less the diagonal, copied in parallel.
    pub fn of_matrix(a: &Csr) -> Self {
        assert_eq!(a.n_rows(), a.n_cols(), "graph of a matrix: not square");
        if is_structurally_symmetric(a) {
            return Self::of_symmetric_pattern(a);
        }
        let n = a.n_rows();
        // The pattern of Aᵀ by counting sort: rows of Aᵀ come out sorted.
        let mut t_offsets = vec![0usize; n + 1];
        for &c in a.cols() {
            t_offsets[c as usize + 1] += 1;
        }
        for r in 0..n {
            t_offsets[r + 1] += t_offsets[r];
        }
        let mut fill = t_offsets.clone();
        let mut t_targets = vec![0u32; a.nnz()];
        for r in 0..n {
            for &c in a.row(r).0 {
                t_targets[fill[c as usize]] = r as u32;
                fill[c as usize] += 1;
            }
        }
        drop(fill);
        // Merge row r of A and of Aᵀ (both sorted), skipping r itself.
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut targets = Vec::with_capacity(a.nnz());
        for r in 0..n {
            let (p, q) = (a.row(r).0, &t_targets[t_offsets[r]..t_offsets[r + 1]]);
            let (mut i, mut j) = (0, 0);
            while i < p.len() || j < q.len() {
                let next = if j == q.len() || (i < p.len() && p[i] < q[j]) {
                    i += 1;
                    p[i - 1]
                } else if i == p.len() || q[j] < p[i] {
                    j += 1;
                    q[j - 1]
                } else {
                    (i, j) = (i + 1, j + 1);
                    p[i - 1]
                };
                if next as usize != r {
                    targets.push(next);
                }
            }
            offsets.push(targets.len());
        }
        Self { offsets, targets }
    }

    /// The graph of a structurally symmetric square matrix: each row less
    /// its diagonal.
    fn of_symmetric_pattern(a: &Csr) -> Self {
        let n = a.n_rows();
        let has_diagonal = |r: usize| a.row(r).0.binary_search(&(r as u32)).is_ok();
        let offsets = parallel_offsets(n, |r| a.row(r).0.len() - has_diagonal(r) as usize);
        let mut targets = vec![0u32; offsets[n]];
        let blocks = row_blocks(n);
        split_lengths(
            &mut targets,
            blocks.iter().map(|b| offsets[b.end] - offsets[b.start]),
        )
        .into_par_iter()
        .zip(&blocks)
        .for_each(|(out, rows)| {
            let mut next = out.iter_mut();
            for r in rows.clone() {
                for &c in a.row(r).0.iter().filter(|&&c| c as usize != r) {
                    *next.next().expect("row lengths counted") = c;
                }
            }
        });
        Self { offsets, targets }
    }

    /// A graph from neighbour lists (each symmetric pair listed from both
    /// ends); lists are sorted and deduplicated, self-loops dropped.
    pub fn from_lists(lists: Vec<Vec<u32>>) -> Result<Self, String> {
        let n = lists.len();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut targets = Vec::new();
        for (v, mut list) in lists.into_iter().enumerate() {
            list.sort_unstable();
            list.dedup();
            if let Some(&u) = list.iter().find(|&&u| u as usize >= n) {
                return Err(format!("vertex {v} has neighbour {u}, out of range 0..{n}"));
            }
            targets.extend(list.into_iter().filter(|&u| u as usize != v));
            offsets.push(targets.len());
        }
        Ok(Self { offsets, targets })
    }

    /// The graph whose vertex v's neighbours are what `neighbours(v, list)`
    /// pushes onto `list`: each list sorted and deduplicated, v itself
    /// dropped ([`sorted_rows`]). For a mesh, the cells across each cell's
    /// internal faces: the graph of its matrix's pattern (what
    /// [`Self::of_matrix`] gives) without the pattern.
    pub fn of_neighbours(n: usize, neighbours: impl Fn(usize, &mut Vec<u32>) + Sync) -> Self {
        let (offsets, targets) = sorted_rows(n, |v, list| {
            let start = list.len();
            neighbours(v, list);
            let mut kept = start;
            for i in start..list.len() {
                if list[i] as usize != v {
                    list[kept] = list[i];
                    kept += 1;
                }
            }
            list.truncate(kept);
        });
        Self { offsets, targets }
    }

    /// Number of vertices.
    pub fn n(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Twice the number of edges.
    pub fn n_targets(&self) -> usize {
        self.targets.len()
    }
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }
    pub fn neighbours(&self, v: usize) -> &[u32] {
        &self.targets[self.offsets[v]..self.offsets[v + 1]]
    }
    pub fn degree(&self, v: usize) -> usize {
        self.offsets[v + 1] - self.offsets[v]
    }

    /// The subgraph induced by `vertices` (distinct): its vertex i is
    /// `vertices[i]`; `local(u)` must give u's index in `vertices`, `None`
    /// for a vertex not in it.
    pub fn induced(&self, vertices: &[u32], local: impl Fn(u32) -> Option<u32>) -> Self {
        let mut offsets = Vec::with_capacity(vertices.len() + 1);
        offsets.push(0);
        let mut targets = Vec::new();
        for &v in vertices {
            let start = targets.len();
            targets.extend(self.neighbours(v as usize).iter().filter_map(|&u| local(u)));
            targets[start..].sort_unstable();
            offsets.push(targets.len());
        }
        Self { offsets, targets }
    }

    /// Cuthill–McKee ordering (module documentation): every component is
    /// visited, each from its unvisited vertex of smallest degree.
    pub fn cuthill_mckee(&self) -> Permutation {
        self.clone_in_parallel().into_cuthill_mckee()
    }

    /// [`Self::cuthill_mckee`], reusing the graph's arrays.
    pub fn into_cuthill_mckee(self) -> Permutation {
        ByDegree::new(self).cuthill_mckee()
    }

    /// A copy made by all threads (a graph of a large mesh is hundreds of MB).
    fn clone_in_parallel(&self) -> Self {
        Self {
            offsets: self.offsets.par_iter().copied().collect(),
            targets: self.targets.par_iter().copied().collect(),
        }
    }
}

/// A graph whose neighbour lists are sorted by (degree, index), the order in
/// which Cuthill–McKee appends a vertex's unvisited neighbours: a visit then
/// only filters a list, never sorts it.
struct ByDegree {
    graph: Graph,
    degree: Vec<u32>,
}

/// A vertex's (degree, index) as one sortable number.
fn degree_key(degree: &[u32], v: u32) -> u64 {
    (u64::from(degree[v as usize]) << 32) | u64::from(v)
}

impl ByDegree {
    fn new(mut graph: Graph) -> Self {
        let n = graph.n();
        let degree: Vec<u32> = (0..n)
            .into_par_iter()
            .map(|v| graph.degree(v) as u32)
            .collect();
        let blocks = row_blocks(n);
        let offsets = &graph.offsets;
        split_lengths(
            &mut graph.targets,
            blocks.iter().map(|b| offsets[b.end] - offsets[b.start]),
        )
        .into_par_iter()
        .zip(&blocks)
        .for_each(|(lists, rows)| {
            let base = offsets[rows.start];
            for v in rows.clone() {
                let list = &mut lists[offsets[v] - base..offsets[v + 1] - base];
                sort_small_by_key(list, |u| degree_key(&degree, u));
            }
        });
        Self { graph, degree }
    }

    fn key(&self, v: u32) -> u64 {
        degree_key(&self.degree, v)
    }

    fn cuthill_mckee(&self) -> Permutation {
        let n = self.graph.n();
        // Per vertex: unreached, or the position in the order of the vertex
        // that placed it (a component's start: its own position).
        let mark: Vec<AtomicU32> = (0..n)
            .into_par_iter()
            .map(|_| AtomicU32::new(UNREACHED))
            .collect();
        let mut order = vec![0u32; n];
        // Components start from their unvisited vertex of smallest (degree,
        // index). The first is the smallest of all, found by a scan; the
        // others (a mesh is mostly one component) from the unvisited
        // vertices sorted, as the candidates in that order would give them.
        let mut placed = 0;
        if let Some(first) = (0..n as u32).into_par_iter().min_by_key(|&v| self.key(v)) {
            placed = self.visit_component(first, &mark, &mut order, placed);
        }
        if placed < n {
            let mut starts: Vec<u32> = (0..n as u32)
                .into_par_iter()
                .filter(|&v| mark[v as usize].load(Relaxed) == UNREACHED)
                .collect();
            starts.par_sort_unstable_by_key(|&v| self.key(v));
            for start in starts {
                if mark[start as usize].load(Relaxed) == UNREACHED {
                    placed = self.visit_component(start, &mark, &mut order, placed);
                }
            }
        }
        assert_eq!(placed, n, "breadth-first visits place every vertex");
        // The marks have served: they become the inverse permutation.
        order
            .par_iter()
            .enumerate()
            .for_each(|(k, &v)| mark[v as usize].store(k as u32, Relaxed));
        let old_to_new = mark.into_par_iter().map(AtomicU32::into_inner).collect();
        Permutation::from_parts(order, old_to_new)
    }

    /// Writes the Cuthill–McKee order of `start`'s component (unreached) to
    /// `order` from position `placed`; returns the position after it.
    ///
    /// Level by level, each in two parallel passes over the level's vertices
    /// (a vertex at position p of the order):
    /// 1. every neighbour whose mark is above p gets mark p (an atomic
    ///    minimum). Marks below the level's first position are vertices
    ///    placed before, and stay; so each vertex of the next level ends
    ///    marked with the first vertex of this level that lists it.
    /// 2. each vertex's children are the neighbours it marked that still
    ///    hold its position, in list order (degree, index); the children of
    ///    the level's vertices, one after the other, are the next level.
    ///
    /// That is the queue's order exactly: when the queue reaches a vertex,
    /// its unvisited neighbours are those not placed before its level less
    /// the ones earlier vertices of its level took, sorted by (degree,
    /// index).
    fn visit_component(
        &self,
        start: u32,
        mark: &[AtomicU32],
        order: &mut [u32],
        placed: usize,
    ) -> usize {
        /// Vertices per parallel task.
        const CHUNK: usize = 2048;
        let g = &self.graph;
        mark[start as usize].store(placed as u32, Relaxed);
        order[placed] = start;
        let (mut begin, mut end) = (placed, placed + 1);
        while begin < end {
            let (done, rest) = order.split_at_mut(end);
            let level = &done[begin..];
            let first = |c: usize| (begin + c * CHUNK) as u32;
            // Pass 1, keeping per chunk the (vertex, position) pairs it
            // marked: a child of p is among those p marked, so pass 2
            // reads no other marks.
            let marked: Vec<Vec<(u32, u32)>> = level
                .par_chunks(CHUNK)
                .enumerate()
                .map(|(c, chunk)| {
                    let mut marked = Vec::new();
                    for (&v, p) in chunk.iter().zip(first(c)..) {
                        for &u in g.neighbours(v as usize) {
                            let m = &mark[u as usize];
                            if m.load(Relaxed) > p {
                                m.fetch_min(p, Relaxed);
                                marked.push((u, p));
                            }
                        }
                    }
                    marked
                })
                .collect();
            let children: Vec<Vec<u32>> = marked
                .par_iter()
                .map(|marked| {
                    marked
                        .iter()
                        .filter(|&&(u, p)| mark[u as usize].load(Relaxed) == p)
                        .map(|&(u, _)| u)
                        .collect()
                })
                .collect();
            let count: usize = children.iter().map(Vec::len).sum();
            split_lengths(&mut rest[..count], children.iter().map(Vec::len))
                .into_par_iter()
                .zip(&children)
                .for_each(|(to, from)| to.copy_from_slice(from));
            (begin, end) = (end, end + count);
        }
        end
    }
}

/// The mark of a vertex no visit has reached.
const UNREACHED: u32 = u32::MAX;

/// Sorts a short list (a cell's neighbours) by insertion, a long one by the
/// library sort.
fn sort_small_by_key(list: &mut [u32], key: impl Fn(u32) -> u64) {
    if list.len() > 16 {
        list.sort_unstable_by_key(|&u| key(u));
        return;
    }
    for i in 1..list.len() {
        let (u, k) = (list[i], key(list[i]));
        let mut at = i;
        while at > 0 && key(list[at - 1]) > k {
            list[at] = list[at - 1];
            at -= 1;
        }
        list[at] = u;
    }
}

/// Rows 0..n in compressed form (row offsets, n + 1 of them, and the
/// entries): row r is what `row(r, entries)` pushes onto `entries`, then
/// sorted and deduplicated. Built by blocks of rows in parallel and joined
/// in row order, each block by a thread: a mesh's matrix pattern and its
/// cells' graph.
pub fn sorted_rows(n: usize, row: impl Fn(usize, &mut Vec<u32>) + Sync) -> (Vec<usize>, Vec<u32>) {
    // Per block: the entries of its rows and where each row ends.
    let blocks: Vec<(Vec<u32>, Vec<usize>)> = row_blocks(n)
        .into_par_iter()
        .map(|rows| {
            let mut entries = Vec::new();
            let mut ends = Vec::with_capacity(rows.len());
            for r in rows {
                let start = entries.len();
                row(r, &mut entries);
                let list = &mut entries[start..];
                list.sort_unstable();
                let mut kept = 0;
                for i in 0..list.len() {
                    if kept == 0 || list[i] != list[kept - 1] {
                        list[kept] = list[i];
                        kept += 1;
                    }
                }
                entries.truncate(start + kept);
                ends.push(entries.len());
            }
            (entries, ends)
        })
        .collect();
    let (block_entries, block_ends): (Vec<_>, Vec<_>) = blocks.into_iter().unzip();
    let entries = crate::slices::concat(&block_entries);
    let firsts = crate::slices::starts(block_entries.iter().map(Vec::len));
    drop(block_entries);
    let mut offsets = vec![0; n + 1];
    split_lengths(&mut offsets[1..], block_ends.iter().map(Vec::len))
        .into_par_iter()
        .zip(&block_ends)
        .zip(firsts)
        .for_each(|((row_ends, ends), first)| {
            for (to, &end) in row_ends.iter_mut().zip(ends) {
                *to = first + end;
            }
        });
    (offsets, entries)
}

/// Consecutive ranges of `ROWS_PER_TASK` rows covering 0..n.
fn row_blocks(n: usize) -> Vec<Range<usize>> {
    (0..n)
        .step_by(ROWS_PER_TASK)
        .map(|s| s..(s + ROWS_PER_TASK).min(n))
        .collect()
}

/// The running totals of `len(0)`, ..., `len(n − 1)` from 0 (n + 1 entries),
/// by blocks of rows in parallel.
fn parallel_offsets(n: usize, len: impl Fn(usize) -> usize + Sync) -> Vec<usize> {
    let mut offsets = vec![0usize; n + 1];
    let blocks = row_blocks(n);
    offsets[1..]
        .par_chunks_mut(ROWS_PER_TASK)
        .zip(&blocks)
        .for_each(|(out, rows)| {
            let mut sum = 0;
            for (o, r) in out.iter_mut().zip(rows.clone()) {
                sum += len(r);
                *o = sum;
            }
        });
    let carries: Vec<usize> = blocks
        .iter()
        .scan(0, |before, b| {
            let carry = *before;
            *before += offsets[b.end];
            Some(carry)
        })
        .collect();
    offsets[1..]
        .par_chunks_mut(ROWS_PER_TASK)
        .zip(carries)
        .for_each(|(out, carry)| out.iter_mut().for_each(|o| *o += carry));
    offsets
}

/// Whether every off-diagonal (r, c) of the square `a` has its mirror (c, r).
/// Only the entries above the diagonal are looked up (columns are sorted: a
/// binary search each, rows in parallel): when each has its mirror below and
/// there are as many entries below as above, mirroring maps the entries
/// above one to one onto those below, so those have theirs too.
fn is_structurally_symmetric(a: &Csr) -> bool {
    let (above, below, mirrored) = (0..a.n_rows())
        .into_par_iter()
        .with_min_len(ROWS_PER_TASK)
        .map(|r| {
            let (row, r) = (a.row(r).0, r as u32);
            let first_above = row.partition_point(|&c| c <= r);
            let below = row.partition_point(|&c| c < r);
            let mirrored = row[first_above..]
                .iter()
                .all(|&c| a.row(c as usize).0.binary_search(&r).is_ok());
            (row.len() - first_above, below, mirrored)
        })
        .reduce(|| (0, 0, true), |x, y| (x.0 + y.0, x.1 + y.1, x.2 && y.2));
    mirrored && above == below
}

/// Cuthill–McKee ordering of the graph of `a`'s pattern (square; the
/// pattern is symmetrised first, FVM matrices are structurally symmetric).
pub fn cuthill_mckee(a: &Csr) -> Permutation {
    assert_eq!(a.n_rows(), a.n_cols(), "cuthill_mckee: matrix not square");
    Graph::of_matrix(a).into_cuthill_mckee()
}

/// Reverse Cuthill–McKee (George 1971): the same bandwidth, usually less profile.
pub fn reverse_cuthill_mckee(a: &Csr) -> Permutation {
    cuthill_mckee(a).reversed()
}

/// How rows are ordered before a matrix is stored for the GPU (mod-SELL).
/// Solves permute b and x in and the solution back out: callers never see
/// the internal order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RowOrdering {
    /// The matrix's own order (for an FVM matrix, the mesh's cell order).
    Natural,
    /// Cuthill–McKee, as in Wikberg 2024, §3.2.
    Cm,
    /// Reverse Cuthill–McKee.
    #[default]
    Rcm,
    /// Slices as METIS sub-domains ([`super::partition`]): raises λ, the
    /// fraction of off-diagonals read from shared memory.
    Metis,
}

impl RowOrdering {
    pub const ALL: [Self; 4] = [Self::Natural, Self::Cm, Self::Rcm, Self::Metis];

    pub fn name(self) -> &'static str {
        match self {
            Self::Natural => "natural",
            Self::Cm => "cm",
            Self::Rcm => "rcm",
            Self::Metis => "metis",
        }
    }

    /// [`Self::permutation`], except that RCM keeps the rows of a matrix
    /// whose own order is already banded ([`is_banded`]: a mesh numbered
    /// along its axes, as blockMesh and the box generator do) instead of
    /// spending seconds to reach about the same bandwidth.
    pub fn permutation_unless_banded(
        self,
        a: &Csr,
        slice_height: usize,
    ) -> Result<Option<Permutation>, String> {
        if a.n_rows() == a.n_cols() && self.keeps_banded(|| relative_bandwidth(a)) {
            return Ok(None);
        }
        self.permutation(a, slice_height)
    }

    /// Whether this ordering keeps a row order of `relative` bandwidth
    /// ([`relative_bandwidth`], evaluated only for RCM) as it is: RCM keeps
    /// an order that is banded already (logged).
    pub fn keeps_banded(self, relative: impl FnOnce() -> f64) -> bool {
        if self != Self::Rcm {
            return false;
        }
        let relative = relative();
        let banded = relative <= BANDED;
        if banded {
            log::info!(
                "rows kept in mesh order: bandwidth {relative:.2} n^(2/3), already banded \
                 (RCM is for orders above {BANDED} n^(2/3))"
            );
        }
        banded
    }

    /// The permutation of `a`'s rows (`None` for the natural order); the
    /// METIS ordering cuts slices of `slice_height` rows.
    pub fn permutation(self, a: &Csr, slice_height: usize) -> Result<Option<Permutation>, String> {
        if a.n_rows() != a.n_cols() {
            return Err(format!(
                "a row ordering needs a square matrix, this one is {} x {}",
                a.n_rows(),
                a.n_cols()
            ));
        }
        Ok(match self {
            Self::Natural => None,
            Self::Cm | Self::Rcm => self.permutation_of_graph(Graph::of_matrix(a)),
            Self::Metis => Some(
                super::partition::slice_partition_order(a, slice_height)
                    .map_err(|e| format!("metis ordering: {e}"))?,
            ),
        })
    }

    /// Whether the ordering is computed from the matrix's graph alone
    /// (Cuthill–McKee and its reverse): [`Self::permutation_of_graph`].
    pub fn of_graph(self) -> bool {
        matches!(self, Self::Cm | Self::Rcm)
    }

    /// The permutation this ordering computes from `graph`, the graph of
    /// the matrix's pattern ([`Graph::of_matrix`]); equal to
    /// [`Self::permutation`] of the matrix. None for an ordering that is
    /// not computed from the graph alone ([`Self::of_graph`]).
    pub fn permutation_of_graph(self, graph: Graph) -> Option<Permutation> {
        match self {
            Self::Cm => Some(graph.into_cuthill_mckee()),
            Self::Rcm => Some(graph.into_cuthill_mckee().reversed()),
            Self::Natural | Self::Metis => None,
        }
    }
}

impl std::fmt::Display for RowOrdering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RowOrdering {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown row ordering '{s}' (use natural, cm, rcm or metis)"))
    }
}

/// A square matrix in a [`RowOrdering`], with the way in and out for vectors.
pub struct Reordered<'a> {
    matrix: Cow<'a, Csr>,
    permutation: Option<Cow<'a, Permutation>>,
}

impl<'a> Reordered<'a> {
    pub fn new(a: &'a Csr, ordering: RowOrdering, slice_height: usize) -> Result<Self, String> {
        let permutation = ordering.permutation(a, slice_height)?;
        Ok(Self::build(a, permutation.map(Cow::Owned)))
    }

    /// `a` in the order of `permutation` (computed earlier, e.g. once for
    /// many matrices of one pattern); `None` keeps `a`'s order.
    pub fn with_permutation(
        a: &'a Csr,
        permutation: Option<&'a Permutation>,
    ) -> Result<Self, String> {
        if let Some(p) = permutation.filter(|p| p.len() != a.n_rows()) {
            return Err(format!(
                "a permutation of {} rows cannot reorder a matrix of {}",
                p.len(),
                a.n_rows()
            ));
        }
        Ok(Self::build(a, permutation.map(Cow::Borrowed)))
    }

    fn build(a: &'a Csr, permutation: Option<Cow<'a, Permutation>>) -> Self {
        let matrix = match &permutation {
            Some(p) => Cow::Owned(p.apply_symmetric(a)),
            None => Cow::Borrowed(a),
        };
        Self {
            matrix,
            permutation,
        }
    }

    /// The reordered matrix.
    pub fn matrix(&self) -> &Csr {
        &self.matrix
    }
    pub fn permutation(&self) -> Option<&Permutation> {
        self.permutation.as_deref()
    }

    /// `v` in the internal order.
    pub fn to_new(&self, v: &[f64]) -> Vec<f64> {
        match &self.permutation {
            Some(p) => p.to_new(v),
            None => v.to_vec(),
        }
    }

    /// `v_new` (internal order) written to `out` in the caller's order.
    pub fn to_old_into(&self, v_new: &[f64], out: &mut [f64]) {
        match &self.permutation {
            Some(p) => out.copy_from_slice(&p.to_old(v_new)),
            None => out.copy_from_slice(v_new),
        }
    }
}

/// The bandwidth up to which a matrix's own row order counts as banded, in
/// units of n^(2/3) ([`relative_bandwidth`]). A cube of n cells numbered
/// along its axes has 1, its RCM order about as much (docs/src/performance.md
/// has the measurements); a renumbered (shuffled) mesh has about n^(1/3).
pub const BANDED: f64 = 2.0;

/// The bandwidth of `a` over n^(2/3), the bandwidth of a cube of n cells
/// numbered along its axes (a 2-D mesh numbered so has n^(1/2), less).
pub fn relative_bandwidth(a: &Csr) -> f64 {
    let n = a.n_rows().max(1) as f64;
    bandwidth(a) as f64 / n.powf(2.0 / 3.0)
}

/// [`relative_bandwidth`] of the matrix of `n` rows whose off-diagonal
/// entries are the pairs (`owner[f]`, `neighbour[f]`) and their transposes
/// (a finite-volume matrix: the cells across each internal face), read from
/// the faces without the matrix.
pub fn relative_bandwidth_of_pairs(n: usize, owner: &[u32], neighbour: &[u32]) -> f64 {
    let band = owner
        .par_iter()
        .zip(neighbour)
        .map(|(&o, &c)| o.abs_diff(c) as usize)
        .max()
        .unwrap_or(0);
    band as f64 / (n.max(1) as f64).powf(2.0 / 3.0)
}

/// Whether `a`'s own row order is banded: [`relative_bandwidth`] at most
/// [`BANDED`].
pub fn is_banded(a: &Csr) -> bool {
    relative_bandwidth(a) <= BANDED
}

/// max |r − c| over the stored entries.
pub fn bandwidth(a: &Csr) -> usize {
    (0..a.n_rows())
        .into_par_iter()
        .map(|r| {
            let cols = a.row(r).0;
            match (cols.first(), cols.last()) {
                (Some(&lo), Some(&hi)) => r.abs_diff(lo as usize).max(r.abs_diff(hi as usize)),
                _ => 0,
            }
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{
        cuthill_mckee_by_queue, random_permutation, random_symmetric, SplitMix,
    };

    #[test]
    fn an_axis_numbered_grid_is_banded_and_a_shuffled_one_is_not() {
        use crate::sparse::testing::grid_laplacian;
        let a = grid_laplacian(12, 12, 12);
        assert_eq!(bandwidth(&a), 144);
        assert!((relative_bandwidth(&a) - 1.0).abs() < 1e-12);
        assert!(is_banded(&a));
        assert!(is_banded(&grid_laplacian(40, 40, 1)));
        assert!(RowOrdering::Rcm
            .permutation_unless_banded(&a, 32)
            .unwrap()
            .is_none());
        // Natural, CM and METIS are what they are asked to be.
        assert!(RowOrdering::Cm
            .permutation_unless_banded(&a, 32)
            .unwrap()
            .is_some());
        let mut rng = SplitMix(3);
        let shuffled = random_permutation(a.n_rows(), &mut rng).apply_symmetric(&a);
        assert!(!is_banded(&shuffled), "{}", relative_bandwidth(&shuffled));
        let rcm = RowOrdering::Rcm
            .permutation_unless_banded(&shuffled, 32)
            .unwrap();
        assert_eq!(rcm, Some(reverse_cuthill_mckee(&shuffled)));
    }

    /// A random graph of `n` vertices in `components` random groups (edges
    /// only within a group): `tries` random pairs, each an edge unless it is
    /// a loop, crosses groups or (with `distinct`) repeats an edge.
    fn random_grouped_graph(
        rng: &mut SplitMix,
        n: usize,
        components: usize,
        tries: usize,
        distinct: bool,
    ) -> Graph {
        let group: Vec<usize> = (0..n).map(|_| rng.below(components)).collect();
        let mut lists = vec![Vec::new(); n];
        for _ in 0..tries {
            let (u, v) = (rng.below(n), rng.below(n));
            if u != v && group[u] == group[v] && !(distinct && lists[u].contains(&(v as u32))) {
                lists[u].push(v as u32);
                lists[v].push(u as u32);
            }
        }
        Graph::from_lists(lists).unwrap()
    }

    #[test]
    fn the_level_by_level_visit_is_the_queue_order() {
        use crate::sparse::testing::grid_laplacian;
        let mut rng = SplitMix(11);
        // Random graphs with several components, one with levels of
        // thousands of vertices (several parallel tasks each), and a
        // shuffled grid.
        for (n, components) in [(300, 3), (2000, 1), (5000, 20), (40_000, 1)] {
            let g = random_grouped_graph(&mut rng, n, components, 3 * n, true);
            assert_eq!(g.cuthill_mckee().new_to_old(), cuthill_mckee_by_queue(&g));
        }
        let a = grid_laplacian(60, 60, 8);
        let shuffled = random_permutation(a.n_rows(), &mut rng).apply_symmetric(&a);
        let g = Graph::of_matrix(&shuffled);
        assert_eq!(g.cuthill_mckee().new_to_old(), cuthill_mckee_by_queue(&g));
    }

    #[test]
    fn component_starts_are_those_of_the_sorted_candidates() {
        let mut rng = SplitMix(7);
        for (n, components) in [(0, 1), (1, 1), (40, 1), (300, 5), (500, 37)] {
            let g = random_grouped_graph(&mut rng, n.max(1), components, 2 * n, false);
            let g = if n == 0 {
                Graph::from_lists(Vec::new()).unwrap()
            } else {
                g
            };
            assert_eq!(
                g.cuthill_mckee().new_to_old(),
                cuthill_mckee_by_queue(&g),
                "n {n}, {components} components"
            );
        }
    }

    /// The graph of a pattern that is not structurally symmetric is that of
    /// A + Aᵀ; a symmetric one takes the parallel copy, which must agree
    /// with the merge of A and Aᵀ.
    #[test]
    fn graphs_of_symmetric_and_nonsymmetric_patterns() {
        // Upper entries (r, c) with r + c a multiple of 3 dropped.
        let lopsided = |a: &Csr| -> Csr {
            let mut row_ptr = vec![0];
            let mut cols = Vec::new();
            for r in 0..a.n_rows() {
                cols.extend(
                    a.row(r)
                        .0
                        .iter()
                        .filter(|&&c| c as usize <= r || !(r + c as usize).is_multiple_of(3)),
                );
                row_ptr.push(cols.len());
            }
            let values = vec![1.0; cols.len()];
            Csr::new(a.n_cols(), row_ptr, cols, values).unwrap()
        };
        let lists_of = |a: &Csr| -> Vec<Vec<u32>> {
            let mut lists = vec![Vec::new(); a.n_rows()];
            for (r, list) in lists.iter_mut().enumerate() {
                for &c in a.row(r).0 {
                    list.push(c);
                }
            }
            for r in 0..a.n_rows() {
                for &c in a.row(r).0 {
                    lists[c as usize].push(r as u32);
                }
            }
            lists
        };
        let symmetric = random_symmetric(30_000, 5, 4);
        for (a, expected) in [(symmetric.clone(), true), (lopsided(&symmetric), false)] {
            let t = a.transpose();
            assert_eq!(a.cols() == t.cols() && a.row_ptr() == t.row_ptr(), expected);
            assert_eq!(is_structurally_symmetric(&a), expected);
            let g = Graph::of_matrix(&a);
            assert_eq!(g, Graph::from_lists(lists_of(&a)).unwrap());
            assert_eq!(g.cuthill_mckee().new_to_old(), cuthill_mckee_by_queue(&g));
        }
    }

    #[test]
    fn permutation_round_trips_and_rejects_non_permutations() {
        let p = Permutation::from_new_to_old(vec![2, 0, 1]).unwrap();
        assert_eq!(p.old_to_new(), &[1, 2, 0]);
        assert_eq!(p.to_new(&[10, 11, 12]), vec![12, 10, 11]);
        assert_eq!(p.to_old(&p.to_new(&[10, 11, 12])), vec![10, 11, 12]);
        assert!(Permutation::from_new_to_old(vec![0, 0]).is_err());
        assert!(Permutation::from_new_to_old(vec![0, 5]).is_err());
        assert_eq!(p.reversed().new_to_old(), &[1, 0, 2]);
        assert_eq!(p.inverse().new_to_old(), p.old_to_new());
        assert_eq!(
            p.inverse().to_new(&p.to_new(&[10, 11, 12])),
            vec![10, 11, 12]
        );
    }

    #[test]
    fn symmetric_permutation_preserves_spmv() {
        let a = random_symmetric(300, 5, 7);
        let p = reverse_cuthill_mckee(&a);
        let b = p.apply_symmetric(&a);
        let x: Vec<f64> = (0..300).map(|i| (i as f64 * 0.37).sin()).collect();
        let (mut y, mut yp) = (vec![0.0; 300], vec![0.0; 300]);
        a.spmv(&x, &mut y);
        b.spmv(&p.to_new(&x), &mut yp);
        for (a, b) in p.to_old(&yp).iter().zip(&y) {
            assert!((a - b).abs() <= 1e-13 * b.abs().max(1.0), "{a} vs {b}");
        }
        assert_eq!(p.inverse().apply_symmetric(&b), a);
    }

    #[test]
    fn cuthill_mckee_of_a_shuffled_path_is_a_path_and_handles_components() {
        // Two paths 0-1-2-...-9 and 10..14, rows shuffled; plus an isolated row 15.
        let shuffle: Vec<u32> = (0..16u32).map(|i| (i * 7) % 16).collect();
        let edges: Vec<(u32, u32)> = (0..9).chain(10..14).map(|i| (i, i + 1)).collect();
        let mut rows: Vec<Vec<u32>> = (0..16u32).map(|j| vec![j]).collect();
        for (u, v) in edges {
            let (u, v) = (shuffle[u as usize], shuffle[v as usize]);
            rows[u as usize].push(v);
            rows[v as usize].push(u);
        }
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for mut r in rows {
            r.sort_unstable();
            vals.extend(r.iter().map(|_| 1.0));
            cols.extend(r);
            row_ptr.push(cols.len());
        }
        let a = Csr::new(16, row_ptr, cols, vals).unwrap();
        assert!(bandwidth(&a) > 1);
        for p in [cuthill_mckee(&a), reverse_cuthill_mckee(&a)] {
            assert_eq!(p.len(), 16);
            assert_eq!(bandwidth(&p.apply_symmetric(&a)), 1);
        }
        // The isolated row (degree 0) comes first in Cuthill–McKee.
        assert_eq!(cuthill_mckee(&a).new_to_old()[0], shuffle[15]);
    }
}
