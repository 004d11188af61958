//! DIC and IC(0) on the CPU (see the module docs of `solve::ic`).

use std::marker::PhantomData;
use std::ops::Range;

use crate::solve::reduce::CHUNK;
use crate::solve::split::{SplitMatrix, TriangleRows};
use crate::solve::triangles::Triangles;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::{Csr, Permutation};

/// OpenFOAM's diagonal incomplete Cholesky (DICPreconditioner): M = (D* + L) D*⁻¹ (D* + U)
/// with the off-diagonals of A and a modified diagonal D*,
/// d*_j = a_jj − Σ_{i<j} a_ij² / d*_i (OpenFOAM `calcReciprocalD`).
///
/// The sweeps read row r's off-diagonals premultiplied by 1/d*_r
/// ([`SplitMatrix`]): OpenFOAM computes `rD[r]*coeff` first in each term,
/// so the products are the same bits, one multiply fewer per entry. The
/// lower and the upper triangle are stored apart ([`TriangleRows`]), so
/// each sweep streams only the half of the matrix it uses.
pub struct Dic<'a> {
    /// Row j's strictly lower entries a_ji / d*_j: the forward sweep's.
    lower: TriangleRows,
    /// Row i's strictly upper entries a_ij / d*_i: the backward sweep's.
    upper: TriangleRows,
    /// 1 / d*_r, as OpenFOAM stores it.
    reciprocal_d: Vec<f64>,
    matrix: PhantomData<&'a Csr>,
}

impl<'a> Dic<'a> {
    pub fn new(a: &'a Csr) -> Result<Self, SolveError> {
        Self::factorise(Triangles::new(a, "DIC")?)
    }

    /// DIC of a matrix it keeps.
    pub fn owned(a: Csr, precond: &'static str) -> Result<Dic<'static>, SolveError> {
        Dic::factorise(Triangles::owned(a, precond)?)
    }

    fn factorise(t: Triangles<'_>) -> Result<Self, SolveError> {
        Self::of_split(&SplitMatrix::new(t.matrix()))
    }

    /// DIC of a split matrix; a missing or non-positive diagonal entry is
    /// an error naming the row.
    pub fn of_split(split: &SplitMatrix) -> Result<Self, SolveError> {
        let d = modified_diagonal(split)?;
        Ok(Self::stored(split, d.iter().map(|d| 1.0 / d).collect()))
    }

    /// The stored sweeps of a factor of `split` ([`DicFactor`]: DILU's,
    /// `solve::ilu::dilu`).
    pub(in crate::solve) fn of_factor(split: &SplitMatrix, factor: DicFactor) -> Self {
        Self::stored(split, factor.reciprocal_d)
    }

    /// `split`'s triangles scaled by 1/d* row by row.
    fn stored(split: &SplitMatrix, reciprocal_d: Vec<f64>) -> Self {
        let lower = split.lower_rows().scaled(&reciprocal_d);
        let upper = split.upper_rows().scaled(&reciprocal_d);
        Self {
            lower,
            upper,
            reciprocal_d,
            matrix: PhantomData,
        }
    }

    /// 1 / d*, per row.
    pub fn reciprocal_diagonal(&self) -> &[f64] {
        &self.reciprocal_d
    }

    /// w ← (D* + U)⁻¹ D* (D* + L)⁻¹ r without a separate pass: the forward
    /// sweep writes w_j = r_j / d*_j − Σ_{i<j} (a_ji / d*_j) w_i row by row.
    pub fn sweeps(&self, r: &[f64], w: &mut [f64]) {
        self.forward(r, w);
        self.upper.backward(w, 0..w.len());
    }

    fn forward(&self, r: &[f64], w: &mut [f64]) {
        let rd = &self.reciprocal_d;
        assert_eq!(r.len(), rd.len(), "DIC: r size");
        self.lower.forward(w, |j| rd[j] * r[j]);
    }

    /// [`Dic::sweeps`], returning r · w with [`reduce::dot`](super::reduce::dot)'s bits: the
    /// backward sweep goes chunk by chunk (`reduce::CHUNK` rows, last
    /// chunk first), and each chunk's r · w is summed while the chunk is
    /// still in cache, instead of in a pass of its own over r and w.
    pub fn sweeps_dot(&self, r: &[f64], w: &mut [f64]) -> f64 {
        self.forward(r, w);
        backward_dot(r, w, |w, rows| self.upper.backward(w, rows))
    }
}

/// r · w with [`reduce::dot`](super::reduce::dot)'s bits, each chunk of
/// `reduce::CHUNK` rows (last chunk first) summed right after `backward`
/// has swept it, while it is in cache: the end of both DIC factors'
/// `sweeps_dot`.
fn backward_dot(
    r: &[f64],
    w: &mut [f64],
    mut backward: impl FnMut(&mut [f64], Range<usize>),
) -> f64 {
    let n = w.len();
    let mut partials = vec![0.0; n.div_ceil(CHUNK)];
    for (c, partial) in partials.iter_mut().enumerate().rev() {
        let rows = c * CHUNK..((c + 1) * CHUNK).min(n);
        backward(w, rows.clone());
        *partial = r[rows.clone()]
            .iter()
            .zip(&w[rows])
            .map(|(r, w)| r * w)
            .sum::<f64>();
    }
    partials.iter().sum()
}

impl LinearOperator for Dic<'_> {
    fn n(&self) -> usize {
        self.reciprocal_d.len()
    }
    /// OpenFOAM `DICPreconditioner::precondition`, same operations per entry.
    fn apply(&self, r: &[f64], w: &mut [f64]) {
        self.sweeps(r, w);
    }
    fn apply_dot(&self, r: &[f64], w: &mut [f64]) -> f64 {
        self.sweeps_dot(r, w)
    }
}

