//! Symmetric diagonal equilibration (Wikberg 2024, §6.5–6.6, with the errata of
//! §11.11 fixed): PCG solves the scaled system Â y = b̂ with Â = S A S,
//! b̂ = S b and x = S y, for a positive diagonal S. Â is symmetric positive
//! (semi-)definite when A is, so CG applies unchanged.
//!
//! - **Jacobi scaling**: s_i = 1/√a_ii, so Â has a unit diagonal. Plain CG on
//!   Â takes the same steps as Jacobi-PCG on A (exact arithmetic), without
//!   the z = D⁻¹ r pass (Wikberg 2024, §6.6: "explicit" Jacobi).
//! - **Ruiz** (Knight–Ruiz–Uçar symmetric Ruiz, Wikberg's (2024) Algorithm 4 with
//!   the square root applied once and the absolute value in the deviation):
//!   starting from S = I, each sweep takes the row norms r_i of Â (∞-norm or
//!   2-norm, diagonal included) and sets s_i ← s_i / √r_i, until
//!   max_i |1 − r_i| ≤ tolerance or `max_sweeps`. In the ∞-norm on a matrix
//!   whose rows and columns are dominated by a positive diagonal (every FVM
//!   Laplacian here) the first sweep gives exactly the Jacobi scaling and the
//!   second finds it converged; the 2-norm (Wikberg's choice) gives a
//!   different scaling.
//!
//! Convergence is still tested on the ORIGINAL system: the residual of A x = b
//! is r = S⁻¹ r̂, so the backends sum |r_i| = |r̂_i| / s_i with the weights
//! [`Equilibration::unscale`], and OpenFOAM's normFactor is built from
//! A x = S⁻¹ Â y, b = S⁻¹ b̂, mean(x) = mean(S y) and the row sums of the
//! original A ([`Equilibration::row_sums`]). The normalised residuals are thus
//! those of the unscaled solve up to rounding, and the same tolerance, relTol
//! and maxIter mean the same thing.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use super::row_sums::openfoam_row_sums;
use super::SolveError;
use crate::foam::write::format_g;
use crate::sparse::ordering::Permutation;
use crate::sparse::Csr;

/// Which row norm Ruiz equilibrates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuizNorm {
    /// max_j |â_ij| (Knight–Ruiz–Uçar; converges at rate 1/2 or better).
    Inf,
    /// (Σ_j â_ij²)^½ (Wikberg's (2024) choice, §6.5).
    Two,
}

/// Settings of Ruiz equilibration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuizSettings {
    pub norm: RuizNorm,
    /// Stop when every row norm is within this of 1.
    pub tolerance: f64,
    /// At most this many scaling sweeps (the result is used even when the
    /// tolerance was not reached: any positive scaling is valid).
    pub max_sweeps: usize,
}

impl Default for RuizSettings {
    fn default() -> Self {
        Self {
            norm: RuizNorm::Inf,
            tolerance: 1e-6,
            max_sweeps: 50,
        }
    }
}

/// Which equilibration PCG applies before solving (a solver setting, next to
/// the preconditioner, which then acts on the scaled system).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum EquilibrationKind {
    /// Solve A x = b as given.
    #[default]
    None,
    /// s_i = 1/√a_ii (unit diagonal).
    Jacobi,
    Ruiz(RuizSettings),
}

impl EquilibrationKind {
    /// The scaling of `a` (square, symmetric, positive diagonal); `None` for
    /// [`EquilibrationKind::None`].
    pub fn build(&self, a: &Csr) -> Result<Option<Equilibration>, SolveError> {
        match self {
            Self::None => Ok(None),
            Self::Jacobi => Equilibration::jacobi(a).map(Some),
            Self::Ruiz(settings) => Equilibration::ruiz(a, settings).map(Some),
        }
    }
}

impl fmt::Display for EquilibrationKind {
    /// The form [`FromStr`] reads (`none`, `jacobi`, `ruiz:norm=inf:tol=1e-6:sweeps=50`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Jacobi => f.write_str("jacobi"),
            Self::Ruiz(s) => write!(
                f,
                "ruiz:norm={}:tol={}:sweeps={}",
                match s.norm {
                    RuizNorm::Inf => "inf",
                    RuizNorm::Two => "2",
                },
                format_g(s.tolerance),
                s.max_sweeps
            ),
        }
    }
}

