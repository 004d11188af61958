//! ILU(k)'s factorisation and sweeps and OpenFOAM's DILU on the CPU (see
//! the module docs).

use super::{diagonal_slots, pivot_ok, pivot_thresholds, symbolic, zero_pivot};
use crate::solve::checks::check_square;
use crate::solve::ic::{check_positive_diagonal, Dic, DicFactor};
use crate::solve::split::SplitMatrix;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::fill::FillPattern;
use crate::sparse::levels::LevelSchedule;
use crate::sparse::Csr;

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