impl Dic<'_> {
    /// These sweeps over vectors that hold the rows in another order: row k
    /// of this factor (its k-th row, the k-th visited) is entry
    /// `place.new_to_old()[k]` of r and w. The rows are visited in this
    /// factor's order and each operation is the one of [`Dic::sweeps`], so
    /// w has the same bits as gathering r into this order, sweeping and
    /// scattering back, without those two passes (a rank's block DIC,
    /// factored in ascending global order, on vectors in the rank's local
    /// order: `solve::distributed`).
    pub fn in_vector_order(&self, place: &Permutation) -> PlacedDic {
        let n = self.reciprocal_d.len();
        assert_eq!(place.len(), n, "Dic::in_vector_order: permutation size");
        let place = place.new_to_old();
        let mut runs = Vec::new();
        for k in 0..n {
            if k == 0 || place[k] != place[k - 1] + 1 {
                runs.push((k, place[k] as usize));
            }
        }
        runs.push((n, n));
        PlacedDic {
            runs,
            lower: PlacedRows::of(&self.lower, place),
            upper: PlacedRows::of(&self.upper, place),
            reciprocal_d: self.reciprocal_d.clone(),
        }
    }
}

/// DIC factored with its rows in one order and swept in that order over
/// vectors that hold the rows in another ([`Dic::in_vector_order`]). The
/// factor is stored in visiting order, so it streams as [`Dic`]'s does; r
/// and w are read in runs of consecutive entries (a rank's ascending
/// global order is its interior and its boundary rows, each ascending,
/// merged: few runs, each read sequentially).
pub struct PlacedDic {
    /// (first visited row, its vector entry) of each run of visited rows
    /// whose vector entries are consecutive; a last (n, n) closes them.
    runs: Vec<(usize, usize)>,
    /// [`Dic`]'s scaled lower rows, columns as vector entries.
    lower: PlacedRows,
    /// [`Dic`]'s scaled upper rows, columns as vector entries.
    upper: PlacedRows,
    /// 1 / d*, by visited row.
    reciprocal_d: Vec<f64>,
}

/// A triangle's rows in visiting order with each column replaced by the
/// vector entry that holds that row (entries in the triangle's order).
struct PlacedRows {
    start: Vec<usize>,
    cols: Vec<u32>,
    values: Vec<f64>,
}

impl PlacedRows {
    fn of(t: &TriangleRows, place: &[u32]) -> Self {
        let (start, cols) = t.pattern();
        Self {
            start: start.to_vec(),
            cols: cols.iter().map(|&c| place[c as usize]).collect(),
            values: t.values().to_vec(),
        }
    }
}

impl PlacedDic {
    /// The runs as (visited rows, first vector entry).
    fn runs(&self) -> impl DoubleEndedIterator<Item = (std::ops::Range<usize>, usize)> + '_ {
        self.runs.windows(2).map(|w| (w[0].0..w[1].0, w[0].1))
    }
}

impl LinearOperator for PlacedDic {
    fn n(&self) -> usize {
        self.reciprocal_d.len()
    }