impl FromStr for EquilibrationKind {
    type Err = String;
    /// `none`, `jacobi`, or `ruiz` with optional `:norm=inf|2`, `:tol=X`,
    /// `:sweeps=N` (defaults: [`RuizSettings::default`]).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let name = parts.next().unwrap_or_default();
        let options: Vec<&str> = parts.collect();
        let kind = match name.to_ascii_lowercase().as_str() {
            "none" => Self::None,
            "jacobi" => Self::Jacobi,
            "ruiz" => {
                let mut settings = RuizSettings::default();
                for option in &options {
                    let (key, value) = option.split_once('=').ok_or_else(|| {
                        format!("equilibration '{s}': option '{option}' must be key=value")
                    })?;
                    let bad = || format!("equilibration '{s}': bad value '{value}' for {key}");
                    match key {
                        "norm" => {
                            settings.norm = match value {
                                "inf" => RuizNorm::Inf,
                                "2" => RuizNorm::Two,
                                _ => return Err(format!("{} (choose inf or 2)", bad())),
                            }
                        }
                        "tol" => settings.tolerance = value.parse().map_err(|_| bad())?,
                        "sweeps" => settings.max_sweeps = value.parse().map_err(|_| bad())?,
                        _ => {
                            return Err(format!(
                                "equilibration '{s}': unknown option '{key}' (norm, tol, sweeps)"
                            ))
                        }
                    }
                }
                if !(settings.tolerance.is_finite() && settings.tolerance >= 0.0) {
                    return Err(format!(
                        "equilibration '{s}': tol must be a finite number >= 0"
                    ));
                }
                if settings.max_sweeps == 0 {
                    return Err(format!("equilibration '{s}': sweeps must be at least 1"));
                }
                return Ok(Self::Ruiz(settings));
            }
            _ => {
                return Err(format!(
                    "unknown equilibration '{s}' (choose none, jacobi or \
                     ruiz[:norm=inf|2][:tol=X][:sweeps=N])"
                ))
            }
        };
        if options.is_empty() {
            Ok(kind)
        } else {
            Err(format!(
                "equilibration '{name}' takes no options, got '{s}'"
            ))
        }
    }
}

/// A computed scaling S of one matrix, with what the backends need to map
/// vectors in and out and to test convergence on the original system.
#[derive(Clone, Debug, PartialEq)]
pub struct Equilibration {
    /// s_i > 0.
    scale: Vec<f64>,
    /// 1/s_i: the original residual is r_i = r̂_i / s_i.
    unscale: Vec<f64>,
    /// rowSum(A) of the original matrix, in the CPU backend's order.
    row_sums: Vec<f64>,
    /// Ruiz sweeps done (1 for Jacobi).
    sweeps: usize,
    /// max_i |1 − r_i| of the final scaling (Ruiz), 0 for Jacobi.
    deviation: f64,
}

impl Equilibration {
    /// s_i = 1/√a_ii.
    pub fn jacobi(a: &Csr) -> Result<Self, SolveError> {
        let diag = positive_diagonal(a, "Jacobi scaling")?;
        Ok(Self::from_scale(
            a,
            diag.iter().map(|d| 1.0 / d.sqrt()).collect(),
            1,
            0.0,
        ))
    }

    /// Symmetric Ruiz sweeps from S = I (module documentation).
    pub fn ruiz(a: &Csr, settings: &RuizSettings) -> Result<Self, SolveError> {
        positive_diagonal(a, "Ruiz equilibration")?;
        let mut scale = vec![1.0; a.n_rows()];
        let mut sweeps = 0;
        loop {
            let norms = scaled_row_norms(a, &scale, settings.norm);
            let deviation = norms.iter().fold(0.0f64, |m, r| m.max((1.0 - r).abs()));
            if !deviation.is_finite() {
                return Err(SolveError::InvalidControls(format!(
                    "Ruiz equilibration: a row norm became {deviation} after {sweeps} sweeps \
                     (overflow); use jacobi equilibration"
                )));
            }
            if deviation <= settings.tolerance || sweeps == settings.max_sweeps {
                if deviation > settings.tolerance {
                    log::info!(
                        "Ruiz equilibration: deviation {} after {sweeps} sweeps (tolerance {})",
                        format_g(deviation),
                        format_g(settings.tolerance)
                    );
                }
                return Ok(Self::from_scale(a, scale, sweeps, deviation));
            }
            scale
                .par_iter_mut()
                .zip(&norms)
                .for_each(|(s, r)| *s /= r.sqrt());
            sweeps += 1;
        }
    }

    fn from_scale(a: &Csr, scale: Vec<f64>, sweeps: usize, deviation: f64) -> Self {
        Self {
            unscale: scale.iter().map(|s| 1.0 / s).collect(),
            scale,
            row_sums: openfoam_row_sums(a),
            sweeps,
            deviation,
        }
    }

    pub fn n(&self) -> usize {
        self.scale.len()
    }
    /// s_i.
    pub fn scale(&self) -> &[f64] {
        &self.scale
    }
    /// 1/s_i, the weights of the original residual.
    pub fn unscale(&self) -> &[f64] {
        &self.unscale
    }
    /// rowSum of the original matrix (OpenFOAM's normFactor needs it).
    pub fn row_sums(&self) -> &[f64] {
        &self.row_sums
    }
    pub fn sweeps(&self) -> usize {
        self.sweeps
    }
    pub fn deviation(&self) -> f64 {
        self.deviation
    }

