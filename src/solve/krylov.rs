//! Krylov solvers for nonsymmetric systems (Yang 2015): the fused steps both
//! GMRES(m) (`gmres`) and BiCGStab (`bicgstab`) are written over, the CPU
//! (rayon) reference backend, and their settings.
//!
//! As for PCG (`pcg::CgBackend`), each algorithm is written once over a small
//! set of fused steps ([`KrylovBackend`]) that an executor
//! (`executor::Executor`) implements on its own vector type: [`CpuKrylovBackend`] here is the reference,
//! `gpu::krylov::GpuKrylovBackend` runs the same steps on the device. A step
//! that returns a number returns the reduction of the vector it wrote (an
//! SpMV with a dot product, an axpy with the next dot product of modified
//! Gram–Schmidt, ...), so that a device backend reads back one scalar per step.
//!
//! Preconditioners are a `precondition::Precondition` of the executor's
//! vectors (z = M⁻¹ v, no symmetry assumed): any `LinearOperator` on the CPU
//! (`Preconditioner::build` gives the named ones) and any
//! `gpu::smooth::DevicePreconditioner` on the GPU.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use std::convert::Infallible;

use super::algorithm::{parse_switch, parse_value};
use super::cpu::CpuBackend;
use super::precondition::{apply_infallible, Precondition};
use super::reduce::{chunked_sums, dot, sum_by, sum_pairs, CHUNK};
use super::{CgBackend, Executor, LinearOperator, OnExecutor};
use crate::sparse::Csr;

/// The entry points, kept at their old path (they live in `entry`).
pub use super::entry::{solve_krylov, solve_krylov_with};

/// The fused steps of GMRES and BiCGStab on an [`Executor`]'s vectors (the
/// initial residual, a · b and the device status are the executor's).
/// Reductions must be deterministic (same bits run to run).
pub trait KrylovBackend: Executor {
    /// r = b − A x; returns (Σ|r|, r · r).
    fn residual(&self, b: &Self::Vector, x: &Self::Vector, r: &mut Self::Vector) -> (f64, f64);
    /// z = M⁻¹ v (z fully overwritten).
    fn precondition(&self, v: &Self::Vector, z: &mut Self::Vector);
    /// y = A v; returns (y · w, y · y) (`w` = None: y · y twice).
    fn apply_operator(
        &self,
        v: &Self::Vector,
        y: &mut Self::Vector,
        w: Option<&Self::Vector>,
    ) -> (f64, f64);
    /// y = α x.
    fn scale(&self, alpha: f64, x: &Self::Vector, y: &mut Self::Vector);
    /// y += α x; returns y · w after the update (`w` = None: y · y).
    fn axpy_dot(
        &self,
        alpha: f64,
        x: &Self::Vector,
        y: &mut Self::Vector,
        w: Option<&Self::Vector>,
    ) -> f64;
    /// (v_i · w) for every v_i.
    fn multi_dot(&self, vs: &[&Self::Vector], w: &Self::Vector) -> Vec<f64>;
    /// y += Σ_i c_i v_i (i ascending, per element); returns y · y after.
    fn multi_axpy(&self, c: &[f64], vs: &[&Self::Vector], y: &mut Self::Vector) -> f64;
    /// BiCGStab direction p = r + β (p − ω v); β = 0 copies r.
    fn bicg_direction(
        &self,
        beta: f64,
        omega: f64,
        r: &Self::Vector,
        v: &Self::Vector,
        p: &mut Self::Vector,
    );
    /// s = r − α v; returns Σ|s|.
    fn bicg_half(
        &self,
        alpha: f64,
        r: &Self::Vector,
        v: &Self::Vector,
        s: &mut Self::Vector,
    ) -> f64;
    /// x += α y + ω z, r = s − ω t; returns (Σ|r|, r0 · r).
    #[allow(clippy::too_many_arguments)]
    fn bicg_update(
        &self,
        alpha: f64,
        omega: f64,
        y: &Self::Vector,
        z: &Self::Vector,
        s: &Self::Vector,
        t: &Self::Vector,
        r0: &Self::Vector,
        x: &mut Self::Vector,
        r: &mut Self::Vector,
    ) -> (f64, f64);
    /// The preconditioner's name in the log line
    /// ([`solver_name`](super::pcg::solver_name): `DILU` of `DILUPBiCGStab`).
    fn preconditioner_name(&self) -> Option<&'static str> {
        None
    }
}

