//! Smoothers: stationary iterations x ← x + M⁻¹(b − A x) (Wikberg 2024 Ch. 4),
//! used as solvers (OpenFOAM's `smoothSolver`, [`super::smooth_solver`]) and,
//! run from x = 0, as PCG preconditioners ([`SmootherPreconditioner`]).
//!
//! The CPU implementations here are the references of the GPU ones
//! (`gpu::smooth`, `kernels/smooth.cu`): the same row formulas in the same
//! operation order, so that the same colouring or block partition gives the
//! same iterates to round-off.
//! - Weighted Jacobi (§4.1, damping ω) and L1-Jacobi (Baker, Falgout, Kolev,
//!   Yang 2011: M = diag(a_ii + Σ_{j≠i} |a_ij|), convergent for any SPD A).
//! - Gauss–Seidel (§4.2): natural order (the sequential baseline, OpenFOAM's
//!   `GaussSeidel`/`symGaussSeidel`), or multicolour (§4.2.1) with a
//!   [`Colouring`]: colour by colour, rows of one colour in parallel.
//! - Block Jacobi (§4.3, [`super::block_jacobi`]).
//! - OpenFOAM's `DIC` and `DICGaussSeidel` smoothers (CPU only).
//! - Polynomial smoothers x ← x + s(D⁻¹A) D⁻¹ (b − A x) (`Neumann`,
//!   `Chebyshev`, `leastSquares`, [`super::polynomial`]; Zhang and Zhang 2013, §7.7):
//!   |1 − t s(t)| ≤ 1 on [0, b], small on the upper part of the spectrum.

use std::fmt;

use rayon::prelude::*;

use super::block_jacobi::BlockJacobi;
use super::colouring::Colouring;
use super::ic::Dic;
use super::polynomial::{PolynomialKind, PolynomialPreconditioner, PolynomialSettings};
use super::scalar::Precision;
use super::split::SplitMatrix;
use super::triangles::Triangles;
use super::{from_str_by_name, LinearOperator, SolveError};
use crate::foam::write::format_g;
use crate::sparse::blocks::grown_blocks;
use crate::sparse::ordering::reverse_cuthill_mckee;
use crate::sparse::{Csr, Permutation};

// Block Jacobi's settings and the smoother trait, kept at their old paths
// (they live in `block_jacobi` and `solve`).
pub use super::block_jacobi::{BlockJacobiSettings, InnerSolver};
pub use super::Smoother;

/// Direction of a Gauss–Seidel sweep. A symmetric sweep is a forward sweep
/// followed by a backward one (OpenFOAM's `symGaussSeidel`); as a
/// preconditioner from x = 0 it is SSOR with ω = 1, M = (D+L) D⁻¹ (D+U).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    Forward,
    Backward,
    Symmetric,
}

/// The row order of Gauss–Seidel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColouringKind {
    /// Row by row in the matrix order: sequential, CPU only.
    Natural,
    /// Multicolour, Jones–Plassmann colours (computed on the GPU there).
    JonesPlassmann,
    /// Multicolour, first-fit greedy colours in row order (computed on the host).
    Greedy,
}

impl ColouringKind {
    pub const ALL: [Self; 3] = [Self::Natural, Self::JonesPlassmann, Self::Greedy];
    pub fn name(self) -> &'static str {
        match self {
            Self::Natural => "natural",
            Self::JonesPlassmann => "JonesPlassmann",
            Self::Greedy => "greedy",
        }
    }
    /// The colouring of `a` (None for the natural order).
    pub fn colouring(self, a: &Csr) -> Option<Colouring> {
        match self {
            Self::Natural => None,
            Self::JonesPlassmann => Some(Colouring::jones_plassmann(a)),
            Self::Greedy => Some(Colouring::greedy(a)),
        }
    }
}

from_str_by_name!(ColouringKind, "colouring");

/// Which smoother.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmootherKind {
    Jacobi,
    L1Jacobi,
    GaussSeidel(Sweep),
    BlockJacobi,
    /// OpenFOAM's DIC smoother: x += M_DIC⁻¹ (b − A x).
    Dic,
    /// OpenFOAM's DICGaussSeidel: the DIC sweeps, then as many Gauss–Seidel sweeps.
    DicGaussSeidel,
    /// x += M⁻¹ (b − A x) with a polynomial preconditioner M⁻¹ (`SmootherSettings::polynomial`).
    Polynomial(PolynomialKind),
}

