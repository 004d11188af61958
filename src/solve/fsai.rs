//! Factored sparse approximate inverse (FSAI; Bernaschi et al. 2019): M⁻¹ = Gᵀ G ≈ A⁻¹
//! with G lower triangular, each row scaled so that diag(G A Gᵀ) = I.
//!
//! Row i of G solves the small SPD system A[P̄,P̄] g = −A[P̄,i] on its pattern
//! P̄ (columns < i) and is scaled by 1/√ψ, ψ = a_ii − yᵀy where y = L⁻¹(−A[P̄,i])
//! and L Lᵀ = A[P̄,P̄] (the square root the paper's eq. 10 misses, erratum 1).
//! The pattern is either static (the lower part of the pattern of Ã^power, Ã
//! the prefiltered A) or adaptive (aFSAI): starting from G̃ = I, each step adds
//! the `step_size` columns with the largest Kaporin gradient |(A g̃ᵀ)_j|, j < i,
//! extends the Cholesky factor of the gathered system by those columns, and
//! stops on stagnation of ψ (S2, default) or on ψ ≤ ε ψ₀ (S1, eq. 17 as printed).
//!
//! This is the CPU reference of the GPU setup (`gpu::fsai_setup`): every
//! floating-point operation below is done in the order fixed by
//! `FSAI_SPEC.md`, so that the device reproduces it bit for bit in f64 (and in
//! f32 for [`Precision::Mixed`]). Points the spec leaves to the implementation:
//! - the gradient's 32-slot xor-butterfly sum is evaluated over the smallest
//!   power of two ≥ |cols| + 1 slots: the other slots hold +0.0 and adding +0.0
//!   changes at most the sign of a zero, which nothing reads (a candidate needs
//!   v_j ≠ 0, the pick compares |v_j|);
//! - with `step_size` > 1, ψ is updated column by column (ψ ← ψ − y_m²) and the
//!   stop test compares ψ before the step with ψ after all its columns;
//! - a breakdown while re-solving after the postfilter (or while factoring a
//!   static row) keeps the columns factored before it;
//! - the right-hand side of the forward step starts at −a_ci, or at +0.0 (not
//!   −0.0) when a_ci is not stored; w_q and the gradient's products are +0.0
//!   for entries not stored;
//! - the final row is g_q / √ψ (a division by s = √ψ) and 1 / s on the diagonal.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use super::algorithm::parse_value;
use super::checks::square_size;
use super::scalar::{Precision, Real};
use super::{from_str_by_name, LinearOperator, SolveError};
use crate::foam::write::format_g;
use crate::sparse::Csr;

/// Most off-diagonal entries of an adaptive row: the gradient sums at most 32
/// rows (row i and one per pattern column) in one warp.
pub const MAX_ADAPTIVE_PATTERN: usize = 31;

/// Highest power of a static pattern (the pattern grows like power³ on 3-D meshes).
pub const MAX_POWER: usize = 8;

/// When an adaptive row stops growing before `steps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsaiStop {
    /// S2: a step reduced ψ by less than ε ψ (hypre's rule; reproduces the
    /// paper's densities).
    Stagnation,
    /// S1: ψ ≤ ε ψ₀ (the paper's eq. 17 as printed).
    Reduction,
}

impl FsaiStop {
    pub const ALL: [Self; 2] = [Self::Stagnation, Self::Reduction];
    pub fn name(self) -> &'static str {
        match self {
            Self::Stagnation => "stagnation",
            Self::Reduction => "reduction",
        }
    }
}

from_str_by_name!(FsaiStop, "FSAI stop rule");

/// aFSAI's pattern growth: at most `steps` steps of `step_size` columns
/// each, stopped early by `stop` with tolerance `epsilon`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptivePattern {
    pub steps: usize,
    pub step_size: usize,
    pub epsilon: f64,
    pub stop: FsaiStop,
}

impl AdaptivePattern {
    /// The defaults (chosen by the measurement in docs/src/fsai.md).
    pub const DEFAULT: Self = Self {
        steps: 10,
        step_size: 1,
        epsilon: 0.005,
        stop: FsaiStop::Stagnation,
    };

    /// The most columns a row can grow to.
    pub fn max_columns(&self) -> usize {
        self.steps * self.step_size
    }
}

/// How the pattern of G is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FsaiPattern {
    /// Lower part of the pattern of Ã^power, Ã = A without the entries
    /// |a_ij| < prefilter √(a_ii a_jj).
    Static { power: usize, prefilter: f64 },
    /// aFSAI.
    Adaptive(AdaptivePattern),
}

impl FsaiPattern {
    /// The adaptive defaults.
    pub const ADAPTIVE: Self = Self::Adaptive(AdaptivePattern::DEFAULT);
    /// The static defaults: the lower pattern of A, nothing dropped.
    pub const STATIC: Self = Self::Static {
        power: 1,
        prefilter: 0.0,
    };
}

/// FSAI's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FsaiSettings {
    pub pattern: FsaiPattern,
    /// δ: drop |g̃_ij| < δ (unit diagonal) and re-solve the row; 0 = off.
    pub postfilter: f64,
    /// `Mixed`: the setup runs in f32 (G is stored and applied in f64).
    pub precision: Precision,
}

impl Default for FsaiSettings {
    fn default() -> Self {
        Self {
            pattern: FsaiPattern::ADAPTIVE,
            postfilter: 0.0,
            precision: Precision::Double,
        }
    }
}

/// The keys of [`FsaiSettings::from_keys`].
const KEYS: &str =
    "pattern, steps, stepSize, epsilon, stop, power, prefilter, postfilter, precision";

impl FsaiSettings {
    /// aFSAI of at most `steps` one-column steps with tolerance `epsilon`
    /// and rule `stop`, the rest at the defaults.
    pub fn adaptive(steps: usize, epsilon: f64, stop: FsaiStop) -> Self {
        Self {
            pattern: FsaiPattern::Adaptive(AdaptivePattern {
                steps,
                step_size: 1,
                epsilon,
                stop,
            }),
            ..Self::default()
        }
    }

