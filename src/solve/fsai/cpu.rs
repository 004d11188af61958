//! FSAI's set-up and application on the CPU, the reference of the device's
//! (see the module docs of `solve::fsai`).

use rayon::prelude::*;

use super::{AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop};
use crate::solve::checks::square_size;
use crate::solve::scalar::{Precision, Real};
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// What the setup produced besides G.
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiStats {
    /// μ = nnz(G) / nnz(A).
    pub density: f64,
    /// μ₀: the density before the postfilter.
    pub density_before_postfilter: f64,
    /// Entry k: rows that took k adaptive steps (static: every row takes 1).
    pub rows_by_steps: Vec<usize>,
    /// Rows where a pivot or ψ was not positive (f32, or a singular matrix):
    /// they keep their last good state.
    pub fallback_rows: usize,
}

/// The factor G (lower, sorted columns, so the diagonal is last in each row).
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiFactor {
    pub g: Csr,
    pub stats: FsaiStats,
}

/// a_{r,c} in precision T, 0 when (r, c) is not stored.
fn entry<T: Real>(a: &Csr, r: usize, c: usize) -> T {
    stored(a, r, c).unwrap_or(T::ZERO)
}

/// a_{r,c} in precision T, if (r, c) is stored.
fn stored<T: Real>(a: &Csr, r: usize, c: usize) -> Option<T> {
    let (cols, vals) = a.row(r);
    cols.binary_search(&(c as u32))
        .ok()
        .map(|k| T::from_f64(vals[k]))
}

/// One row's growing system: its pattern in insertion order, the packed
/// lower Cholesky factor L of A[cols, cols] (row m at m(m+1)/2), y = L⁻¹(−r),
/// r = A[cols, i], the solution g and ψ.
#[derive(Clone, Debug)]
pub struct RowSystem<T> {
    pub row: usize,
    pub cols: Vec<u32>,
    pub l: Vec<T>,
    pub y: Vec<T>,
    pub g: Vec<T>,
    pub psi: T,
}

/// A pivot or ψ that is not positive (the row keeps its last good state).
#[derive(Debug)]
struct Breakdown;

impl<T: Real> RowSystem<T> {
    /// The empty pattern of row `i` (G̃ = I, ψ = a_ii).
    pub fn new(a: &Csr, i: usize) -> Self {
        let mut system = Self::unset();
        system.reset(a, i);
        system
    }

    /// No row yet, no room: [`Self::reset`] makes it a row's.
    fn unset() -> Self {
        Self {
            row: 0,
            cols: Vec::new(),
            l: Vec::new(),
            y: Vec::new(),
            g: Vec::new(),
            psi: T::ZERO,
        }
    }

    /// [`Self::new`] in place, keeping the vectors' room (no allocation
    /// from row to row).
    fn reset(&mut self, a: &Csr, i: usize) {
        self.row = i;
        self.cols.clear();
        self.l.clear();
        self.y.clear();
        self.g.clear();
        self.psi = entry(a, i, i);
    }

    fn l_at(&self, r: usize, c: usize) -> T {
        self.l[r * (r + 1) / 2 + c]
    }

    /// Step 3: extends L, y and ψ by column c. On a breakdown nothing changes.
    fn append(&mut self, a: &Csr, c: usize) -> Result<(), Breakdown> {
        let m = self.cols.len();
        let base = m * (m + 1) / 2;
        self.l.truncate(base);
        for q in 0..m {
            let mut s: T = entry(a, c, self.cols[q] as usize);
            for t in 0..q {
                s = s - self.l[base + t] * self.l_at(q, t);
            }
            let v = s / self.l_at(q, q);
            self.l.push(v);
        }
        let mut s: T = entry(a, c, c);
        for t in 0..m {
            s = s - self.l[base + t] * self.l[base + t];
        }
        if !(s > T::ZERO && s.is_finite()) {
            self.l.truncate(base);
            return Err(Breakdown);
        }
        let d = s.sqrt();
        self.l.push(d);
        // −a_ci, or +0.0 when not stored (not −0.0).
        let mut rr: T = stored::<T>(a, c, self.row).map_or(T::ZERO, |v| -v);
        for t in 0..m {
            rr = rr - self.l[base + t] * self.y[t];
        }
        let ym = rr / d;
        self.y.push(ym);
        self.cols.push(c as u32);
        self.psi = self.psi - ym * ym;
        Ok(())
    }

    /// Drops the columns from `len` on (L, y), restoring ψ.
    fn truncate(&mut self, len: usize, psi: T) {
        self.cols.truncate(len);
        self.l.truncate(len * (len + 1) / 2);
        self.y.truncate(len);
        self.psi = psi;
    }