/// A smoother and its parameters, as `fvSolution`/`case.toml` give them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmootherSettings {
    pub kind: SmootherKind,
    /// Sweeps per application (OpenFOAM `nSweeps`; per residual check in smoothSolver).
    pub sweeps: usize,
    /// Jacobi damping ω (also of block Jacobi's inner Jacobi steps).
    pub omega: f64,
    /// Gauss–Seidel row order.
    pub colouring: ColouringKind,
    pub block: BlockJacobiSettings,
    /// The polynomial smoothers' degree, bound and precision (its kind is
    /// the one of `SmootherKind::Polynomial`); its `precision` is also
    /// block-IC's (the one `precision` key).
    pub polynomial: PolynomialSettings,
}

/// Smoother names: OpenFOAM's, ours, and the multicolour aliases.
const NAMES: [(&str, SmootherKind, Option<ColouringKind>); 17] = [
    ("Jacobi", SmootherKind::Jacobi, None),
    ("L1Jacobi", SmootherKind::L1Jacobi, None),
    (
        "GaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Forward),
        None,
    ),
    (
        "nonBlockingGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Forward),
        None,
    ),
    (
        "backwardGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Backward),
        None,
    ),
    (
        "symGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Symmetric),
        None,
    ),
    (
        "multicolourGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Forward),
        Some(ColouringKind::JonesPlassmann),
    ),
    (
        "multicolourBackwardGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Backward),
        Some(ColouringKind::JonesPlassmann),
    ),
    (
        "multicolourSymGaussSeidel",
        SmootherKind::GaussSeidel(Sweep::Symmetric),
        Some(ColouringKind::JonesPlassmann),
    ),
    ("blockJacobi", SmootherKind::BlockJacobi, None),
    ("DIC", SmootherKind::Dic, None),
    ("FDIC", SmootherKind::Dic, None),
    ("DICGaussSeidel", SmootherKind::DicGaussSeidel, None),
    ("FDICGaussSeidel", SmootherKind::DicGaussSeidel, None),
    (
        "Neumann",
        SmootherKind::Polynomial(PolynomialKind::Neumann),
        None,
    ),
    (
        "Chebyshev",
        SmootherKind::Polynomial(PolynomialKind::Chebyshev),
        None,
    ),
    (
        "leastSquares",
        SmootherKind::Polynomial(PolynomialKind::LeastSquares),
        None,
    ),
];

/// Block-IC (block Jacobi whose blocks are solved by an incomplete
/// Cholesky factorisation): `blockIC` is IC(0), `blockDIC` OpenFOAM's DIC.
pub const BLOCK_IC_NAMES: [(&str, InnerSolver); 2] = [
    ("blockIC", InnerSolver::Ic0),
    ("blockDIC", InnerSolver::Dic),
];

impl SmootherKind {
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|e| e.1 == self && e.2.is_none())
            .map(|e| e.0)
            .expect("every kind has a name")
    }
}

impl SmootherSettings {
    /// `kind` with default parameters: one sweep, ω = 1, natural order, the
    /// block settings of Wikberg 2024, §4.4.
    pub fn new(kind: SmootherKind) -> Self {
        Self {
            kind,
            sweeps: 1,
            omega: 1.0,
            colouring: ColouringKind::Natural,
            block: BlockJacobiSettings::default(),
            polynomial: PolynomialSettings::new(
                match kind {
                    SmootherKind::Polynomial(k) => k,
                    _ => PolynomialKind::LeastSquares,
                },
                4,
            ),
        }
    }

    /// Block Jacobi on blocks of `block_size` rows, each solved by
    /// `inner_max_iter` steps of `inner` (fewer where the block's residual
    /// falls by `inner_tolerance`), double-buffered; one sweep, no damping.
    pub fn block_jacobi(
        inner: InnerSolver,
        inner_tolerance: f64,
        inner_max_iter: usize,
        block_size: usize,
    ) -> Self {
        Self {
            block: BlockJacobiSettings {
                block_size,
                inner,
                inner_tolerance,
                inner_max_iter,
                asynchronous: false,
            },
            ..Self::new(SmootherKind::BlockJacobi)
        }
    }