    /// Checks the parameters; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let nonnegative = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("FSAI {name} must be a finite number >= 0, got {v}"))
            }
        };
        match self.pattern {
            FsaiPattern::Static { power, prefilter } => {
                if !(1..=MAX_POWER).contains(&power) {
                    return Err(format!(
                        "FSAI power must be between 1 and {MAX_POWER}, got {power}"
                    ));
                }
                nonnegative("prefilter", prefilter)?;
            }
            FsaiPattern::Adaptive(AdaptivePattern {
                steps,
                step_size,
                epsilon,
                ..
            }) => {
                if steps == 0 || step_size == 0 {
                    return Err(format!(
                        "FSAI steps and stepSize must be at least 1, got steps {steps}, \
                         stepSize {step_size}"
                    ));
                }
                if steps.saturating_mul(step_size) > MAX_ADAPTIVE_PATTERN {
                    return Err(format!(
                        "FSAI steps * stepSize must be at most {MAX_ADAPTIVE_PATTERN} (a row's \
                         gradient sums at most 32 rows in one GPU warp), got {steps} * \
                         {step_size} = {}",
                        steps * step_size
                    ));
                }
                nonnegative("epsilon", epsilon)?;
            }
        }
        nonnegative("postfilter", self.postfilter)
    }

    /// Settings from `key value` pairs (case-insensitive keys, the
    /// `case.toml`, fvSolution and command-line names): `pattern`
    /// (adaptive | static), `steps`, `stepSize`, `epsilon`, `stop`
    /// (stagnation | reduction) for adaptive; `power`, `prefilter` for static;
    /// `postfilter`, `precision` (double | mixed) for both. Unset keys keep
    /// their defaults; a key of the other pattern is an error.
    pub fn from_keys<'k>(
        pairs: impl IntoIterator<Item = (&'k str, &'k str)>,
    ) -> Result<Self, String> {
        Self::default().with_keys(pairs)
    }

    /// [`Self::from_keys`] starting from these settings instead of the defaults.
    pub fn with_keys<'k>(
        &self,
        pairs: impl IntoIterator<Item = (&'k str, &'k str)>,
    ) -> Result<Self, String> {
        fn count(key: &str, value: &str) -> Result<usize, String> {
            parse_value(format_args!("FSAI {key}"), value, "a whole number")
        }
        fn number(key: &str, value: &str) -> Result<f64, String> {
            parse_value(format_args!("FSAI {key}"), value, "a number")
        }
        let static_of = |p: FsaiPattern| match p {
            FsaiPattern::Static { power, prefilter } => Some((power, prefilter)),
            FsaiPattern::Adaptive(_) => None,
        };
        let (mut adaptive, mut growth) = match self.pattern {
            FsaiPattern::Adaptive(growth) => (true, growth),
            FsaiPattern::Static { .. } => (false, AdaptivePattern::DEFAULT),
        };
        let (mut power, mut prefilter) = static_of(self.pattern)
            .or(static_of(FsaiPattern::STATIC))
            .expect("STATIC is static");
        let mut settings = *self;
        let (mut adaptive_key, mut static_key) = (None, None);
        for (key, value) in pairs {
            let lower = key.to_ascii_lowercase();
            match lower.as_str() {
                "pattern" => {
                    adaptive = match value.to_ascii_lowercase().as_str() {
                        "adaptive" => true,
                        "static" => false,
                        _ => {
                            return Err(format!(
                                "unknown FSAI pattern '{value}' (choose one of adaptive, static)"
                            ))
                        }
                    }
                }
                "steps" => growth.steps = count(key, value)?,
                "stepsize" => growth.step_size = count(key, value)?,
                "epsilon" => growth.epsilon = number(key, value)?,
                "stop" => growth.stop = value.parse()?,
                "power" => power = count(key, value)?,
                "prefilter" => prefilter = number(key, value)?,
                "postfilter" => settings.postfilter = number(key, value)?,
                "precision" => {
                    settings.precision = value
                        .parse()
                        .map_err(|e: String| format!("FSAI precision: {e}"))?
                }
                _ => return Err(format!("unknown FSAI parameter '{key}' ({KEYS})")),
            }
            match lower.as_str() {
                "steps" | "stepsize" | "epsilon" | "stop" => adaptive_key = Some(key),
                "power" | "prefilter" => static_key = Some(key),
                _ => {}
            }
        }
        settings.pattern = if adaptive {
            if let Some(k) = static_key {
                return Err(format!(
                    "FSAI {k} applies to pattern static, but the pattern is adaptive"
                ));
            }
            FsaiPattern::Adaptive(growth)
        } else {
            if let Some(k) = adaptive_key {
                return Err(format!(
                    "FSAI {k} applies to pattern adaptive, but the pattern is static"
                ));
            }
            FsaiPattern::Static { power, prefilter }
        };
        settings.validate()?;
        Ok(settings)
    }

    /// E.g. `FSAI (adaptive, 10 steps of 1, epsilon 0.005, stagnation, double precision)`.
    pub fn describe(&self) -> String {
        let pattern = match self.pattern {
            FsaiPattern::Static { power, prefilter } => {
                format!("static, power {power}, prefilter {}", format_g(prefilter))
            }
            FsaiPattern::Adaptive(growth) => format!(
                "adaptive, {} steps of {}, epsilon {}, {}",
                growth.steps,
                growth.step_size,
                format_g(growth.epsilon),
                growth.stop.name()
            ),
        };
        let post = if self.postfilter > 0.0 {
            format!(", postfilter {}", format_g(self.postfilter))
        } else {
            String::new()
        };
        format!(
            "FSAI ({pattern}{post}, {} precision setup)",
            self.precision.name()
        )
    }
}

