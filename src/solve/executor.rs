//! The executor: where a solver's vectors live and where the basic steps on
//! them run. Every solver of `solve` is written once over an executor and
//! the fused steps its method adds (Ginkgo's executors with per-solver
//! kernels, Anzt et al. 2022):
//!
//! | method trait | steps it adds | written over it |
//! |---|---|---|
//! | `pcg::CgBackend` | precondition, direction, A p, update | `pcg::pcg` |
//! | `krylov::KrylovBackend` | residual, products with dots, Gram–Schmidt, BiCGStab updates | `gmres::gmres`, `bicgstab::bicgstab` |
//! | `smooth_solver::SmoothBackend` | sweeps (a GAMG V-cycle) | `smooth_solver::smooth_solve` |
//! | `eisenstat::EisenstatBackend` | the split-preconditioned CG iteration | `eisenstat::eisenstat_cg` |
//!
//! and `deflation::DeflationOps`, the coarse-space steps deflation adds to
//! the vectors of a `CgBackend` (its dot products and sums are the
//! executor's).
//!
//! Executors of the product: on the host `cpu::CpuBackend` (rayon, the
//! reference; also under `single_reduction::SingleReduction`,
//! `krylov::CpuKrylovBackend`, `smooth_solver::CpuSmoothing`,
//! `gamg::Gamg`, `eisenstat::CpuEisenstat`), one rank of a distributed run
//! `distributed::DistributedBackend` (and `DistributedKrylovBackend`); on a
//! GPU `gpu::pcg::GpuCgBackend` (also under `gpu::smooth::GpuSmoothing`,
//! `gpu::eisenstat::DeviceEisenstat`), `gpu::krylov::GpuKrylovBackend`, and
//! over several GPUs or ranks `gpu::multi::MultiGpuBackend`. Steps that run
//! on another executor unchanged name it ([`OnExecutor`]); adapters that
//! change a step (`deflation::Deflated` projects the initial residual,
//! `lanczos::Recorded` starts a new record) implement [`Executor`] and
//! forward the rest.
//!
//! Reductions (`initialize`, `dot`, `sum_abs`) are deterministic: the same
//! bits run to run, whatever the thread count; over ranks every rank gets
//! the same value.

use super::SolveError;

/// Norms of the initial residual r = b − A x.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InitialNorms {
    /// Σ |r_i|.
    pub residual_sum: f64,
    /// OpenFOAM's normFactor: Σ(|A x − A x̄| + |b − A x̄|) + 1e-20 with
    /// A x̄ = rowSum(A) · mean(x).
    pub norm_factor: f64,
}

impl InitialNorms {
    /// What an executor whose device failed reports (`device_status` says why).
    pub const NAN: Self = Self {
        residual_sum: f64::NAN,
        norm_factor: f64::NAN,
    };
}

/// Where vectors live and the steps every solver needs run (module
/// documentation). A method trait (`CgBackend`, `KrylovBackend`, ...)
/// extends it with the fused steps of its method.
///
/// A device executor does not return its errors from each step: a step
/// that fails records the failure, returns NaN (or a missing vector) and
/// later steps do nothing; [`Self::device_status`] reports it, and the
/// solvers check it after their reductions.
pub trait Executor {
    /// A vector of length [`Self::n`] where the executor keeps it.
    type Vector;
    /// The rows this executor holds (a rank's: its owned rows; over several
    /// ranks in one process: all of them).
    fn n(&self) -> usize;
    /// A zero vector of length n.
    fn new_vector(&self) -> Self::Vector;
    /// r = b − A x; returns Σ|r| and OpenFOAM's normFactor.
    fn initialize(&self, b: &Self::Vector, x: &Self::Vector, r: &mut Self::Vector) -> InitialNorms;
    /// a · b.
    fn dot(&self, a: &Self::Vector, b: &Self::Vector) -> f64;
    /// Σ |v_i|.
    fn sum_abs(&self, v: &Self::Vector) -> f64;
    /// A failure of the executor itself (a device error) since the last
    /// call; the CPU never fails.
    fn device_status(&self) -> Result<(), SolveError> {
        Ok(())
    }
    /// [`Self::new_vector`], a failure to allocate it (or an earlier
    /// device failure) returned as the error, for solvers that stop at once.
    fn checked_vector(&self) -> Result<Self::Vector, SolveError> {
        let v = self.new_vector();
        self.device_status()?;
        Ok(v)
    }
}

/// A method's steps that run on another executor, whose vectors, initial
/// residual, reductions and device status they use unchanged
/// (`CpuKrylovBackend` and `CpuSmoothing` on a `CpuBackend`,
/// `DeviceEisenstat` and `GpuSmoothing` on a `GpuCgBackend`, ...): they are
/// an [`Executor`] through it, with no forwarding of their own.
pub trait OnExecutor {
    type Inner: Executor;
    /// The executor the steps run on.
    fn executor(&self) -> &Self::Inner;
}

/// An [`Executor`]'s vectors and reductions (`n`, `new_vector`, `dot`,
/// `sum_abs`) passed on unchanged to the executor in field `$inner`, written
/// inside the `impl Executor` block of a wrapper that gives its own
/// initial residual (and, where it adds one, its own device status); a
/// wrapper that changes none of them is an [`OnExecutor`] instead.
macro_rules! vectors_and_reductions_of {
    ($inner:ident) => {
        fn n(&self) -> usize {
            self.$inner.n()
        }
        fn new_vector(&self) -> Self::Vector {
            self.$inner.new_vector()
        }
        fn dot(&self, a: &Self::Vector, b: &Self::Vector) -> f64 {
            self.$inner.dot(a, b)
        }
        fn sum_abs(&self, v: &Self::Vector) -> f64 {
            self.$inner.sum_abs(v)
        }
    };
}
pub(crate) use vectors_and_reductions_of;

impl<T: OnExecutor> Executor for T {
    type Vector = <T::Inner as Executor>::Vector;
    fn n(&self) -> usize {
        self.executor().n()
    }
    fn new_vector(&self) -> Self::Vector {
        self.executor().new_vector()
    }
    fn initialize(&self, b: &Self::Vector, x: &Self::Vector, r: &mut Self::Vector) -> InitialNorms {
        self.executor().initialize(b, x, r)
    }
    fn dot(&self, a: &Self::Vector, b: &Self::Vector) -> f64 {
        self.executor().dot(a, b)
    }
    fn sum_abs(&self, v: &Self::Vector) -> f64 {
        self.executor().sum_abs(v)
    }
    fn device_status(&self) -> Result<(), SolveError> {
        self.executor().device_status()
    }
    fn checked_vector(&self) -> Result<Self::Vector, SolveError> {
        self.executor().checked_vector()
    }
}