    /// Step 4: g = L⁻ᵀ y.
    fn back_solve(&mut self) {
        let m = self.cols.len();
        self.g.clear();
        self.g.resize(m, T::ZERO);
        for q in (0..m).rev() {
            let mut s = self.y[q];
            for t in q + 1..m {
                s = s - self.l_at(t, q) * self.g[t];
            }
            self.g[q] = s / self.l_at(q, q);
        }
    }

    /// Appends `cols` one by one and solves; a pivot or ψ that is not
    /// positive keeps the columns before it (returns false).
    fn factor_all(&mut self, a: &Csr, cols: &[u32]) -> bool {
        let mut ok = true;
        for &c in cols {
            let (len, psi) = (self.cols.len(), self.psi);
            if self.append(a, c as usize).is_err() {
                ok = false;
                break;
            }
            if !(self.psi > T::ZERO && self.psi.is_finite()) {
                self.truncate(len, psi);
                ok = false;
                break;
            }
        }
        self.back_solve();
        ok
    }

    /// Step 1–2: the Kaporin gradient v = A g̃ᵀ over j < i (32-slot tree sum)
    /// and the `step_size` columns with the largest |v_j| not in the pattern
    /// (ties: smaller j), largest first, into `picks` (cleared first), the
    /// gradient's buffers in `scratch`.
    fn candidates(
        &self,
        a: &Csr,
        step_size: usize,
        scratch: &mut GradientScratch<T>,
        picks: &mut Vec<u32>,
    ) {
        self.gradient_into(a, scratch);
        let best = &mut scratch.out;
        best.sort_unstable_by(|x, y| {
            y.0.partial_cmp(&x.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(x.1.cmp(&y.1))
        });
        picks.clear();
        picks.extend(best.iter().take(step_size).map(|&(_, j)| j));
    }

    /// The slot rows of the gradient: (row, coefficient), slot 0 = row i with 1.
    fn slots(&self) -> impl Iterator<Item = (usize, T)> + '_ {
        std::iter::once((self.row, T::ONE)).chain(
            self.cols
                .iter()
                .zip(&self.g)
                .map(|(&c, &g)| (c as usize, g)),
        )
    }

    /// (|v_j|, j) for the candidates j (< i, not in the pattern, v_j ≠ 0),
    /// ascending j. The products of all slot rows are sorted by (j, slot);
    /// a column reached by one slot is that product (the tree adds only
    /// zeros to it), others go through the butterfly over the slots.
    #[cfg(test)]
    fn gradient(&self, a: &Csr) -> Vec<(T, u32)> {
        let mut scratch = GradientScratch::default();
        self.gradient_into(a, &mut scratch);
        scratch.out
    }

    /// [`Self::gradient`] into `scratch.out`, with the scratch's buffers.
    fn gradient_into(&self, a: &Csr, scratch: &mut GradientScratch<T>) {
        let i = self.row;
        let width = (self.cols.len() + 1).next_power_of_two();
        let GradientScratch {
            items,
            pattern,
            out,
        } = scratch;
        items.clear();
        for (t, (r, coef)) in self.slots().enumerate() {
            let (cols, vals) = a.row(r);
            for (&j, &v) in cols.iter().zip(vals) {
                if j as usize >= i {
                    break;
                }
                items.push((j, t as u8, coef * T::from_f64(v)));
            }
        }
        items.sort_unstable_by_key(|e| (e.0, e.1));
        pattern.clear();
        pattern.extend_from_slice(&self.cols);
        pattern.sort_unstable();
        out.clear();
        let mut k = 0;
        while k < items.len() {
            let j = items[k].0;
            let e = k + items[k..].partition_point(|it| it.0 == j);
            let v = if e - k == 1 {
                items[k].2
            } else {
                let mut p = [T::ZERO; 32];
                for it in &items[k..e] {
                    p[it.1 as usize] = it.2;
                }
                tree_sum(&mut p, width)
            };
            if v != T::ZERO && pattern.binary_search(&j).is_err() {
                out.push((v.abs(), j));
            }
            k = e;
        }
    }
}

/// The buffers of [`RowSystem::gradient_into`], kept from row to row.
struct GradientScratch<T> {
    /// (column, slot, product) of the slot rows' entries below the row.
    items: Vec<(u32, u8, T)>,
    /// The row's pattern, sorted.
    pattern: Vec<u32>,
    /// (|v_j|, j) of the candidates.
    out: Vec<(T, u32)>,
}

