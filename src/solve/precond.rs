//! Which preconditioner PCG, GMRES and BiCGStab use ([`Preconditioner`],
//! [`PreconditionerKind`]) and the dispatch that checks and builds it on a
//! CSR matrix as a `LinearOperator` z = M⁻¹ r.
//!
//! This module sits above the preconditioners: it imports each of them to
//! build it, and none of them imports it. The preconditioners themselves
//! live in their own modules (`diagonal`, `ic`, `ilu`,
//! `polynomial`, `smoother`, `schwarz`, `fsai`, `amg`, `algorithms`); the
//! re-exports below keep the paths `solve::precond::{Dic, Ic0, …}` working.

use std::fmt;

use super::algorithms::Registered;
use super::amg::{Amg, AmgSettings};
use super::fsai::{FsaiPreconditioner, FsaiSettings};
use super::ilu::Ilu;
use super::polynomial::{PolynomialPreconditioner, PolynomialSettings};
use super::scalar::Precision;
use super::schwarz::{Schwarz, SchwarzSettings};
use super::smoother::{GaussSeidel, SmootherPreconditioner, SmootherSettings, Sweep};
use super::{from_str_by_name, LinearOperator, SolveError};
use crate::sparse::{Csr, Permutation};

pub use super::ic::{Dic, Ic0};
pub use super::ilu::{check_fill_level, parse_fill_level, MAX_FILL_LEVEL};
pub use super::jacobi::{Identity, Jacobi};

/// Which preconditioner PCG uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreconditionerKind {
    None,
    Jacobi,
    /// OpenFOAM's diagonal incomplete Cholesky.
    Dic,
    /// Incomplete Cholesky with no fill-in.
    Ic0,
    /// Symmetric Gauss-Seidel (SSOR with ω = 1) in natural row order: one
    /// symmetric sweep of the `symGaussSeidel` smoother from z = 0.
    SymGaussSeidel,
    /// OpenFOAM's diagonal incomplete LU (`solve::ilu::dilu`): DIC on a
    /// symmetric matrix, the cheap preconditioner of PBiCGStab.
    Dilu,
    /// Symmetric Gauss-Seidel (SSOR, ω = 1) run by Eisenstat's trick
    /// (`solve::eisenstat`): SGS-PCG's iterates at about one matrix read per
    /// iteration. PCG only (elsewhere it is the plain SGS preconditioner);
    /// multicolour on the GPU.
    EisenstatSgs,
}

impl PreconditionerKind {
    pub const ALL: [Self; 7] = [
        Self::None,
        Self::Jacobi,
        Self::Dic,
        Self::Ic0,
        Self::SymGaussSeidel,
        Self::Dilu,
        Self::EisenstatSgs,
    ];

    /// Name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Jacobi => "jacobi",
            Self::Dic => "dic",
            Self::Ic0 => "ic0",
            Self::SymGaussSeidel => "sgs",
            Self::Dilu => "dilu",
            Self::EisenstatSgs => "eisenstatSGS",
        }
    }

    /// Its name in the log line where OpenFOAM has one of the same name
    /// (`none`, `diagonal`, `DIC`, `DILU`: `nonePCG`, `diagonalPCG`, ...);
    /// the others leave the Krylov method's name alone.
    pub fn log_name(self) -> Option<&'static str> {
        match self {
            Self::None => Some("none"),
            Self::Jacobi => Some("diagonal"),
            Self::Dic => Some("DIC"),
            Self::Dilu => Some("DILU"),
            Self::Ic0 | Self::SymGaussSeidel | Self::EisenstatSgs => None,
        }
    }

    /// Builds the preconditioner for `a` (square, symmetric).
    pub fn build<'a>(self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
        Ok(match self {
            Self::None => Box::new(Identity(a.n_rows())),
            Self::Jacobi => Box::new(Jacobi::new(a)?),
            Self::Dic => Box::new(Dic::new(a)?),
            Self::Ic0 => Box::new(Ic0::new(a)?),
            Self::SymGaussSeidel => Box::new(SmootherPreconditioner::new(
                Box::new(GaussSeidel::new(a, Sweep::Symmetric, None)?),
                1,
            )),
            Self::Dilu => Box::new(super::ilu::dilu(a)?),
            // The same M; PCG runs it by Eisenstat's trick (`solve_pcg_scaled`).
            Self::EisenstatSgs => Box::new(SmootherPreconditioner::new(
                Box::new(GaussSeidel::new(a, Sweep::Symmetric, None)?),
                1,
            )),
        })
    }
}

