//! Aggregation algebraic multigrid (AMG), the CPU reference of the GPU AMG
//! (`gpu::amg`, `kernels/amg.cu`); the algorithm is fixed by `AMG_SPEC.md`
//! (repository root of the work trees) so that both give the same hierarchy.
//!
//! Setup ([`Hierarchy::setup`]): each level is coarsened by `passes` passes of
//! pairwise matching of strongly (negatively) coupled rows, single rows
//! joining a neighbouring pair ([`pairwise_matching`]; two passes make
//! aggregates of about 4.5 rows, three of about 9: Notay's
//! double pairwise aggregation, ETNA 37 (2010) §3, and OpenFOAM GAMG's
//! `faceAreaPair` agglomeration), each followed by the Galerkin product
//! Pᵀ A P with the piecewise-constant P of the pass ([`galerkin`]). The
//! coarsest matrix (at most `coarsest_rows` rows) is factored densely
//! ([`coarsest::CoarsestSolver`], singular all-Neumann matrices included).
//!
//! The cycle ([`cycle::Amg`], a [`super::LinearOperator`] from x = 0) is a
//! V-, W- or K-cycle (Notay & Vassilevski 2008: two flexible-CG steps on
//! each coarse level, so PCG must run flexible) with a symmetric smoother,
//! so that the V- and W-cycles are symmetric positive definite operators.

pub mod coarsest;
pub mod cycle;
pub mod galerkin;
pub mod matching;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

pub use cycle::Amg;

pub use galerkin::{galerkin, galerkin_values, Members};
pub use matching::{pair_hash, pairwise_matching, Matching};

use super::algorithm::{parse_switch, parse_value, set_pairs};
use super::checks::{check_finite_matrix, check_system, on_copies, square_size};
pub use super::scalar::Precision;
use super::smooth_solver::{smooth_solve, CpuSmoothing};
use super::smoother::{check_diagonal, PreconditionerSmoother};
use super::{from_str_by_name, SolveError, SolverControls, SolverPerformance};
use crate::foam::write::format_g;
use crate::sparse::Csr;
use coarsest::CoarsestSolver;

/// The multigrid cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleKind {
    /// One coarse-level cycle per level.
    V,
    /// Two coarse-level cycles per level.
    W,
    /// Krylov-accelerated: two flexible-CG steps per coarse level, each
    /// preconditioned by the coarse cycle (not a fixed linear map).
    K,
}

impl CycleKind {
    pub const ALL: [Self; 3] = [Self::V, Self::W, Self::K];
    pub fn name(self) -> &'static str {
        match self {
            Self::V => "V",
            Self::W => "W",
            Self::K => "K",
        }
    }
}

from_str_by_name!(CycleKind, "AMG cycle");

/// The smoother on every level but the coarsest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmgSmootherKind {
    /// Weighted Jacobi, x ← x + ω D⁻¹ (b − A x).
    Jacobi,
    /// L1-Jacobi, D replaced by diag(a_ii + Σ_{j≠i} |a_ij|) (`solve::smoother`).
    L1Jacobi,
    /// Chebyshev polynomial in D⁻¹A of degree `sweeps` on [λmax/30, λmax],
    /// λmax the Gershgorin bound of D⁻¹A.
    Chebyshev,
    /// Multicolour Gauss–Seidel (Jones–Plassmann colours): forward sweeps
    /// before the coarse correction, backward after (symmetric cycle).
    MulticolourGaussSeidel,
}

impl AmgSmootherKind {
    pub const ALL: [Self; 4] = [
        Self::Jacobi,
        Self::L1Jacobi,
        Self::Chebyshev,
        Self::MulticolourGaussSeidel,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Self::Jacobi => "Jacobi",
            Self::L1Jacobi => "L1Jacobi",
            Self::Chebyshev => "Chebyshev",
            Self::MulticolourGaussSeidel => "multicolourGaussSeidel",
        }
    }
}

