//! PCG over ranks: the [`CgBackend`] of one rank's rows of a
//! distributed matrix ([`LocalMatrix`]) with a [`Communicator`]. The PCG loop
//! is `pcg::pcg`, unchanged: A p needs the halo of p (exchanged while the
//! owned block is multiplied), dot products and Σ|r| are summed over the
//! ranks, and OpenFOAM's normFactor takes the global mean of x. Every rank
//! gets the same scalars, so all ranks take the same decisions and stop at
//! the same iteration.
//!
//! The preconditioner is block Jacobi over ranks: any CPU preconditioner of
//! `solve::precond` built on the rank's owned block (halo couplings dropped).
//! Jacobi is the global Jacobi; DIC, IC(0), symmetric Gauss–Seidel... become
//! their block versions, weaker as the rank count grows; AMG (a distributed
//! GAMG) builds each rank's hierarchy on its owned block. The block is
//! factored and swept in ascending global row order, not in the local
//! `[interior | boundary]` order of the products: that is the order of an
//! OpenFOAM processor's cells (`decomposePar` keeps them ascending), so
//! block DIC/FDIC is OpenFOAM's processor-local DIC and a run on OpenFOAM's
//! decomposition takes `mpirun -parallel`'s iterations. DIC, FDIC and DILU
//! keep their factor in global order and sweep the rows in that order at
//! their local places (`ic::PlacedDic`), reading r and writing z where the
//! backend holds them; the other order-dependent preconditioners gather r
//! into global order and scatter z back at each application
//! ([`InGlobalOrder`]), with the same bits.
//!
//! PBiCGStab runs over the ranks too: `bicgstab::bicgstab` over
//! [`DistributedKrylovBackend`], OpenFOAM's `-parallel` PBiCGStab steps.
//!
//! Subdomain deflation ([`Deflation::Subdomains`], Nicolaides; Frank & Vuik)
//! adds a coarse space of one vector per rank, the indicator of its owned
//! rows, and so takes out the smallest eigenvalues that block Jacobi leaves
//! as the rank count grows: [`RankDeflation`] is `solve::deflation`'s
//! [`DeflationOps`] over the ranks (AZ of the rank's rows, [`RankColumns`];
//! E = ZᵀAZ summed over the ranks and inverted on each, [`RankCoarse`]), run
//! through the same `Deflated` adapter (`deflation::deflated_pcg`) as the
//! serial deflated PCG. GPU ranks run the same steps on the device
//! (`gpu::multi::MultiGpuDeflation`, from the same [`RankColumns`] and
//! [`RankCoarse`]).

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use nalgebra::DMatrix;

use super::bicgstab::bicgstab;
use super::checks::{check_size, check_values, on_copies};
use super::deflation::{coarse_inverse, deflated_pcg, DeflationOps};
use super::ic::Dic;
use super::ilu::dilu;
use super::krylov::KrylovBackend;
use super::pcg::NORM_FACTOR_SMALL;
use super::reduce::{dot, sum_by};
use super::row_sums::openfoam_row_sums;
use super::split::SplitMatrix;
use super::{
    pcg, CgBackend, Executor, InitialNorms, LinearOperator, OnExecutor, Preconditioner,
    PreconditionerKind, SolveError, SolverControls, SolverPerformance,
};
use crate::parallel::collective::agreed;
use crate::parallel::{Communicator, HaloExchange};
use crate::sparse::distribute::LocalMatrix;
use crate::sparse::{Csr, Permutation};

/// A preconditioner of a rank's owned block built and applied in ascending
/// global row order, seen from the local order: z = Pᵀ M⁻¹ P r with P the
/// local → ascending-global permutation. Row-order dependent preconditioners
/// (Gauss–Seidel's sweeps, AMG's aggregation) then do what a processor of a
/// `decomposePar` case does. DIC, FDIC and DILU do it without the two
/// passes per application (`ic::PlacedDic`); this is the fallback of the
/// others.
pub struct InGlobalOrder<'a> {
    order: Permutation,
    inner: Box<dyn LinearOperator + 'a>,
    /// (P r, M⁻¹ P r), reused between applications.
    scratch: Mutex<(Vec<f64>, Vec<f64>)>,
}

