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

use super::algorithm::parse_value;
use super::from_str_by_name;
use super::scalar::Precision;
use crate::foam::write::format_g;

mod cpu;

pub use cpu::{
    fsai_diagonal, fsai_setup, static_pattern_into, FsaiFactor, FsaiPreconditioner, FsaiStats,
    PatternScratch, RowSystem, StepOutcome,
};

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
