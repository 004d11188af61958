//! PCG over ranks (issue 10): the [`CgBackend`] of one rank's rows of a
//! distributed matrix ([`LocalMatrix`]) with a [`Communicator`]. The PCG loop
//! is `pcg::pcg`, unchanged: A p needs the halo of p (exchanged while the
//! interior rows are multiplied), dot products and Σ|r| are summed over the
//! ranks, and OpenFOAM's normFactor takes the global mean of x. Every rank
//! gets the same scalars, so all ranks take the same decisions and stop at
//! the same iteration.
//!
//! The preconditioner is block Jacobi over ranks: any CPU preconditioner of
//! `solve::precond` built on the rank's owned block (halo couplings dropped).
//! Jacobi is the global Jacobi; DIC, IC(0), symmetric Gauss–Seidel... become
//! their block versions, weaker as the rank count grows; AMG (a distributed
//! GAMG) builds each rank's hierarchy on its owned block.
//!
//! Subdomain deflation ([`Deflation::Subdomains`], Nicolaides; Frank & Vuik)
//! adds a coarse space of one vector per rank, the indicator of its owned
//! rows, and so takes out the smallest eigenvalues that block Jacobi leaves
//! as the rank count grows: [`RankDeflation`] is `solve::deflation`'s
//! [`DeflationOps`] over the ranks (E = ZᵀAZ summed over the ranks and
//! inverted on each), run through the same [`Deflated`] adapter as the
//! serial deflated PCG.

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;

use nalgebra::DMatrix;

use super::cpu::{diagonal_slots, openfoam_row_sums, row_sum_by};
use super::deflation::{coarse_inverse, Deflated, DeflationOps};
use super::error::check_finite;
use super::pcg::NORM_FACTOR_SMALL;
use super::reduce::{dot, sum_by};
use super::{
    pcg, CgBackend, InitialNorms, LinearOperator, Preconditioner, SolveError, SolverControls,
    SolverPerformance,
};
use crate::parallel::collective::agreed;
use crate::parallel::Communicator;
use crate::sparse::distribute::LocalMatrix;

/// PCG steps on one rank's owned rows; vectors hold the owned rows (local
/// order), the halo of x and p lives in the backend.
pub struct DistributedBackend<'a> {
    local: &'a LocalMatrix,
    comm: &'a dyn Communicator,
    precond: &'a dyn LinearOperator,
    diag_slot: Vec<usize>,
    /// rowSum of the owned rows (halo couplings included).
    row_sums: Vec<f64>,
    /// Halo values of the vector last exchanged.
    halo: RefCell<Vec<f64>>,
    flexible: bool,
}

impl<'a> DistributedBackend<'a> {
    /// `precond` acts on the owned rows (`local.n_owned`).
    pub fn new(
        local: &'a LocalMatrix,
        comm: &'a dyn Communicator,
        precond: &'a dyn LinearOperator,
    ) -> Self {
        assert_eq!(
            precond.n(),
            local.n_owned,
            "DistributedBackend: preconditioner size"
        );
        Self {
            local,
            comm,
            precond,
            diag_slot: diagonal_slots(&local.matrix),
            row_sums: openfoam_row_sums(&local.matrix),
            halo: RefCell::new(vec![0.0; local.n_halo()]),
            flexible: false,
        }
    }

    /// Flexible PCG (see `solve::pcg`) for preconditioners that are not a
    /// fixed linear map.
    pub fn flexible(mut self, flexible: bool) -> Self {
        self.flexible = flexible;
        self
    }

    fn global_sum<const K: usize>(&self, mut values: [f64; K]) -> [f64; K] {
        self.comm.sum(&mut values);
        values
    }

    /// (A x)_r with x's owned values in `x` and its halo in `halo`.
    fn row_times(&self, r: usize, x: &[f64], halo: &[f64]) -> f64 {
        let n = self.local.n_owned;
        row_sum_by(&self.local.matrix, r, self.diag_slot[r], |c, v| {
            v * if c < n { x[c] } else { halo[c - n] }
        })
    }

    /// q_r = (A p)_r for rows `rows` (q indexed from `rows.start`); returns
    /// Σ p_r q_r over them.
    fn product(&self, rows: std::ops::Range<usize>, p: &[f64], halo: &[f64], q: &mut [f64]) -> f64 {
        let start = rows.start;
        let mut p_q = 0.0;
        for r in rows {
            let v = self.row_times(r, p, halo);
            q[r - start] = v;
            p_q += p[r] * v;
        }
        p_q
    }
}

