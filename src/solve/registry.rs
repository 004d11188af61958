//! The preconditioners PCG and the other Krylov methods can be given, each
//! registered once by name ([`PRECONDITIONERS`]), in the manner of AmgX's
//! factory table and Ginkgo's self-parsing preconditioners.
//!
//! A [`Registration`] holds what every front end needs: the names it answers
//! to, the keys it takes and one parser of them (`from_keys`), which the
//! command line (`name:key=value,...`, [`parse_spec`]), case.toml
//! (`preconditioner = { name = "...", key = value }`) and fvSolution
//! (`preconditioner { preconditioner name; key value; }`) all call through
//! [`parse`]; the CPU constructor; and what the GPU does with it
//! ([`GpuSupport`]): run it, run an adapted device form, or fall back to
//! another preconditioner for a stated reason, which the run logs
//! ([`gpu_fallback`]). An unknown name or key is an error that names it and
//! lists the valid ones.
//!
//! Preconditioners written after the registry, or moved into it, implement
//! [`Algorithm`] in their own folder (`solve/ssor/`, `solve/neumann/`:
//! settings, `from_keys`, CPU and CUDA implementations) and are listed once
//! in [`registered!`]'s invocation and once in [`PRECONDITIONERS`];
//! docs/src/development.md, "Adding a preconditioner", gives the steps.

use std::fmt;

use super::amg::{AmgSettings, CycleKind};
use super::fsai::FsaiSettings;
use super::ilu;
use super::jacobi::JacobiSettings;
use super::neumann::NeumannSettings;
use super::polynomial::{PolynomialKind, PolynomialSettings};
use super::precond::{Preconditioner, PreconditionerKind};
use super::scalar::Precision;
use super::schwarz::{SchwarzKind, SchwarzSettings};
use super::smoother::SmootherSettings;
use super::ssor::SsorSettings;
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

pub use super::algorithm::{Algorithm, KeyValues};
pub use super::algorithms::Registered;

/// Which Krylov method the preconditioner serves: PCG, or GMRES / BiCGStab
/// (which take nonsymmetric preconditioners and have their own device path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Pcg,
    Krylov,
}

/// What the GPU runs for a preconditioner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GpuSupport {
    /// The device runs it as given.
    Native,
    /// The device runs its device form (`gpu::smooth::gpu_preconditioner`):
    /// `how` says what changes (e.g. the row order of Gauss–Seidel sweeps).
    /// `default`: given without the keys that tune it for the GPU
    /// ([`GpuDefault::explicit_keys`]), the device runs the measured faster
    /// setting of that row of [`GPU_DEFAULTS`] instead; with them, `how`.
    Adapted {
        how: &'static str,
        default: Option<&'static GpuDefault>,
    },
    /// The device has no form of it and runs the preconditioner named `to`
    /// instead; the run logs `reason` ([`gpu_fallback`]).
    Fallback {
        to: &'static str,
        reason: &'static str,
    },
}

/// What the GPU runs in place of an OpenFOAM preconditioner given without
/// the keys that tune it for the GPU: one row of [`GPU_DEFAULTS`], chosen by
/// measurement (docs/src/gpu.md, "GPU defaults"). The CPU runs what is given.
#[derive(Debug, PartialEq)]
pub struct GpuDefault {
    /// The given preconditioner as the log names it (`DIC`, `GAMG`).
    pub given: &'static str,
    /// The registration it applies to (its documented name).
    pub registration: &'static str,
    /// Keys that ask for the given settings exactly: with any of them the
    /// GPU runs what is given (its device form), not this row.
    pub explicit_keys: &'static [&'static str],
    /// What the GPU runs (the log names it by its `Display`).
    pub runs: GpuDefaultSettings,
    /// Why, and the measurement that says so.
    pub why: &'static str,
}

/// The settings a [`GpuDefault`] runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GpuDefaultSettings {
    /// This polynomial preconditioner (Gershgorin bound, the default ratio).
    Polynomial {
        kind: PolynomialKind,
        degree: usize,
        precision: Precision,
    },
    /// The given AMG with these settings (its other keys, e.g. sweeps from
    /// nPreSweeps / nPostSweeps, kept).
    Amg {
        cycle: CycleKind,
        precision: Precision,
        passes: usize,
        omega: f64,
        /// The coarse correction's scaling θ (`overCorrection`).
        over_correction: f64,
    },
}

/// What runs, as the log names it: made from the settings, so that it
/// cannot say other values than those the GPU runs.
impl fmt::Display for GpuDefaultSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Polynomial {
                kind,
                degree,
                precision,
            } => write!(
                f,
                "PCG with the {}({degree}) polynomial in {} precision",
                kind.name(),
                precision.name()
            ),
            Self::Amg {
                cycle,
                precision,
                passes,
                omega,
                over_correction,
            } => write!(
                f,
                "AMG-PCG, {}-cycle in {} precision, {passes} matching passes, omega {omega}, \
                 over-correction {over_correction}",
                cycle.name(),
                precision.name()
            ),
        }
    }
}

impl GpuDefault {
    /// The settings the GPU runs for `given` (the preconditioner of this row).
    pub fn settings(&self, given: &Preconditioner) -> Preconditioner {
        match (self.runs, given) {
            (
                GpuDefaultSettings::Polynomial {
                    kind,
                    degree,
                    precision,
                },
                _,
            ) => Preconditioner::Polynomial(PolynomialSettings {
                precision,
                ..PolynomialSettings::new(kind, degree)
            }),
            (
                GpuDefaultSettings::Amg {
                    cycle,
                    precision,
                    passes,
                    omega,
                    over_correction,
                },
                given,
            ) => {
                let base = match given {
                    Preconditioner::Amg(s) => *s,
                    _ => AmgSettings::default(),
                };
                Preconditioner::Amg(AmgSettings {
                    cycle,
                    precision,
                    passes,
                    omega,
                    over_correction,
                    ..base
                })
            }
        }
    }

