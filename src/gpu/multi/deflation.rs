//! Subdomain deflation over GPU ranks: `solve::distributed`'s
//! [`RankDeflation`](crate::solve::distributed::RankDeflation) on the
//! device, for a [`MultiGpuBackend`] (a rank of a distributed run,
//! `for_rank`, or all ranks in one process, `new`). One deflation vector per
//! rank, the indicator of its owned rows; the deflated PCG is
//! `solve::deflation::deflated_pcg` over the backend, as on the CPU ranks,
//! so the iterates are the CPU ranks' to round-off.
//!
//! Set-up (once, collective): each rank's AZ rows ([`RankColumns`], built on
//! the host from the rank's local system) uploaded as a column-major ELL of
//! width w (the most ranks one row couples to: the rank and its
//! neighbours), the rank's own column in slot 0 of every row; E = ZᵀAZ
//! summed over the ranks and inverted on each ([`RankCoarse`]).
//!
//! Per projection P v: each rank's Σ v (block partials, `reduce_partials`)
//! read back, the k sums all-reduced (one nonzero per rank) and a = E⁻¹ Zᵀ v
//! computed on the host (k = ranks, a few numbers), a uploaded, then
//! v −= (AZ) a on the device (`defl_subtract` of `kernels/deflation.cu`).
//! The prolongation x += s Z a is x += s a_rank on the rank's rows
//! (`defl_prolong_add`, whose per-row subdomain is the ELL's slot 0).
//! Dot products and Σ|v| are the backend's reductions. A device error is
//! recorded by the backend (its `device_status`).

use std::cell::RefCell;

use cudarc::driver::CudaSlice;

use super::{comm_of, MultiGpuBackend, MultiVector, Partials};
use crate::gpu::{GpuError, NULL, VECTOR_BLOCK};
use crate::solve::deflation::{deflated_pcg, DeflationOps};
use crate::solve::distributed::{agree, Deflation, RankCoarse, RankColumns};
use crate::solve::{pcg, SolveError, SolverControls, SolverPerformance};
use crate::sparse::distribute::Decomposition;
use crate::sparse::Csr;

/// One rank's AZ on its device.
struct RankAz {
    width: usize,
    /// Column-major n × w: slot j of row i at j n + i; -1 is padding.
    parts: CudaSlice<i32>,
    values: CudaSlice<f64>,
    /// a = E⁻¹ Zᵀ v of the last projection (k values).
    correction: RefCell<CudaSlice<f64>>,
}

/// [`DeflationOps`] of subdomain deflation over the ranks of a
/// [`MultiGpuBackend`] (module documentation).
pub struct MultiGpuDeflation<'b, 'g> {
    backend: &'b MultiGpuBackend<'g>,
    coarse: RankCoarse,
    /// Index-aligned with the backend's ranks.
    ranks: Vec<RankAz>,
}

impl<'b, 'g> MultiGpuDeflation<'b, 'g> {
    /// Deflation of `a` split by `d` over `backend`'s ranks (the backend
    /// built from the same `a` and `d`). Collective over the run's ranks: an
    /// error on one (e.g. out of device memory) is an error on all, as is a
    /// singular E.
    pub fn new(
        backend: &'b MultiGpuBackend<'g>,
        a: &Csr,
        d: &Decomposition,
    ) -> Result<Self, SolveError> {
        let comm = comm_of(backend);
        let columns = backend
            .ranks
            .iter()
            .map(|r| {
                let local = d.local(a, r.index).map_err(SolveError::InvalidControls)?;
                Ok(RankColumns::of(&local))
            })
            .collect::<Result<Vec<_>, SolveError>>();
        let uploaded = columns.and_then(|columns| {
            let ranks = backend
                .ranks
                .iter()
                .zip(&columns)
                .map(|(r, c)| upload(r.gpu, c, d.n_ranks()))
                .collect::<Result<Vec<_>, GpuError>>()?;
            Ok((columns, ranks))
        });
        let (columns, ranks) = agree(comm, uploaded)?;
        let refs: Vec<&RankColumns> = columns.iter().collect();
        let coarse = RankCoarse::new(&refs, d.n_ranks(), comm)?;
        Ok(Self {
            backend,
            coarse,
            ranks,
        })
    }