    /// [`Dic::sweeps`] in visiting order: the forward sweep w_j = r_j / d*_j
    /// − Σ (a_ji / d*_j) w_i (entries left to right), then the backward one
    /// (rows and entries right to left).
    fn apply(&self, r: &[f64], w: &mut [f64]) {
        let n = self.n();
        assert_eq!(r.len(), n, "DIC: r size");
        assert_eq!(w.len(), n, "DIC: w size");
        let rd = &self.reciprocal_d;
        let (lower, upper) = (&self.lower, &self.upper);
        // SAFETY: visited rows k < n index rd and start (n + 1 entries);
        // start[k]..start[k + 1] lie within cols and values; runs place
        // their rows at entries l < n (a permutation's, `in_vector_order`),
        // and every column is a permutation's entry, below n = w.len().
        unsafe {
            for (rows, first) in self.runs() {
                let k0 = rows.start;
                for k in rows {
                    let l = first + (k - k0);
                    let mut acc = rd.get_unchecked(k) * r.get_unchecked(l);
                    for e in *lower.start.get_unchecked(k)..*lower.start.get_unchecked(k + 1) {
                        let c = *lower.cols.get_unchecked(e) as usize;
                        acc -= lower.values.get_unchecked(e) * w.get_unchecked(c);
                    }
                    *w.get_unchecked_mut(l) = acc;
                }
            }
            for (rows, first) in self.runs().rev() {
                let k0 = rows.start;
                for k in rows.rev() {
                    let l = first + (k - k0);
                    let mut wl = *w.get_unchecked(l);
                    for e in
                        (*upper.start.get_unchecked(k)..*upper.start.get_unchecked(k + 1)).rev()
                    {
                        let c = *upper.cols.get_unchecked(e) as usize;
                        wl -= upper.values.get_unchecked(e) * w.get_unchecked(c);
                    }
                    *w.get_unchecked_mut(l) = wl;
                }
            }
        }
    }
}

/// OpenFOAM's DIC diagonal d*_j = a_jj − Σ_{i<j} a_ij² / d*_i of `split`
/// (`calcReciprocalD`); an error names the row of a missing or
/// non-positive diagonal entry, or where the factorisation breaks down.
fn modified_diagonal(split: &SplitMatrix) -> Result<Vec<f64>, SolveError> {
    check_positive_diagonal(split, "DIC")?;
    let lower = split.lower_rows();
    let mut d = split.diag().to_vec();
    // OpenFOAM loops over faces (owner i < neighbour j, owner-major) doing
    // d_j -= a_ij² / d_i; per j that is i ascending, the lower row of j here.
    for j in 0..split.n() {
        let mut dj = d[j];
        for (i, a_ji) in lower.entries(j) {
            dj -= a_ji * a_ji / d[i];
        }
        if dj.is_nan() || dj <= 0.0 {
            return Err(SolveError::FactorizationBreakdown {
                precond: "DIC",
                row: j,
                value: dj,
            });
        }
        d[j] = dj;
    }
    Ok(d)
}

/// A missing (stored as 0), non-positive or NaN diagonal entry of `split`
/// as the error naming `precond` and the row.
pub(crate) fn check_positive_diagonal(
    split: &SplitMatrix,
    precond: &'static str,
) -> Result<(), SolveError> {
    match split.diag().iter().position(|&d| d.is_nan() || d <= 0.0) {
        Some(row) => Err(SolveError::NonPositiveDiagonal {
            precond,
            row,
            value: split.diag()[row],
        }),
        None => Ok(()),
    }
}

/// DIC as OpenFOAM's DIC smoother keeps it (and DILU, whose sweeps are
/// DIC's with its own d*: `solve::ilu::dilu_factor`): 1/d* alone, each sweep forming
/// (a_ij / d*_i) from the matrix's own split rows as it goes (the bits of
/// [`Dic`]'s stored products: the same product, formed later). GAMG's
/// levels use it: their set-up writes one vector per level instead of a
/// scaled copy of both triangles, and the sweeps read the triangles the
/// level's Gauss–Seidel and products read. So does CPU PCG's DIC
/// (`CpuBackend::dic`), on the rows its product reads.
pub struct DicFactor {
    reciprocal_d: Vec<f64>,
}

impl DicFactor {
    /// The factor of `split` (errors as [`Dic::of_split`]'s).
    pub fn of_split(split: &SplitMatrix) -> Result<Self, SolveError> {
        // d* becomes 1/d* in place: one vector, not two.
        let mut reciprocal_d = modified_diagonal(split)?;
        reciprocal_d.iter_mut().for_each(|d| *d = 1.0 / *d);
        Ok(Self { reciprocal_d })
    }

    /// The factor of the split rows it will sweep, with its 1/d* computed
    /// elsewhere (DILU's, `solve::ilu::dilu_factor`).
    pub(in crate::solve) fn from_reciprocal_diagonal(reciprocal_d: Vec<f64>) -> Self {
        Self { reciprocal_d }
    }

    pub fn n(&self) -> usize {
        self.reciprocal_d.len()
    }

    /// [`Dic::sweeps`] of the matrix `split` this factor was made from.
    pub fn sweeps(&self, split: &SplitMatrix, r: &[f64], w: &mut [f64]) {
        self.forward(split, r, w);
        split
            .upper_rows()
            .backward_scaled(w, &self.reciprocal_d, 0..w.len());
    }