    /// The settings of a smoother name (case-insensitive): `Jacobi`,
    /// `L1Jacobi`, `GaussSeidel`, `backwardGaussSeidel`, `symGaussSeidel`,
    /// their `multicolour…` forms (Jones–Plassmann colours), `blockJacobi`,
    /// `DIC`, `DICGaussSeidel` (and OpenFOAM's `FDIC…`, `nonBlockingGaussSeidel`).
    pub fn named(name: &str) -> Result<Self, String> {
        for (alias, inner) in BLOCK_IC_NAMES {
            if alias.eq_ignore_ascii_case(name) {
                let mut s = Self::new(SmootherKind::BlockJacobi);
                s.block.inner = inner;
                return Ok(s);
            }
        }
        let (_, kind, colouring) = NAMES
            .iter()
            .find(|e| e.0.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<_> = NAMES
                    .iter()
                    .map(|e| e.0)
                    .chain(BLOCK_IC_NAMES.iter().map(|e| e.0))
                    .collect();
                format!(
                    "unknown smoother '{name}' (choose one of {})",
                    names.join(", ")
                )
            })?;
        let mut s = Self::new(*kind);
        if let Some(c) = colouring {
            s.colouring = *c;
        }
        Ok(s)
    }

    /// Checks the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.sweeps == 0 {
            return Err("nSweeps must be at least 1".into());
        }
        if !(self.omega.is_finite() && self.omega > 0.0 && self.omega <= 2.0) {
            return Err(format!(
                "omega (Jacobi damping) must be in (0, 2], got {}",
                self.omega
            ));
        }
        let b = &self.block;
        if b.block_size == 0 || !b.block_size.is_multiple_of(32) || b.block_size > 1024 {
            return Err(format!(
                "blockSize must be a multiple of 32 between 32 and 1024, got {}",
                b.block_size
            ));
        }
        if b.inner_max_iter == 0 {
            return Err("innerMaxIter must be at least 1".into());
        }
        if !(b.inner_tolerance.is_finite() && b.inner_tolerance >= 0.0) {
            return Err(format!(
                "innerTolerance must be a finite number >= 0, got {}",
                b.inner_tolerance
            ));
        }
        if b.asynchronous && b.inner.is_factorisation() {
            return Err(format!(
                "block-IC (inner {}) is synchronous only; set asynchronous false",
                b.inner.name()
            ));
        }
        match self.kind {
            SmootherKind::Polynomial(kind) => PolynomialSettings {
                kind,
                ..self.polynomial
            }
            .validate(),
            _ if self.polynomial.precision == Precision::Mixed && !self.has_mixed_precision() => {
                Err(format!(
                    "precision mixed is available for the polynomial smoothers, block-IC \
                     (blockIC, blockDIC) and (as PCG preconditioners on the GPU) Jacobi, L1Jacobi, \
                     multicolour Gauss-Seidel and blockJacobi, not for {}",
                    self.kind.name()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether `precision mixed` (`polynomial.precision`) applies: the
    /// polynomials and block-IC run an f32 copy on the GPU; Jacobi, L1
    /// Jacobi, multicolour Gauss–Seidel and block Jacobi as PCG
    /// preconditioners (sweeps from zero) on the GPU.
    pub fn has_mixed_precision(&self) -> bool {
        match self.kind {
            SmootherKind::Polynomial(_) | SmootherKind::Jacobi | SmootherKind::L1Jacobi => true,
            // Multicolour on the GPU (natural order runs multicolour there too).
            SmootherKind::GaussSeidel(_) => true,
            SmootherKind::BlockJacobi => true,
            _ => false,
        }
    }

    /// The block-IC name (`blockIC`, `blockDIC`) of block Jacobi with an
    /// incomplete-Cholesky inner solve.
    pub fn block_ic_name(&self) -> Option<&'static str> {
        (self.kind == SmootherKind::BlockJacobi)
            .then(|| BLOCK_IC_NAMES.iter().find(|e| e.1 == self.block.inner))
            .flatten()
            .map(|e| e.0)
    }

    /// Whether sweeps from x = 0 are a fixed linear map of b. Block Jacobi
    /// with an inner CG, or with an inner tolerance, is not (flexible PCG).
    pub fn is_linear(&self) -> bool {
        self.kind != SmootherKind::BlockJacobi
            || self.block.inner.is_factorisation()
            || (self.block.inner != InnerSolver::Cg && self.block.inner_tolerance == 0.0)
    }

    /// Whether the smoother needs a symmetric matrix: the incomplete
    /// Cholesky ones, and block Jacobi with an inner CG. Point Jacobi and
    /// Gauss–Seidel need only a positive diagonal (and converge on
    /// diagonally dominant matrices, such as relaxed momentum equations).
    pub fn needs_symmetric_matrix(&self) -> bool {
        match self.kind {
            SmootherKind::Dic | SmootherKind::DicGaussSeidel => true,
            SmootherKind::BlockJacobi => self.block.inner == InnerSolver::Cg,
            _ => false,
        }
    }

    /// Whether the smoother can precondition PCG: symmetric, and the same
    /// operator at every application (up to the inner tolerance).
    pub fn check_preconditioner(&self) -> Result<(), String> {
        let name = self.kind.name();
        match self.kind {
            SmootherKind::GaussSeidel(Sweep::Forward | Sweep::Backward)
            | SmootherKind::DicGaussSeidel => Err(format!(
                "the {name} smoother is not symmetric, so it cannot precondition PCG; use \
                 symGaussSeidel"
            )),
            SmootherKind::BlockJacobi if self.block.asynchronous => Err(
                "asynchronous block Jacobi depends on the order the blocks run in, so it \
                 cannot precondition PCG; set asynchronous false"
                    .into(),
            ),
            SmootherKind::BlockJacobi if self.block.inner == InnerSolver::GaussSeidel => Err(
                "block Jacobi with the forward Gauss-Seidel inner solver is not symmetric, so \
                 it cannot precondition PCG; use inner symGaussSeidel"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// A readable description, e.g. `blockJacobi (inner CG, tolerance 1e-08,
    /// at most 100 steps, 512-row blocks, synchronous)`.
    pub fn describe(&self) -> String {
        let mut s = self.kind.name().to_string();
        if let Some(name) = self.block_ic_name() {
            s = format!("{name} ({}-row blocks", self.block.block_size);
            if self.polynomial.precision == Precision::Mixed {
                s += ", mixed precision";
            }
            s += ")";
            if self.sweeps != 1 {
                s += &format!(", {} sweeps", self.sweeps);
            }
            return s;
        }
        match self.kind {
            SmootherKind::Jacobi if self.omega != 1.0 => {
                s += &format!(" (omega {})", format_g(self.omega))
            }
            SmootherKind::GaussSeidel(_) if self.colouring != ColouringKind::Natural => {
                s += &format!(" (multicolour, {} colouring)", self.colouring.name())
            }
            SmootherKind::BlockJacobi => {
                let b = &self.block;
                let omega = if b.inner == InnerSolver::Jacobi && self.omega != 1.0 {
                    format!(" (omega {})", format_g(self.omega))
                } else {
                    String::new()
                };
                let mixed = match self.polynomial.precision {
                    Precision::Mixed => ", mixed precision",
                    Precision::Double => "",
                };
                s += &format!(
                    " (inner {}{omega}, tolerance {}, at most {} steps, {}-row blocks, {}{mixed})",
                    b.inner.name(),
                    format_g(b.inner_tolerance),
                    b.inner_max_iter,
                    b.block_size,
                    if b.asynchronous {
                        "asynchronous"
                    } else {
                        "synchronous"
                    }
                )
            }
            SmootherKind::Polynomial(kind) => {
                s = PolynomialSettings {
                    kind,
                    ..self.polynomial
                }
                .describe()
            }
            _ => {}
        }
        if self.sweeps != 1 {
            s += &format!(", {} sweeps", self.sweeps);
        }
        s
    }

    /// The row order the smoother wants, where it has one: block Jacobi's
    /// blocks grown over reverse Cuthill–McKee ([`grown_blocks`]), so that each
    /// block of `block_size` rows is a compact piece of the mesh. Both the CPU
    /// and the GPU solves use it, so both see the same blocks.
    pub fn ordering(&self, a: &Csr) -> Option<Permutation> {
        (self.kind == SmootherKind::BlockJacobi)
            .then(|| grown_blocks(a, self.block.block_size, &reverse_cuthill_mckee(a)))
    }

    /// The CPU smoother for `a` (square, positive diagonal).
    pub fn build<'a>(&self, a: &'a Csr) -> Result<Box<dyn Smoother + 'a>, SolveError> {
        self.validate().map_err(SolveError::InvalidControls)?;
        Ok(match self.kind {
            SmootherKind::Jacobi => Box::new(PointJacobi::weighted(a, self.omega)?),
            SmootherKind::L1Jacobi => Box::new(PointJacobi::l1(a)?),
            SmootherKind::GaussSeidel(sweep) => {
                Box::new(GaussSeidel::new(a, sweep, self.colouring.colouring(a))?)
            }
            SmootherKind::BlockJacobi => Box::new(BlockJacobi::new(a, self.block, self.omega)?),
            SmootherKind::Dic => Box::new(PreconditionerSmoother::new(a, Box::new(Dic::new(a)?))),
            SmootherKind::DicGaussSeidel => Box::new(Sequence(vec![
                Box::new(PreconditionerSmoother::new(a, Box::new(Dic::new(a)?))),
                Box::new(GaussSeidel::new(a, Sweep::Forward, None)?),
            ])),
            SmootherKind::Polynomial(kind) => Box::new(PreconditionerSmoother::new(
                a,
                Box::new(PolynomialPreconditioner::new(
                    a,
                    &PolynomialSettings {
                        kind,
                        ..self.polynomial
                    },
                )?),
            )),
        })
    }
}

impl fmt::Display for SmootherSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// x_i ← x_i + s_i (b − A x)_i with s_i = ω / a_ii (weighted Jacobi) or
/// 1 / (a_ii + Σ_{j≠i} |a_ij|) (L1-Jacobi); double-buffered.
pub struct PointJacobi<'a> {
    t: Triangles<'a>,
    scale: Vec<f64>,
}

impl<'a> PointJacobi<'a> {
    pub fn weighted(a: &'a Csr, omega: f64) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "Jacobi smoother")?;
        let scale = (0..t.n()).map(|r| omega / t.diag(r)).collect();
        Ok(Self { t, scale })
    }

    pub fn l1(a: &'a Csr) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "L1-Jacobi smoother")?;
        let scale = (0..t.n()).map(|r| 1.0 / l1_row_norm(&t, r)).collect();
        Ok(Self { t, scale })
    }

    /// The s_i of each row.
    pub fn scale(&self) -> &[f64] {
        &self.scale
    }
}

/// a_rr + Σ_{c≠r} |a_rc|, summed in column order (as the GPU set-up does).
fn l1_row_norm(t: &Triangles<'_>, r: usize) -> f64 {
    t.off_diagonal(r)
        .fold(t.diag(r), |s, slot| s + t.value(slot).abs())
}

/// L1-Jacobi's row scales 1 / (a_rr + Σ_{c≠r} |a_rc|) of `a` (positive diagonal).
pub fn l1_jacobi_scale(a: &Csr) -> Result<Vec<f64>, SolveError> {
    Ok(PointJacobi::l1(a)?.scale)
}

impl Smoother for PointJacobi<'_> {
    fn n(&self) -> usize {
        self.t.n()
    }
    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        let t = &self.t;
        let mut old = vec![0.0; t.n()];
        for _ in 0..sweeps {
            old.copy_from_slice(x);
            x.par_iter_mut().enumerate().for_each(|(i, xi)| {
                // (b − A x)_i: b − a_ii x_i first, then the off-diagonals by column.
                let mut res = b[i] - t.diag(i) * old[i];
                for s in t.off_diagonal(i) {
                    res -= t.value(s) * old[t.col(s)];
                }
                *xi = old[i] + self.scale[i] * res;
            });
        }
    }
}