impl fmt::Display for PreconditionerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

from_str_by_name!(PreconditionerKind, "preconditioner");

/// PCG's preconditioner: a named one, or a smoother run from z = 0
/// (`SmootherSettings::sweeps` sweeps; symmetric smoothers only), or a
/// polynomial in the Jacobi-scaled matrix (`solve::polynomial`).
/// PCG's preconditioner: a named one, a smoother run from z = 0
/// (`SmootherSettings::sweeps` sweeps; symmetric smoothers only), or one
/// aggregation-AMG cycle (`solve::amg`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Preconditioner {
    Kind(PreconditionerKind),
    Smoother(SmootherSettings),
    Polynomial(PolynomialSettings),
    Amg(AmgSettings),
    /// ILU(k) with this fill level (`solve::ilu`).
    Ilu(u32),
    /// Restricted (RAS) or symmetric additive (AS) Schwarz (`solve::schwarz`).
    Schwarz(SchwarzSettings),
    /// Factored sparse approximate inverse, z = Gᵀ G r (`solve::fsai`).
    Fsai(FsaiSettings),
    /// DIC or IC(0) (the kind) in mixed precision (`precision mixed`): on
    /// the GPU the level-scheduled triangular sweeps run in f32 on an f32
    /// copy of the factor (`gpu::ic`), PCG stays f64; the CPU runs the f64
    /// factorisation. `dic:precision=mixed` on the command line.
    MixedIc(PreconditionerKind),
    /// A preconditioner written as a `registry::Algorithm` in its own folder.
    Registered(Registered),
}

impl From<PreconditionerKind> for Preconditioner {
    fn from(kind: PreconditionerKind) -> Self {
        Self::Kind(kind)
    }
}

impl PartialEq<PreconditionerKind> for Preconditioner {
    fn eq(&self, kind: &PreconditionerKind) -> bool {
        *self == Self::Kind(*kind)
    }
}

impl fmt::Display for Preconditioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kind(k) => k.fmt(f),
            Self::Smoother(s) => s.fmt(f),
            Self::Polynomial(p) => p.fmt(f),
            Self::Amg(s) => s.fmt(f),
            Self::Ilu(k) => write!(f, "ilu{k}"),
            Self::Schwarz(s) => s.fmt(f),
            Self::Fsai(s) => s.fmt(f),
            Self::MixedIc(k) => write!(f, "{k}:precision=mixed"),
            Self::Registered(r) => r.fmt(f),
        }
    }
}

impl Preconditioner {
    /// DIC or IC(0) (`kind`) in `precision`: the named kind in f64,
    /// [`Preconditioner::MixedIc`] in mixed precision.
    pub fn with_ic_precision(kind: PreconditionerKind, precision: Precision) -> Self {
        match precision {
            Precision::Double => Self::Kind(kind),
            Precision::Mixed => Self::MixedIc(kind),
        }
    }

    /// Whether `s` names ILU or Schwarz (`ilu`, `ilu1`, `iluk:K`, `ras…`,
    /// `as…`, any case): the specifications [`Preconditioner::from_str`]
    /// reads for them.
    pub fn names_ilu_or_schwarz(s: &str) -> bool {
        let head = s.split(':').next().unwrap_or_default().to_ascii_lowercase();
        head.starts_with("ilu") || head == "ras" || head == "as"
    }

    /// Whether PCG must be flexible (the preconditioner is not a fixed linear map).
    pub fn is_flexible(&self) -> bool {
        match self {
            Self::Kind(_) | Self::Polynomial(_) | Self::Fsai(_) => false,
            Self::Smoother(s) => !s.is_linear(),
            Self::Amg(s) => !s.is_linear(),
            Self::Ilu(_) | Self::Schwarz(_) => false,
            Self::MixedIc(_) => false,
            Self::Registered(r) => r.is_flexible(),
        }
    }