    /// The log line of `field`'s solver: what runs and why.
    pub fn message(&self, field: &str) -> String {
        format!(
            "{field}: {} runs on the GPU as {} ({})",
            self.given, self.runs, self.why
        )
    }

    /// Whether `keys` holds one of [`Self::explicit_keys`].
    pub fn is_explicit(&self, keys: &KeyValues) -> bool {
        keys.iter().any(|(key, _)| {
            self.explicit_keys
                .iter()
                .any(|k| k.eq_ignore_ascii_case(key))
        })
    }
}

/// The GPU's AMG-PCG: V-cycle in mixed precision, 2 matching passes,
/// Jacobi ω 0.9 (the AMG tuning of docs/src/measurements.md), the coarse
/// correction scaled by θ = 1.8: the pressure solves of a time step, which
/// start from the last step's p, take 15-24 % fewer iterations than with the
/// AMG's θ = 1.5, from-zero solves to 1e-8 within ±2 of 40
/// (docs/src/measurements.md, "the coarse correction's scaling").
const AMG_V_MIXED: GpuDefaultSettings = GpuDefaultSettings::Amg {
    cycle: CycleKind::V,
    precision: Precision::Mixed,
    passes: 2,
    omega: 0.9,
    over_correction: 1.8,
};

/// DIC / FDIC in PCG without `precision`: AMG-PCG, whose hierarchy a run
/// sets up once on the device-assembled matrix and keeps while the matrix
/// holds (outer iterations, non-orthogonal and PISO correctors).
pub static DIC_ON_GPU: GpuDefault = GpuDefault {
    given: "DIC",
    registration: "DIC",
    explicit_keys: &["precision"],
    runs: AMG_V_MIXED,
    why: "faster to the same tolerance than Chebyshev(4) and level-scheduled DIC, its set-up \
          kept while the matrix holds: bench --preconditioners, docs/src/gpu.md",
};

/// IC(0) in PCG without `precision`, as DIC.
pub static IC0_ON_GPU: GpuDefault = GpuDefault {
    given: "IC(0)",
    registration: "IC0",
    explicit_keys: &["precision"],
    runs: AMG_V_MIXED,
    why: "faster to the same tolerance than Chebyshev(4) and level-scheduled IC(0), its set-up \
          kept while the matrix holds: bench --preconditioners, docs/src/gpu.md",
};

/// GAMG (solver or PCG preconditioner) without the AMG's own keys.
pub static GAMG_ON_GPU: GpuDefault = GpuDefault {
    given: "GAMG",
    registration: "AMG",
    explicit_keys: AMG_GPU_KEYS,
    runs: AMG_V_MIXED,
    why: "the GPU's fastest AMG settings, faster than the K-cycle in double precision: \
          docs/src/measurements.md, AMG tuning",
};

/// Every GPU default, one row per given preconditioner (docs/src/gpu.md
/// has the table with its measurements).
pub static GPU_DEFAULTS: &[&GpuDefault] = &[&DIC_ON_GPU, &IC0_ON_GPU, &GAMG_ON_GPU];

/// Whether `keys`, given to the preconditioner `name`, include keys that
/// tune it for the GPU (a [`GpuDefault::explicit_keys`] of its row): the
/// GPU then runs it as given. False for a name with no GPU default.
pub fn explicit_gpu_keys(name: &str, keys: &KeyValues) -> bool {
    let Ok(registration) = find(name) else {
        return false;
    };
    GPU_DEFAULTS
        .iter()
        .any(|row| row.registration == registration.name() && row.is_explicit(keys))
}

/// Builds the CPU preconditioner of settings `p` (made by the same
/// registration's `from_keys`) for `a`.
pub type CpuConstructor =
    for<'a> fn(&Preconditioner, &'a Csr) -> Result<Box<dyn LinearOperator + 'a>, SolveError>;

/// One preconditioner (or a family that shares its keys, e.g. the smoothers).
pub struct Registration {
    /// The names it answers to; the first is the one documented. A name
    /// matches exactly, or else without regard to case, `-` and `_`.
    pub names: &'static [&'static str],
    /// The keys `from_keys` reads, as documented (camelCase).
    pub keys: &'static [&'static str],
    /// A key the command line may give by position (`iluk:2`) or at the end
    /// of the name (`ilu5`).
    pub positional: Option<&'static str>,
    /// One line for listings.
    pub summary: &'static str,
    /// Settings from the name as given and its keys (known ones only:
    /// [`parse`] refuses the others first).
    pub from_keys: fn(&str, &KeyValues) -> Result<Preconditioner, String>,
    pub cpu: CpuConstructor,
    /// What the GPU runs for these settings under `Role`.
    pub gpu: fn(&Preconditioner, Role) -> GpuSupport,
}

impl Registration {
    /// The documented name.
    pub fn name(&self) -> &'static str {
        self.names[0]
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Registration({})", self.name())
    }
}

/// A name or key the registry does not know, or settings its parser refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryError {
    UnknownName {
        name: String,
        valid: Vec<&'static str>,
    },
    UnknownKey {
        preconditioner: &'static str,
        key: String,
        valid: &'static [&'static str],
    },
    Invalid {
        preconditioner: String,
        message: String,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownName { name, valid } => write!(
                f,
                "unknown preconditioner '{name:.80}' (choose one of {})",
                valid.join(", ")
            ),
            Self::UnknownKey {
                preconditioner,
                key,
                valid: [],
            } => write!(
                f,
                "unknown {preconditioner} key '{key:.80}' ({preconditioner} takes no keys)"
            ),
            Self::UnknownKey {
                preconditioner,
                key,
                valid,
            } => write!(
                f,
                "unknown {preconditioner} key '{key:.80}' (valid keys: {})",
                valid.join(", ")
            ),
            Self::Invalid {
                preconditioner,
                message,
            } => write!(f, "preconditioner {preconditioner}: {message}"),
        }
    }
}