impl fmt::Display for FsaiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl FromStr for FsaiSettings {
    type Err = String;
    /// `fsai` (the defaults) or `fsai:key=value,...` (`:` or `,` between
    /// pairs) with the keys of [`FsaiSettings::from_keys`], e.g.
    /// `fsai:steps=20,epsilon=0.001` or `fsai:pattern=static:power=2`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (head, rest) = s.split_once(':').unwrap_or((s, ""));
        if !head.eq_ignore_ascii_case("fsai") {
            return Err(format!(
                "'{s}' is not an FSAI specification (fsai[:key=value,...])"
            ));
        }
        let pairs = rest
            .split([':', ','])
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.trim(), v.trim()))
                    .ok_or_else(|| format!("FSAI parameter '{p}' must be key=value ({KEYS})"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_keys(pairs)
    }
}

/// What the setup produced besides G.
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiStats {
    /// μ = nnz(G) / nnz(A).
    pub density: f64,
    /// μ₀: the density before the postfilter.
    pub density_before_postfilter: f64,
    /// Entry k: rows that took k adaptive steps (static: every row takes 1).
    pub rows_by_steps: Vec<usize>,
    /// Rows where a pivot or ψ was not positive (f32, or a singular matrix):
    /// they keep their last good state.
    pub fallback_rows: usize,
}

/// The factor G (lower, sorted columns, so the diagonal is last in each row).
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiFactor {
    pub g: Csr,
    pub stats: FsaiStats,
}

/// a_{r,c} in precision T, 0 when (r, c) is not stored.
fn entry<T: Real>(a: &Csr, r: usize, c: usize) -> T {
    stored(a, r, c).unwrap_or(T::ZERO)
}

/// a_{r,c} in precision T, if (r, c) is stored.
fn stored<T: Real>(a: &Csr, r: usize, c: usize) -> Option<T> {
    let (cols, vals) = a.row(r);
    cols.binary_search(&(c as u32))
        .ok()
        .map(|k| T::from_f64(vals[k]))
}

/// One row's growing system: its pattern in insertion order, the packed
/// lower Cholesky factor L of A[cols, cols] (row m at m(m+1)/2), y = L⁻¹(−r),
/// r = A[cols, i], the solution g and ψ.
#[derive(Clone, Debug)]
pub struct RowSystem<T> {
    pub row: usize,
    pub cols: Vec<u32>,
    pub l: Vec<T>,
    pub y: Vec<T>,
    pub g: Vec<T>,
    pub psi: T,
}

/// A pivot or ψ that is not positive (the row keeps its last good state).
#[derive(Debug)]
struct Breakdown;

impl<T: Real> RowSystem<T> {
    /// The empty pattern of row `i` (G̃ = I, ψ = a_ii).
    pub fn new(a: &Csr, i: usize) -> Self {
        let mut system = Self::unset();
        system.reset(a, i);
        system
    }

    /// No row yet, no room: [`Self::reset`] makes it a row's.
    fn unset() -> Self {
        Self {
            row: 0,
            cols: Vec::new(),
            l: Vec::new(),
            y: Vec::new(),
            g: Vec::new(),
            psi: T::ZERO,
        }
    }

    /// [`Self::new`] in place, keeping the vectors' room (no allocation
    /// from row to row).
    fn reset(&mut self, a: &Csr, i: usize) {
        self.row = i;
        self.cols.clear();
        self.l.clear();
        self.y.clear();
        self.g.clear();
        self.psi = entry(a, i, i);
    }

    fn l_at(&self, r: usize, c: usize) -> T {
        self.l[r * (r + 1) / 2 + c]
    }

    /// Step 3: extends L, y and ψ by column c. On a breakdown nothing changes.
    fn append(&mut self, a: &Csr, c: usize) -> Result<(), Breakdown> {
        let m = self.cols.len();
        let base = m * (m + 1) / 2;
        self.l.truncate(base);
        for q in 0..m {
            let mut s: T = entry(a, c, self.cols[q] as usize);
            for t in 0..q {
                s = s - self.l[base + t] * self.l_at(q, t);
            }
            let v = s / self.l_at(q, q);
            self.l.push(v);
        }
        let mut s: T = entry(a, c, c);
        for t in 0..m {
            s = s - self.l[base + t] * self.l[base + t];
        }
        if !(s > T::ZERO && s.is_finite()) {
            self.l.truncate(base);
            return Err(Breakdown);
        }
        let d = s.sqrt();
        self.l.push(d);
        // −a_ci, or +0.0 when not stored (not −0.0).
        let mut rr: T = stored::<T>(a, c, self.row).map_or(T::ZERO, |v| -v);
        for t in 0..m {
            rr = rr - self.l[base + t] * self.y[t];
        }
        let ym = rr / d;
        self.y.push(ym);
        self.cols.push(c as u32);
        self.psi = self.psi - ym * ym;
        Ok(())
    }

    /// Drops the columns from `len` on (L, y), restoring ψ.
    fn truncate(&mut self, len: usize, psi: T) {
        self.cols.truncate(len);
        self.l.truncate(len * (len + 1) / 2);
        self.y.truncate(len);
        self.psi = psi;
    }

    /// Step 4: g = L⁻ᵀ y.
    fn back_solve(&mut self) {
        let m = self.cols.len();
        self.g.clear();
        self.g.resize(m, T::ZERO);
        for q in (0..m).rev() {
            let mut s = self.y[q];
            for t in q + 1..m {
                s = s - self.l_at(t, q) * self.g[t];
            }
            self.g[q] = s / self.l_at(q, q);
        }
    }

    /// Appends `cols` one by one and solves; a pivot or ψ that is not
    /// positive keeps the columns before it (returns false).
    fn factor_all(&mut self, a: &Csr, cols: &[u32]) -> bool {
        let mut ok = true;
        for &c in cols {
            let (len, psi) = (self.cols.len(), self.psi);
            if self.append(a, c as usize).is_err() {
                ok = false;
                break;
            }
            if !(self.psi > T::ZERO && self.psi.is_finite()) {
                self.truncate(len, psi);
                ok = false;
                break;
            }
        }
        self.back_solve();
        ok
    }