impl<'a> InGlobalOrder<'a> {
    /// The permutation that lists `local`'s owned rows by ascending global
    /// row, and the owned block in that order, or `None` when the local
    /// order is already ascending.
    pub fn block_of(local: &LocalMatrix) -> (Option<Permutation>, Csr) {
        let block = local.owned_block();
        let owned = &local.global[..local.n_owned];
        if owned.windows(2).all(|w| w[0] < w[1]) {
            return (None, block);
        }
        let mut new_to_old: Vec<u32> = (0..local.n_owned as u32).collect();
        new_to_old.sort_by_key(|&l| owned[l as usize]);
        let order = Permutation::from_new_to_old(new_to_old).expect("owned rows listed once");
        let in_order = order.apply_symmetric(&block);
        (Some(order), in_order)
    }

    pub fn new(order: Permutation, inner: Box<dyn LinearOperator + 'a>) -> Self {
        let n = order.len();
        Self {
            order,
            inner,
            scratch: Mutex::new((vec![0.0; n], vec![0.0; n])),
        }
    }
}

impl LinearOperator for InGlobalOrder<'_> {
    fn n(&self) -> usize {
        self.order.len()
    }

    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (r_ordered, z_ordered) = &mut *scratch;
        for (k, &l) in self.order.new_to_old().iter().enumerate() {
            r_ordered[k] = r[l as usize];
        }
        self.inner.apply(r_ordered, z_ordered);
        for (k, &l) in self.order.new_to_old().iter().enumerate() {
            z[l as usize] = z_ordered[k];
        }
    }
}

/// The halo couplings of a rank's boundary rows (local rows `n_interior..
/// n_owned`, the only ones with any): row `n_interior + k`'s are
/// `start[k]..start[k + 1]`, (halo slot, coefficient) by ascending column.
struct HaloCouplings {
    n_interior: usize,
    start: Vec<usize>,
    slots: Vec<u32>,
    values: Vec<f64>,
}

impl HaloCouplings {
    fn of(local: &LocalMatrix) -> Self {
        let n_owned = local.n_owned;
        let (mut start, mut slots, mut values) = (vec![0], Vec::new(), Vec::new());
        for r in local.n_interior..n_owned {
            let (cols, vals) = local.matrix.row(r);
            // Local columns ascend, the owned ones (< n_owned) first.
            let k = cols.partition_point(|&c| (c as usize) < n_owned);
            slots.extend(cols[k..].iter().map(|&c| c - n_owned as u32));
            values.extend_from_slice(&vals[k..]);
            start.push(slots.len());
        }
        Self {
            n_interior: local.n_interior,
            start,
            slots,
            values,
        }
    }

    /// `sum` + Σ a_rc halo_c over boundary row r's halo entries, left to
    /// right: after the owned entries, as the CSR row holds them.
    #[inline]
    fn add_to(&self, r: usize, mut sum: f64, halo: &[f64]) -> f64 {
        let k = r - self.n_interior;
        for e in self.start[k]..self.start[k + 1] {
            sum += self.values[e] * halo[self.slots[e] as usize];
        }
        sum
    }
}