impl std::error::Error for RegistryError {}

/// The registration of an [`Algorithm`] whose device form exists.
const fn algorithm<T: Algorithm + Into<Registered>>(
    names: &'static [&'static str],
    summary: &'static str,
) -> Registration {
    Registration {
        names,
        keys: T::KEYS,
        positional: T::POSITIONAL,
        summary,
        from_keys: algorithm_from_keys::<T>,
        cpu: build_cpu,
        gpu: pcg_only,
    }
}

/// `T`'s settings from `keys`, and from the number that ends `name` when
/// `T` has a positional key (`neu2` is `neu` with order 2).
fn algorithm_from_keys<T: Algorithm + Into<Registered>>(
    name: &str,
    keys: &KeyValues,
) -> Result<Preconditioner, String> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let settings = match T::POSITIONAL {
        Some(key) if stem.len() < name.len() => {
            if keys.get(key).is_some() {
                return Err(format!(
                    "{name} names its {key}; give {stem} with {key}, or {name} alone"
                ));
            }
            let mut keys = keys.clone();
            keys.push(key, &name[stem.len()..]);
            T::from_keys(&keys)?
        }
        _ => T::from_keys(keys)?,
    };
    settings.validate()?;
    Ok(Preconditioner::Registered(settings.into()))
}

/// The CPU constructor of the registrations: [`Preconditioner::build`]
/// (which dispatches on the settings `from_keys` made).
fn build_cpu<'a>(
    p: &Preconditioner,
    a: &'a Csr,
) -> Result<Box<dyn LinearOperator + 'a>, SolveError> {
    p.build(a)
}

fn native(_: &Preconditioner, _: Role) -> GpuSupport {
    GpuSupport::Native
}

const TO_JACOBI_NO_DEVICE_FORM: &str =
    "it has no device form (its sweeps are sequential recurrences)";

/// DIC and IC(0): for PCG given without `precision`, the GPU default of
/// their row ([`DIC_ON_GPU`], [`IC0_ON_GPU`]); with it, their level-scheduled
/// sweeps in that precision; as given for GMRES / BiCGStab.
fn ic_on_gpu(p: &Preconditioner, method: Role) -> GpuSupport {
    match (p, method) {
        (Preconditioner::Kind(_), Role::Krylov) | (Preconditioner::MixedIc(_), Role::Pcg) => {
            GpuSupport::Native
        }
        (Preconditioner::Kind(k), Role::Pcg) => GpuSupport::Adapted {
            how: "level-scheduled triangular sweeps (rows in colour order)",
            default: Some(match k {
                PreconditionerKind::Ic0 => &IC0_ON_GPU,
                _ => &DIC_ON_GPU,
            }),
        },
        (_, Role::Pcg) => GpuSupport::Native,
        (_, Role::Krylov) => GpuSupport::Fallback {
            to: "diagonal",
            reason: "GMRES and BiCGStab on the GPU run DIC and IC(0) in double precision only",
        },
    }
}

fn pcg_only(_: &Preconditioner, method: Role) -> GpuSupport {
    match method {
        Role::Pcg => GpuSupport::Native,
        Role::Krylov => GpuSupport::Fallback {
            to: "diagonal",
            reason: "GMRES and BiCGStab on the GPU take ILU, Schwarz, DILU, DIC, IC(0), \
                     diagonal or none",
        },
    }
}

fn krylov_only(_: &Preconditioner, method: Role) -> GpuSupport {
    match method {
        Role::Krylov => GpuSupport::Native,
        Role::Pcg => GpuSupport::Fallback {
            to: "diagonal",
            reason: TO_JACOBI_NO_DEVICE_FORM,
        },
    }
}

fn adapted_smoother(p: &Preconditioner, method: Role) -> GpuSupport {
    match method {
        Role::Krylov => pcg_only(p, method),
        Role::Pcg => GpuSupport::Adapted {
            how: "Gauss-Seidel sweeps in a multicolour order, DIC smoothing as symmetric \
                  Gauss-Seidel",
            default: None,
        },
    }
}

fn adapted_amg(p: &Preconditioner, method: Role) -> GpuSupport {
    match method {
        Role::Krylov => pcg_only(p, method),
        Role::Pcg => GpuSupport::Adapted {
            how: "Gauss-Seidel, DIC and Chebyshev smoothers as L1-Jacobi",
            default: Some(&GAMG_ON_GPU),
        },
    }
}

/// DIC / IC(0) with `precision` (mixed: [`Preconditioner::MixedIc`]).
fn ic_from_keys(k: PreconditionerKind, keys: &KeyValues) -> Result<Preconditioner, String> {
    let precision = keys
        .get("precision")
        .map(str::parse::<Precision>)
        .transpose()?
        .unwrap_or(Precision::Double);
    Ok(Preconditioner::with_ic_precision(k, precision))
}