    /// Step 1–2: the Kaporin gradient v = A g̃ᵀ over j < i (32-slot tree sum)
    /// and the `step_size` columns with the largest |v_j| not in the pattern
    /// (ties: smaller j), largest first, into `picks` (cleared first), the
    /// gradient's buffers in `scratch`.
    fn candidates(
        &self,
        a: &Csr,
        step_size: usize,
        scratch: &mut GradientScratch<T>,
        picks: &mut Vec<u32>,
    ) {
        self.gradient_into(a, scratch);
        let best = &mut scratch.out;
        best.sort_unstable_by(|x, y| {
            y.0.partial_cmp(&x.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(x.1.cmp(&y.1))
        });
        picks.clear();
        picks.extend(best.iter().take(step_size).map(|&(_, j)| j));
    }

    /// The slot rows of the gradient: (row, coefficient), slot 0 = row i with 1.
    fn slots(&self) -> impl Iterator<Item = (usize, T)> + '_ {
        std::iter::once((self.row, T::ONE)).chain(
            self.cols
                .iter()
                .zip(&self.g)
                .map(|(&c, &g)| (c as usize, g)),
        )
    }

    /// (|v_j|, j) for the candidates j (< i, not in the pattern, v_j ≠ 0),
    /// ascending j. The products of all slot rows are sorted by (j, slot);
    /// a column reached by one slot is that product (the tree adds only
    /// zeros to it), others go through the butterfly over the slots.
    #[cfg(test)]
    fn gradient(&self, a: &Csr) -> Vec<(T, u32)> {
        let mut scratch = GradientScratch::default();
        self.gradient_into(a, &mut scratch);
        scratch.out
    }

    /// [`Self::gradient`] into `scratch.out`, with the scratch's buffers.
    fn gradient_into(&self, a: &Csr, scratch: &mut GradientScratch<T>) {
        let i = self.row;
        let width = (self.cols.len() + 1).next_power_of_two();
        let GradientScratch {
            items,
            pattern,
            out,
        } = scratch;
        items.clear();
        for (t, (r, coef)) in self.slots().enumerate() {
            let (cols, vals) = a.row(r);
            for (&j, &v) in cols.iter().zip(vals) {
                if j as usize >= i {
                    break;
                }
                items.push((j, t as u8, coef * T::from_f64(v)));
            }
        }
        items.sort_unstable_by_key(|e| (e.0, e.1));
        pattern.clear();
        pattern.extend_from_slice(&self.cols);
        pattern.sort_unstable();
        out.clear();
        let mut k = 0;
        while k < items.len() {
            let j = items[k].0;
            let e = k + items[k..].partition_point(|it| it.0 == j);
            let v = if e - k == 1 {
                items[k].2
            } else {
                let mut p = [T::ZERO; 32];
                for it in &items[k..e] {
                    p[it.1 as usize] = it.2;
                }
                tree_sum(&mut p, width)
            };
            if v != T::ZERO && pattern.binary_search(&j).is_err() {
                out.push((v.abs(), j));
            }
            k = e;
        }
    }
}

/// The buffers of [`RowSystem::gradient_into`], kept from row to row.
struct GradientScratch<T> {
    /// (column, slot, product) of the slot rows' entries below the row.
    items: Vec<(u32, u8, T)>,
    /// The row's pattern, sorted.
    pattern: Vec<u32>,
    /// (|v_j|, j) of the candidates.
    out: Vec<(T, u32)>,
}

impl<T> Default for GradientScratch<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            pattern: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// Everything one row's set-up needs, kept from row to row over a chunk of
/// rows, so that the rows allocate nothing once the buffers have grown: the
/// rows run on every core at once, and an allocation per row made 16
/// threads slower than 4 on a 16-core host.
struct RowScratch<T> {
    system: RowSystem<T>,
    gradient: GradientScratch<T>,
    picks: Vec<u32>,
    pattern: PatternScratch,
    /// A static pattern's columns, or the postfilter's kept ones.
    cols: Vec<u32>,
    /// The finished row of G, (column, value).
    entries: Vec<(u32, f64)>,
}

impl<T: Real> RowScratch<T> {
    fn new() -> Self {
        Self {
            system: RowSystem::unset(),
            gradient: GradientScratch::default(),
            picks: Vec::new(),
            pattern: PatternScratch::default(),
            cols: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// The xor butterfly over the first `width` (a power of two ≤ 32) slots:
/// p[l] += p[l + w] for w = width/2, …, 1; the result is p[0]. With the other
/// slots +0.0 this is the 32-slot sum of the spec up to the sign of a zero.
fn tree_sum<T: Real>(p: &mut [T; 32], width: usize) -> T {
    let mut w = width;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            p[l] = p[l] + p[l + w];
        }
    }
    p[0]
}

/// The outcome of one adaptive step.
#[derive(Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Columns added, the row goes on.
    Grown,
    /// Columns added and the stop rule fired.
    Stopped,
    /// No candidate column (row exhausted): nothing changed.
    Exhausted,
    /// A pivot or the new ψ was not positive: nothing changed.
    Breakdown,
}

impl<T: Real> RowSystem<T> {
    /// One adaptive step (steps 1–5 of the spec).
    /// The gradient's and the picks' buffers are `scratch` and `picks`.
    fn adaptive_step(
        &mut self,
        a: &Csr,
        growth: &AdaptivePattern,
        psi0: T,
        scratch: &mut GradientScratch<T>,
        picks: &mut Vec<u32>,
    ) -> StepOutcome {
        let AdaptivePattern {
            step_size,
            epsilon,
            stop,
            ..
        } = *growth;
        self.candidates(a, step_size, scratch, picks);
        if picks.is_empty() {
            return StepOutcome::Exhausted;
        }
        let (len, psi) = (self.cols.len(), self.psi);
        for &c in picks.iter() {
            if self.append(a, c as usize).is_err() {
                self.truncate(len, psi);
                return StepOutcome::Breakdown;
            }
        }
        let psi_new = self.psi;
        if !(psi_new > T::ZERO && psi_new.is_finite()) {
            self.truncate(len, psi);
            return StepOutcome::Breakdown;
        }
        self.back_solve();
        let eps = T::from_f64(epsilon);
        let stopped = match stop {
            FsaiStop::Stagnation => psi - psi_new < eps * psi,
            FsaiStop::Reduction => psi_new <= eps * psi0,
        };
        if stopped {
            StepOutcome::Stopped
        } else {
            StepOutcome::Grown
        }
    }