/// Gauss–Seidel in natural row order, or multicolour with a colouring.
pub struct GaussSeidel<'a> {
    t: Triangles<'a>,
    sweep: Sweep,
    colouring: Option<Colouring>,
    /// The natural-order sweeps' copy of the matrix (rows contiguous, no
    /// diagonal in them).
    split: Option<SplitMatrix>,
}

impl<'a> GaussSeidel<'a> {
    pub fn new(a: &'a Csr, sweep: Sweep, colouring: Option<Colouring>) -> Result<Self, SolveError> {
        if let Some(c) = &colouring {
            assert_eq!(
                c.colours().len(),
                a.n_rows(),
                "Gauss-Seidel: colouring size"
            );
        }
        let t = Triangles::new(a, "Gauss-Seidel")?;
        let split = colouring.is_none().then(|| SplitMatrix::new(t.matrix()));
        Ok(Self {
            t,
            sweep,
            colouring,
            split,
        })
    }

    pub fn colouring(&self) -> Option<&Colouring> {
        self.colouring.as_ref()
    }

    /// x_i = (b_i − Σ_{j≠i} a_ij x_j) / a_ii, off-diagonals by column.
    fn row(&self, i: usize, b: &[f64], x: &[f64]) -> f64 {
        let t = &self.t;
        let mut acc = b[i];
        for s in t.off_diagonal(i) {
            acc -= t.value(s) * x[t.col(s)];
        }
        acc / t.diag(i)
    }
}