/// The smoother keys (`nSweeps`, `omega`, ...) onto `s`.
fn smoother_keys(s: &mut SmootherSettings, keys: &KeyValues) -> Result<(), String> {
    let count = "a whole number";
    let number = "a number";
    for key in ["nSweeps", "sweeps"] {
        if let Some(v) = keys.parsed(key, count)? {
            s.sweeps = v;
        }
    }
    if let Some(v) = keys.parsed("omega", number)? {
        s.omega = v;
    }
    if let Some(v) = keys.get("colouring") {
        s.colouring = v.parse()?;
    }
    if let Some(v) = keys.get("inner") {
        s.block.inner = v.parse()?;
    }
    if let Some(v) = keys.parsed("innerTolerance", number)? {
        s.block.inner_tolerance = v;
    }
    if let Some(v) = keys.parsed("innerMaxIter", count)? {
        s.block.inner_max_iter = v;
    }
    if let Some(v) = keys.parsed("blockSize", count)? {
        s.block.block_size = v;
    }
    if let Some(v) = keys.parsed("asynchronous", "true or false")? {
        s.block.asynchronous = v;
    }
    if let Some(v) = keys.get("precision") {
        s.polynomial.precision = v.parse()?;
    }
    Ok(())
}

fn smoother_from_keys(name: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    let mut s = SmootherSettings::named(&name.replace('-', ""))?;
    smoother_keys(&mut s, keys)?;
    s.validate()?;
    s.check_preconditioner()?;
    Ok(Preconditioner::Smoother(s))
}

fn polynomial_from_keys(name: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    PolynomialSettings::from_keys(name, keys).map(Preconditioner::Polynomial)
}

/// AMG's keys; OpenFOAM's `nPreSweeps` / `nPostSweeps` (defaults 0 and 2)
/// give ν = max(1, (pre + post) / 2) sweeps on each side of the symmetric
/// cycle, the same smoothing work; GAMG's agglomeration keys are accepted
/// (the pairwise matching aggregates as faceAreaPair does) and the keys with
/// no counterpart are ignored.
fn amg_from_keys(_: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    let mut s = AmgSettings::default();
    let pre: Option<usize> = keys.parsed("nPreSweeps", "a whole number")?;
    let post: Option<usize> = keys.parsed("nPostSweeps", "a whole number")?;
    if pre.is_some() || post.is_some() {
        s.sweeps = ((pre.unwrap_or(0) + post.unwrap_or(2)) / 2).max(1);
    }
    for (key, value) in keys.iter() {
        let lower = key.to_ascii_lowercase();
        if ["npresweeps", "npostsweeps"].contains(&lower.as_str()) {
            continue;
        }
        if AMG_IGNORED_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            if lower == "agglomerator"
                && value != "faceAreaPair"
                && value != "pairGAMGAgglomeration"
            {
                log::info!(
                    "GAMG agglomerator {value}: aggregated by pairwise matching of strong \
                     couplings (as faceAreaPair)"
                );
            }
            continue;
        }
        s.set(key, value)?;
    }
    s.validate()?;
    Ok(Preconditioner::Amg(s))
}

/// AMG's keys: those it reads, then OpenFOAM GAMG keys with no counterpart
/// in the aggregation AMG (accepted and ignored, [`AMG_IGNORED_KEYS`]).
const AMG_KEYS: &[&str] = &[
    "smoother",
    "nSweeps",
    "nPreSweeps",
    "nPostSweeps",
    "nCellsInCoarsestLevel",
    "refineCoarsest",
    "sweeps",
    "coarsestRows",
    "passes",
    "matchingRounds",
    "maxLevels",
    "cycle",
    "omega",
    "overCorrection",
    "precision",
    "fused",
    "agglomerator",
    "mergeLevels",
    "preSweepsLevelMultiplier",
    "maxPreSweeps",
    "postSweepsLevelMultiplier",
    "maxPostSweeps",
    "nFinestSweeps",
    "cacheAgglomeration",
    "directSolveCoarsest",
    "scaleCorrection",
    "interpolateCorrection",
    "nVcycles",
    "processorAgglomerator",
    "coarsestLevelCorr",
];
/// The GAMG keys AMG accepts and ignores: the tail of [`AMG_KEYS`].
const AMG_IGNORED_KEYS: &[&str] = AMG_KEYS.split_at(16).1;
/// AMG's own keys, which OpenFOAM's GAMG does not have (`sweeps` to
/// `fused` in [`AMG_KEYS`]): given, the GPU runs the AMG as given rather
/// than [`GAMG_ON_GPU`].
const AMG_GPU_KEYS: &[&str] = AMG_KEYS.split_at(16).0.split_at(6).1;

/// ILU(k): the folder's parser (`ilu::fill_level_from_keys`).
fn ilu_from_keys(name: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    ilu::fill_level_from_keys(name, keys).map(Preconditioner::Ilu)
}

/// RAS / AS: the folder's parser (`SchwarzSettings::from_keys`).
fn schwarz_from_keys(name: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    SchwarzSettings::from_keys(name, keys).map(Preconditioner::Schwarz)
}

fn fsai_from_keys(_: &str, keys: &KeyValues) -> Result<Preconditioner, String> {
    FsaiSettings::from_keys(keys.iter()).map(Preconditioner::Fsai)
}

const SMOOTHER_KEYS: &[&str] = &[
    "nSweeps",
    "omega",
    "colouring",
    "inner",
    "innerTolerance",
    "innerMaxIter",
    "blockSize",
    "asynchronous",
    "precision",
];