impl<T> Default for GradientScratch<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            pattern: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// Everything one row's set-up needs, kept from row to row over a chunk of
/// rows, so that the rows allocate nothing once the buffers have grown: the
/// rows run on every core at once, and an allocation per row made 16
/// threads slower than 4 on a 16-core host.
struct RowScratch<T> {
    system: RowSystem<T>,
    gradient: GradientScratch<T>,
    picks: Vec<u32>,
    pattern: PatternScratch,
    /// A static pattern's columns, or the postfilter's kept ones.
    cols: Vec<u32>,
    /// The finished row of G, (column, value).
    entries: Vec<(u32, f64)>,
}

impl<T: Real> RowScratch<T> {
    fn new() -> Self {
        Self {
            system: RowSystem::unset(),
            gradient: GradientScratch::default(),
            picks: Vec::new(),
            pattern: PatternScratch::default(),
            cols: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// The xor butterfly over the first `width` (a power of two ≤ 32) slots:
/// p[l] += p[l + w] for w = width/2, …, 1; the result is p[0]. With the other
/// slots +0.0 this is the 32-slot sum of the spec up to the sign of a zero.
fn tree_sum<T: Real>(p: &mut [T; 32], width: usize) -> T {
    let mut w = width;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            p[l] = p[l] + p[l + w];
        }
    }
    p[0]
}

/// The outcome of one adaptive step.
#[derive(Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Columns added, the row goes on.
    Grown,
    /// Columns added and the stop rule fired.
    Stopped,
    /// No candidate column (row exhausted): nothing changed.
    Exhausted,
    /// A pivot or the new ψ was not positive: nothing changed.
    Breakdown,
}

impl<T: Real> RowSystem<T> {
    /// One adaptive step (steps 1–5 of the spec).
    /// The gradient's and the picks' buffers are `scratch` and `picks`.
    fn adaptive_step(
        &mut self,
        a: &Csr,
        growth: &AdaptivePattern,
        psi0: T,
        scratch: &mut GradientScratch<T>,
        picks: &mut Vec<u32>,
    ) -> StepOutcome {
        let AdaptivePattern {
            step_size,
            epsilon,
            stop,
            ..
        } = *growth;
        self.candidates(a, step_size, scratch, picks);
        if picks.is_empty() {
            return StepOutcome::Exhausted;
        }
        let (len, psi) = (self.cols.len(), self.psi);
        for &c in picks.iter() {
            if self.append(a, c as usize).is_err() {
                self.truncate(len, psi);
                return StepOutcome::Breakdown;
            }
        }
        let psi_new = self.psi;
        if !(psi_new > T::ZERO && psi_new.is_finite()) {
            self.truncate(len, psi);
            return StepOutcome::Breakdown;
        }
        self.back_solve();
        let eps = T::from_f64(epsilon);
        let stopped = match stop {
            FsaiStop::Stagnation => psi - psi_new < eps * psi,
            FsaiStop::Reduction => psi_new <= eps * psi0,
        };
        if stopped {
            StepOutcome::Stopped
        } else {
            StepOutcome::Grown
        }
    }

    /// Postfilter: drops |g_q| < δ and re-solves on the kept columns in
    /// insertion order. Returns false on a breakdown of the re-solve.
    /// The kept columns go through `kept`.
    fn postfilter(&mut self, a: &Csr, delta: f64, kept: &mut Vec<u32>) -> bool {
        let d = T::from_f64(delta);
        kept.clear();
        kept.extend(
            self.cols
                .iter()
                .zip(&self.g)
                .filter(|(_, g)| g.abs() >= d)
                .map(|(&c, _)| c),
        );
        if kept.len() == self.cols.len() {
            return true;
        }
        self.reset(a, self.row);
        self.factor_all(a, kept)
    }

    /// The row of G into `entries` (cleared first): (column, value) sorted
    /// by column, diagonal last.
    fn scaled_into(&self, entries: &mut Vec<(u32, f64)>) {
        let s = self.psi.sqrt();
        entries.clear();
        entries.extend(
            self.cols
                .iter()
                .zip(&self.g)
                .map(|(&c, &g)| (c, (g / s).to_f64())),
        );
        entries.sort_unstable_by_key(|e| e.0);
        entries.push((self.row as u32, (T::ONE / s).to_f64()));
    }
}

/// The static pattern of row i: columns j < i within `power` steps of i in
/// the graph of Ã (ascending).
#[cfg(test)]
fn static_pattern(a: &Csr, diag: &[f64], i: usize, power: usize, prefilter: f64) -> Vec<u32> {
    let mut out = Vec::new();
    let mut scratch = PatternScratch::default();
    static_pattern_into(a, diag, (i, power, prefilter), &mut scratch, &mut out);
    out
}