/// Gram–Schmidt variant of GMRES's Arnoldi process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Orthogonalization {
    /// Modified Gram–Schmidt (Yang 2015's, Saad Alg. 6.2): j dependent dots.
    #[default]
    Mgs,
    /// Classical Gram–Schmidt run twice ("twice is enough"): two block
    /// reductions per step instead of j dependent ones.
    Cgs2,
}

/// Which side of A the preconditioner multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PreconditioningSide {
    /// M⁻¹ A x = M⁻¹ b: GMRES minimises ‖M⁻¹ r‖₂ (Yang 2015's setting).
    Left,
    /// A M⁻¹ u = b, x = M⁻¹ u: GMRES minimises the true ‖r‖₂.
    #[default]
    Right,
}

impl Orthogonalization {
    pub fn name(self) -> &'static str {
        match self {
            Self::Mgs => "MGS",
            Self::Cgs2 => "CGS2",
        }
    }
}

impl PreconditioningSide {
    pub fn name(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::Right => "right",
        }
    }
}

impl FromStr for Orthogonalization {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "mgs" | "modifiedgramschmidt" => Ok(Self::Mgs),
            "cgs2" | "classicalgramschmidt2" => Ok(Self::Cgs2),
            _ => Err(format!(
                "unknown orthogonalisation '{s}' (choose MGS or CGS2)"
            )),
        }
    }
}

impl FromStr for PreconditioningSide {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "left" => Ok(Self::Left),
            "right" => Ok(Self::Right),
            _ => Err(format!(
                "unknown preconditioning side '{s}' (choose left or right)"
            )),
        }
    }
}

/// GMRES(m) options (fvSolution `nKrylov`, `orthogonalisation`,
/// `preconditioningSide`, `flexible`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmresSettings {
    /// Restart length m (Arnoldi steps per cycle), 1–1000.
    pub restart: usize,
    pub orthogonalization: Orthogonalization,
    pub side: PreconditioningSide,
    /// Flexible GMRES (Saad 1993): stores z_j = M⁻¹ v_j, so the
    /// preconditioner may change between applications (right side only).
    pub flexible: bool,
}

impl Default for GmresSettings {
    /// GMRES(20), MGS, right preconditioning, not flexible.
    fn default() -> Self {
        Self {
            restart: 20,
            orthogonalization: Orthogonalization::Mgs,
            side: PreconditioningSide::Right,
            flexible: false,
        }
    }
}

impl GmresSettings {
    pub const MAX_RESTART: usize = 1000;

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=Self::MAX_RESTART).contains(&self.restart) {
            return Err(format!(
                "GMRES restart length (nKrylov) is {}; it must be between 1 and {}",
                self.restart,
                Self::MAX_RESTART
            ));
        }
        if self.flexible && self.side == PreconditioningSide::Left {
            return Err(
                "flexible GMRES preconditions on the right: drop 'flexible' or use side right"
                    .into(),
            );
        }
        Ok(())
    }
}

impl GmresSettings {
    /// The keys [`Self::set`] takes (fvSolution and case.toml spellings).
    pub const KEYS: [&'static str; 4] = [
        "nKrylov",
        "orthogonalisation",
        "preconditioningSide",
        "flexible",
    ];