    /// Its name before the Krylov method's in the log line, where OpenFOAM
    /// has the preconditioner (`DICPCG`, `diagonalPCG`, `nonePCG`, `GAMGPCG`,
    /// `DILUPBiCGStab`: [`solver_name`](super::pcg::solver_name)); the
    /// lines of the others name the method alone.
    pub fn log_name(&self) -> Option<&'static str> {
        match self {
            Self::Kind(kind) => kind.log_name(),
            Self::Amg(_) => Some("GAMG"),
            _ => None,
        }
    }

    /// Checks the parameters only, for the nonsymmetric Krylov methods
    /// (GMRES, BiCGStab take RAS, which [`Preconditioner::check`] refuses).
    pub fn validate(&self) -> Result<(), SolveError> {
        match self {
            Self::Schwarz(s) => s.validate().map_err(SolveError::InvalidControls),
            _ => self.check(),
        }
    }

    /// Checks that the preconditioner can precondition PCG (a symmetric
    /// smoother with valid parameters).
    pub fn check(&self) -> Result<(), SolveError> {
        match self {
            Self::Kind(_) => Ok(()),
            Self::Smoother(s) => s
                .validate()
                .and_then(|()| s.check_preconditioner())
                .map_err(SolveError::InvalidControls),
            Self::Polynomial(p) => p.validate().map_err(SolveError::InvalidControls),
            Self::Amg(s) => s.validate().map_err(SolveError::InvalidControls),
            Self::Ilu(k) => check_fill_level(*k).map_err(SolveError::InvalidControls),
            Self::Schwarz(s) => s
                .validate()
                .map_err(SolveError::InvalidControls)
                .and_then(|()| {
                    if s.is_symmetric() || s.overlap == 0 {
                        Ok(())
                    } else {
                        Err(SolveError::InvalidControls(format!(
                            "{s} is not symmetric (restricted prolongation with overlap {}): PCG \
                         needs AS (preconditioner AS, IC(0) blocks) or RAS with overlap 0; \
                         use RAS with GMRES or BiCGStab",
                            s.overlap
                        )))
                    }
                }),
            Self::Fsai(s) => s.validate().map_err(SolveError::InvalidControls),
            Self::MixedIc(PreconditionerKind::Dic | PreconditionerKind::Ic0) => Ok(()),
            Self::Registered(r) => r.validate().map_err(SolveError::InvalidControls),
            Self::MixedIc(k) => Err(SolveError::InvalidControls(format!(
                "precision mixed is available for the dic and ic0 preconditioners (and the \
                 polynomials, smoothers and FSAI), not for {k}"
            ))),
        }
    }

    /// The row order the preconditioner wants (block Jacobi's blocks).
    pub fn ordering(&self, a: &Csr) -> Option<Permutation> {
        match self {
            Self::Kind(_) | Self::Polynomial(_) | Self::Amg(_) | Self::Fsai(_) => None,
            Self::Ilu(_) | Self::Schwarz(_) => None,
            Self::Smoother(s) => s.ordering(a),
            Self::MixedIc(_) | Self::Registered(_) => None,
        }
    }

    /// The CPU preconditioner for `a` (square; symmetric unless it is ILU,
    /// DILU or Schwarz). Parameters checked by [`Preconditioner::validate`]:
    /// PCG's callers [`Preconditioner::check`] first.
    pub fn build<'a>(&self, a: &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
        self.validate()?;
        match self {
            Self::Kind(k) => k.build(a),
            Self::Smoother(s) => Ok(Box::new(SmootherPreconditioner::of_settings(
                s.build(a)?,
                s,
            ))),
            Self::Polynomial(p) => Ok(Box::new(PolynomialPreconditioner::new(a, p)?)),
            Self::Amg(s) => {
                let amg = Amg::new(a, s)?;
                log::info!("{s}: {}", amg.hierarchy().describe());
                Ok(Box::new(amg))
            }
            Self::Ilu(k) => {
                let ilu = Ilu::new(a, *k)?;
                let (fw, bw) = ilu.levels();
                log::info!(
                    "ILU({k}): {} fill entries, {fw} forward / {bw} backward levels",
                    ilu.n_fill()
                );
                Ok(Box::new(ilu))
            }
            Self::Schwarz(s) => {
                let m = Schwarz::new(a, s)?;
                log::info!("{}", m.describe());
                Ok(Box::new(m))
            }
            Self::Fsai(s) => {
                let p = FsaiPreconditioner::new(a, s)?;
                let st = &p.factor.stats;
                log::info!(
                    "{s}: density {:.3} (before postfilter {:.3}), {} fallback rows",
                    st.density,
                    st.density_before_postfilter,
                    st.fallback_rows
                );
                Ok(Box::new(p))
            }
            Self::MixedIc(k) => {
                log::info!("{k} in mixed precision runs its f32 sweeps on the GPU; the CPU runs {k} in f64");
                k.build(a)
            }
            Self::Registered(r) => r.build_cpu(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, four_by_four};
    use nalgebra::{DMatrix, DVector};

    /// [4 -1 0 -2; -1 5 -1 0; 0 -1 6 -1; -2 0 -1 7]: row 0 couples to 1 and 3 but not 2.
    fn sample() -> Csr {
        four_by_four(-1.0)
    }

    /// Checks M z = r for M given densely, with z = precond.apply(r).
    fn assert_inverts(precond: &dyn LinearOperator, m: &DMatrix<f64>) {
        let r = [1.0, -2.0, 0.5, 3.0];
        let mut z = vec![0.0; 4];
        precond.apply(&r, &mut z);
        let mz = m * DVector::from_column_slice(&z);
        for i in 0..4 {
            assert!(
                (mz[i] - r[i]).abs() < 1e-14,
                "row {i}: {} vs {}",
                mz[i],
                r[i]
            );
        }
    }

    #[test]
    fn dic_matches_hand_computed_factor() {
        let a = sample();
        let dic = Dic::new(&a).unwrap();
        // By hand: d0 = 4; d1 = 5 - 1/4 = 4.75; d2 = 6 - 1/4.75;
        // d3 = 7 - 4/4 - 1/d2 (row 3 couples to 0 and 2, not 1).
        let d2 = 6.0 - 1.0 / 4.75;
        let d = [4.0, 4.75, d2, 7.0 - 1.0 - 1.0 / d2];
        for (r, rd) in dic.reciprocal_diagonal().iter().enumerate() {
            assert!((rd * d[r] - 1.0).abs() < 1e-15, "row {r}");
        }
        // M = (D* + L) D*⁻¹ (D* + U).
        let full = dense(&a);
        let dstar = DMatrix::from_diagonal(&DVector::from_column_slice(&d));
        let lower = full.lower_triangle() - DMatrix::from_diagonal(&full.diagonal());
        let upper = lower.transpose();
        let inv = DMatrix::from_diagonal(&DVector::from_iterator(4, d.iter().map(|d| 1.0 / d)));
        assert_inverts(&dic, &((&dstar + &lower) * inv * (&dstar + upper)));
    }

    #[test]
    fn sgs_and_ic0_and_jacobi_invert_their_dense_forms() {
        let a = sample();
        let full = dense(&a);
        let diag = DMatrix::from_diagonal(&full.diagonal());
        let lower = full.lower_triangle() - &diag;
        let upper = lower.transpose();
        let m_sgs = (&diag + &lower) * diag.clone().try_inverse().unwrap() * (&diag + upper);
        let sgs = PreconditionerKind::SymGaussSeidel.build(&a).unwrap();
        assert_inverts(sgs.as_ref(), &m_sgs);
        assert_inverts(&Jacobi::new(&a).unwrap(), &diag);
        // IC(0) on this pattern: L Lᵀ equals A on every stored entry of the lower triangle.
        let ic = Ic0::new(&a).unwrap();
        // The factor: L's strictly lower values in A's slots, then its diagonal.
        let factor = ic.factor();
        let mut l = DMatrix::zeros(4, 4);
        for i in 0..4 {
            l[(i, i)] = factor[a.nnz() + i];
            let (cols, _) = a.row(i);
            let first = a.row_ptr()[i];
            for (s, &c) in (first..).zip(cols) {
                if (c as usize) < i {
                    l[(i, c as usize)] = factor[s];
                }
            }
        }
        let llt = &l * l.transpose();
        for r in 0..4 {
            for c in 0..=r {
                if a.slot(r, c).is_some() {
                    assert!((llt[(r, c)] - full[(r, c)]).abs() < 1e-14, "({r},{c})");
                }
            }
        }
        assert_inverts(&ic, &llt);
    }

    #[test]
    fn block_ic_names_parse_with_their_options() {
        use crate::solve::{InnerSolver, Precision};
        let p: Preconditioner = "block-ic:blockSize=256:precision=mixed".parse().unwrap();
        let Preconditioner::Smoother(s) = p else {
            panic!("{p}")
        };
        assert_eq!(
            (s.block.inner, s.block.block_size, s.polynomial.precision),
            (InnerSolver::Ic0, 256, Precision::Mixed)
        );
        assert!(!p.is_flexible());
        let Ok(Preconditioner::Smoother(s)) = "blockDIC".parse::<Preconditioner>() else {
            panic!("blockDIC")
        };
        assert_eq!((s.block.inner, s.block.block_size), (InnerSolver::Dic, 512));
        crate::test_support::assert_parse_refused::<Preconditioner>(&[
            (
                "block-ic:blockSize=100",
                "blockSize must be a multiple of 32",
            ),
            ("block-dic:precision=half", "unknown precision 'half'"),
            ("block-ic:degree=4", "unknown blockIC key 'degree'"),
            ("block-ic:256", "must be key=value"),
        ]);
    }

    #[test]
    fn block_jacobi_parses_with_its_inner_solver_and_precision() {
        use crate::solve::{InnerSolver, Precision};
        let spec = "block-jacobi:inner=CG:innerTolerance=0.01:innerMaxIter=20:blockSize=256:\
                    precision=mixed:sweeps=2";
        let p: Preconditioner = spec.parse().unwrap();
        let Preconditioner::Smoother(s) = p else {
            panic!("{p}")
        };
        assert_eq!(s.kind, crate::solve::SmootherKind::BlockJacobi);
        assert_eq!(
            (
                s.block.inner,
                s.block.inner_tolerance,
                s.block.inner_max_iter,
                s.block.block_size,
                s.sweeps,
                s.polynomial.precision
            ),
            (InnerSolver::Cg, 0.01, 20, 256, 2, Precision::Mixed)
        );
        assert!(p.is_flexible(), "inner CG is not a fixed linear map");
        assert!(p.to_string().contains("mixed precision"), "{p}");
        let Ok(Preconditioner::Smoother(s)) = "blockJacobi".parse::<Preconditioner>() else {
            panic!("blockJacobi")
        };
        assert_eq!(s.polynomial.precision, Precision::Double);
        crate::test_support::assert_parse_refused::<Preconditioner>(&[
            ("block-jacobi:inner=GaussSeidel", "not symmetric"),
            (
                "block-jacobi:innerMaxIter=x",
                "innerMaxIter must be a whole number, got 'x'",
            ),
            ("block-jacobi:degree=4", "unknown blockJacobi key 'degree'"),
            ("block-ic:inner=CG", "unknown blockIC key 'inner'"),
        ]);
    }

    #[test]
    fn dic_and_ic0_take_a_precision() {
        for name in ["dic", "ic0"] {
            let kind: PreconditionerKind = name.parse().unwrap();
            let mixed: Preconditioner = format!("{name}:precision=mixed").parse().unwrap();
            assert_eq!(mixed, Preconditioner::MixedIc(kind));
            assert_eq!(mixed.to_string(), format!("{name}:precision=mixed"));
            assert_eq!(mixed.to_string().parse::<Preconditioner>(), Ok(mixed));
            assert!(!mixed.is_flexible() && mixed.check().is_ok());
            let double: Preconditioner = format!("{name}:precision=double").parse().unwrap();
            assert_eq!(double, Preconditioner::Kind(kind));
        }
        assert!(Preconditioner::MixedIc(PreconditionerKind::Jacobi)
            .check()
            .is_err());
        crate::test_support::assert_parse_refused::<Preconditioner>(&[
            ("dic:precision=half", "unknown precision 'half'"),
            ("ic0:degree=2", "unknown IC0 key 'degree'"),
        ]);
        // The CPU runs the f64 factorisation.
        let a = crate::sparse::testing::random_symmetric(50, 4, 1);
        let r: Vec<f64> = (0..50).map(|i| i as f64 - 20.0).collect();
        let (mut z1, mut z2) = (vec![0.0; 50], vec![0.0; 50]);
        Preconditioner::MixedIc(PreconditionerKind::Dic)
            .build(&a)
            .unwrap()
            .apply(&r, &mut z1);
        Dic::new(&a).unwrap().apply(&r, &mut z2);
        assert_eq!(z1, z2);
    }

    #[test]
    fn bad_diagonals_are_reported_with_the_row() {
        let a = crate::solve::error::non_positive::matrix();
        for kind in [PreconditionerKind::Jacobi, PreconditionerKind::Dic] {
            let err = kind.build(&a).err().unwrap();
            crate::solve::error::non_positive::assert_refused(&err, &kind.to_string());
        }
        // Positive diagonal but not positive definite: DIC pivot goes negative.
        let a = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1., 2., 2., 1.]).unwrap();
        let err = PreconditionerKind::Dic.build(&a).err().unwrap();
        assert_eq!(
            err,
            SolveError::FactorizationBreakdown {
                precond: "DIC",
                row: 1,
                value: -3.0
            }
        );
        assert!(err.to_string().contains("row 1"), "{err}");
        assert_eq!("SGS".parse(), Ok(PreconditionerKind::SymGaussSeidel));
        assert!("ilu"
            .parse::<PreconditionerKind>()
            .unwrap_err()
            .contains("dic"));
    }
}