impl FromStr for AmgSmootherKind {
    type Err = String;
    /// Our names, and OpenFOAM GAMG's smoothers: the Gauss–Seidel family
    /// (`GaussSeidel`, `symGaussSeidel`, `nonBlockingGaussSeidel`, `DIC`,
    /// `DICGaussSeidel` and their F-forms: sequential triangular sweeps) runs
    /// as multicolour Gauss–Seidel, as on the GPU.
    fn from_str(s: &str) -> Result<Self, String> {
        const GAUSS_SEIDEL: [&str; 9] = [
            "GaussSeidel",
            "symGaussSeidel",
            "nonBlockingGaussSeidel",
            "multicolourSymGaussSeidel",
            "DIC",
            "FDIC",
            "DICGaussSeidel",
            "FDICGaussSeidel",
            "GS",
        ];
        if GAUSS_SEIDEL.iter().any(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(Self::MulticolourGaussSeidel);
        }
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown AMG smoother '{s}' (choose one of Jacobi, L1Jacobi, Chebyshev, \
                     multicolourGaussSeidel, or OpenFOAM's GaussSeidel/DIC family)"
                )
            })
    }
}

/// AMG parameters (`case.toml` `[solver.p.amg]`, fvSolution `GAMG` keywords).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AmgSettings {
    /// Pairwise matching passes per level (2: aggregates of ~4 rows; 3: ~8).
    pub passes: usize,
    /// Handshake rounds per matching pass at most.
    pub matching_rounds: usize,
    /// Levels at most, the fine and the coarsest included.
    pub max_levels: usize,
    /// Coarsen until a level has at most this many rows (then dense Cholesky).
    pub coarsest_rows: usize,
    pub cycle: CycleKind,
    pub smoother: AmgSmootherKind,
    /// Pre- and post-smoothing sweeps (the Chebyshev degree).
    pub sweeps: usize,
    /// Jacobi damping ω.
    pub omega: f64,
    /// The coarse correction is scaled by this factor in V- and W-cycles
    /// (unsmoothed aggregation underestimates it; the K-cycle's Krylov step
    /// scales it optimally and ignores this).
    pub over_correction: f64,
    /// Arithmetic of the cycle: `Double`, or `Mixed` (every level's matrix
    /// values and the cycle's vectors in f32, the outer Krylov method in f64).
    pub precision: Precision,
    /// GPU: fuse the cycle's kernels where one sweep is made before and
    /// after the coarse correction (pre-sweep from zero + residual +
    /// restriction; prolongation + correction + post-sweep): the same
    /// arithmetic with fewer passes over the vectors. The CPU ignores it.
    pub fused: bool,
    /// GPU: after a value update, refine the previous coarsest inverse by
    /// Newton–Schulz steps (a few tiled products) instead of factoring the
    /// coarsest matrix again, falling back to the factorisation on the
    /// device when the matrix moved too far (docs/src/amg.md). The inverse
    /// then equals a fresh set-up's to 1e-8 relative (or to the rounding of
    /// an ill-conditioned matrix's inverse), not bit for bit. The CPU
    /// ignores it.
    pub refine_coarsest: bool,
}

/// Largest coarsest matrix factored densely (n² doubles, n³/3 flops).
pub const MAX_DENSE_ROWS: usize = 4096;

impl Default for AmgSettings {
    /// Chosen by measurement (README "AMG tuning").
    fn default() -> Self {
        Self {
            passes: 3,
            matching_rounds: 6,
            max_levels: 25,
            coarsest_rows: 1000,
            cycle: CycleKind::K,
            smoother: AmgSmootherKind::Jacobi,
            sweeps: 1,
            omega: 0.9,
            over_correction: 1.5,
            precision: Precision::Double,
            fused: false,
            refine_coarsest: true,
        }
    }
}