/// The buffers of [`static_pattern_into`], kept from row to row.
#[derive(Default)]
pub struct PatternScratch {
    reached: Vec<u32>,
    frontier: Vec<u32>,
    next: Vec<u32>,
}

/// [`static_pattern`] of row i (`power` steps, `prefilter`) appended to
/// `out`. The steps are breadth first over sorted vectors: each step's new
/// columns gathered from the frontier's kept entries, sorted, deduplicated
/// and merged into those reached, with no hashing and, over many rows, no
/// allocation (a hash set per row took 13 s on 16 cores for power 2 on
/// 8 M rows).
pub fn static_pattern_into(
    a: &Csr,
    diag: &[f64],
    (i, power, prefilter): (usize, usize, f64),
    scratch: &mut PatternScratch,
    out: &mut Vec<u32>,
) {
    let keep =
        |r: usize, c: usize, v: f64| c != r && v.abs() >= prefilter * (diag[r] * diag[c]).sqrt();
    let PatternScratch {
        reached,
        frontier,
        next,
    } = scratch;
    reached.clear();
    reached.push(i as u32);
    frontier.clear();
    frontier.push(i as u32);
    for _ in 0..power {
        next.clear();
        for &r in frontier.iter() {
            let (cols, vals) = a.row(r as usize);
            for (&c, &v) in cols.iter().zip(vals) {
                if keep(r as usize, c as usize, v) {
                    next.push(c);
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        next.retain(|c| reached.binary_search(c).is_err());
        if next.is_empty() {
            break;
        }
        reached.extend_from_slice(next);
        reached.sort_unstable();
        std::mem::swap(frontier, next);
    }
    out.extend(reached.iter().filter(|&&c| (c as usize) < i));
}

/// The finished rows of a chunk: G's rows one after the other, and the
/// statistics' counts.
struct ChunkRows {
    /// (column, value) of the rows, one row after the other.
    entries: Vec<(u32, f64)>,
    /// Entries of each row.
    lengths: Vec<u32>,
    /// Entry k: rows that took k steps.
    rows_by_steps: Vec<usize>,
    fallback_rows: usize,
    /// Entries before the postfilter, summed over the rows.
    nnz_before_postfilter: usize,
}

impl ChunkRows {
    /// The rows, each its (column, value) entries.
    fn rows(&self) -> impl Iterator<Item = &[(u32, f64)]> + '_ {
        let mut rest = self.entries.as_slice();
        self.lengths.iter().map(move |&len| {
            let (row, tail) = rest.split_at(len as usize);
            rest = tail;
            row
        })
    }
}

/// Row i of G appended to `out`, with `scratch`'s buffers.
fn setup_row<T: Real>(
    a: &Csr,
    diag: &[f64],
    (i, s): (usize, &FsaiSettings),
    scratch: &mut RowScratch<T>,
    out: &mut ChunkRows,
) {
    let RowScratch {
        system: row,
        gradient,
        picks,
        pattern,
        cols,
        entries,
    } = scratch;
    row.reset(a, i);
    let mut fallback = false;
    let mut steps_taken = 0;
    match s.pattern {
        FsaiPattern::Static { power, prefilter } => {
            cols.clear();
            static_pattern_into(a, diag, (i, power, prefilter), pattern, cols);
            fallback |= !row.factor_all(a, cols);
            steps_taken = 1;
        }
        FsaiPattern::Adaptive(growth) => {
            let psi0 = row.psi;
            for _ in 0..growth.steps {
                match row.adaptive_step(a, &growth, psi0, gradient, picks) {
                    StepOutcome::Grown => steps_taken += 1,
                    StepOutcome::Stopped => {
                        steps_taken += 1;
                        break;
                    }
                    StepOutcome::Exhausted => break,
                    StepOutcome::Breakdown => {
                        fallback = true;
                        break;
                    }
                }
            }
        }
    }
    out.nnz_before_postfilter += row.cols.len() + 1;
    if s.postfilter > 0.0 {
        fallback |= !row.postfilter(a, s.postfilter, cols);
    }
    row.scaled_into(entries);
    out.entries.extend_from_slice(entries);
    out.lengths.push(entries.len() as u32);
    out.rows_by_steps[steps_taken] += 1;
    out.fallback_rows += usize::from(fallback);
}

/// Rows `rows` of G, their buffers kept from row to row.
fn setup_chunk<T: Real>(
    a: &Csr,
    diag: &[f64],
    s: &FsaiSettings,
    rows: std::ops::Range<usize>,
    steps_max: usize,
) -> ChunkRows {
    let mut out = ChunkRows {
        entries: Vec::new(),
        lengths: Vec::with_capacity(rows.len()),
        rows_by_steps: vec![0; steps_max + 1],
        fallback_rows: 0,
        nnz_before_postfilter: 0,
    };
    let mut scratch = RowScratch::<T>::new();
    for i in rows {
        setup_row(a, diag, (i, s), &mut scratch, &mut out);
    }
    out
}

/// Rows per parallel task.
const CHUNK: usize = 2048;

/// The CPU reference setup of G for the symmetric matrix `a` (sorted
/// columns, positive diagonal), rows in parallel; the result does not depend
/// on the number of threads.
pub fn fsai_setup(a: &Csr, s: &FsaiSettings) -> Result<FsaiFactor, SolveError> {
    s.validate().map_err(SolveError::InvalidControls)?;
    let n = square_size(a)?;
    let diag = fsai_diagonal(a)?;
    let steps_max = match s.pattern {
        FsaiPattern::Static { .. } => 1,
        FsaiPattern::Adaptive(growth) => growth.steps,
    };
    let chunks: Vec<ChunkRows> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let rows = c * CHUNK..((c + 1) * CHUNK).min(n);
            match s.precision {
                Precision::Double => setup_chunk::<f64>(a, &diag, s, rows, steps_max),
                Precision::Mixed => setup_chunk::<f32>(a, &diag, s, rows, steps_max),
            }
        })
        .collect();
    let mut rows_by_steps = vec![0; steps_max + 1];
    let (mut fallback_rows, mut nnz0) = (0, 0);
    for chunk in &chunks {
        for (total, k) in rows_by_steps.iter_mut().zip(&chunk.rows_by_steps) {
            *total += k;
        }
        fallback_rows += chunk.fallback_rows;
        nnz0 += chunk.nnz_before_postfilter;
    }
    if fallback_rows > 0 {
        log::warn!(
            "FSAI: {fallback_rows} rows broke down (a pivot or psi not positive) and kept \
             their last good pattern"
        );
    }
    let g =
        Csr::from_rows(n, chunks.iter().flat_map(ChunkRows::rows)).map_err(SolveError::Device)?;
    let nnz_a = a.nnz() as f64;
    Ok(FsaiFactor {
        stats: FsaiStats {
            density: g.nnz() as f64 / nnz_a,
            density_before_postfilter: nnz0 as f64 / nnz_a,
            rows_by_steps,
            fallback_rows,
        },
        g,
    })
}