/// PCG steps on one rank's owned rows; vectors hold the owned rows (local
/// order), the halo of x and p lives in the backend.
///
/// A p is the owned block's product ([`SplitMatrix`], on the rank's thread:
/// over the upper triangle alone for a symmetric block, each off-diagonal
/// read once, as the serial CPU product and an OpenFOAM processor's face
/// loop), taken while the halo of p travels, then the halo couplings added
/// to the boundary rows, as an OpenFOAM processor adds its processor
/// patches' after its own faces. Each row's terms are added in the order of
/// its CSR row (diagonal, lower, upper, halo), so the bits are those of the
/// row-by-row product.
pub struct DistributedBackend<'a> {
    local: &'a LocalMatrix,
    comm: &'a dyn Communicator,
    precond: &'a dyn LinearOperator,
    /// The owned block A_oo (local order).
    owned: SplitMatrix,
    /// A_oh by boundary rows.
    couplings: HaloCouplings,
    /// rowSum of the owned rows (halo couplings included).
    row_sums: Vec<f64>,
    /// Halo values of the vector last exchanged.
    halo: RefCell<Vec<f64>>,
    flexible: bool,
    /// The preconditioner's name in the log line ([`Self::named`]).
    name: Option<&'static str>,
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
            owned: SplitMatrix::new(&local.owned_block()),
            couplings: HaloCouplings::of(local),
            row_sums: openfoam_row_sums(&local.matrix),
            halo: RefCell::new(vec![0.0; local.n_halo()]),
            flexible: false,
            name: None,
        }
    }

    /// This backend, its preconditioner named `name` in the log line.
    pub fn named(self, name: Option<&'static str>) -> Self {
        Self { name, ..self }
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

    /// q = A p over the owned rows, the owned block multiplied while the
    /// halo of p is in flight; returns this rank's part of p · q (the
    /// interior rows' sum, then the boundary rows' added to it).
    fn times(&self, p: &[f64], q: &mut [f64]) -> f64 {
        let n_interior = self.local.n_interior;
        let mut halo = self.halo.borrow_mut();
        let mut interior = 0.0;
        self.comm.exchange(
            HaloExchange::new(&self.local.neighbours, p, &mut halo),
            &mut || {
                self.owned.apply_on_this_thread(p, q, |i, qi| {
                    if i < n_interior {
                        interior += p[i] * qi;
                    }
                })
            },
        );
        let mut boundary = 0.0;
        for r in n_interior..self.local.n_owned {
            q[r] = self.couplings.add_to(r, q[r], &halo);
            boundary += p[r] * q[r];
        }
        interior + boundary
    }
}

impl Executor for DistributedBackend<'_> {
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
        // A x into r first.
        self.times(x, r);
        let (mut residual, mut norm) = (0.0, 0.0);
        for i in 0..n {
            let ax = r[i];
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

    /// The rank's part, summed over the ranks.
    fn dot(&self, a: &Vec<f64>, b: &Vec<f64>) -> f64 {
        self.global_sum([dot(a, b)])[0]
    }

    /// The rank's part (summed in row order), summed over the ranks.
    fn sum_abs(&self, v: &Vec<f64>) -> f64 {
        self.global_sum([v.iter().map(|x| x.abs()).sum()])[0]
    }
}