impl AmgSettings {
    /// Checks the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let at_least_one = [
            ("passes", self.passes),
            ("matchingRounds", self.matching_rounds),
            ("sweeps", self.sweeps),
            ("coarsestRows", self.coarsest_rows),
        ];
        if let Some((name, _)) = at_least_one.iter().find(|e| e.1 == 0) {
            return Err(format!("AMG {name} must be at least 1"));
        }
        if self.max_levels < 2 {
            return Err(format!(
                "AMG maxLevels must be at least 2 (the fine and a coarse level), got {}",
                self.max_levels
            ));
        }
        if self.coarsest_rows > MAX_DENSE_ROWS {
            return Err(format!(
                "AMG coarsestRows must be at most {MAX_DENSE_ROWS} (the coarsest matrix is \
                 factored densely), got {}",
                self.coarsest_rows
            ));
        }
        if !(self.omega.is_finite() && self.omega > 0.0 && self.omega <= 2.0) {
            return Err(format!(
                "AMG omega (Jacobi damping) must be in (0, 2], got {}",
                self.omega
            ));
        }
        if !(self.over_correction.is_finite()
            && self.over_correction > 0.0
            && self.over_correction <= 2.0)
        {
            return Err(format!(
                "AMG overCorrection must be in (0, 2], got {}",
                self.over_correction
            ));
        }
        Ok(())
    }

    /// Sets one parameter by name (case-insensitive; `case.toml` and
    /// fvSolution keys): `passes`, `matchingRounds`, `maxLevels`,
    /// `coarsestRows` (OpenFOAM `nCellsInCoarsestLevel`), `cycle` (V, W, K),
    /// `smoother`, `sweeps` (`nSweeps`; OpenFOAM's `nPreSweeps` and
    /// `nPostSweeps` too: the cycle is symmetric, so both set the same
    /// count), `omega`, `overCorrection`, `precision` (double, mixed),
    /// `fused` (true, false), `refineCoarsest` (true, false).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn count(key: &str, value: &str) -> Result<usize, String> {
            parse_value(format_args!("AMG {key}"), value, "a whole number")
        }
        fn number(key: &str, value: &str) -> Result<f64, String> {
            parse_value(format_args!("AMG {key}"), value, "a number")
        }
        match key.to_ascii_lowercase().as_str() {
            "passes" => self.passes = count(key, value)?,
            "matchingrounds" => self.matching_rounds = count(key, value)?,
            "maxlevels" => self.max_levels = count(key, value)?,
            "coarsestrows" | "ncellsincoarsestlevel" => self.coarsest_rows = count(key, value)?,
            "cycle" => self.cycle = value.parse()?,
            "smoother" => self.smoother = value.parse()?,
            "sweeps" | "nsweeps" | "npresweeps" | "npostsweeps" => self.sweeps = count(key, value)?,
            "omega" => self.omega = number(key, value)?,
            "overcorrection" => self.over_correction = number(key, value)?,
            "precision" => self.precision = value.parse()?,
            "fused" => {
                self.fused = parse_switch(&value.to_ascii_lowercase())
                    .ok_or_else(|| format!("AMG fused must be true or false, got '{value}'"))?
            }
            "refinecoarsest" => {
                self.refine_coarsest =
                    parse_switch(&value.to_ascii_lowercase()).ok_or_else(|| {
                        format!("AMG refineCoarsest must be true or false, got '{value}'")
                    })?
            }
            _ => {
                return Err(format!(
                    "unknown AMG parameter '{key}' (passes, matchingRounds, maxLevels, \
                     coarsestRows, cycle, smoother, sweeps, omega, overCorrection, precision, \
                     fused, refineCoarsest)"
                ))
            }
        }
        Ok(())
    }

    /// Whether the cycle is a fixed linear map (else PCG runs flexible).
    pub fn is_linear(&self) -> bool {
        self.cycle != CycleKind::K
    }

    /// A readable description, e.g. `AMG (V-cycle, L1Jacobi, 1 sweep, 2 passes)`.
    pub fn describe(&self) -> String {
        let mut s = format!("AMG ({}-cycle, {}", self.cycle.name(), self.smoother.name());
        if self.smoother == AmgSmootherKind::Jacobi {
            s += &format!(" omega {}", format_g(self.omega));
        }
        s += &format!(
            ", {} sweep{}, {} passes",
            self.sweeps,
            if self.sweeps == 1 { "" } else { "s" },
            self.passes
        );
        if self.over_correction != 1.0 && self.cycle != CycleKind::K {
            s += &format!(", over-correction {}", format_g(self.over_correction));
        }
        if self.precision == Precision::Mixed {
            s += ", mixed precision";
        }
        if self.fused {
            s += ", fused";
        }
        if !self.refine_coarsest {
            s += ", coarsest factored at every update";
        }
        s + ")"
    }
}

