//! Incomplete LU for nonsymmetric matrices (Yang 2015, §2.9–2.11): ILU(k) as
//! Yang 2015 decouples it — the symbolic level-of-fill pattern
//! (`sparse::fill`), then ILU(0) in the IKJ order on A padded with zeros at
//! the fill positions — and OpenFOAM's DILU, which modifies only the
//! diagonal.
//!
//! The factors live in the padded matrix's slots: L strictly lower with a
//! unit diagonal, U on and above the diagonal. No pivoting: a pivot u_ii with
//! |u_ii| ≤ ε·max_j |a_ij| (ε the machine epsilon, the row of the padded
//! matrix) is a [`SolveError::ZeroPivot`] naming the row. The GPU
//! (`gpu::ilu`) factorises and sweeps level by level with the same
//! operations in the same order, so its factors equal these bit for bit.
//!
//! Levels: the forward sweep (and the factorisation) of row i waits for the
//! rows j < i of its L row, the backward sweep for the rows j > i of its U
//! row; `sparse::levels` groups them. Fill adds dependencies, so ILU(1) has
//! more levels than ILU(0), and the row order decides the count (natural
//! order on a 3-D grid: the wavefronts nx + ny + nz − 2; RCM about the same;
//! a multicolour order few levels but a weaker factor).

use super::checks::check_square;
use super::ic::{check_positive_diagonal, Dic, DicFactor};
use super::split::SplitMatrix;
use super::{LinearOperator, SolveError};
use crate::sparse::fill::{ilu_pattern, FillPattern};
use crate::sparse::levels::LevelSchedule;
use crate::sparse::Csr;

/// The highest ILU fill level accepted (Yang 2015 uses 0 to 3).
pub const MAX_FILL_LEVEL: u32 = 8;

/// An ILU fill level that is too high for the pattern to stay sparse.
pub fn check_fill_level(k: u32) -> Result<(), String> {
    if k > MAX_FILL_LEVEL {
        return Err(format!(
            "ILU fill level {k} is too high (at most {MAX_FILL_LEVEL}; Yang 2015 uses 0 to 3)"
        ));
    }
    Ok(())
}

/// An ILU fill level from text (`ilu1`'s `1`, `iluk:2`'s `2`).
pub fn parse_fill_level(k: &str) -> Result<u32, String> {
    let k: u32 = k.trim().parse().map_err(|_| {
        format!("ILU fill level must be a whole number (ilu0, ilu1, iluk:K), not '{k}'")
    })?;
    check_fill_level(k)?;
    Ok(k)
}

/// The pivot threshold of each row: ε times the row's largest |a_ij|.
pub fn pivot_thresholds(a: &Csr) -> Vec<f64> {
    (0..a.n_rows())
        .map(|i| f64::EPSILON * a.row(i).1.iter().fold(0.0f64, |m, v| m.max(v.abs())))
        .collect()
}

/// Whether `u` passes as a pivot against `tiny` (false for NaN).
pub fn pivot_ok(u: f64, tiny: f64) -> bool {
    u.abs() > tiny && u.is_finite()
}

/// The ILU factors of a square matrix on its ILU(k) pattern.
#[derive(Clone, Debug)]
pub struct Ilu {
    /// L (strictly lower, unit diagonal implied) and U (diagonal and upper)
    /// in the slots of the padded matrix.
    lu: Csr,
    diag_slot: Vec<usize>,
    fill_level: u32,
    n_fill: usize,
}

impl Ilu {
    /// ILU(k) of `a` (square): symbolic phase, then [`Ilu::factorise`].
    pub fn new(a: &Csr, k: u32) -> Result<Self, SolveError> {
        let pattern = symbolic(a, k)?;
        Self::factorise(&pattern)
    }