impl CgBackend for DistributedBackend<'_> {
    fn precondition(&self, r: &Vec<f64>, z: &mut Vec<f64>) -> f64 {
        self.precond.apply(r, z);
        self.global_sum([dot(r, z)])[0]
    }

    fn flexible_term(&self, z: &Vec<f64>, q: &Vec<f64>) -> Option<f64> {
        self.flexible.then(|| self.global_sum([dot(z, q)])[0])
    }

    fn preconditioner_name(&self) -> Option<&'static str> {
        self.name
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

    fn apply_operator(&self, p: &Vec<f64>, q: &mut Vec<f64>) -> f64 {
        self.global_sum([self.times(p, q)])[0]
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

/// AZ of one rank's owned rows for subdomain deflation over the ranks: Z's
/// column q is 1 on rank q's rows, so row i of AZ has a nonzero in column q
/// for each rank q whose rows row i couples to (the rank itself and its
/// neighbours): the sum of a_ij over q's columns j, in the row's column
/// order. The rank's own column comes first in every row (a zero where the
/// row has no owned column), then the others in order of first appearance.
/// The CPU ranks ([`RankDeflation`]) and the GPU ranks
/// (`gpu::multi::MultiGpuDeflation`, which keeps it on the device) use it
/// as built here.
#[derive(Clone, Debug, PartialEq)]
pub struct RankColumns {
    rank: usize,
    /// Row i is `entries[ptr[i]..ptr[i + 1]]`: (rank q, Σ over q's columns).
    ptr: Vec<usize>,
    entries: Vec<(usize, f64)>,
}

impl RankColumns {
    /// AZ of `local`'s owned rows.
    pub fn of(local: &LocalMatrix) -> Self {
        let rank = local.rank;
        // The rank of each local column (`recv` ranges are local slots).
        let mut owner = vec![rank; local.n_local()];
        for nb in &local.neighbours {
            owner[nb.recv.clone()].fill(nb.rank);
        }
        let (mut ptr, mut entries) = (vec![0], Vec::new());
        for i in 0..local.n_owned {
            let start = entries.len();
            entries.push((rank, 0.0));
            let (cols, vals) = local.matrix.row(i);
            for (&c, &v) in cols.iter().zip(vals) {
                let q = owner[c as usize];
                match entries[start..].iter_mut().find(|(r, _)| *r == q) {
                    Some((_, sum)) => *sum += v,
                    None => entries.push((q, v)),
                }
            }
            ptr.push(entries.len());
        }
        Self { rank, ptr, entries }
    }

    /// The rank whose rows these are.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Owned rows.
    pub fn n_rows(&self) -> usize {
        self.ptr.len() - 1
    }
    /// Row i: (rank q, (AZ)_iq), the rank's own first.
    pub fn row(&self, i: usize) -> &[(usize, f64)] {
        &self.entries[self.ptr[i]..self.ptr[i + 1]]
    }
    /// The most ranks one row couples to (at least 1).
    pub fn width(&self) -> usize {
        self.ptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1)
    }
    /// (P v)_i = v_i − (AZ a)_i for a = E⁻¹ Zᵀ v.
    fn subtract(&self, a: &[f64], v: &mut [f64]) {
        for (i, vi) in v.iter_mut().enumerate() {
            *vi -= self.row(i).iter().map(|&(q, w)| w * a[q]).sum::<f64>();
        }
    }
}

/// The coarse matrix E = ZᵀAZ of subdomain deflation over `k` ranks, the
/// sum of every rank's rows of it, and its inverse
/// (`deflation::coarse_inverse`): the same bits on every rank.
#[derive(Clone, Debug)]
pub struct RankCoarse {
    e: DMatrix<f64>,
    e_inverse: DMatrix<f64>,
}

impl RankCoarse {
    /// Collective: E's rows of the ranks in `columns` (a rank of a
    /// distributed run: its own; one process holding all `k` ranks: all of
    /// them) summed over the processes by `comm`. An error (E not positive
    /// definite: A singular) is the same on every rank.
    pub fn new(
        columns: &[&RankColumns],
        k: usize,
        comm: &dyn Communicator,
    ) -> Result<Self, SolveError> {
        let mut e = vec![0.0; k * k];
        for c in columns {
            for i in 0..c.n_rows() {
                for &(q, v) in c.row(i) {
                    e[c.rank * k + q] += v;
                }
            }
        }
        comm.sum(&mut e);
        let e = DMatrix::from_row_slice(k, k, &e);
        let e_inverse = coarse_inverse(&e)?;
        Ok(Self { e, e_inverse })
    }

    /// k, the number of ranks.
    pub fn size(&self) -> usize {
        self.e.nrows()
    }

    /// E = ZᵀAZ as summed over the ranks (before symmetrisation).
    pub fn matrix(&self) -> &DMatrix<f64> {
        &self.e
    }

    /// a = E⁻¹ Zᵀ v from `c`, this process's ranks' sums of v at their
    /// ranks (zero elsewhere), summed over the processes first (collective).
    pub fn correction(&self, comm: &dyn Communicator, mut c: Vec<f64>) -> Vec<f64> {
        comm.sum(&mut c);
        let k = self.size();
        (0..k)
            .map(|p| (0..k).map(|q| self.e_inverse[(p, q)] * c[q]).sum())
            .collect()
    }
}