impl FromStr for AmgSettings {
    type Err = String;
    /// `amg` (the defaults) or `amg:key=value:…` with the keys of
    /// [`AmgSettings::set`], e.g. `amg:cycle=K:passes=3:smoother=Jacobi`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let head = parts.next().unwrap_or_default();
        if !head.eq_ignore_ascii_case("amg") {
            return Err(format!(
                "'{s}' is not an AMG specification (amg[:key=value]...)"
            ));
        }
        let mut settings = Self::default();
        set_pairs(parts, "AMG", |key, value| settings.set(key, value))?;
        settings.validate()?;
        Ok(settings)
    }
}

impl fmt::Display for AmgSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// One coarsening step: level l's rows → level l + 1's rows.
pub struct Level {
    /// Row of level l → row of level l + 1 (the passes composed).
    pub aggregate: Vec<u32>,
    /// The rows of each coarse row, ascending (restriction sums in this order).
    pub members: Members,
    /// The matchings of the passes, each on the previous pass's product.
    pub passes: Vec<Matching>,
    /// A_{l+1} = Pᵀ A_l P, the last pass's product.
    pub coarse: Csr,
}

impl Level {
    pub fn n_coarse(&self) -> usize {
        self.coarse.n_rows()
    }
}

/// Why coarsening stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CoarseningStop {
    /// The last level has at most `coarsest_rows` rows.
    Small,
    /// `max_levels` levels.
    MaxLevels,
    /// The next level would have had more than rows / 1.2 rows (few
    /// negative couplings left to match); it was not kept.
    Stalled { rows: usize, coarse_rows: usize },
}

/// A level shrinking less than this factor is not worth its cost.
const MIN_COARSENING: f64 = 1.2;

/// The AMG hierarchy of a matrix: the transfers and coarse matrices (the
/// fine matrix is not copied) and the coarsest factor.
pub struct Hierarchy {
    pub settings: AmgSettings,
    pub n: usize,
    pub fine_nnz: usize,
    pub levels: Vec<Level>,
    pub coarsest: CoarsestSolver,
    pub stop: CoarseningStop,
}

/// The composition of the passes' matchings: row → coarse row of the last pass.
fn compose(passes: &[Matching]) -> Vec<u32> {
    use rayon::prelude::*;
    let mut aggregate = passes[0].aggregate.clone();
    for pass in &passes[1..] {
        aggregate
            .par_iter_mut()
            .with_min_len(4096)
            .for_each(|c| *c = pass.aggregate[*c as usize]);
    }
    aggregate
}

/// Coarsens `a` by `passes` passes: the matchings and the last product.
fn coarsen(a: &Csr, settings: &AmgSettings) -> (Vec<Matching>, Csr) {
    let mut passes = Vec::with_capacity(settings.passes);
    let mut product: Option<Csr> = None;
    for _ in 0..settings.passes {
        let m = product.as_ref().unwrap_or(a);
        let matching = pairwise_matching(m, settings.matching_rounds);
        let next = galerkin(m, &matching.aggregate, matching.n_coarse);
        passes.push(matching);
        product = Some(next);
    }
    (passes, product.expect("at least one pass"))
}

/// Checks what every AMG entry point needs of the fine matrix: square,
/// non-empty, finite, positive diagonal.
fn check_matrix(a: &Csr) -> Result<(), SolveError> {
    square_size(a)?;
    check_finite_matrix(a)?;
    check_diagonal(a, "AMG")
}