    /// The deflation of a case's `deflation` setting: [`Self::new`] for
    /// [`Deflation::Subdomains`], none for [`Deflation::None`].
    pub fn of_setting(
        backend: &'b MultiGpuBackend<'g>,
        a: &Csr,
        d: &Decomposition,
        deflation: Deflation,
    ) -> Result<Option<Self>, SolveError> {
        match deflation {
            Deflation::None => Ok(None),
            Deflation::Subdomains => Self::new(backend, a, d).map(Some),
        }
    }

    /// E = ZᵀAZ as summed over the ranks.
    pub fn coarse(&self) -> &RankCoarse {
        &self.coarse
    }

    /// v −= (AZ) a on every rank, a uploaded first.
    fn subtract(&self, a: &[f64], v: &MultiVector) -> Result<(), GpuError> {
        for (k, (r, az)) in self.backend.ranks.iter().zip(&self.ranks).enumerate() {
            let mut a_dev = az.correction.borrow_mut();
            r.gpu.write(a, &mut a_dev)?;
            let (n, w, x) = (r.n32(), az.width as i32, v.part(k)?);
            r.gpu
                .launch("defl_subtract", r.grid(), VECTOR_BLOCK, 0, |args| {
                    args.arg(&n).arg(&w).arg(&az.parts).arg(&az.values);
                    // No fused-loop state: the kernel always runs.
                    args.arg(&*a_dev).arg(x).arg(&NULL);
                })?;
        }
        Ok(())
    }
}

/// `c` as the device ELL of [`RankAz`], with room for `k` coarse values.
fn upload(gpu: &crate::gpu::Gpu, c: &RankColumns, k: usize) -> Result<RankAz, GpuError> {
    let (n, width) = (c.n_rows(), c.width());
    let mut parts = vec![-1i32; n * width];
    let mut values = vec![0.0; n * width];
    for i in 0..n {
        for (j, &(q, v)) in c.row(i).iter().enumerate() {
            parts[j * n + i] = q as i32;
            values[j * n + i] = v;
        }
    }
    Ok(RankAz {
        width,
        parts: gpu.upload(&parts)?,
        values: gpu.upload(&values)?,
        correction: RefCell::new(gpu.zeros(k)?),
    })
}

impl DeflationOps<MultiVector> for MultiGpuDeflation<'_, '_> {
    /// Zᵀ v is every rank's Σ v read back and summed over the processes
    /// (made, with NaN, even by a rank whose device failed), a = E⁻¹ Zᵀ v on
    /// the host, then v −= (AZ) a on the device.
    fn project(&self, v: &mut MultiVector) {
        let mut c = vec![0.0; self.coarse.size()];
        let sums = self
            .backend
            .failure
            .guarded(None, || self.backend.rank_sums(Partials::Sum(v)).map(Some));
        for (j, r) in self.backend.ranks.iter().enumerate() {
            c[r.index] = sums.as_ref().map_or(f64::NAN, |s| s[j]);
        }
        let a = self.coarse.correction(comm_of(self.backend), c);
        self.backend.failure.guarded((), || self.subtract(&a, v))
    }

    fn prolong_add(&self, s: f64, x: &mut MultiVector) {
        self.backend.failure.guarded((), || {
            for (k, (r, az)) in self.backend.ranks.iter().zip(&self.ranks).enumerate() {
                let (n, xv, a_dev) = (r.n32(), x.part(k)?, az.correction.borrow());
                // Slot 0 of the ELL: the rank's own index on every row.
                r.gpu
                    .launch("defl_prolong_add", r.grid(), VECTOR_BLOCK, 0, |a| {
                        a.arg(&n).arg(&s).arg(&az.parts).arg(&*a_dev).arg(xv);
                    })?;
            }
            Ok(())
        })
    }
}

/// PCG over `backend`'s ranks from the initial guess in `x`, deflated by
/// `deflation` when given (the initial guess corrected first, as on the CPU
/// ranks: `solve::deflation::deflated_pcg`). Collective.
pub fn pcg_over_ranks(
    backend: &MultiGpuBackend<'_>,
    deflation: Option<&MultiGpuDeflation>,
    b: &MultiVector,
    x: &mut MultiVector,
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    match deflation {
        None => pcg(backend, b, x, controls, field),
        Some(ops) => deflated_pcg(backend, ops, b, x, controls, field).map(|(perf, _)| perf),
    }
}