/// Every preconditioner, once. The order is the order of listings.
pub static PRECONDITIONERS: &[Registration] = &[
    Registration {
        names: &["DIC", "FDIC"],
        keys: &["precision"],
        positional: None,
        summary: "OpenFOAM's diagonal incomplete Cholesky (FDIC: the same)",
        from_keys: |_, keys| ic_from_keys(PreconditionerKind::Dic, keys),
        cpu: build_cpu,
        gpu: ic_on_gpu,
    },
    Registration {
        names: &["IC0", "ic"],
        keys: &["precision"],
        positional: None,
        summary: "incomplete Cholesky with no fill-in",
        from_keys: |_, keys| ic_from_keys(PreconditionerKind::Ic0, keys),
        cpu: build_cpu,
        gpu: ic_on_gpu,
    },
    Registration {
        names: &["diagonal", "jacobi"],
        keys: JacobiSettings::KEYS,
        positional: None,
        summary: "Jacobi: z = D⁻¹ r",
        from_keys: |_, keys| JacobiSettings::from_keys(keys).map(Preconditioner::from),
        cpu: build_cpu,
        gpu: native,
    },
    Registration {
        names: &["none"],
        keys: &[],
        positional: None,
        summary: "no preconditioning",
        from_keys: |_, _| Ok(PreconditionerKind::None.into()),
        cpu: build_cpu,
        gpu: native,
    },
    Registration {
        names: &["DILU"],
        keys: &[],
        positional: None,
        summary: "OpenFOAM's diagonal incomplete LU (for GMRES / BiCGStab)",
        from_keys: |_, _| Ok(PreconditionerKind::Dilu.into()),
        cpu: build_cpu,
        gpu: krylov_only,
    },
    Registration {
        names: &["sgs"],
        keys: &[],
        positional: None,
        summary: "one symmetric Gauss-Seidel sweep in natural row order (SSOR, ω = 1)",
        from_keys: |_, _| Ok(PreconditionerKind::SymGaussSeidel.into()),
        cpu: build_cpu,
        gpu: adapted_smoother,
    },
    Registration {
        names: &["eisenstatSGS"],
        keys: &[],
        positional: None,
        summary: "symmetric Gauss-Seidel PCG by Eisenstat's trick",
        from_keys: |_, _| Ok(PreconditionerKind::EisenstatSgs.into()),
        cpu: build_cpu,
        gpu: pcg_only,
    },
    Registration {
        names: &["ILU", "ilu0", "ilu1", "ilu2", "ilu3", "iluk"],
        keys: &["fillLevel"],
        positional: Some("fillLevel"),
        summary: "incomplete LU with fill level k (ilu1, iluk:K, or fillLevel)",
        from_keys: ilu_from_keys,
        cpu: build_cpu,
        gpu: native,
    },
    Registration {
        names: &["RAS"],
        keys: SchwarzSettings::KEYS,
        positional: None,
        summary: "restricted additive Schwarz over METIS sub-domains",
        from_keys: schwarz_from_keys,
        cpu: build_cpu,
        gpu: native,
    },
    Registration {
        names: &["AS"],
        keys: SchwarzSettings::KEYS,
        positional: None,
        summary: "symmetric additive Schwarz over METIS sub-domains",
        from_keys: schwarz_from_keys,
        cpu: build_cpu,
        gpu: native,
    },
    Registration {
        names: &["FSAI"],
        keys: &[
            "pattern",
            "steps",
            "stepSize",
            "epsilon",
            "stop",
            "power",
            "prefilter",
            "postfilter",
            "precision",
        ],
        positional: None,
        summary: "factored sparse approximate inverse, static or adaptive pattern",
        from_keys: fsai_from_keys,
        cpu: build_cpu,
        gpu: pcg_only,
    },
    Registration {
        names: &["AMG", "GAMG"],
        keys: AMG_KEYS,
        positional: None,
        summary: "one aggregation-AMG cycle (OpenFOAM's GAMG keys accepted)",
        from_keys: amg_from_keys,
        cpu: build_cpu,
        gpu: adapted_amg,
    },
    Registration {
        names: &["Neumann", "Chebyshev", "leastSquares"],
        keys: PolynomialSettings::KEYS,
        positional: None,
        summary: "a polynomial in the Jacobi-scaled matrix",
        from_keys: polynomial_from_keys,
        cpu: build_cpu,
        gpu: pcg_only,
    },
    Registration {
        names: &["blockIC", "blockDIC"],
        keys: &["blockSize", "precision"],
        positional: None,
        summary: "block Jacobi with IC(0) / DIC blocks",
        from_keys: smoother_from_keys,
        cpu: build_cpu,
        gpu: adapted_smoother,
    },
    Registration {
        names: &["blockJacobi"],
        keys: &[
            "blockSize",
            "precision",
            "inner",
            "innerTolerance",
            "innerMaxIter",
            "nSweeps",
            "sweeps",
            "omega",
        ],
        positional: None,
        summary: "block Jacobi with an inner solver (Jacobi, symGaussSeidel, CG)",
        from_keys: smoother_from_keys,
        cpu: build_cpu,
        gpu: adapted_smoother,
    },
    Registration {
        names: &[
            "symGaussSeidel",
            "multicolourSymGaussSeidel",
            "Jacobi",
            "L1Jacobi",
            "GaussSeidel",
            "nonBlockingGaussSeidel",
            "backwardGaussSeidel",
            "multicolourGaussSeidel",
            "multicolourBackwardGaussSeidel",
            "DICGaussSeidel",
            "FDICGaussSeidel",
        ],
        keys: SMOOTHER_KEYS,
        positional: None,
        summary: "a symmetric smoother run from z = 0 (nSweeps sweeps)",
        from_keys: smoother_from_keys,
        cpu: build_cpu,
        gpu: adapted_smoother,
    },
    algorithm::<SsorSettings>(
        &["SSOR"],
        "symmetric successive over-relaxation with relaxation ω (omega)",
    ),
    algorithm::<NeumannSettings>(
        &["truncatedNeumann", "neu1", "neu2", "neu"],
        "truncated Neumann series of the triangular factors, order 1 (neu1), 2 (neu2), …",
    ),
];

/// Lower case without `-` and `_`: how names match when no name is exact.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Every name the registry answers to, documented ones first.
pub fn names() -> Vec<&'static str> {
    PRECONDITIONERS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}

