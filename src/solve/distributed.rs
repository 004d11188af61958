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
//! their block versions, weaker as the rank count grows.

use std::cell::RefCell;

use super::cpu::{diagonal_slots, openfoam_row_sums, row_sum_by};
use super::error::check_finite;
use super::pcg::NORM_FACTOR_SMALL;
use super::reduce::{dot, sum_by};
use super::{
    pcg, CgBackend, InitialNorms, LinearOperator, Preconditioner, SolveError, SolverControls,
    SolverPerformance,
};
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
    let built = setup();
    // Every rank learns whether one failed, so that none waits in PCG's
    // reductions for a rank that gave up.
    let mut failed = vec![0.0; comm.size()];
    failed[comm.rank()] = f64::from(u8::from(built.is_err()));
    comm.merge(&mut failed);
    let precond = match built {
        Err(e) => return Err(e),
        Ok(_) if failed.iter().any(|&f| f != 0.0) => {
            let rank = failed.iter().position(|&f| f != 0.0).unwrap_or_default();
            return Err(SolveError::InvalidControls(format!(
                "rank {rank} could not set up its part of the distributed solve (its log \
                 says why)"
            )));
        }
        Ok(p) => p,
    };
    let backend = DistributedBackend::new(local, comm, precond.as_ref())
        .flexible(preconditioner.is_flexible());
    let mut x_work = x.to_vec();
    let perf = pcg(&backend, &b.to_vec(), &mut x_work, controls, field)?;
    x.copy_from_slice(&x_work);
    Ok(perf)
}