    /// Sets one key from its text: `nKrylov` (restart length), `orthogonalisation`
    /// (`MGS`|`CGS2`), `preconditioningSide` (`left`|`right`), `flexible`
    /// (`yes`|`no`|`true`|`false`|`on`|`off`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "nKrylov" => {
                self.restart = parse_value(key, value, "a whole number (the restart length)")?
            }
            "orthogonalisation" | "orthogonalization" => self.orthogonalization = value.parse()?,
            "preconditioningSide" => self.side = value.parse()?,
            "flexible" => {
                self.flexible = parse_switch(&value.to_ascii_lowercase())
                    .ok_or_else(|| format!("flexible '{value}': expected yes or no"))?
            }
            other => {
                return Err(format!(
                    "unknown GMRES key '{other}' (keys: {})",
                    Self::KEYS.join(", ")
                ))
            }
        }
        self.validate()
    }
}

impl KrylovMethod {
    /// The method of an OpenFOAM solver name: `GMRES` (default settings) or
    /// `PBiCGStab`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "GMRES" | "gmres" => Some(Self::Gmres(GmresSettings::default())),
            "PBiCGStab" | "BiCGStab" | "bicgstab" => Some(Self::BiCgStab),
            _ => None,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::Gmres(s) => s.validate(),
            Self::BiCgStab => Ok(()),
        }
    }
}

impl fmt::Display for GmresSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}GMRES({}) {} {}-preconditioned",
            if self.flexible { "F" } else { "" },
            self.restart,
            self.orthogonalization.name(),
            self.side.name()
        )
    }
}

/// Which Krylov method solves a nonsymmetric system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KrylovMethod {
    Gmres(GmresSettings),
    /// OpenFOAM's PBiCGStab.
    BiCgStab,
}

impl fmt::Display for KrylovMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gmres(s) => s.fmt(f),
            Self::BiCgStab => f.write_str("PBiCGStab"),
        }
    }
}

/// Krylov steps on host vectors: a CSR matrix (OpenFOAM's row-product order,
/// as PCG's `CpuBackend`) and any preconditioner of host vectors
/// ([`Precondition`]`<Vec<f64>>`: every `LinearOperator` is one).
pub struct CpuKrylovBackend<'a, P: Precondition<Vec<f64>> + ?Sized = dyn LinearOperator + 'a> {
    cg: CpuBackend<'a>,
    /// `None`: `cg` preconditions with its own ([`Self::on_backend`]).
    precond: Option<&'a P>,
}

impl<'a> CpuKrylovBackend<'a> {
    /// The Krylov steps on `cg`, which preconditions with what it holds
    /// (DIC's or DILU's factor of the split rows its product reads:
    /// [`CpuBackend::dic`], [`CpuBackend::dilu`]), so the solve splits the
    /// matrix once and keeps no scaled copy of it.
    pub fn on_backend(cg: CpuBackend<'a>) -> Self {
        Self { cg, precond: None }
    }
}

impl<P: Precondition<Vec<f64>> + ?Sized> CpuKrylovBackend<'_, P> {
    /// This backend, its preconditioner named `name` in the log line.
    pub fn named(self, name: Option<&'static str>) -> Self {
        Self {
            cg: self.cg.named(name),
            ..self
        }
    }
}

impl<'a, P: Precondition<Vec<f64>, Error = Infallible> + Sync + ?Sized> CpuKrylovBackend<'a, P> {
    /// `a` square; `precond` z = M⁻¹ v of the same size (not necessarily
    /// symmetric or linear).
    pub fn new(a: &'a Csr, precond: &'a P) -> Self {
        assert_eq!(
            precond.n(),
            a.n_rows(),
            "CpuKrylovBackend: preconditioner size"
        );
        Self {
            // The executor: residuals, dots and sums; the Krylov steps
            // precondition with `precond` themselves.
            cg: CpuBackend::unpreconditioned(a),
            precond: Some(precond),
        }
    }
}