/// The registration of `name`: an exact match, else one without regard to
/// case, `-` and `_`; an error listing the names otherwise.
pub fn find(name: &str) -> Result<&'static Registration, RegistryError> {
    let exact = PRECONDITIONERS.iter().find(|r| r.names.contains(&name));
    let folded_name = folded(name);
    exact
        .or_else(|| {
            PRECONDITIONERS
                .iter()
                .find(|r| r.names.iter().any(|n| folded(n) == folded_name))
        })
        .or_else(|| {
            // A positional key given in the name: `ilu5` is ILU with fill level 5.
            let stem = folded_name.trim_end_matches(|c: char| c.is_ascii_digit());
            PRECONDITIONERS.iter().find(|r| {
                r.positional.is_some()
                    && stem.len() < folded_name.len()
                    && r.names.iter().any(|n| folded(n) == stem)
            })
        })
        .ok_or_else(|| RegistryError::UnknownName {
            name: name.to_string(),
            valid: names(),
        })
}

/// The settings `name` with `keys` stands for: every front end's one path.
pub fn parse(name: &str, keys: &KeyValues) -> Result<Preconditioner, RegistryError> {
    let registration = find(name)?;
    if let Some((key, _)) = keys.iter().find(|(key, _)| {
        !registration
            .keys
            .iter()
            .any(|k| k.eq_ignore_ascii_case(key))
    }) {
        return Err(RegistryError::UnknownKey {
            preconditioner: registration.name(),
            key: key.to_string(),
            valid: registration.keys,
        });
    }
    (registration.from_keys)(name, keys).map_err(|message| RegistryError::Invalid {
        preconditioner: name.to_string(),
        message,
    })
}

impl std::str::FromStr for Preconditioner {
    type Err = String;
    /// The command line's grammar ([`parse_spec`]).
    fn from_str(s: &str) -> Result<Self, String> {
        parse_spec(s).map_err(|e| e.to_string())
    }
}

/// The command line's grammar: `name`, or `name:key=value,key=value` (`:`
/// also separates pairs; a registration's positional key may be given bare,
/// as in `iluk:2`).
pub fn parse_spec(spec: &str) -> Result<Preconditioner, RegistryError> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let registration = find(name)?;
    let mut keys = KeyValues::new();
    for part in rest
        .split([',', ':'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match (part.split_once('='), registration.positional) {
            (Some((key, value)), _) => keys.push(key.trim(), value.trim()),
            (None, Some(key)) => keys.push(key, part),
            (None, None) => {
                return Err(RegistryError::Invalid {
                    preconditioner: name.to_string(),
                    message: format!("option '{part}' must be key=value"),
                })
            }
        }
    }
    parse(name, &keys)
}

/// The registration whose `from_keys` makes settings like `p`.
pub fn registration_of(p: &Preconditioner) -> &'static Registration {
    let name = match p {
        Preconditioner::Kind(k) | Preconditioner::MixedIc(k) => match k {
            PreconditionerKind::None => "none",
            PreconditionerKind::Jacobi => "diagonal",
            PreconditionerKind::Dic => "DIC",
            PreconditionerKind::Ic0 => "IC0",
            PreconditionerKind::SymGaussSeidel => "sgs",
            PreconditionerKind::Dilu => "DILU",
            PreconditionerKind::EisenstatSgs => "eisenstatSGS",
        },
        Preconditioner::Smoother(_) => "symGaussSeidel",
        Preconditioner::Polynomial(_) => "Chebyshev",
        Preconditioner::Amg(_) => "AMG",
        Preconditioner::Ilu(_) => "ILU",
        Preconditioner::Schwarz(s) if s.kind == SchwarzKind::Restricted => "RAS",
        Preconditioner::Schwarz(_) => "AS",
        Preconditioner::Fsai(_) => "FSAI",
        Preconditioner::Registered(r) => r.name(),
    };
    find(name).expect("every preconditioner is registered")
}

/// What the GPU runs for `p` under `method`.
pub fn gpu_support(p: &Preconditioner, method: Role) -> GpuSupport {
    (registration_of(p).gpu)(p, method)
}

/// Where the GPU cannot run `p`: the preconditioner it runs instead and the
/// message for the run's log. Nothing is logged here: a run asks for its
/// solvers' mapping at every solve and logs the message once
/// (`case::run::log_gpu_mapping`).
pub fn gpu_fallback(p: &Preconditioner, method: Role) -> Option<(Preconditioner, String)> {
    let GpuSupport::Fallback { to, reason } = gpu_support(p, method) else {
        return None;
    };
    let used = parse(to, &KeyValues::new()).expect("a fallback names a registered preconditioner");
    let message = format!("preconditioner {p} is not on the GPU ({reason}): using {used} there");
    Some((used, message))
}