    fn forward(&self, split: &SplitMatrix, r: &[f64], w: &mut [f64]) {
        let rd = &self.reciprocal_d;
        assert_eq!(r.len(), rd.len(), "DIC: r size");
        assert_eq!(split.n(), rd.len(), "DIC: matrix size");
        split.lower_rows().forward_scaled(w, rd, |j| rd[j] * r[j]);
    }

    /// [`Dic::sweeps_dot`] of the matrix `split` this factor was made from:
    /// the same bits, with the backward sweep chunk by chunk and each
    /// chunk's r · w summed while it is in cache. CPU PCG's DIC runs so on
    /// the backend's own split rows, which then hold the only copy of the
    /// matrix's off-diagonal entries in the solve (a scaled copy of both
    /// triangles was as large again).
    pub fn sweeps_dot(&self, split: &SplitMatrix, r: &[f64], w: &mut [f64]) -> f64 {
        self.forward(split, r, w);
        backward_dot(r, w, |w, rows| {
            split
                .upper_rows()
                .backward_scaled(w, &self.reciprocal_d, rows)
        })
    }
}

/// Incomplete Cholesky IC(0): M = L Lᵀ with L on the lower pattern of A.
pub struct Ic0<'a> {
    t: Triangles<'a>,
    /// L's strictly lower values, stored in A's slots (upper slots unused).
    l: Vec<f64>,
    l_diag: Vec<f64>,
}

impl<'a> Ic0<'a> {
    pub fn new(a: &'a Csr) -> Result<Self, SolveError> {
        Self::factorise(Triangles::new(a, "IC(0)")?)
    }

    /// IC(0) of a matrix it keeps (`solve::schwarz`'s blocks, block-IC's block
    /// diagonal); `precond` names it in errors.
    pub fn owned(a: Csr, precond: &'static str) -> Result<Ic0<'static>, SolveError> {
        Ic0::factorise(Triangles::owned(a, precond)?)
    }

    fn factorise(t: Triangles<'a>) -> Result<Self, SolveError> {
        let mut l = vec![0.0; t.matrix().nnz()];
        let mut l_diag = vec![0.0; t.n()];
        for i in 0..t.n() {
            for s in t.lower(i) {
                let k = t.col(s);
                // l_ik = (a_ik − Σ_{m<k} l_im l_km) / l_kk over the common pattern.
                let sum = sparse_dot(&t, &l, t.lower(i).start..s, t.lower(k));
                l[s] = (t.value(s) - sum) / l_diag[k];
            }
            let pivot = t.diag(i) - t.lower(i).map(|s| l[s] * l[s]).sum::<f64>();
            if pivot.is_nan() || pivot <= 0.0 {
                return Err(SolveError::FactorizationBreakdown {
                    precond: "IC(0)",
                    row: i,
                    value: pivot,
                });
            }
            l_diag[i] = pivot.sqrt();
        }
        Ok(Self { t, l, l_diag })
    }

    /// L's strictly lower values in A's slots (zeros in the others), then
    /// its diagonal.
    pub fn factor(&self) -> Vec<f64> {
        let mut f = self.l.clone();
        f.extend_from_slice(&self.l_diag);
        f
    }
}

/// Σ l[p] l[q] over slots p in `a`, q in `b` with equal columns (both sorted).
fn sparse_dot(
    t: &Triangles<'_>,
    l: &[f64],
    mut a: std::ops::Range<usize>,
    mut b: std::ops::Range<usize>,
) -> f64 {
    let mut sum = 0.0;
    let (mut p, mut q) = (a.next(), b.next());
    while let (Some(sp), Some(sq)) = (p, q) {
        match t.col(sp).cmp(&t.col(sq)) {
            std::cmp::Ordering::Less => p = a.next(),
            std::cmp::Ordering::Greater => q = b.next(),
            std::cmp::Ordering::Equal => {
                sum += l[sp] * l[sq];
                p = a.next();
                q = b.next();
            }
        }
    }
    sum
}

impl LinearOperator for Ic0<'_> {
    fn n(&self) -> usize {
        self.t.n()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        // L y = r, row-wise.
        for i in 0..self.t.n() {
            let sum: f64 = self.t.lower(i).map(|s| self.l[s] * z[self.t.col(s)]).sum();
            z[i] = (r[i] - sum) / self.l_diag[i];
        }
        // Lᵀ z = y, column-wise over the rows of L.
        for i in (0..self.t.n()).rev() {
            z[i] /= self.l_diag[i];
            for s in self.t.lower(i) {
                z[self.t.col(s)] -= self.l[s] * z[i];
            }
        }
    }
}

// The tests read the factors' private steps.
#[cfg(test)]
#[path = "tests.rs"]
mod tests;