    /// Postfilter: drops |g_q| < δ and re-solves on the kept columns in
    /// insertion order. Returns false on a breakdown of the re-solve.
    /// The kept columns go through `kept`.
    fn postfilter(&mut self, a: &Csr, delta: f64, kept: &mut Vec<u32>) -> bool {
        let d = T::from_f64(delta);
        kept.clear();
        kept.extend(
            self.cols
                .iter()
                .zip(&self.g)
                .filter(|(_, g)| g.abs() >= d)
                .map(|(&c, _)| c),
        );
        if kept.len() == self.cols.len() {
            return true;
        }
        self.reset(a, self.row);
        self.factor_all(a, kept)
    }

    /// The row of G into `entries` (cleared first): (column, value) sorted
    /// by column, diagonal last.
    fn scaled_into(&self, entries: &mut Vec<(u32, f64)>) {
        let s = self.psi.sqrt();
        entries.clear();
        entries.extend(
            self.cols
                .iter()
                .zip(&self.g)
                .map(|(&c, &g)| (c, (g / s).to_f64())),
        );
        entries.sort_unstable_by_key(|e| e.0);
        entries.push((self.row as u32, (T::ONE / s).to_f64()));
    }
}

/// The static pattern of row i: columns j < i within `power` steps of i in
/// the graph of Ã (ascending).
#[cfg(test)]
fn static_pattern(a: &Csr, diag: &[f64], i: usize, power: usize, prefilter: f64) -> Vec<u32> {
    let mut out = Vec::new();
    let mut scratch = PatternScratch::default();
    static_pattern_into(a, diag, (i, power, prefilter), &mut scratch, &mut out);
    out
}

/// The buffers of [`static_pattern_into`], kept from row to row.
#[derive(Default)]
pub struct PatternScratch {
    reached: Vec<u32>,
    frontier: Vec<u32>,
    next: Vec<u32>,
}

/// [`static_pattern`] of row i (`power` steps, `prefilter`) appended to
/// `out`. The steps are breadth first over sorted vectors: each step's new
/// columns gathered from the frontier's kept entries, sorted, deduplicated
/// and merged into those reached, with no hashing and, over many rows, no
/// allocation (a hash set per row took 13 s on 16 cores for power 2 on
/// 8 M rows).
pub fn static_pattern_into(
    a: &Csr,
    diag: &[f64],
    (i, power, prefilter): (usize, usize, f64),
    scratch: &mut PatternScratch,
    out: &mut Vec<u32>,
) {
    let keep =
        |r: usize, c: usize, v: f64| c != r && v.abs() >= prefilter * (diag[r] * diag[c]).sqrt();
    let PatternScratch {
        reached,
        frontier,
        next,
    } = scratch;
    reached.clear();
    reached.push(i as u32);
    frontier.clear();
    frontier.push(i as u32);
    for _ in 0..power {
        next.clear();
        for &r in frontier.iter() {
            let (cols, vals) = a.row(r as usize);
            for (&c, &v) in cols.iter().zip(vals) {
                if keep(r as usize, c as usize, v) {
                    next.push(c);
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        next.retain(|c| reached.binary_search(c).is_err());
        if next.is_empty() {
            break;
        }
        reached.extend_from_slice(next);
        reached.sort_unstable();
        std::mem::swap(frontier, next);
    }
    out.extend(reached.iter().filter(|&&c| (c as usize) < i));
}

/// The finished rows of a chunk: G's rows one after the other, and the
/// statistics' counts.
struct ChunkRows {
    /// (column, value) of the rows, one row after the other.
    entries: Vec<(u32, f64)>,
    /// Entries of each row.
    lengths: Vec<u32>,
    /// Entry k: rows that took k steps.
    rows_by_steps: Vec<usize>,
    fallback_rows: usize,
    /// Entries before the postfilter, summed over the rows.
    nnz_before_postfilter: usize,
}

impl ChunkRows {
    /// The rows, each its (column, value) entries.
    fn rows(&self) -> impl Iterator<Item = &[(u32, f64)]> + '_ {
        let mut rest = self.entries.as_slice();
        self.lengths.iter().map(move |&len| {
            let (row, tail) = rest.split_at(len as usize);
            rest = tail;
            row
        })
    }
}

/// Row i of G appended to `out`, with `scratch`'s buffers.
fn setup_row<T: Real>(
    a: &Csr,
    diag: &[f64],
    (i, s): (usize, &FsaiSettings),
    scratch: &mut RowScratch<T>,
    out: &mut ChunkRows,
) {
    let RowScratch {
        system: row,
        gradient,
        picks,
        pattern,
        cols,
        entries,
    } = scratch;
    row.reset(a, i);
    let mut fallback = false;
    let mut steps_taken = 0;
    match s.pattern {
        FsaiPattern::Static { power, prefilter } => {
            cols.clear();
            static_pattern_into(a, diag, (i, power, prefilter), pattern, cols);
            fallback |= !row.factor_all(a, cols);
            steps_taken = 1;
        }
        FsaiPattern::Adaptive(growth) => {
            let psi0 = row.psi;
            for _ in 0..growth.steps {
                match row.adaptive_step(a, &growth, psi0, gradient, picks) {
                    StepOutcome::Grown => steps_taken += 1,
                    StepOutcome::Stopped => {
                        steps_taken += 1;
                        break;
                    }
                    StepOutcome::Exhausted => break,
                    StepOutcome::Breakdown => {
                        fallback = true;
                        break;
                    }
                }
            }
        }
    }
    out.nnz_before_postfilter += row.cols.len() + 1;
    if s.postfilter > 0.0 {
        fallback |= !row.postfilter(a, s.postfilter, cols);
    }
    row.scaled_into(entries);
    out.entries.extend_from_slice(entries);
    out.lengths.push(entries.len() as u32);
    out.rows_by_steps[steps_taken] += 1;
    out.fallback_rows += usize::from(fallback);
}

/// Rows `rows` of G, their buffers kept from row to row.
fn setup_chunk<T: Real>(
    a: &Csr,
    diag: &[f64],
    s: &FsaiSettings,
    rows: std::ops::Range<usize>,
    steps_max: usize,
) -> ChunkRows {
    let mut out = ChunkRows {
        entries: Vec::new(),
        lengths: Vec::with_capacity(rows.len()),
        rows_by_steps: vec![0; steps_max + 1],
        fallback_rows: 0,
        nnz_before_postfilter: 0,
    };
    let mut scratch = RowScratch::<T>::new();
    for i in rows {
        setup_row(a, diag, (i, s), &mut scratch, &mut out);
    }
    out
}

/// Rows per parallel task.
const CHUNK: usize = 2048;

/// The CPU reference setup of G for the symmetric matrix `a` (sorted
/// columns, positive diagonal), rows in parallel; the result does not depend
/// on the number of threads.
pub fn fsai_setup(a: &Csr, s: &FsaiSettings) -> Result<FsaiFactor, SolveError> {
    s.validate().map_err(SolveError::InvalidControls)?;
    let n = square_size(a)?;
    let diag = fsai_diagonal(a)?;
    let steps_max = match s.pattern {
        FsaiPattern::Static { .. } => 1,
        FsaiPattern::Adaptive(growth) => growth.steps,
    };
    let chunks: Vec<ChunkRows> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let rows = c * CHUNK..((c + 1) * CHUNK).min(n);
            match s.precision {
                Precision::Double => setup_chunk::<f64>(a, &diag, s, rows, steps_max),
                Precision::Mixed => setup_chunk::<f32>(a, &diag, s, rows, steps_max),
            }
        })
        .collect();
    let mut rows_by_steps = vec![0; steps_max + 1];
    let (mut fallback_rows, mut nnz0) = (0, 0);
    for chunk in &chunks {
        for (total, k) in rows_by_steps.iter_mut().zip(&chunk.rows_by_steps) {
            *total += k;
        }
        fallback_rows += chunk.fallback_rows;
        nnz0 += chunk.nnz_before_postfilter;
    }
    if fallback_rows > 0 {
        log::warn!(
            "FSAI: {fallback_rows} rows broke down (a pivot or psi not positive) and kept \
             their last good pattern"
        );
    }
    let g =
        Csr::from_rows(n, chunks.iter().flat_map(ChunkRows::rows)).map_err(SolveError::Device)?;
    let nnz_a = a.nnz() as f64;
    Ok(FsaiFactor {
        stats: FsaiStats {
            density: g.nnz() as f64 / nnz_a,
            density_before_postfilter: nnz0 as f64 / nnz_a,
            rows_by_steps,
            fallback_rows,
        },
        g,
    })
}

