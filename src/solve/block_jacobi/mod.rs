//! Block Jacobi (Wikberg 2024, §4.3): the CPU reference of the GPU kernel
//! `smooth_block` (`kernels/smooth.cu`, Wikberg's `smooth_kern`).
//!
//! Blocks are runs of `block_size` consecutive rows (on the GPU a mod-SELL
//! slice; the last block is padded with rows a_ii = 1, b_i = 0, x_i = 0). One
//! outer sweep, for each block l:
//! - the block residual (4.8) b_l − A_l x, in the kernel's order
//!   (b_i − a_ii x_i, then the off-diagonals by column);
//! - y ≈ A_ll⁻¹ (b − A x)_l by the inner solver from y = 0 (Jacobi damped by ω, warp-
//!   serialised Gauss–Seidel with Jacobi inside a warp, or CG), stopped at the
//!   relative inner tolerance or the step cap; a block with a zero residual is
//!   skipped (y = 0);
//! - x_l ← x_l + y (4.9).
//!
//! Block-IC (inner `DIC` or `IC0`, `blockDIC`/`blockIC`): the blocks are
//! solved by OpenFOAM's DIC or by IC(0) of the block-diagonal part of A
//! (`sparse::blocks::block_diagonal`), factorised once; as `solve::ic`'s
//! `Dic`/`Ic0` on that matrix, so M⁻¹ = (L D Lᵀ)⁻¹ block by block, symmetric.
//! The GPU factorises and sweeps each block inside one thread block
//! (`smooth_block`, `block_ic_factor`) in the same operation order, bit for bit.
//!
//! Synchronous: every block reads the x of the sweep's start (double buffer).
//! Asynchronous: the blocks update x in place; here in block order (block
//! Gauss–Seidel), on the GPU in whatever order the thread blocks run, so the
//! GPU's asynchronous iterates are not reproducible and are compared by their
//! convergence only.
//!
//! The reductions (‖r_l‖², p·Ap, …) are summed left to right here and by a
//! shuffle tree on the GPU: iterates agree to round-off, and a tolerance test
//! sitting on the threshold could go either way.
//!
//! Mixed precision ([`BlockJacobi::sweeps_from_zero`] in f32, the GPU's
//! `smooth_block_f32`): the same sweeps with the matrix rounded to f32, the
//! iterate, the block residual and the inner iterates in f32, b rounded to
//! f32; the reductions are still summed in f64 and the scalars they give
//! (CG's α, β) rounded to f32. In f64 these are exactly the sweeps above.

use super::from_str_by_name;

mod cpu;

pub use cpu::{BlockIc, BlockJacobi};

/// The solver of a block's local system in block Jacobi (Wikberg 2024, §4.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InnerSolver {
    /// Jacobi steps from 0 (the first gives D⁻¹ b).
    Jacobi,
    /// Forward Gauss–Seidel, serialised by warps of 32 rows with Jacobi inside
    /// a warp (the semantics of Wikberg's (2024) code).
    GaussSeidel,
    /// The same forward sweep followed by a backward one (warps in reverse):
    /// symmetric, for PCG.
    SymGaussSeidel,
    /// Conjugate gradients from 0.
    Cg,
    /// OpenFOAM's DIC of the block, factorised once (block-IC, `blockDIC`).
    Dic,
    /// IC(0) of the block, factorised once (block-IC, `blockIC`).
    Ic0,
}

impl InnerSolver {
    pub const ALL: [Self; 6] = [
        Self::Jacobi,
        Self::GaussSeidel,
        Self::SymGaussSeidel,
        Self::Cg,
        Self::Dic,
        Self::Ic0,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Self::Jacobi => "Jacobi",
            Self::GaussSeidel => "GaussSeidel",
            Self::SymGaussSeidel => "symGaussSeidel",
            Self::Cg => "CG",
            Self::Dic => "DIC",
            Self::Ic0 => "IC0",
        }
    }

    /// Whether the block is solved by an incomplete factorisation (one
    /// application, no inner steps or tolerance: block-IC).
    pub fn is_factorisation(self) -> bool {
        matches!(self, Self::Dic | Self::Ic0)
    }
}

from_str_by_name!(InnerSolver, "inner solver");

/// Block-Jacobi settings (Wikberg 2024, §4.3, §4.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockJacobiSettings {
    /// Rows per block: the mod-SELL slice height on the GPU (multiple of 32, ≤ 1024).
    pub block_size: usize,
    pub inner: InnerSolver,
    /// Stop the inner solve when ‖r_l‖₂ ≤ tolerance · ‖r_l⁰‖₂ on the block
    /// (relative, where Wikberg (2024) used 1e-15 on the absolute squared norm); 0
    /// runs exactly `inner_max_iter` steps (a fixed linear operator, unless CG).
    pub inner_tolerance: f64,
    /// Inner steps at most (Wikberg's (2024) 100).
    pub inner_max_iter: usize,
    /// Read and write x in place (block-asynchronous; on the host the blocks
    /// run in order, which is block Gauss–Seidel) instead of double-buffered.
    pub asynchronous: bool,
}

impl Default for BlockJacobiSettings {
    /// The smoother tests of Wikberg 2024, §4.4: H = 512, inner CG to tolerance or 100 steps.
    fn default() -> Self {
        Self {
            block_size: 512,
            inner: InnerSolver::Cg,
            inner_tolerance: 1e-8,
            inner_max_iter: 100,
            asynchronous: false,
        }
    }
}

/// Rows of a warp: the unit the inner Gauss–Seidel serialises.
pub const WARP: usize = 32;