/// Subdomain deflation over the ranks on this rank's owned rows (CPU):
/// Zᵀv is each rank's sum of v (a global sum of one value per rank), AZ by
/// rows ([`RankColumns`]), E⁻¹ on every rank ([`RankCoarse`]).
pub struct RankDeflation<'a> {
    comm: &'a dyn Communicator,
    columns: RankColumns,
    coarse: RankCoarse,
    /// a = E⁻¹ Zᵀ v of the last `project`.
    correction: RefCell<Vec<f64>>,
}

impl<'a> RankDeflation<'a> {
    /// Collective: every rank calls it with its part of the matrix. An error
    /// (E not positive definite: A singular) is the same on every rank.
    pub fn new(local: &LocalMatrix, comm: &'a dyn Communicator) -> Result<Self, SolveError> {
        let columns = RankColumns::of(local);
        let coarse = RankCoarse::new(&[&columns], comm.size(), comm)?;
        Ok(Self {
            comm,
            correction: RefCell::new(vec![0.0; coarse.size()]),
            columns,
            coarse,
        })
    }

    /// E = ZᵀAZ as summed over the ranks (the same on every rank).
    pub fn coarse_matrix(&self) -> &DMatrix<f64> {
        self.coarse.matrix()
    }
}

impl DeflationOps<Vec<f64>> for RankDeflation<'_> {
    fn project(&self, v: &mut Vec<f64>) {
        let mut c = vec![0.0; self.coarse.size()];
        c[self.columns.rank] = v.iter().sum();
        let a = self.coarse.correction(self.comm, c);
        self.columns.subtract(&a, v);
        *self.correction.borrow_mut() = a;
    }

    fn prolong_add(&self, s: f64, x: &mut Vec<f64>) {
        let shift = s * self.correction.borrow()[self.columns.rank];
        x.iter_mut().for_each(|xi| *xi += shift);
    }
}

/// Collective: every rank learns whether one failed its part of a set-up,
/// so that none waits in a later reduction for a rank that gave up. Returns
/// this rank's result, or (on the others) an error naming the first rank
/// that failed with its message.
pub fn agree<T>(comm: &dyn Communicator, built: Result<T, SolveError>) -> Result<T, SolveError> {
    agreed(
        comm,
        built,
        |_| 1,
        |failure| {
            SolveError::InvalidControls(format!(
                "rank {} could not set up its part of the distributed solve: {}",
                failure.rank, failure.message
            ))
        },
    )
}

/// Checks the rank's inputs and builds `preconditioner` on its owned block
/// (`block`, in the row order of `order`: [`InGlobalOrder::block_of`]).
/// `symmetric`: for PCG (symmetric preconditioners only).
#[allow(clippy::too_many_arguments)]
fn block_preconditioner<'a>(
    local: &LocalMatrix,
    preconditioner: &Preconditioner,
    order: Option<Permutation>,
    block: &'a Csr,
    b: &[f64],
    x: &[f64],
    controls: &SolverControls,
    symmetric: bool,
) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
    for found in [b.len(), x.len()] {
        check_size(
            "distributed right-hand side / initial guess",
            local.n_owned,
            found,
        )?;
    }
    check_values(b, x, controls)?;
    match symmetric {
        true => preconditioner.check()?,
        false => preconditioner.validate()?,
    }
    if preconditioner.ordering(block).is_some() {
        return Err(SolveError::InvalidControls(format!(
            "{preconditioner} reorders the rows and cannot precondition a distributed \
             solve; use jacobi, dic, ic0, sgs or another preconditioner without its own \
             row ordering"
        )));
    }
    Ok(match order {
        Some(order) => in_global_order(preconditioner, order, block)?,
        None => preconditioner.build(block)?,
    })
}