impl CgBackend for DistributedBackend<'_> {
    type Vector = Vec<f64>;

    fn n(&self) -> usize {
        self.local.n_owned
    }

    fn new_vector(&self) -> Vec<f64> {
        vec![0.0; self.n()]
    }

    fn initialize(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> InitialNorms {
        let n = self.n();
        let [x_sum] = self.global_sum([sum_by(n, |i| x[i])]);
        let x_mean = x_sum / self.local.n_global.max(1) as f64;
        let mut halo = self.halo.borrow_mut();
        self.comm
            .exchange(&self.local.neighbours, x, &mut halo, &mut || {});
        let (mut residual, mut norm) = (0.0, 0.0);
        for i in 0..n {
            let ax = self.row_times(i, x, &halo);
            let a_xbar = self.row_sums[i] * x_mean;
            r[i] = b[i] - ax;
            residual += r[i].abs();
            norm += (ax - a_xbar).abs() + (b[i] - a_xbar).abs();
        }
        let [residual_sum, norm] = self.global_sum([residual, norm]);
        InitialNorms {
            residual_sum,
            norm_factor: norm + NORM_FACTOR_SMALL,
        }
    }

    fn precondition(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> f64 {
        self.precond.apply(r, z);
        self.global_sum([dot(r, z)])[0]
    }

    fn flexible_term(&self, z: &Vec<f64>, q: &Vec<f64>) -> Option<f64> {
        self.flexible.then(|| self.global_sum([dot(z, q)])[0])
    }

    fn update_direction(&self, beta: f64, z: &Vec<f64>, p: &mut Vec<f64>) {
        if beta == 0.0 {
            p.copy_from_slice(z);
        } else {
            for (p, z) in p.iter_mut().zip(z) {
                *p = z + beta * *p;
            }
        }
    }

    /// The interior rows are multiplied while the halo of p is in flight.
    fn apply_operator(&self, p: &Vec<f64>, q: &mut Vec<f64>) -> f64 {
        let (n_interior, n_owned) = (self.local.n_interior, self.local.n_owned);
        let mut halo = self.halo.borrow_mut();
        let (q_interior, q_boundary) = q.split_at_mut(n_interior);
        let mut interior = 0.0;
        self.comm
            .exchange(&self.local.neighbours, p, &mut halo, &mut || {
                interior = self.product(0..n_interior, p, &[], q_interior)
            });
        let boundary = self.product(n_interior..n_owned, p, &halo, q_boundary);
        self.global_sum([interior + boundary])[0]
    }

    fn update_solution(
        &self,
        alpha: f64,
        p: &Vec<f64>,
        q: &Vec<f64>,
        x: &mut Vec<f64>,
        r: &mut Vec<f64>,
    ) -> f64 {
        let mut residual = 0.0;
        for i in 0..x.len() {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
            residual += r[i].abs();
        }
        self.global_sum([residual])[0]
    }
}

/// The coarse space of a distributed PCG (fvSolution `deflation` in the
/// solver dictionary, case.toml `deflation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deflation {
    /// Block Jacobi alone.
    #[default]
    None,
    /// One deflation vector per rank: the indicator of its owned rows.
    Subdomains,
}

impl Deflation {
    pub const NAMES: &'static str = "none, subdomains";
}

impl FromStr for Deflation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "subdomains" => Ok(Self::Subdomains),
            other => Err(format!(
                "unknown deflation '{other}' (one of: {})",
                Self::NAMES
            )),
        }
    }
}

impl fmt::Display for Deflation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Subdomains => "subdomains",
        })
    }
}

/// Subdomain deflation over the ranks, on this rank's owned rows: Z's column
/// q is 1 on rank q's rows, so Zᵀv is each rank's sum of v (a global sum of
/// one value per rank), AZ has a nonzero in column q for a row coupled to a
/// row of rank q (the rank itself and its neighbours), and E = ZᵀAZ is the
/// ranks' sum of their rows of it, inverted on every rank
/// (`deflation::coarse_inverse`, the same bits everywhere).
pub struct RankDeflation<'a> {
    comm: &'a dyn Communicator,
    rank: usize,
    /// AZ of the owned rows: `az_ptr[i]..az_ptr[i + 1]` into `az` of
    /// (rank, Σ over that rank's columns of a_ij).
    az_ptr: Vec<usize>,
    az: Vec<(usize, f64)>,
    e: DMatrix<f64>,
    e_inverse: DMatrix<f64>,
    /// a = E⁻¹ Zᵀ v of the last `project`.
    correction: RefCell<Vec<f64>>,
}

impl<'a> RankDeflation<'a> {
    /// Collective: every rank calls it with its part of the matrix. An error
    /// (E not positive definite: A singular) is the same on every rank.
    pub fn new(local: &LocalMatrix, comm: &'a dyn Communicator) -> Result<Self, SolveError> {
        let (k, rank, n) = (comm.size(), comm.rank(), local.n_owned);
        // The rank of each local column (`recv` ranges are local slots).
        let mut owner = vec![rank; local.n_local()];
        for nb in &local.neighbours {
            owner[nb.recv.clone()].fill(nb.rank);
        }
        let (mut az_ptr, mut az) = (vec![0], Vec::new());
        let mut e = vec![0.0; k * k];
        for i in 0..n {
            let start = az.len();
            let (cols, vals) = local.matrix.row(i);
            for (&c, &v) in cols.iter().zip(vals) {
                let q = owner[c as usize];
                match az[start..].iter_mut().find(|(r, _)| *r == q) {
                    Some((_, sum)) => *sum += v,
                    None => az.push((q, v)),
                }
            }
            for &(q, v) in &az[start..] {
                e[rank * k + q] += v;
            }
            az_ptr.push(az.len());
        }
        comm.sum(&mut e);
        let e = DMatrix::from_row_slice(k, k, &e);
        let e_inverse = coarse_inverse(&e)?;
        Ok(Self {
            comm,
            rank,
            az_ptr,
            az,
            e,
            e_inverse,
            correction: RefCell::new(vec![0.0; k]),
        })
    }