/// The order in which a Gauss–Seidel sweep visits `groups` groups of rows
/// (rows one at a time, or colours). A symmetric sweep does not repeat its
/// turning group: the repeat would read the same values and write the same bits.
pub fn sweep_order(sweep: Sweep, groups: usize) -> Vec<usize> {
    match sweep {
        Sweep::Forward => (0..groups).collect(),
        Sweep::Backward => (0..groups).rev().collect(),
        Sweep::Symmetric => (0..groups)
            .chain((0..groups.saturating_sub(1)).rev())
            .collect(),
    }
}

/// Checks that every diagonal entry of `a` is present and positive (every
/// smoother divides by it); the error names `what` and the row.
pub fn check_diagonal(a: &Csr, what: &'static str) -> Result<(), SolveError> {
    Triangles::new(a, what).map(|_| ())
}

impl Smoother for GaussSeidel<'_> {
    fn n(&self) -> usize {
        self.t.n()
    }
    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        if let Some(split) = &self.split {
            // The symmetric sweep's repeated turning row writes the same bits.
            for _ in 0..sweeps {
                if self.sweep != Sweep::Backward {
                    split.gauss_seidel(b, x, true);
                }
                if self.sweep != Sweep::Forward {
                    split.gauss_seidel(b, x, false);
                }
            }
            return;
        }
        let groups = sweep_order(
            self.sweep,
            self.colouring
                .as_ref()
                .map_or(self.t.n(), |c| c.n_colours()),
        );
        for _ in 0..sweeps {
            match &self.colouring {
                None => {
                    for &i in &groups {
                        x[i] = self.row(i, b, x);
                    }
                }
                Some(c) => {
                    for &k in &groups {
                        let rows = c.rows_of(k);
                        let new: Vec<f64> = rows
                            .par_iter()
                            .map(|&r| self.row(r as usize, b, x))
                            .collect();
                        for (&r, v) in rows.iter().zip(new) {
                            x[r as usize] = v;
                        }
                    }
                }
            }
        }
    }
}