impl Hierarchy {
    /// The hierarchy of `a` (square, symmetric, positive diagonal; singular
    /// only through the constants, as all-Neumann problems are).
    pub fn setup(a: &Csr, settings: &AmgSettings) -> Result<Self, SolveError> {
        settings.validate().map_err(SolveError::InvalidControls)?;
        check_matrix(a)?;
        let mut levels: Vec<Level> = Vec::new();
        let stop = loop {
            let m = levels.last().map_or(a, |l| &l.coarse);
            if m.n_rows() <= settings.coarsest_rows {
                break CoarseningStop::Small;
            }
            if levels.len() + 1 >= settings.max_levels {
                break CoarseningStop::MaxLevels;
            }
            let (passes, coarse) = coarsen(m, settings);
            if (m.n_rows() as f64) < MIN_COARSENING * coarse.n_rows() as f64 {
                log::info!(
                    "AMG: coarsening stalled at level {} ({} rows would become {}); it is the \
                     coarsest",
                    levels.len(),
                    m.n_rows(),
                    coarse.n_rows()
                );
                break CoarseningStop::Stalled {
                    rows: m.n_rows(),
                    coarse_rows: coarse.n_rows(),
                };
            }
            let aggregate = compose(&passes);
            let members = Members::new(&aggregate, coarse.n_rows());
            levels.push(Level {
                aggregate,
                members,
                passes,
                coarse,
            });
        };
        let last = levels.last().map_or(a, |l| &l.coarse);
        if last.n_rows() > MAX_DENSE_ROWS {
            return Err(SolveError::InvalidControls(format!(
                "AMG: coarsening ended ({}) with {} rows on the coarsest level, more than the \
                 {MAX_DENSE_ROWS} that can be factored densely; raise maxLevels, or use another \
                 preconditioner for this matrix (few negative off-diagonal couplings to aggregate)",
                match stop {
                    CoarseningStop::MaxLevels => "maxLevels reached",
                    _ => "the levels stopped shrinking",
                },
                last.n_rows()
            )));
        }
        let coarsest = CoarsestSolver::new(last)?;
        Ok(Self {
            settings: *settings,
            n: a.n_rows(),
            fine_nnz: a.nnz(),
            levels,
            coarsest,
            stop,
        })
    }

    /// Recomputes every coarse matrix for new values of the fine matrix `a`
    /// (same pattern as at setup), keeping the aggregates and the coarse
    /// patterns: the matrices equal those of a fresh setup that finds the
    /// same aggregates, bit for bit (same summation order).
    pub fn update_values(&mut self, a: &Csr) -> Result<(), SolveError> {
        check_matrix(a)?;
        if a.n_rows() != self.n || a.nnz() != self.fine_nnz {
            return Err(SolveError::InvalidControls(format!(
                "AMG update: the matrix has {} rows and {} entries but the hierarchy was set up \
                 for {} rows and {} entries; set it up again for a new pattern",
                a.n_rows(),
                a.nnz(),
                self.n,
                self.fine_nnz
            )));
        }
        for l in 0..self.levels.len() {
            let (done, rest) = self.levels.split_at_mut(l);
            let m = done.last().map_or(a, |p| &p.coarse);
            let level = &mut rest[0];
            let mut product: Option<Csr> = None;
            let (last, first) = level.passes.split_last().expect("at least one pass");
            for pass in first {
                let cur = product.as_ref().unwrap_or(m);
                product = Some(galerkin(cur, &pass.aggregate, pass.n_coarse));
            }
            let cur = product.as_ref().unwrap_or(m);
            let members = Members::new(&last.aggregate, last.n_coarse);
            galerkin_values(cur, &last.aggregate, &members, &mut level.coarse).map_err(|row| {
                SolveError::InvalidControls(format!(
                    "AMG update: level {} coarse row {row} gets an entry outside the pattern of \
                     the setup (the fine matrix pattern changed); set it up again",
                    l + 1
                ))
            })?;
        }
        self.coarsest = CoarsestSolver::new(self.matrix(a, self.levels.len()))?;
        Ok(())
    }

    /// Number of levels, the fine and the coarsest included.
    pub fn n_levels(&self) -> usize {
        self.levels.len() + 1
    }