/// `preconditioner` built on `block` (the owned block in ascending global
/// row order) and applied to vectors in the local order, `order` listing
/// the local row of each global-order row. DIC, FDIC and DILU sweep the
/// rows in global order at their local places ([`Dic::in_vector_order`]):
/// the bits of [`InGlobalOrder`] without its gather of r and scatter of z
/// at every application. The others go through [`InGlobalOrder`].
fn in_global_order<'a>(
    preconditioner: &Preconditioner,
    order: Permutation,
    block: &'a Csr,
) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
    Ok(match preconditioner {
        Preconditioner::Kind(PreconditionerKind::Dic) => {
            Box::new(Dic::new(block)?.in_vector_order(&order))
        }
        Preconditioner::Kind(PreconditionerKind::Dilu) => {
            Box::new(dilu(block)?.in_vector_order(&order))
        }
        _ => Box::new(InGlobalOrder::new(order, preconditioner.build(block)?)),
    })
}

/// Builds `preconditioner` on the rank's owned block in global order (every
/// rank agreeing that each could), then runs `solve` with it on copies of
/// `b` and `x` and writes the solution back into `x`.
#[allow(clippy::too_many_arguments)]
fn with_block_preconditioner(
    local: &LocalMatrix,
    comm: &dyn Communicator,
    preconditioner: &Preconditioner,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    symmetric: bool,
    solve: impl FnOnce(
        &dyn LinearOperator,
        &Vec<f64>,
        &mut Vec<f64>,
    ) -> Result<SolverPerformance, SolveError>,
) -> Result<SolverPerformance, SolveError> {
    // Jacobi and none do not depend on the row order: no permutation.
    let order_free = matches!(
        preconditioner,
        Preconditioner::Kind(PreconditionerKind::None | PreconditionerKind::Jacobi)
    );
    let (order, block) = match order_free {
        true => (None, local.owned_block()),
        false => InGlobalOrder::block_of(local),
    };
    let precond = agree(
        comm,
        block_preconditioner(
            local,
            preconditioner,
            order,
            &block,
            b,
            x,
            controls,
            symmetric,
        ),
    )?;
    on_copies(b, x, |b, x| solve(precond.as_ref(), b, x))
}

/// Solves the distributed system A x = b on this rank's rows with PCG and
/// block-Jacobi `preconditioner` (built on the owned block), with the coarse
/// space `deflation` ([`RankDeflation`] for [`Deflation::Subdomains`]); `b`
/// and `x` hold the owned rows in local order. Every rank must call it; an
/// error on one rank (bad input, a preconditioner that cannot be built) is an
/// error on all of them.
#[allow(clippy::too_many_arguments)]
pub fn solve_pcg_distributed(
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
    with_block_preconditioner(
        local,
        comm,
        &preconditioner,
        b,
        x,
        controls,
        true,
        |precond, b, x| {
            let backend = DistributedBackend::new(local, comm, precond)
                .flexible(preconditioner.is_flexible())
                .named(preconditioner.log_name());
            match deflation {
                Deflation::None => pcg(&backend, b, x, controls, field),
                Deflation::Subdomains => {
                    let ops = RankDeflation::new(local, comm)?;
                    Ok(deflated_pcg(&backend, &ops, b, x, controls, field)?.0)
                }
            }
        },
    )
}

/// PBiCGStab's steps ([`KrylovBackend`]) on one rank's owned rows: the
/// products exchange the halo as PCG's do, and every dot product and Σ|r| is
/// a sum over the ranks, as OpenFOAM's `gSumProd`/`gSumMag` in a `-parallel`
/// run; the preconditioner is the block one (block DIC/DILU in global order).
pub struct DistributedKrylovBackend<'a> {
    cg: DistributedBackend<'a>,
}

impl<'a> DistributedKrylovBackend<'a> {
    pub fn new(
        local: &'a LocalMatrix,
        comm: &'a dyn Communicator,
        precond: &'a dyn LinearOperator,
    ) -> Self {
        Self {
            cg: DistributedBackend::new(local, comm, precond),
        }
    }

    /// This backend, its preconditioner named `name` in the log line.
    pub fn named(self, name: Option<&'static str>) -> Self {
        Self {
            cg: self.cg.named(name),
        }
    }