    /// The numeric phase on a padded pattern: ILU(0), IKJ, rows in order.
    pub fn factorise(pattern: &FillPattern) -> Result<Self, SolveError> {
        let p = &pattern.matrix;
        let n = p.n_rows();
        let diag_slot = diagonal_slots(p);
        let tiny = pivot_thresholds(p);
        let (row_ptr, cols) = (p.row_ptr(), p.cols());
        let mut lu = p.values().to_vec();
        let mut pos = vec![usize::MAX; n];
        for i in 0..n {
            for s in row_ptr[i]..row_ptr[i + 1] {
                pos[cols[s] as usize] = s;
            }
            for s in row_ptr[i]..diag_slot[i] {
                let k = cols[s] as usize;
                let l = lu[s] / lu[diag_slot[k]];
                lu[s] = l;
                for t in diag_slot[k] + 1..row_ptr[k + 1] {
                    let q = pos[cols[t] as usize];
                    if q != usize::MAX {
                        lu[q] -= l * lu[t];
                    }
                }
            }
            for s in row_ptr[i]..row_ptr[i + 1] {
                pos[cols[s] as usize] = usize::MAX;
            }
            let u = lu[diag_slot[i]];
            if !pivot_ok(u, tiny[i]) {
                return Err(zero_pivot(pattern.fill_level, i, u));
            }
        }
        let lu = Csr::new(n, row_ptr.to_vec(), cols.to_vec(), lu).map_err(SolveError::Device)?;
        Ok(Self {
            lu,
            diag_slot,
            fill_level: pattern.fill_level,
            n_fill: pattern.n_fill(),
        })
    }

    /// L and U in the padded matrix's slots.
    pub fn factors(&self) -> &Csr {
        &self.lu
    }
    pub fn fill_level(&self) -> u32 {
        self.fill_level
    }
    /// Fill entries (pattern entries not in A).
    pub fn n_fill(&self) -> usize {
        self.n_fill
    }
    /// Levels of the forward and the backward sweep.
    pub fn levels(&self) -> (usize, usize) {
        (
            LevelSchedule::lower(&self.lu).n_levels(),
            LevelSchedule::upper(&self.lu).n_levels(),
        )
    }

    /// Forward sweep L y = r in place of `z` (z = r on entry).
    fn forward(&self, z: &mut [f64]) {
        let (row_ptr, cols, lu) = (self.lu.row_ptr(), self.lu.cols(), self.lu.values());
        for i in 0..z.len() {
            let mut acc = z[i];
            for s in row_ptr[i]..self.diag_slot[i] {
                acc -= lu[s] * z[cols[s] as usize];
            }
            z[i] = acc;
        }
    }

    /// Backward sweep U x = y in place.
    fn backward(&self, z: &mut [f64]) {
        let (row_ptr, cols, lu) = (self.lu.row_ptr(), self.lu.cols(), self.lu.values());
        for i in (0..z.len()).rev() {
            let mut acc = z[i];
            for s in self.diag_slot[i] + 1..row_ptr[i + 1] {
                acc -= lu[s] * z[cols[s] as usize];
            }
            z[i] = acc / lu[self.diag_slot[i]];
        }
    }
}

impl LinearOperator for Ilu {
    fn n(&self) -> usize {
        self.diag_slot.len()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        z.copy_from_slice(r);
        self.forward(z);
        self.backward(z);
    }
}

/// The ILU(k) pattern of `a` as a solve error when `a` is not square.
pub fn symbolic(a: &Csr, k: u32) -> Result<FillPattern, SolveError> {
    check_square(a)?;
    ilu_pattern(a, k).map_err(SolveError::InvalidControls)
}

/// Slot of each row's diagonal (the padded pattern always has it).
pub fn diagonal_slots(p: &Csr) -> Vec<usize> {
    (0..p.n_rows())
        .map(|i| p.slot(i, i).expect("the ILU pattern holds every diagonal"))
        .collect()
}

/// The zero-pivot error of ILU(k) at `row`.
pub fn zero_pivot(k: u32, row: usize, value: f64) -> SolveError {
    SolveError::ZeroPivot {
        precond: match k {
            0 => "ILU(0)",
            1 => "ILU(1)",
            2 => "ILU(2)",
            3 => "ILU(3)",
            _ => "ILU(k)",
        },
        row,
        value,
    }
}

/// For each slot (j, i) of `a` the slot (i, j); an error naming `precond`
/// when the pattern is not symmetric (FVM matrices always have one).
pub fn transposed_slots(a: &Csr, precond: &str) -> Result<Vec<usize>, SolveError> {
    let mut t = vec![0usize; a.nnz()];
    for k in 0..a.n_rows() {
        let (cols, _) = a.row(k);
        for (s, &i) in (a.row_ptr()[k]..).zip(cols) {
            t[s] = a.slot(i as usize, k).ok_or_else(|| {
                SolveError::InvalidControls(format!(
                    "{precond} needs a symmetric pattern: entry ({k}, {i}) has no ({i}, {k})"
                ))
            })?;
        }
    }
    Ok(t)
}