    /// E = ZᵀAZ as summed over the ranks (the same on every rank).
    pub fn coarse_matrix(&self) -> &DMatrix<f64> {
        &self.e
    }
}

impl DeflationOps for RankDeflation<'_> {
    type Vector = Vec<f64>;

    fn project(&self, v: &mut Vec<f64>) {
        let k = self.comm.size();
        let mut c = vec![0.0; k];
        c[self.rank] = v.iter().sum();
        self.comm.sum(&mut c);
        let a: Vec<f64> = (0..k)
            .map(|p| (0..k).map(|q| self.e_inverse[(p, q)] * c[q]).sum())
            .collect();
        for (i, vi) in v.iter_mut().enumerate() {
            let row = &self.az[self.az_ptr[i]..self.az_ptr[i + 1]];
            *vi -= row.iter().map(|&(q, w)| w * a[q]).sum::<f64>();
        }
        *self.correction.borrow_mut() = a;
    }

    fn prolong_add(&self, s: f64, x: &mut Vec<f64>) {
        let shift = s * self.correction.borrow()[self.rank];
        x.iter_mut().for_each(|xi| *xi += shift);
    }

    fn dot(&self, a: &Vec<f64>, b: &Vec<f64>) -> f64 {
        let mut s = [dot(a, b)];
        self.comm.sum(&mut s);
        s[0]
    }

    fn sum_abs(&self, v: &Vec<f64>) -> f64 {
        let mut s = [v.iter().map(|x| x.abs()).sum()];
        self.comm.sum(&mut s);
        s[0]
    }
}

/// Solves the distributed system A x = b on this rank's rows with PCG and
/// block-Jacobi `preconditioner` (built on the owned block); `b` and `x` hold
/// the owned rows in local order. Every rank must call it; an error on one
/// rank (bad input, a preconditioner that cannot be built) is an error on
/// all of them.
pub fn solve_pcg_distributed(
    local: &LocalMatrix,
    comm: &dyn Communicator,
    preconditioner: impl Into<Preconditioner>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    solve_pcg_distributed_deflated(
        local,
        comm,
        preconditioner,
        Deflation::None,
        b,
        x,
        controls,
        field,
    )
}

/// [`solve_pcg_distributed`] with the coarse space `deflation`
/// ([`RankDeflation`] for [`Deflation::Subdomains`]).
#[allow(clippy::too_many_arguments)]
pub fn solve_pcg_distributed_deflated(
    local: &LocalMatrix,
    comm: &dyn Communicator,
    preconditioner: impl Into<Preconditioner>,
    deflation: Deflation,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let preconditioner = preconditioner.into();
    let block = local.owned_block();
    let setup = || -> Result<Box<dyn LinearOperator + '_>, SolveError> {
        if b.len() != local.n_owned || x.len() != local.n_owned {
            return Err(SolveError::SizeMismatch {
                what: "distributed right-hand side / initial guess",
                expected: local.n_owned,
                found: if b.len() != local.n_owned {
                    b.len()
                } else {
                    x.len()
                },
            });
        }
        check_finite("right-hand side b", b)?;
        check_finite("initial guess x", x)?;
        controls.validate()?;
        preconditioner.check()?;
        if preconditioner.ordering(&block).is_some() {
            return Err(SolveError::InvalidControls(format!(
                "{preconditioner} reorders the rows and cannot precondition a distributed \
                 solve; use jacobi, dic, ic0, sgs or another preconditioner without its own \
                 row ordering"
            )));
        }
        preconditioner.build(&block)
    };
    // Every rank learns whether one failed, so that none waits in PCG's
    // reductions for a rank that gave up.
    let precond = agreed(
        comm,
        setup(),
        |_| 1,
        |failure| {
            SolveError::InvalidControls(format!(
                "rank {} could not set up its part of the distributed solve: {}",
                failure.rank, failure.message
            ))
        },
    )?;
    let backend = DistributedBackend::new(local, comm, precond.as_ref())
        .flexible(preconditioner.is_flexible());
    let (b, mut x_work) = (b.to_vec(), x.to_vec());
    let perf = match deflation {
        Deflation::None => pcg(&backend, &b, &mut x_work, controls, field)?,
        Deflation::Subdomains => {
            let ops = RankDeflation::new(local, comm)?;
            let deflated = Deflated::new(&backend, &ops);
            deflated.correct_initial_guess(&b, &mut x_work)?;
            pcg(&deflated, &b, &mut x_work, controls, field)?
        }
    };
    x.copy_from_slice(&x_work);
    Ok(perf)
}