    fn sums<const K: usize>(&self, values: [f64; K]) -> [f64; K] {
        self.cg.global_sum(values)
    }
}

/// The PCG backend's executor.
impl<'a> OnExecutor for DistributedKrylovBackend<'a> {
    type Inner = DistributedBackend<'a>;
    fn executor(&self) -> &DistributedBackend<'a> {
        &self.cg
    }
}

impl KrylovBackend for DistributedKrylovBackend<'_> {
    fn preconditioner_name(&self) -> Option<&'static str> {
        self.cg.name
    }

    fn residual(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> (f64, f64) {
        self.cg.times(x, r);
        let (mut abs, mut squares) = (0.0, 0.0);
        for (r, b) in r.iter_mut().zip(b) {
            *r = b - *r;
            abs += r.abs();
            squares += *r * *r;
        }
        let [abs, squares] = self.sums([abs, squares]);
        (abs, squares)
    }

    fn precondition(&self, v: &Vec<f64>, z: &mut Vec<f64>) {
        self.cg.precond.apply(v, z);
    }

    fn apply_operator(&self, v: &Vec<f64>, y: &mut Vec<f64>, w: Option<&Vec<f64>>) -> (f64, f64) {
        self.cg.times(v, y);
        let yy = dot(y, y);
        let [yw, yy] = self.sums([w.map_or(yy, |w| dot(y, w)), yy]);
        (yw, yy)
    }

    fn scale(&self, alpha: f64, x: &Vec<f64>, y: &mut Vec<f64>) {
        for (y, x) in y.iter_mut().zip(x) {
            *y = alpha * x;
        }
    }

    fn axpy_dot(&self, alpha: f64, x: &Vec<f64>, y: &mut Vec<f64>, w: Option<&Vec<f64>>) -> f64 {
        for (y, x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
        self.sums([dot(y, w.unwrap_or(y))])[0]
    }

    fn multi_dot(&self, vs: &[&Vec<f64>], w: &Vec<f64>) -> Vec<f64> {
        let mut dots: Vec<f64> = vs.iter().map(|v| dot(v, w)).collect();
        self.cg.comm.sum(&mut dots);
        dots
    }

    fn multi_axpy(&self, c: &[f64], vs: &[&Vec<f64>], y: &mut Vec<f64>) -> f64 {
        assert_eq!(c.len(), vs.len(), "multi_axpy: coefficients");
        for (i, y) in y.iter_mut().enumerate() {
            for (c, v) in c.iter().zip(vs) {
                *y += c * v[i];
            }
        }
        self.sums([dot(y, y)])[0]
    }

    fn bicg_direction(&self, beta: f64, omega: f64, r: &Vec<f64>, v: &Vec<f64>, p: &mut Vec<f64>) {
        if beta == 0.0 {
            p.copy_from_slice(r);
        } else {
            for (i, p) in p.iter_mut().enumerate() {
                *p = r[i] + beta * (*p - omega * v[i]);
            }
        }
    }

    fn bicg_half(&self, alpha: f64, r: &Vec<f64>, v: &Vec<f64>, s: &mut Vec<f64>) -> f64 {
        let mut abs = 0.0;
        for (i, s) in s.iter_mut().enumerate() {
            *s = r[i] - alpha * v[i];
            abs += s.abs();
        }
        self.sums([abs])[0]
    }

    fn bicg_update(
        &self,
        alpha: f64,
        omega: f64,
        y: &Vec<f64>,
        z: &Vec<f64>,
        s: &Vec<f64>,
        t: &Vec<f64>,
        r0: &Vec<f64>,
        x: &mut Vec<f64>,
        r: &mut Vec<f64>,
    ) -> (f64, f64) {
        let (mut abs, mut rho) = (0.0, 0.0);
        for i in 0..x.len() {
            x[i] += alpha * y[i] + omega * z[i];
            r[i] = s[i] - omega * t[i];
            abs += r[i].abs();
            rho += r0[i] * r[i];
        }
        let [abs, rho] = self.sums([abs, rho]);
        (abs, rho)
    }
}

/// Solves the distributed system A x = b on this rank's rows with OpenFOAM's
/// PBiCGStab (`solve::bicgstab`) and block-Jacobi `preconditioner` (DIC,
/// DILU... on the owned block, in global row order): the steps of
/// `mpirun -parallel`'s PBiCGStab. Every rank must call it; an error on one
/// rank is an error on all of them.
pub fn solve_bicgstab_distributed(
    local: &LocalMatrix,
    comm: &dyn Communicator,
    preconditioner: impl Into<Preconditioner>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let preconditioner = preconditioner.into();
    with_block_preconditioner(
        local,
        comm,
        &preconditioner,
        b,
        x,
        controls,
        false,
        |precond, b, x| {
            let backend = DistributedKrylovBackend::new(local, comm, precond)
                .named(preconditioner.log_name());
            bicgstab(&backend, b, x, controls, field)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::distribute::Decomposition;
    use crate::sparse::testing::{bits, grid_laplacian, random_nonsymmetric, random_symmetric};

    /// Every rank's block preconditioner as the solves build it against the
    /// same preconditioner built on the global-order block and applied
    /// through [`InGlobalOrder`] (gather, apply, scatter): the same bits.
    fn check_blocks(a: &Csr, d: &Decomposition, preconditioner: Preconditioner, symmetric: bool) {
        let controls = SolverControls::absolute(1e-8, 100);
        let mut reordered = 0;
        for rank in 0..d.n_ranks() {
            let local = d.local(a, rank).unwrap();
            let n = local.n_owned;
            let (order, block) = InGlobalOrder::block_of(&local);
            reordered += order.is_some() as usize;
            let reference: Box<dyn LinearOperator> = match order.clone() {
                Some(order) => Box::new(InGlobalOrder::new(
                    order,
                    preconditioner.build(&block).unwrap(),
                )),
                None => preconditioner.build(&block).unwrap(),
            };
            let (b, x) = (vec![1.0; n], vec![0.0; n]);
            let built = block_preconditioner(
                &local,
                &preconditioner,
                order,
                &block,
                &b,
                &x,
                &controls,
                symmetric,
            )
            .unwrap();
            let r: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 113) as f64 / 17.0 - 3.0)
                .collect();
            let (mut z, mut z_reference) = (vec![f64::NAN; n], vec![f64::NAN; n]);
            built.apply(&r, &mut z);
            reference.apply(&r, &mut z_reference);
            assert_eq!(
                bits(&z),
                bits(&z_reference),
                "{preconditioner}, rank {rank} of {}",
                d.n_ranks()
            );
        }
        assert!(reordered > 0, "no rank needed the global order");
    }

    #[test]
    fn block_preconditioners_in_local_order_have_the_bits_of_the_global_order() {
        let grid = grid_laplacian(13, 11, 7);
        let spd = random_symmetric(600, 6, 7);
        let nonsymmetric = random_nonsymmetric(600, 6, 8);
        let n = grid.n_rows();
        let stripes = Decomposition::from_owners((0..n).map(|i| (i * 3 / n) as u32).collect(), 3);
        let layouts = [
            (&grid, Decomposition::metis(&grid, 2).unwrap()),
            (&grid, Decomposition::metis(&grid, 4).unwrap()),
            (&grid, stripes.unwrap()),
            (&spd, Decomposition::metis(&spd, 3).unwrap()),
        ];
        for (a, d) in &layouts {
            for kind in [PreconditionerKind::Dic, PreconditionerKind::SymGaussSeidel] {
                check_blocks(a, d, kind.into(), true);
            }
            check_blocks(a, d, PreconditionerKind::Dilu.into(), false);
        }
        let d = Decomposition::metis(&nonsymmetric, 3).unwrap();
        check_blocks(&nonsymmetric, &d, PreconditionerKind::Dilu.into(), false);
    }
}