    /// The same scaling for the matrix with rows and columns renumbered by
    /// `p` (`p.apply_symmetric(A)`).
    pub fn permuted(&self, p: &Permutation) -> Self {
        Self {
            scale: p.to_new(&self.scale),
            unscale: p.to_new(&self.unscale),
            row_sums: p.to_new(&self.row_sums),
            ..*self
        }
    }

    /// Â = S A S, â_ij = (s_i a_ij) s_j.
    pub fn scale_matrix(&self, a: &Csr) -> Csr {
        assert_eq!(a.n_rows(), self.n(), "scale_matrix: size");
        let mut scaled = a.clone();
        let (row_ptr, cols) = (a.row_ptr(), a.cols());
        let s = &self.scale;
        let mut rows: Vec<&mut [f64]> = Vec::with_capacity(self.n());
        let mut rest = scaled.values_mut();
        for r in 0..self.n() {
            let (row, tail) = rest.split_at_mut(row_ptr[r + 1] - row_ptr[r]);
            rows.push(row);
            rest = tail;
        }
        rows.into_par_iter().enumerate().for_each(|(r, values)| {
            let cols = &cols[row_ptr[r]..row_ptr[r + 1]];
            for (v, &c) in values.iter_mut().zip(cols) {
                *v = s[r] * *v * s[c as usize];
            }
        });
        scaled
    }

    /// b̂ = S b.
    pub fn scale_rhs(&self, b: &[f64]) -> Vec<f64> {
        multiply(&self.scale, b)
    }
    /// y = S⁻¹ x (an initial guess into the scaled system).
    pub fn to_scaled(&self, x: &[f64]) -> Vec<f64> {
        multiply(&self.unscale, x)
    }
    /// x = S y (a scaled solution back to the original unknowns).
    pub fn to_original(&self, y: &[f64]) -> Vec<f64> {
        multiply(&self.scale, y)
    }
}

fn multiply(d: &[f64], v: &[f64]) -> Vec<f64> {
    assert_eq!(d.len(), v.len(), "equilibration: vector length");
    d.par_iter().zip(v).map(|(d, v)| d * v).collect()
}

/// The diagonal of `a`, every entry positive (SPD needs it, and both scalings
/// take its square root).
fn positive_diagonal(a: &Csr, what: &'static str) -> Result<Vec<f64>, SolveError> {
    (0..a.n_rows())
        .map(|r| match a.slot(r, r).map(|s| a.values()[s]) {
            Some(d) if d > 0.0 => Ok(d),
            found => Err(SolveError::NonPositiveDiagonal {
                precond: what,
                row: r,
                value: found.unwrap_or(0.0),
            }),
        })
        .collect()
}