/// The executor is the PCG backend's: the same vectors, initial residual
/// and reductions.
impl<'a, P: Precondition<Vec<f64>> + ?Sized> OnExecutor for CpuKrylovBackend<'a, P> {
    type Inner = CpuBackend<'a>;
    fn executor(&self) -> &CpuBackend<'a> {
        &self.cg
    }
}

impl<P: Precondition<Vec<f64>, Error = Infallible> + Sync + ?Sized> KrylovBackend
    for CpuKrylovBackend<'_, P>
{
    fn preconditioner_name(&self) -> Option<&'static str> {
        self.cg.preconditioner_name()
    }

    fn residual(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> (f64, f64) {
        chunked_sums(r, |i, r| {
            *r = b[i] - self.cg.row_times(i, x);
            (r.abs(), *r * *r)
        })
    }

    fn precondition(&self, v: &Vec<f64>, z: &mut Vec<f64>) {
        match self.precond {
            Some(p) => apply_infallible(p, v, z),
            None => self.cg.apply_preconditioner(v, z),
        }
    }

    fn apply_operator(&self, v: &Vec<f64>, y: &mut Vec<f64>, w: Option<&Vec<f64>>) -> (f64, f64) {
        self.cg.split().apply_sums(v, y, |i, y| {
            let yy = y * y;
            (w.map_or(yy, |w| y * w[i]), yy)
        })
    }

    fn scale(&self, alpha: f64, x: &Vec<f64>, y: &mut Vec<f64>) {
        y.par_iter_mut()
            .zip(x.par_iter())
            .for_each(|(y, x)| *y = alpha * x);
    }

    fn axpy_dot(&self, alpha: f64, x: &Vec<f64>, y: &mut Vec<f64>, w: Option<&Vec<f64>>) -> f64 {
        chunked_sums(y, |i, y| {
            *y += alpha * x[i];
            (w.map_or(*y * *y, |w| *y * w[i]), 0.0)
        })
        .0
    }

    fn multi_dot(&self, vs: &[&Vec<f64>], w: &Vec<f64>) -> Vec<f64> {
        vs.iter().map(|v| dot(v, w)).collect()
    }

    fn multi_axpy(&self, c: &[f64], vs: &[&Vec<f64>], y: &mut Vec<f64>) -> f64 {
        assert_eq!(c.len(), vs.len(), "multi_axpy: coefficients");
        chunked_sums(y, |i, y| {
            for (c, v) in c.iter().zip(vs) {
                *y += c * v[i];
            }
            (*y * *y, 0.0)
        })
        .0
    }

    fn bicg_direction(&self, beta: f64, omega: f64, r: &Vec<f64>, v: &Vec<f64>, p: &mut Vec<f64>) {
        if beta == 0.0 {
            p.copy_from_slice(r);
        } else {
            p.par_iter_mut()
                .enumerate()
                .for_each(|(i, p)| *p = r[i] + beta * (*p - omega * v[i]));
        }
    }

    fn bicg_half(&self, alpha: f64, r: &Vec<f64>, v: &Vec<f64>, s: &mut Vec<f64>) -> f64 {
        chunked_sums(s, |i, s| {
            *s = r[i] - alpha * v[i];
            (s.abs(), 0.0)
        })
        .0
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
        let sums: Vec<(f64, f64)> = x
            .par_chunks_mut(CHUNK)
            .zip(r.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(c, (x, r))| {
                let (mut res, mut rho) = (0.0, 0.0);
                for k in 0..x.len() {
                    let i = c * CHUNK + k;
                    x[k] += alpha * y[i] + omega * z[i];
                    r[k] = s[i] - omega * t[i];
                    res += r[k].abs();
                    rho += r0[i] * r[k];
                }
                (res, rho)
            })
            .collect();
        sum_pairs(&sums)
    }
}

/// Σ|v|, in the fixed chunk order.
pub fn sum_abs(v: &[f64]) -> f64 {
    sum_by(v.len(), |i| v[i].abs())
}