/// OpenFOAM's DILU (DILUPreconditioner): M = (D* + L) D*⁻¹ (D* + U) with the
/// off-diagonals of A and the diagonal
/// d*_j = a_jj − Σ_{i<j} a_ij a_ji / d*_i (`calcReciprocalD`: per face,
/// `rD[u] -= upper*lower/rD[l]`, faces owner-major, so per row j the lower
/// columns i ascending). On a symmetric matrix this is DIC bit for bit; the
/// sweeps are DIC's ([`Dic`]), on triangles stored scaled by 1/d*. d* and
/// the errors are [`dilu_factor`]'s.
pub fn dilu(a: &Csr) -> Result<Dic<'_>, SolveError> {
    check_square(a)?;
    let split = SplitMatrix::new(a);
    let factor = dilu_factor(&split)?;
    Ok(Dic::of_factor(&split, factor))
}

/// [`dilu`]'s d* as a [`DicFactor`] of split rows, whose sweeps form each
/// scaled entry from those rows (`CpuBackend::dilu`: the rows the Krylov
/// backend's product reads, so a solve keeps no scaled copy of the
/// triangles). Row j's lower entries a_ji, columns i ascending, each meet
/// a_ij as the next unread entry of row i's upper triangle (rows j ascending
/// read every upper row in column order): one cursor per row, no search.
/// Errors: a non-positive diagonal entry, a pattern that is not symmetric
/// (naming an entry without its mirror), a pivot d*_j failing [`pivot_ok`]
/// against ε max_k |a_jk| ([`SolveError::ZeroPivot`]).
pub fn dilu_factor(split: &SplitMatrix) -> Result<DicFactor, SolveError> {
    check_positive_diagonal(split, "DILU")?;
    let (lower, upper) = (split.lower_rows(), split.upper_rows());
    let n = split.n();
    let (upper_start, upper_cols) = upper.pattern();
    let upper_values = upper.values();
    let unmirrored = |row: usize, col: usize| {
        SolveError::InvalidControls(format!(
            "DILU needs a symmetric pattern: entry ({row}, {col}) has no ({col}, {row})"
        ))
    };
    // next[i]: row i's first upper entry not yet met.
    let mut next: Vec<usize> = upper_start[..n].to_vec();
    let mut d = split.diag().to_vec();
    for j in 0..n {
        let mut dj = d[j];
        let mut largest = dj.abs();
        let (cols, values) = lower.row_slices(j);
        for (&i, &a_ji) in cols.iter().zip(values) {
            let i = i as usize;
            let s = next[i];
            if s == upper_start[i + 1] || upper_cols[s] as usize != j {
                return Err(unmirrored(j, i));
            }
            next[i] = s + 1;
            dj -= upper_values[s] * a_ji / d[i];
            largest = largest.max(a_ji.abs());
        }
        let (_, upper_row) = upper.row_slices(j);
        let largest = upper_row.iter().fold(largest, |m, v| m.max(v.abs()));
        // `pivot_thresholds`' ε max_k |a_jk|: a maximum, in any order.
        if !pivot_ok(dj, f64::EPSILON * largest) {
            return Err(SolveError::ZeroPivot {
                precond: "DILU",
                row: j,
                value: dj,
            });
        }
        d[j] = dj;
    }
    if let Some(i) = (0..n).find(|&i| next[i] != upper_start[i + 1]) {
        return Err(unmirrored(i, upper_cols[next[i]] as usize));
    }
    d.iter_mut().for_each(|d| *d = 1.0 / *d);
    Ok(DicFactor::from_reciprocal_diagonal(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, random_symmetric};

    #[test]
    fn dilu_on_a_symmetric_matrix_is_dic() {
        let a = random_symmetric(300, 6, 11);
        let dic = Dic::new(&a).unwrap();
        let dilu = dilu(&a).unwrap();
        assert_eq!(dic.reciprocal_diagonal(), dilu.reciprocal_diagonal());
    }

    /// DILU's d* is the recurrence's, entry by entry from the CSR (each
    /// a_ij found by a search), and the split rows' sweeps have the stored
    /// DILU's bits, on nonsymmetric values over a symmetric pattern.
    #[test]
    fn dilu_of_split_rows_has_the_bits_of_the_stored_dilu() {
        use crate::sparse::testing::{bits, random_nonsymmetric, random_vector};
        for (n, per_row, seed) in [(1, 1, 3), (200, 5, 7), (2500, 9, 8)] {
            let a = random_nonsymmetric(n, per_row, seed);
            let stored = dilu(&a).unwrap();
            let transposed = transposed_slots(&a, "DILU").unwrap();
            let mut d: Vec<f64> = (0..n).map(|j| a.values()[a.slot(j, j).unwrap()]).collect();
            for j in 0..n {
                let lower = a.row_ptr()[j]..a.slot(j, j).unwrap();
                for (s, &mirror) in lower.clone().zip(&transposed[lower]) {
                    let i = a.cols()[s] as usize;
                    d[j] -= a.values()[mirror] * a.values()[s] / d[i];
                }
            }
            let reciprocal: Vec<f64> = d.iter().map(|d| 1.0 / d).collect();
            assert_eq!(
                bits(stored.reciprocal_diagonal()),
                bits(&reciprocal),
                "n = {n}"
            );
            let split = SplitMatrix::new(&a);
            let factor = dilu_factor(&split).unwrap();
            let r = random_vector(n, seed + 1);
            let (mut w_stored, mut w_factor) = (vec![0.0; n], vec![0.0; n]);
            stored.apply(&r, &mut w_stored);
            factor.sweeps(&split, &r, &mut w_factor);
            assert_eq!(bits(&w_factor), bits(&w_stored), "n = {n}");
        }
    }

    /// The stored DILU's refusals, each naming its row or entry.
    #[test]
    fn dilu_of_split_rows_refuses_what_the_stored_dilu_refuses() {
        let dilu_error = |a: &Csr| dilu_factor(&SplitMatrix::new(a)).err().unwrap().to_string();
        // (0, 1) without (1, 0), and (2, 0) without (0, 2).
        let one_sided = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![2.0, 1.0, 2.0]).unwrap();
        assert!(dilu(&one_sided).is_err());
        let message = dilu_error(&one_sided);
        assert!(message.contains("entry (0, 1) has no (1, 0)"), "{message}");
        let below = Csr::new(
            3,
            vec![0, 1, 2, 4],
            vec![0, 1, 0, 2],
            vec![2.0, 2.0, 1.0, 2.0],
        )
        .unwrap();
        assert!(dilu(&below).is_err());
        let message = dilu_error(&below);
        assert!(message.contains("entry (2, 0) has no (0, 2)"), "{message}");
        // A zero pivot in row 1: 1 − 1·1/1.
        let singular =
            Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0, 1.0, 1.0, 1.0]).unwrap();
        assert_eq!(
            dilu(&singular).err(),
            dilu_factor(&SplitMatrix::new(&singular)).err()
        );
        let message = dilu_error(&singular);
        assert!(message.contains("row 1"), "{message}");
        let negative = Csr::new(1, vec![0, 1], vec![0], vec![-1.0]).unwrap();
        assert_eq!(
            dilu(&negative).err(),
            dilu_factor(&SplitMatrix::new(&negative)).err()
        );
    }

    #[test]
    fn ilu0_of_a_pattern_closed_matrix_is_exact() {
        // Arrow pointing down-right (last row and column full): no fill, so
        // ILU(0) is the exact LU and M = A.
        let n = 6;
        let mut rows: Vec<Vec<(u32, f64)>> =
            (0..n).map(|i| vec![(i as u32, 4.0 + i as f64)]).collect();
        for i in 0..n - 1 {
            rows[i].push((n as u32 - 1, 1.0 + i as f64 * 0.1));
            rows[n - 1].insert(i, (i as u32, -0.5 - i as f64 * 0.2));
        }
        let a = Csr::from_rows(n, rows).unwrap();
        let ilu = Ilu::new(&a, 0).unwrap();
        let b: Vec<f64> = (0..n).map(|i| i as f64 - 2.5).collect();
        let mut x = vec![0.0; n];
        ilu.apply(&b, &mut x);
        let ax = dense(&a) * nalgebra::DVector::from_column_slice(&x);
        for i in 0..n {
            assert!((ax[i] - b[i]).abs() < 1e-13, "row {i}");
        }
    }
}