/// Row norms of S A S.
fn scaled_row_norms(a: &Csr, s: &[f64], norm: RuizNorm) -> Vec<f64> {
    (0..a.n_rows())
        .into_par_iter()
        .map(|r| {
            let (cols, vals) = a.row(r);
            let terms = cols
                .iter()
                .zip(vals)
                .map(|(&c, &v)| s[r] * v * s[c as usize]);
            match norm {
                RuizNorm::Inf => terms.fold(0.0f64, |m, t| m.max(t.abs())),
                RuizNorm::Two => terms.map(|t| t * t).sum::<f64>().sqrt(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::error::non_positive;
    use crate::sparse::testing::{random_symmetric, SplitMix};

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(a, b)| ((a - b) / b).abs())
            .fold(0.0, f64::max)
    }

    fn ruiz(norm: RuizNorm) -> EquilibrationKind {
        EquilibrationKind::Ruiz(RuizSettings {
            norm,
            ..Default::default()
        })
    }

    #[test]
    fn vectors_round_trip_and_the_scaled_matrix_is_s_a_s() {
        let a = random_symmetric(500, 6, 11);
        let mut rng = SplitMix(3);
        let x: Vec<f64> = (0..500).map(|_| rng.next_f64() - 0.5).collect();
        for kind in [EquilibrationKind::Jacobi, ruiz(RuizNorm::Two)] {
            let eq = kind.build(&a).unwrap().unwrap();
            let back = eq.to_original(&eq.to_scaled(&x));
            assert!(max_rel(&back, &x) <= 4.0 * f64::EPSILON, "{kind}");
            // Â y = S A S S⁻¹ x = S (A x).
            let scaled = eq.scale_matrix(&a);
            let (mut ax, mut ay) = (vec![0.0; 500], vec![0.0; 500]);
            a.spmv(&x, &mut ax);
            scaled.spmv(&eq.to_scaled(&x), &mut ay);
            let expected = eq.scale_rhs(&ax);
            let scale = expected.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let d = ay
                .iter()
                .zip(&expected)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(d <= 1e-13 * scale, "{kind}: {d}");
            assert!(crate::solve::cpu::check_symmetric(&scaled).is_ok());
        }
    }

    #[test]
    fn jacobi_scaling_has_a_unit_diagonal() {
        let a = random_symmetric(300, 8, 5);
        let eq = Equilibration::jacobi(&a).unwrap();
        let scaled = eq.scale_matrix(&a);
        for r in 0..300 {
            let d = scaled.values()[scaled.slot(r, r).unwrap()];
            assert!((d - 1.0).abs() <= 2.0 * f64::EPSILON, "row {r}: {d}");
        }
        assert_eq!((eq.sweeps(), eq.deviation()), (1, 0.0));
    }

    #[test]
    fn ruiz_reaches_unit_row_norms() {
        // Badly scaled rows: multiply a random SPD matrix by D A D with D spanning 1e-3..1e3.
        let base = random_symmetric(400, 8, 9);
        let d: Vec<f64> = (0..400)
            .map(|i| 10f64.powf(-3.0 + 6.0 * i as f64 / 399.0))
            .collect();
        let eq_d = Equilibration {
            scale: d.clone(),
            unscale: d.iter().map(|v| 1.0 / v).collect(),
            row_sums: vec![0.0; 400],
            sweeps: 0,
            deviation: 0.0,
        };
        let a = eq_d.scale_matrix(&base);
        for norm in [RuizNorm::Inf, RuizNorm::Two] {
            let settings = RuizSettings {
                norm,
                tolerance: 1e-10,
                max_sweeps: 200,
            };
            let eq = Equilibration::ruiz(&a, &settings).unwrap();
            let norms = scaled_row_norms(&a, eq.scale(), norm);
            let dev = norms.iter().fold(0.0f64, |m, r| m.max((1.0 - r).abs()));
            println!("{norm:?}: {} sweeps, deviation {dev:e}", eq.sweeps());
            assert!(eq.sweeps() < 200, "{norm:?} did not converge");
            assert_eq!(dev, eq.deviation());
            assert!(dev <= 1e-10, "{norm:?}: {dev}");
            // One sweep only: a valid scaling, reported as not converged.
            let one = Equilibration::ruiz(
                &a,
                &RuizSettings {
                    max_sweeps: 1,
                    ..settings
                },
            )
            .unwrap();
            assert_eq!(one.sweeps(), 1);
            assert!(one.deviation() > 1e-10);
        }
    }

    #[test]
    fn ruiz_inf_on_a_diagonally_dominant_matrix_is_the_jacobi_scaling() {
        let a = random_symmetric(200, 6, 2);
        let jacobi = Equilibration::jacobi(&a).unwrap();
        let ruiz = Equilibration::ruiz(&a, &RuizSettings::default()).unwrap();
        assert_eq!(ruiz.scale(), jacobi.scale());
        assert_eq!(ruiz.sweeps(), 1);
    }

    #[test]
    fn settings_parse_and_print_and_bad_input_is_named() {
        assert_eq!("none".parse(), Ok(EquilibrationKind::None));
        assert_eq!("Jacobi".parse(), Ok(EquilibrationKind::Jacobi));
        assert_eq!("ruiz".parse(), Ok(ruiz(RuizNorm::Inf)));
        let custom: EquilibrationKind = "ruiz:norm=2:tol=1e-8:sweeps=30".parse().unwrap();
        assert_eq!(
            custom,
            EquilibrationKind::Ruiz(RuizSettings {
                norm: RuizNorm::Two,
                tolerance: 1e-8,
                max_sweeps: 30
            })
        );
        assert_eq!(custom.to_string().parse(), Ok(custom));
        crate::test_support::assert_parse_refused::<EquilibrationKind>(&[
            ("ruz", "unknown equilibration 'ruz'"),
            ("ruiz:norm=1", "choose inf or 2"),
            ("ruiz:tol=-1", "tol must be"),
            ("ruiz:sweeps=0", "sweeps must be at least 1"),
            ("ruiz:steps=3", "unknown option 'steps'"),
            ("ruiz:tol", "must be key=value"),
            ("jacobi:tol=1", "takes no options"),
        ]);
    }

    #[test]
    fn a_non_positive_diagonal_is_refused_with_its_row() {
        let a = non_positive::matrix();
        for kind in [EquilibrationKind::Jacobi, ruiz(RuizNorm::Inf)] {
            non_positive::assert_refused(&kind.build(&a).unwrap_err(), &kind.to_string());
        }
        assert_eq!(EquilibrationKind::None.build(&a), Ok(None));
    }
}