/// a_ii for every row, checked positive and every value finite.
pub fn fsai_diagonal(a: &Csr) -> Result<Vec<f64>, SolveError> {
    // Rows in parallel (a search of each row for its diagonal: at 8 M rows
    // this was a sizeable part of the device set-up on one core); the errors
    // name the first such entry or row, as a scan in order would.
    if let Some(k) = a.values().par_iter().position_first(|v| !v.is_finite()) {
        let row = a.row_ptr().partition_point(|&p| p <= k) - 1;
        return Err(SolveError::NonFinite {
            what: "the matrix",
            row,
            value: a.values()[k],
        });
    }
    let diag: Vec<f64> = (0..a.n_rows())
        .into_par_iter()
        .map(|r| a.slot(r, r).map_or(0.0, |k| a.values()[k]))
        .collect();
    // Every value is finite here: not positive is d <= 0.
    if let Some(row) = diag.par_iter().position_first(|&d| d <= 0.0) {
        return Err(SolveError::NonPositiveDiagonal {
            precond: "FSAI",
            row,
            value: diag[row],
        });
    }
    Ok(diag)
}

/// The CPU preconditioner z = Gᵀ (G r).
pub struct FsaiPreconditioner {
    pub factor: FsaiFactor,
    pub gt: Csr,
}

impl FsaiPreconditioner {
    pub fn new(a: &Csr, s: &FsaiSettings) -> Result<Self, SolveError> {
        Ok(Self::from_factor(fsai_setup(a, s)?))
    }

    pub fn from_factor(factor: FsaiFactor) -> Self {
        let gt = factor.g.transpose();
        Self { factor, gt }
    }
}

impl LinearOperator for FsaiPreconditioner {
    fn n(&self) -> usize {
        self.gt.n_rows()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let mut t = vec![0.0; r.len()];
        self.factor.g.spmv(r, &mut t);
        self.gt.spmv(&t, z);
    }
}

// The tests read the set-up's private steps (the row systems, the gradient).
#[cfg(test)]
#[path = "tests.rs"]
mod tests;