/// a_ii for every row, checked positive and every value finite.
pub fn fsai_diagonal(a: &Csr) -> Result<Vec<f64>, SolveError> {
    // Rows in parallel (a search of each row for its diagonal: at 8 M rows
    // this was a sizeable part of the device set-up on one core); the errors
    // name the first such entry or row, as a scan in order would.
    if let Some(k) = a.values().par_iter().position_first(|v| !v.is_finite()) {
        let row = a.row_ptr().partition_point(|&p| p <= k) - 1;
        return Err(SolveError::NonFinite {
            what: "the matrix",
            row,
            value: a.values()[k],
        });
    }
    let diag: Vec<f64> = (0..a.n_rows())
        .into_par_iter()
        .map(|r| a.slot(r, r).map_or(0.0, |k| a.values()[k]))
        .collect();
    // Every value is finite here: not positive is d <= 0.
    if let Some(row) = diag.par_iter().position_first(|&d| d <= 0.0) {
        return Err(SolveError::NonPositiveDiagonal {
            precond: "FSAI",
            row,
            value: diag[row],
        });
    }
    Ok(diag)
}

/// The CPU preconditioner z = Gᵀ (G r).
pub struct FsaiPreconditioner {
    pub factor: FsaiFactor,
    pub gt: Csr,
}

impl FsaiPreconditioner {
    pub fn new(a: &Csr, s: &FsaiSettings) -> Result<Self, SolveError> {
        Ok(Self::from_factor(fsai_setup(a, s)?))
    }

    pub fn from_factor(factor: FsaiFactor) -> Self {
        let gt = factor.g.transpose();
        Self { factor, gt }
    }
}