/// x ← x + M⁻¹ (b − A x) for a preconditioner M (OpenFOAM's DIC smoother).
pub struct PreconditionerSmoother<'a> {
    a: &'a Csr,
    precond: Box<dyn LinearOperator + 'a>,
}

impl<'a> PreconditionerSmoother<'a> {
    pub fn new(a: &'a Csr, precond: Box<dyn LinearOperator + 'a>) -> Self {
        Self { a, precond }
    }
}

impl Smoother for PreconditionerSmoother<'_> {
    fn n(&self) -> usize {
        self.a.n_rows()
    }
    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        let n = self.n();
        let (mut r, mut z) = (vec![0.0; n], vec![0.0; n]);
        for _ in 0..sweeps {
            self.a.spmv(x, &mut r);
            r.iter_mut().zip(b).for_each(|(r, b)| *r = b - *r);
            self.precond.apply(&r, &mut z);
            x.iter_mut().zip(&z).for_each(|(x, z)| *x += z);
        }
    }
}

/// Smoothers applied one after the other, each for all the sweeps
/// (OpenFOAM's `DICGaussSeidelSmoother::smooth`).
pub struct Sequence<'a>(pub Vec<Box<dyn Smoother + 'a>>);

impl Smoother for Sequence<'_> {
    fn n(&self) -> usize {
        self.0[0].n()
    }
    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        for s in &self.0 {
            s.smooth(b, x, sweeps);
        }
    }
}