    /// The matrix of level `l` (`fine` for l = 0).
    pub fn matrix<'a>(&'a self, fine: &'a Csr, l: usize) -> &'a Csr {
        if l == 0 {
            fine
        } else {
            &self.levels[l - 1].coarse
        }
    }

    /// Σ_l nnz(A_l) / nnz(A_0).
    pub fn operator_complexity(&self) -> f64 {
        let coarse: usize = self.levels.iter().map(|l| l.coarse.nnz()).sum();
        1.0 + coarse as f64 / self.fine_nnz as f64
    }

    /// Σ_l n_l / n_0.
    pub fn grid_complexity(&self) -> f64 {
        let coarse: usize = self.levels.iter().map(|l| l.n_coarse()).sum();
        1.0 + coarse as f64 / self.n as f64
    }

    /// The work of one cycle in fine-matrix products (each level's matrix
    /// passes weighted by nnz(A_l) / nnz(A_0); vector updates and the dense
    /// coarsest solve not counted). Per visit of level l: Jacobi-type and
    /// Chebyshev smoothers 2ν passes (pre ν − 1 from zero, the residual,
    /// post ν), Gauss–Seidel 2ν + 1; a W- or K-cycle visits level l 2^l
    /// times and adds 1 (W: coarse residual) or 2 (K: two products) passes
    /// on level l per coarse solve.
    pub fn work_per_cycle(&self) -> f64 {
        let s = &self.settings;
        let per_visit = match s.smoother {
            AmgSmootherKind::MulticolourGaussSeidel => 2 * s.sweeps + 1,
            _ => 2 * s.sweeps,
        } as f64;
        let extra = match s.cycle {
            CycleKind::V => 0.0,
            CycleKind::W => 1.0,
            CycleKind::K => 2.0,
        };
        let nnz = |l: usize| {
            if l == 0 {
                self.fine_nnz
            } else {
                self.levels[l - 1].coarse.nnz()
            }
        } as f64;
        let mut work = 0.0;
        let mut visits = 1.0;
        for l in 0..self.levels.len() {
            work += visits * per_visit * nnz(l) / nnz(0);
            if l > 0 {
                // Products of the coarse solves made from level l − 1.
                work += visits / 2.0 * extra * nnz(l) / nnz(0);
            }
            if s.cycle != CycleKind::V {
                visits *= 2.0;
            }
        }
        work
    }

    /// Rows per level, e.g. `262144 → 66134 → … → 812 rows, operator complexity 1.32`.
    pub fn describe(&self) -> String {
        let mut rows = vec![self.n.to_string()];
        rows.extend(self.levels.iter().map(|l| l.n_coarse().to_string()));
        format!(
            "{} levels: {} rows, operator complexity {:.2}, grid complexity {:.2}{}",
            self.n_levels(),
            rows.join(" → "),
            self.operator_complexity(),
            self.grid_complexity(),
            if self.coarsest.singular() {
                ", singular coarsest (all-Neumann)"
            } else {
                ""
            }
        )
    }
}

/// Solves A x = b by AMG cycles alone, from the x given: x ← x + M⁻¹(b − A x)
/// with M one cycle, the residual checked after each cycle (OpenFOAM's
/// `GAMG` solver; the loop and its stopping rules are smoothSolver's,
/// `solve::smooth_solve`, with one "sweep" per cycle). PCG with the AMG
/// preconditioner ([`super::Preconditioner::Amg`]) needs fewer cycles for
/// the same residual; this is the OpenFOAM-compatible choice.
pub fn solve_amg(
    a: &Csr,
    settings: &AmgSettings,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    check_system(a, b, x, controls)?;
    let amg = Amg::new(a, settings)?;
    log::info!("{settings}: {}", amg.hierarchy().describe());
    let cycle = PreconditionerSmoother::new(a, Box::new(amg));
    let backend = CpuSmoothing::new(a, &cycle);
    on_copies(b, x, |b, x| {
        smooth_solve(&backend, b, x, controls, 1, field)
    })
}