impl LinearOperator for FsaiPreconditioner {
    fn n(&self) -> usize {
        self.gt.n_rows()
    }
    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let mut t = vec![0.0; r.len()];
        self.factor.g.spmv(r, &mut t);
        self.gt.spmv(&t, z);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, random_symmetric};

    fn laplacian_1d(n: usize) -> Csr {
        let mut t = Vec::new();
        for i in 0..n as u32 {
            t.push((i, i, 2.0));
            if i > 0 {
                t.push((i, i - 1, -1.0));
                t.push((i - 1, i, -1.0));
            }
        }
        Csr::from_triplets(n, n, t).unwrap()
    }

    /// One column per step, no stop rule (ε 0): the tests step a row by hand.
    const ONE_COLUMN: AdaptivePattern = AdaptivePattern {
        steps: 1,
        step_size: 1,
        epsilon: 0.0,
        stop: FsaiStop::Stagnation,
    };

    /// The static pattern is the set a plain breadth-first search with a
    /// hash set of the reached columns gives: the columns below i within
    /// `power` kept steps of i.
    #[test]
    fn static_pattern_is_the_breadth_first_set_below_the_row() {
        for seed in 0..4 {
            let a = random_symmetric(300, 6, seed);
            let diag: Vec<f64> = (0..300).map(|i| 1.0 + (i % 5) as f64).collect();
            for (power, prefilter) in [(1, 0.0), (2, 0.0), (3, 0.0), (2, 0.2), (4, 0.1)] {
                for i in (0..300).step_by(7) {
                    let mut seen = std::collections::HashSet::from([i as u32]);
                    let mut frontier = vec![i as u32];
                    for _ in 0..power {
                        let mut next = Vec::new();
                        for &r in &frontier {
                            let (cols, vals) = a.row(r as usize);
                            for (&c, &v) in cols.iter().zip(vals) {
                                let (r, cu) = (r as usize, c as usize);
                                let kept =
                                    cu != r && v.abs() >= prefilter * (diag[r] * diag[cu]).sqrt();
                                if kept && seen.insert(c) {
                                    next.push(c);
                                }
                            }
                        }
                        frontier = next;
                    }
                    let mut expected: Vec<u32> =
                        seen.into_iter().filter(|&c| (c as usize) < i).collect();
                    expected.sort_unstable();
                    assert_eq!(
                        static_pattern(&a, &diag, i, power, prefilter),
                        expected,
                        "seed {seed}, row {i}, power {power}, prefilter {prefilter}"
                    );
                }
            }
        }
    }

    #[test]
    fn full_pattern_gives_the_inverse_cholesky_factor() {
        let n = 9;
        let a = laplacian_1d(n);
        let l = dense(&a).cholesky().unwrap().l();
        let exact = l.try_inverse().unwrap();
        let full_static = FsaiSettings {
            pattern: FsaiPattern::Static {
                power: n - 1,
                prefilter: 0.0,
            },
            ..FsaiSettings::default()
        };
        for s in [
            FsaiSettings::adaptive(n - 1, 0.0, FsaiStop::Stagnation),
            full_static,
        ] {
            let f = fsai_setup(&a, &s).unwrap();
            let g = dense(&f.g);
            for r in 0..n {
                for c in 0..n {
                    assert!(
                        (g[(r, c)] - exact[(r, c)]).abs() < 1e-13,
                        "{s}: G({r},{c}) = {} vs {}",
                        g[(r, c)],
                        exact[(r, c)]
                    );
                }
                // Full lower rows, diagonal last.
                assert_eq!(f.g.row(r).0.len(), r + 1);
                assert_eq!(*f.g.row(r).0.last().unwrap() as usize, r);
            }
            assert_eq!(f.stats.fallback_rows, 0);
        }
    }

    /// diag(G A Gᵀ) for each row.
    fn scaled_diagonal(a: &Csr, g: &Csr) -> Vec<f64> {
        (0..a.n_rows())
            .map(|i| {
                let (gc, gv) = g.row(i);
                let mut s = 0.0;
                for (&p, &gp) in gc.iter().zip(gv) {
                    for (&q, &gq) in gc.iter().zip(gv) {
                        let apq = a
                            .slot(p as usize, q as usize)
                            .map_or(0.0, |k| a.values()[k]);
                        s += gp * apq * gq;
                    }
                }
                s
            })
            .collect()
    }

    fn variants() -> Vec<FsaiSettings> {
        let mut v = vec![
            FsaiSettings::default(),
            FsaiSettings::adaptive(20, 1e-3, FsaiStop::Reduction),
            FsaiSettings {
                pattern: FsaiPattern::Adaptive(AdaptivePattern {
                    steps: 5,
                    step_size: 3,
                    epsilon: 0.01,
                    stop: FsaiStop::Stagnation,
                }),
                ..FsaiSettings::default()
            },
        ];
        for power in [1, 2] {
            v.push(FsaiSettings {
                pattern: FsaiPattern::Static {
                    power,
                    prefilter: 0.05,
                },
                ..FsaiSettings::default()
            });
        }
        let with_post: Vec<_> = v
            .iter()
            .map(|s| FsaiSettings {
                postfilter: 0.05,
                ..*s
            })
            .collect();
        v.extend(with_post);
        v
    }

    #[test]
    fn rows_are_scaled_to_a_unit_diagonal() {
        let a = random_symmetric(600, 8, 7);
        for s in variants() {
            for precision in [Precision::Double, Precision::Mixed] {
                let s = FsaiSettings { precision, ..s };
                let f = fsai_setup(&a, &s).unwrap();
                let tol = if precision == Precision::Double {
                    1e-13
                } else {
                    1e-5
                };
                for (i, d) in scaled_diagonal(&a, &f.g).iter().enumerate() {
                    assert!((d - 1.0).abs() < tol, "{s}: row {i}: {d}");
                }
                assert_eq!(f.stats.fallback_rows, 0, "{s}");
                assert_eq!(f.stats.rows_by_steps.iter().sum::<usize>(), 600);
                assert!(f.stats.density <= f.stats.density_before_postfilter);
                if s.postfilter > 0.0 {
                    assert!(f.stats.density < f.stats.density_before_postfilter, "{s}");
                }
            }
        }
    }

    #[test]
    fn kaporin_psi_decreases_every_step_and_matches_the_solution() {
        let a = random_symmetric(300, 8, 11);
        let mut steps = 0;
        for i in 0..a.n_rows() {
            let mut row = RowSystem::<f64>::new(&a, i);
            let psi0 = row.psi;
            let (mut scratch, mut picks) = (GradientScratch::default(), Vec::new());
            for _ in 0..15 {
                let before = row.psi;
                match row.adaptive_step(&a, &ONE_COLUMN, psi0, &mut scratch, &mut picks) {
                    StepOutcome::Grown | StepOutcome::Stopped => steps += 1,
                    other => {
                        assert_eq!(other, StepOutcome::Exhausted, "row {i}");
                        break;
                    }
                }
                assert!(row.psi < before, "row {i}: psi {} -> {}", before, row.psi);
                // ψ = a_ii + g · A[cols, i] at the solution.
                let dot: f64 = row
                    .cols
                    .iter()
                    .zip(&row.g)
                    .map(|(&c, g)| g * entry::<f64>(&a, c as usize, i))
                    .sum();
                let psi = entry::<f64>(&a, i, i) + dot;
                assert!((psi - row.psi).abs() < 1e-12 * psi0, "row {i}");
            }
        }
        assert!(steps > 1000, "{steps}");
    }

    /// The gradient as the spec writes it: a merge over the 32 slots, every
    /// column through the full 32-slot butterfly.
    fn gradient_reference<T: Real>(row: &RowSystem<T>, a: &Csr) -> Vec<(T, u32)> {
        let i = row.row;
        let slots: Vec<(usize, T)> = row.slots().collect();
        let mut pos: Vec<usize> = slots.iter().map(|s| a.row_ptr()[s.0]).collect();
        let end: Vec<usize> = slots
            .iter()
            .map(|s| a.row_ptr()[s.0] + a.row(s.0).0.partition_point(|&j| (j as usize) < i))
            .collect();
        let mut out = Vec::new();
        while let Some(j) = (0..slots.len())
            .filter(|&t| pos[t] < end[t])
            .map(|t| a.cols()[pos[t]])
            .min()
        {
            let mut p = [T::ZERO; 32];
            for t in 0..slots.len() {
                if pos[t] < end[t] && a.cols()[pos[t]] == j {
                    p[t] = slots[t].1 * T::from_f64(a.values()[pos[t]]);
                    pos[t] += 1;
                }
            }
            let v = tree_sum(&mut p, 32);
            if v != T::ZERO && !row.cols.contains(&j) {
                out.push((v.abs(), j));
            }
        }
        out
    }

    fn check_gradient<T: Real>(a: &Csr) -> usize {
        let mut checked = 0;
        for i in 0..a.n_rows() {
            let mut row = RowSystem::<T>::new(a, i);
            let psi0 = row.psi;
            let (mut scratch, mut picks) = (GradientScratch::default(), Vec::new());
            for _ in 0..31 {
                let bits = |v: Vec<(T, u32)>| -> Vec<(u64, u32)> {
                    v.into_iter()
                        .map(|(x, j)| (x.to_f64().to_bits(), j))
                        .collect()
                };
                assert_eq!(
                    bits(row.gradient(a)),
                    bits(gradient_reference(&row, a)),
                    "row {i}, {} columns",
                    row.cols.len()
                );
                checked += 1;
                let step = row.adaptive_step(a, &ONE_COLUMN, psi0, &mut scratch, &mut picks);
                if step != StepOutcome::Grown {
                    break;
                }
            }
        }
        checked
    }

    #[test]
    fn gradient_equals_the_32_slot_butterfly() {
        let a = random_symmetric(400, 10, 13);
        assert!(check_gradient::<f64>(&a) > 2000);
        assert!(check_gradient::<f32>(&a) > 2000);
    }

    #[test]
    fn mixed_setup_is_close_to_double() {
        let a = random_symmetric(500, 8, 5);
        let d = fsai_setup(&a, &FsaiSettings::default()).unwrap();
        let m = fsai_setup(
            &a,
            &FsaiSettings {
                precision: Precision::Mixed,
                ..FsaiSettings::default()
            },
        )
        .unwrap();
        // Same pattern unless a near-tie in the gradient; values to f32 accuracy.
        let same = (0..500).filter(|&r| d.g.row(r).0 == m.g.row(r).0).count();
        assert!(same >= 490, "{same}");
        for r in (0..500).filter(|&r| d.g.row(r).0 == m.g.row(r).0) {
            for (x, y) in d.g.row(r).1.iter().zip(m.g.row(r).1) {
                assert!(
                    (x - y).abs() < 1e-5 * (1.0 + x.abs()),
                    "row {r}: {x} vs {y}"
                );
            }
        }
    }

    #[test]
    fn bad_settings_and_matrices_are_errors() {
        let a = laplacian_1d(5);
        let err =
            fsai_setup(&a, &FsaiSettings::adaptive(32, 0.01, FsaiStop::Stagnation)).unwrap_err();
        assert!(err.to_string().contains("at most 31"), "{err}");
        let s: Result<FsaiSettings, _> = "fsai:steps=16,stepSize=2".parse();
        assert!(s.unwrap_err().contains("16 * 2 = 32"));
        assert!("fsai:steps=10:stepSize=3".parse::<FsaiSettings>().is_ok());
        let bad = crate::solve::error::non_positive::matrix();
        let err = fsai_setup(&bad, &FsaiSettings::default()).unwrap_err();
        assert_eq!(
            err,
            SolveError::NonPositiveDiagonal {
                precond: "FSAI",
                row: 1,
                value: -3.0
            }
        );
        let missing = Csr::new(2, vec![0, 1, 2], vec![0, 0], vec![1., 0.5]).unwrap();
        assert!(matches!(
            fsai_setup(&missing, &FsaiSettings::default()),
            Err(SolveError::NonPositiveDiagonal { row: 1, .. })
        ));
        crate::test_support::assert_parse_refused::<FsaiSettings>(&[
            ("fsai:power=2", "applies to pattern static"),
            ("fsai:pattern=static:steps=3", "applies to pattern adaptive"),
            ("fsai:pattern=dynamic", "adaptive, static"),
            ("fsai:steps=x", "whole number"),
            ("fsai:epsilon=-1", "epsilon"),
            ("fsai:stop=never", "stagnation, reduction"),
            ("fsai:pattern=static:power=0", "power"),
            ("fsai:precision=half", "double, mixed"),
            ("fsai:colour=red", "unknown FSAI parameter"),
            ("fsai:steps", "key=value"),
        ]);
        assert_eq!(
            "FSAI:pattern=static,power=2,prefilter=0.05".parse::<FsaiSettings>(),
            Ok(FsaiSettings {
                pattern: FsaiPattern::Static {
                    power: 2,
                    prefilter: 0.05
                },
                ..FsaiSettings::default()
            })
        );
    }

    #[test]
    fn preconditioner_applies_gt_g() {
        let a = random_symmetric(200, 6, 3);
        let p = FsaiPreconditioner::new(&a, &FsaiSettings::default()).unwrap();
        let g = dense(&p.factor.g);
        let r: Vec<f64> = (0..200).map(|i| (i as f64 * 0.37).sin()).collect();
        let mut z = vec![0.0; 200];
        p.apply(&r, &mut z);
        let expect = g.transpose() * (&g * nalgebra::DVector::from_column_slice(&r));
        for i in 0..200 {
            assert!((z[i] - expect[i]).abs() < 1e-13 * (1.0 + expect[i].abs()));
        }
    }
}