/// z = M⁻¹ r as `sweeps` smoother sweeps on A z = r from z = 0.
pub struct SmootherPreconditioner<'a> {
    smoother: Box<dyn Smoother + 'a>,
    sweeps: usize,
    /// The sweeps are a fixed linear map of r ([`SmootherSettings::is_linear`]).
    linear: bool,
}

impl<'a> SmootherPreconditioner<'a> {
    /// Sweeps that are a fixed linear map of r (a stationary smoother).
    pub fn new(smoother: Box<dyn Smoother + 'a>, sweeps: usize) -> Self {
        Self {
            smoother,
            sweeps,
            linear: true,
        }
    }

    /// The sweeps of `settings` (not linear with an inner iteration to a
    /// tolerance: [`SmootherSettings::is_linear`]).
    pub fn of_settings(smoother: Box<dyn Smoother + 'a>, settings: &SmootherSettings) -> Self {
        Self {
            linear: settings.is_linear(),
            ..Self::new(smoother, settings.sweeps)
        }
    }
}

impl LinearOperator for SmootherPreconditioner<'_> {
    fn n(&self) -> usize {
        self.smoother.n()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        z.fill(0.0);
        self.smoother.smooth(r, z, self.sweeps);
    }
    fn is_linear(&self) -> bool {
        self.linear
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, random_symmetric};
    use nalgebra::{DMatrix, DVector};

    fn sample(n: usize) -> (Csr, Vec<f64>, Vec<f64>) {
        let a = random_symmetric(n, 5, 11);
        let b: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        let x: Vec<f64> = (0..n).map(|i| ((i * 13) % 7) as f64 * 0.1).collect();
        (a, b, x)
    }

    fn assert_close(x: &[f64], y: &DVector<f64>, what: &str) {
        for i in 0..x.len() {
            assert!(
                (x[i] - y[i]).abs() < 1e-12 * (1.0 + y[i].abs()),
                "{what} row {i}: {} vs {}",
                x[i],
                y[i]
            );
        }
    }

    #[test]
    fn one_sweep_of_each_point_smoother_is_its_splitting() {
        let (a, b, x0) = sample(40);
        let m = dense(&a);
        let d = DMatrix::from_diagonal(&m.diagonal());
        let l = m.lower_triangle() - &d;
        let u = m.upper_triangle() - &d;
        let (bv, xv) = (
            DVector::from_column_slice(&b),
            DVector::from_column_slice(&x0),
        );
        let residual = &bv - &m * &xv;
        // Weighted Jacobi: x + ω D⁻¹ (b − A x).
        let mut x = x0.clone();
        PointJacobi::weighted(&a, 0.7)
            .unwrap()
            .smooth(&b, &mut x, 1);
        let expected = &xv + d.clone().try_inverse().unwrap() * &residual * 0.7;
        assert_close(&x, &expected, "Jacobi");
        // L1-Jacobi: x + (D + diag Σ|a_ij|)⁻¹ (b − A x).
        let l1 = DMatrix::from_fn(40, 40, |i, j| {
            if i == j {
                (0..40).map(|k| m[(i, k)].abs()).sum::<f64>()
            } else {
                0.0
            }
        });
        let mut x = x0.clone();
        PointJacobi::l1(&a).unwrap().smooth(&b, &mut x, 1);
        assert_close(
            &x,
            &(&xv + l1.try_inverse().unwrap() * &residual),
            "L1-Jacobi",
        );
        // Forward GS: (D + L) x' = b − U x; backward: (D + U) x' = b − L x.
        let mut x = x0.clone();
        GaussSeidel::new(&a, Sweep::Forward, None)
            .unwrap()
            .smooth(&b, &mut x, 1);
        let fwd = (&d + &l).lu().solve(&(&bv - &u * &xv)).unwrap();
        assert_close(&x, &fwd, "forward GS");
        let mut x = x0.clone();
        GaussSeidel::new(&a, Sweep::Backward, None)
            .unwrap()
            .smooth(&b, &mut x, 1);
        let bwd = (&d + &u).lu().solve(&(&bv - &l * &xv)).unwrap();
        assert_close(&x, &bwd, "backward GS");
        let mut x = x0.clone();
        GaussSeidel::new(&a, Sweep::Symmetric, None)
            .unwrap()
            .smooth(&b, &mut x, 1);
        let sym = (&d + &u).lu().solve(&(&bv - &l * &fwd)).unwrap();
        assert_close(&x, &sym, "symmetric GS");
    }

    #[test]
    fn multicolour_gauss_seidel_is_gauss_seidel_in_colour_order() {
        let (a, b, x0) = sample(300);
        let colouring = Colouring::jones_plassmann(&a);
        // The rows by colour as a permutation: natural GS on P A Pᵀ.
        let p = Permutation::from_new_to_old(colouring.rows().to_vec()).unwrap();
        let ap = p.apply_symmetric(&a);
        for sweep in [Sweep::Forward, Sweep::Backward, Sweep::Symmetric] {
            let mut x = x0.clone();
            GaussSeidel::new(&a, sweep, Some(colouring.clone()))
                .unwrap()
                .smooth(&b, &mut x, 3);
            let mut xp = p.to_new(&x0);
            GaussSeidel::new(&ap, sweep, None)
                .unwrap()
                .smooth(&p.to_new(&b), &mut xp, 3);
            let expected = DVector::from_column_slice(&p.to_old(&xp));
            assert_close(&x, &expected, &format!("{sweep:?}"));
        }
    }

    #[test]
    fn every_smoother_reduces_the_energy_error() {
        let (a, b, _) = sample(500);
        let m = dense(&a);
        let exact = m
            .clone()
            .lu()
            .solve(&DVector::from_column_slice(&b))
            .unwrap();
        let energy = |x: &[f64]| {
            let e = DVector::from_column_slice(x) - &exact;
            e.dot(&(&m * &e)).sqrt()
        };
        let mut settings: Vec<SmootherSettings> = NAMES
            .iter()
            .map(|e| SmootherSettings::named(e.0).unwrap())
            .collect();
        for inner in InnerSolver::ALL {
            for asynchronous in [false, true] {
                if asynchronous && inner.is_factorisation() {
                    continue; // block-IC is synchronous only
                }
                let mut s = SmootherSettings::new(SmootherKind::BlockJacobi);
                s.block = BlockJacobiSettings {
                    block_size: 64,
                    inner,
                    inner_tolerance: 0.0,
                    inner_max_iter: 3,
                    asynchronous,
                };
                settings.push(s);
            }
        }
        for s in settings {
            let smoother = s.build(&a).unwrap();
            let mut x = vec![0.0; 500];
            let start = energy(&x);
            let mut last = start;
            for _ in 0..5 {
                smoother.smooth(&b, &mut x, 1);
                let e = energy(&x);
                // Exact block solves (one 512-row block) reach round-off at once.
                assert!(e < last || e < 1e-12 * start, "{s}: {e} >= {last}");
                last = e;
            }
        }
    }

    #[test]
    fn settings_are_checked_and_named() {
        let mut s = SmootherSettings::named("symgaussseidel").unwrap();
        assert_eq!(s.kind, SmootherKind::GaussSeidel(Sweep::Symmetric));
        assert!(s.check_preconditioner().is_ok());
        assert!(SmootherSettings::named("GaussSeidel")
            .unwrap()
            .check_preconditioner()
            .unwrap_err()
            .contains("symGaussSeidel"));
        s.omega = 2.5;
        assert!(s.validate().unwrap_err().contains("omega"));
        let mc = SmootherSettings::named("multicolourSymGaussSeidel").unwrap();
        assert_eq!(mc.colouring, ColouringKind::JonesPlassmann);
        assert!(mc.describe().contains("multicolour"));
        let mut bj = SmootherSettings::named("blockJacobi").unwrap();
        assert!(!bj.is_linear());
        bj.block.inner = InnerSolver::SymGaussSeidel;
        bj.block.inner_tolerance = 0.0;
        assert!(bj.is_linear());
        bj.block.asynchronous = true;
        assert!(bj
            .check_preconditioner()
            .unwrap_err()
            .contains("asynchronous"));
        bj.block.block_size = 100;
        assert!(bj.validate().unwrap_err().contains("blockSize"));
        assert!(SmootherSettings::named("ILU")
            .unwrap_err()
            .contains("blockJacobi"));
    }
}