/// The GPU default that replaces `p` under `method` when `p` was given
/// without its GPU keys (`explicit` false), if its row has one.
pub fn gpu_default(
    p: &Preconditioner,
    method: Role,
    explicit: bool,
) -> Option<&'static GpuDefault> {
    match gpu_support(p, method) {
        GpuSupport::Adapted {
            default: Some(row), ..
        } if !explicit => Some(row),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pairs: &[(&str, &str)]) -> KeyValues {
        let mut k = KeyValues::new();
        for (key, value) in pairs {
            k.push(*key, *value);
        }
        k
    }

    #[test]
    fn every_name_is_registered_once() {
        let mut seen = std::collections::BTreeSet::new();
        for name in names() {
            assert!(seen.insert(name), "{name} is registered twice");
            assert!(
                std::ptr::eq(find(name).unwrap().names, find(name).unwrap().names),
                "{name}"
            );
        }
        // An exact name wins over a folded one: `Jacobi` is the smoother,
        // `jacobi` the diagonal preconditioner, as before the registry.
        assert_eq!(find("Jacobi").unwrap().name(), "symGaussSeidel");
        assert_eq!(find("jacobi").unwrap().name(), "diagonal");
        assert_eq!(find("block-ic").unwrap().name(), "blockIC");
    }

    #[test]
    fn every_kind_and_settings_map_back_to_a_registration() {
        for kind in PreconditionerKind::ALL {
            let p = Preconditioner::Kind(kind);
            let r = registration_of(&p);
            let again = parse(r.name(), &KeyValues::new());
            // DIC's and IC(0)'s registration make the kind itself.
            if r.keys.is_empty()
                || matches!(kind, PreconditionerKind::Dic | PreconditionerKind::Ic0)
            {
                assert_eq!(again, Ok(p), "{kind}");
            }
        }
    }

    #[test]
    fn unknown_names_and_keys_are_named_with_the_valid_ones() {
        let err = parse_spec("spai").unwrap_err().to_string();
        assert!(err.contains("unknown preconditioner 'spai'"), "{err}");
        for name in ["DIC", "AMG", "FSAI", "blockJacobi", "Chebyshev", "RAS"] {
            assert!(err.contains(name), "{err} lists {name}");
        }
        let err = parse("FSAI", &keys(&[("steps", "5"), ("tolerance", "1")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown FSAI key 'tolerance'"), "{err}");
        assert!(err.contains("steps, stepSize, epsilon"), "{err}");
        let err = parse_spec("diagonal:omega=2").unwrap_err().to_string();
        assert!(
            err.contains("unknown diagonal key 'omega' (diagonal takes no keys)"),
            "{err}"
        );
        let err = parse_spec("block-ic:inner=CG").unwrap_err().to_string();
        assert!(err.contains("unknown blockIC key 'inner'"), "{err}");
        let err = parse_spec("block-ic:256").unwrap_err().to_string();
        assert!(err.contains("must be key=value"), "{err}");
        let err = parse_spec("symGaussSeidel:nSweeps=x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nSweeps must be a whole number, got 'x'"),
            "{err}"
        );
    }

    #[test]
    fn the_command_line_and_key_values_agree() {
        for (spec, name, pairs) in [
            (
                "amg:cycle=W,nPreSweeps=2",
                "GAMG",
                &[("cycle", "W"), ("nPreSweeps", "2")][..],
            ),
            ("dic:precision=mixed", "FDIC", &[("precision", "mixed")]),
            ("iluk:2", "ILU", &[("fillLevel", "2")]),
            (
                "ras:subdomains=4:overlap=1",
                "RAS",
                &[("subdomains", "4"), ("overlap", "1")],
            ),
            (
                "fsai:steps=5,epsilon=0.001",
                "FSAI",
                &[("steps", "5"), ("epsilon", "0.001")],
            ),
            ("Chebyshev:degree=3", "Chebyshev", &[("degree", "3")]),
            ("block-jacobi:inner=CG", "blockJacobi", &[("inner", "CG")]),
        ] {
            let cli = parse_spec(spec).unwrap();
            assert_eq!(Ok(cli), parse(name, &keys(pairs)), "{spec}");
        }
        // OpenFOAM's GAMG keys: ν = (pre + post) / 2 sweeps on each side.
        let Ok(Preconditioner::Amg(s)) = parse_spec("GAMG:nPreSweeps=1,nPostSweeps=3") else {
            panic!("GAMG parses");
        };
        assert_eq!(s.sweeps, 2);
    }

    #[test]
    fn a_gpu_fallback_is_named_with_its_reason() {
        let dilu = Preconditioner::Kind(PreconditionerKind::Dilu);
        let (used, message) = gpu_fallback(&dilu, Role::Pcg).expect("DILU falls back in PCG");
        assert_eq!(used, Preconditioner::Kind(PreconditionerKind::Jacobi));
        assert!(
            message.contains("preconditioner dilu is not on the GPU"),
            "{message}"
        );
        assert!(message.contains("no device form"), "{message}");
        // Asked again (a later case of the same process), the same message:
        // the registry keeps no state, the run logs it.
        assert_eq!(gpu_fallback(&dilu, Role::Pcg).unwrap().1, message);
        let dic = Preconditioner::Kind(PreconditionerKind::Dic);
        assert_eq!(gpu_fallback(&dic, Role::Pcg), None);
        assert_eq!(
            gpu_fallback(&Preconditioner::MixedIc(PreconditionerKind::Dic), Role::Pcg),
            None
        );
        assert_eq!(gpu_fallback(&dic, Role::Krylov), None);
        assert_eq!(gpu_fallback(&dilu, Role::Krylov), None);
        // A registered algorithm runs its device form in PCG only.
        let ssor = parse_spec("SSOR").unwrap();
        assert_eq!(gpu_fallback(&ssor, Role::Pcg), None);
        assert!(gpu_fallback(&ssor, Role::Krylov).is_some());
        // Every fallback names a registered preconditioner.
        for r in PRECONDITIONERS {
            for name in r.names {
                let Ok(p) = parse_spec(name) else { continue };
                for role in [Role::Pcg, Role::Krylov] {
                    if let GpuSupport::Fallback { to, reason } = gpu_support(&p, role) {
                        assert!(find(to).is_ok(), "{name} falls back to {to}");
                        assert!(!reason.is_empty(), "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_registered_name_has_an_explicit_gpu_answer_for_every_method() {
        for r in PRECONDITIONERS {
            for name in r.names {
                // A name that needs its positional key is given one.
                let parsed = parse_spec(name).or_else(|e| match r.positional {
                    Some(_) => parse_spec(&format!("{name}:1")),
                    None => Err(e),
                });
                let p = match parsed {
                    Ok(p) => p,
                    // A smoother that is not symmetric is refused, by name,
                    // as any preconditioner: nothing to map.
                    Err(e) => {
                        assert!(
                            e.to_string().contains("cannot precondition PCG"),
                            "{name}: {e}"
                        );
                        continue;
                    }
                };
                for role in [Role::Pcg, Role::Krylov] {
                    match gpu_support(&p, role) {
                        GpuSupport::Native => assert_eq!(gpu_fallback(&p, role), None),
                        GpuSupport::Adapted { how, .. } => {
                            assert!(!how.is_empty(), "{name} {role:?}");
                            assert_eq!(gpu_fallback(&p, role), None);
                        }
                        GpuSupport::Fallback { to, reason } => {
                            // The device runs the fallback itself: no chain
                            // of fallbacks, and the run's message says why.
                            let (used, message) = gpu_fallback(&p, role).unwrap();
                            assert_eq!(used, parse_spec(to).unwrap(), "{name}");
                            assert_eq!(
                                gpu_support(&used, role),
                                GpuSupport::Native,
                                "{name} {role:?} falls back to {to}"
                            );
                            assert!(
                                !reason.is_empty() && message.contains(reason),
                                "{name} {role:?}: {message}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn dic_ic0_and_gamg_without_gpu_keys_map_to_their_gpu_defaults() {
        let mapped = |spec: &str, explicit: bool| {
            let p = parse_spec(spec).unwrap();
            gpu_default(&p, Role::Pcg, explicit).map(|row| (row.given, row.settings(&p)))
        };
        // DIC and IC(0): the AMG's defaults with the tuned V-cycle.
        let amg_v_mixed = Preconditioner::Amg(AmgSettings {
            cycle: CycleKind::V,
            precision: Precision::Mixed,
            passes: 2,
            omega: 0.9,
            over_correction: 1.8,
            ..AmgSettings::default()
        });
        for (spec, given) in [("DIC", "DIC"), ("FDIC", "DIC"), ("IC0", "IC(0)")] {
            assert_eq!(mapped(spec, false), Some((given, amg_v_mixed)), "{spec}");
            // `precision` given: the GPU runs the sweeps as given.
            assert_eq!(mapped(spec, true), None, "{spec}");
        }
        // Mixed DIC is explicit by its settings alone.
        assert_eq!(mapped("DIC:precision=mixed", false), None);
        // GAMG: the tuned V-cycle, its OpenFOAM keys kept.
        let Some(("GAMG", Preconditioner::Amg(s))) =
            mapped("GAMG:nPreSweeps=2,nPostSweeps=4", false)
        else {
            panic!("GAMG maps to AMG");
        };
        assert_eq!(
            (s.cycle, s.precision, s.passes, s.omega, s.sweeps),
            (CycleKind::V, Precision::Mixed, 2, 0.9, 3)
        );
        assert_eq!(mapped("GAMG", true), None);
        let Some(("GAMG", Preconditioner::Amg(s))) = mapped("GAMG:refineCoarsest=false", false)
        else {
            panic!("GAMG maps to AMG");
        };
        assert_eq!((s.cycle, s.refine_coarsest), (CycleKind::V, false));
        // Neither GMRES / BiCGStab nor the others have GPU defaults.
        let dic = parse_spec("DIC").unwrap();
        assert_eq!(gpu_default(&dic, Role::Krylov, false), None);
        for spec in ["diagonal", "none", "Chebyshev", "sgs", "ILU", "FSAI"] {
            assert_eq!(mapped(spec, false), None, "{spec}");
        }
        // The message of the run's log.
        assert_eq!(
            DIC_ON_GPU.message("p"),
            "p: DIC runs on the GPU as AMG-PCG, V-cycle in mixed precision, 2 matching passes, \
             omega 0.9, over-correction 1.8 (faster to the same tolerance than Chebyshev(4) and level-scheduled DIC, \
             its set-up kept while the matrix holds: bench --preconditioners, docs/src/gpu.md)"
        );
    }

    #[test]
    fn gpu_keys_are_told_from_openfoam_keys() {
        assert!(!explicit_gpu_keys("DIC", &KeyValues::new()));
        assert!(explicit_gpu_keys("FDIC", &keys(&[("precision", "double")])));
        assert!(explicit_gpu_keys("IC0", &keys(&[("precision", "mixed")])));
        // OpenFOAM's GAMG keys are not GPU keys; AMG's own are.
        let openfoam = keys(&[
            ("smoother", "GaussSeidel"),
            ("nPreSweeps", "0"),
            ("nPostSweeps", "2"),
            ("nCellsInCoarsestLevel", "10"),
            ("agglomerator", "faceAreaPair"),
            ("mergeLevels", "1"),
            ("cacheAgglomeration", "true"),
        ]);
        assert!(!explicit_gpu_keys("GAMG", &openfoam));
        // How the coarsest inverse is updated keeps the GPU's tuned cycle.
        assert!(!explicit_gpu_keys(
            "GAMG",
            &keys(&[("refineCoarsest", "false")])
        ));
        for key in ["cycle", "precision", "passes", "omega", "Passes"] {
            assert!(explicit_gpu_keys("GAMG", &keys(&[(key, "1")])), "{key}");
        }
        assert_eq!(AMG_GPU_KEYS.first(), Some(&"sweeps"));
        assert_eq!(AMG_GPU_KEYS.last(), Some(&"fused"));
        assert!(!explicit_gpu_keys("diagonal", &KeyValues::new()));
        assert!(!explicit_gpu_keys(
            "Chebyshev",
            &keys(&[("precision", "mixed")])
        ));
        // Every row applies to a registration, and names a different one.
        for row in GPU_DEFAULTS {
            assert_eq!(find(row.registration).unwrap().name(), row.registration);
        }
    }
}
