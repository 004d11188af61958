//! OpenFOAM's GAMG solver (`solver GAMG;`), with OpenFOAM's semantics and
//! keys, on the CPU.
//!
//! Agglomeration (OpenFOAM's `pairGAMGAgglomeration`): each pass visits the
//! cells in order (forward and backward on alternate passes) and pairs an
//! unpaired cell with its unpaired neighbour across the heaviest face; a cell
//! whose neighbours are all paired joins the cluster across its heaviest
//! face; a cell without neighbours stays alone. The weights of the coarse
//! faces are the sums of the fine ones. `faceAreaPair` weights a face by
//! |(S_x, 1.01 S_y, 1.02 S_z)| / √|S| (the small anisotropy breaks the ties of
//! uniform meshes), `algebraicPair` by |a_ij|. `mergeLevels` passes make one
//! level; agglomeration stops before a level would have fewer than
//! `nCellsInCoarsestLevel` cells (or no fewer cells than the last), or at
//! `maxLevels` levels. The coarse matrices are the agglomerated sums
//! (Galerkin products with piecewise-constant transfers, `amg::galerkin`),
//! through the coarse addressing the agglomeration keeps per level
//! ([`GalerkinAddressing`]: the coarse pattern and, for each fine
//! coefficient, the coarse one it adds to, as OpenFOAM keeps the coarse face
//! of each fine face): a set-up sums each level in one pass over the finer
//! level's coefficients, without a search, a hash map or a sort. It also
//! keeps each coarse level's split layout ([`SplitPattern`]), into which
//! the coarse sums are written directly: the levels' [`SplitMatrix`] rows
//! are made without a coarse CSR copy, and share their pattern arrays
//! across the solves of a cached agglomeration.
//!
//! The V-cycle (OpenFOAM's `GAMGSolver::Vcycle`): the finest residual is
//! summed onto the first coarse level; going down, each coarse level is
//! optionally pre-smoothed from zero (`nPreSweeps`, growing by
//! `preSweepsLevelMultiplier` per level up to `maxPreSweeps`) and its
//! residual summed onto the next; the coarsest level is solved (PCG with DIC
//! to the solver's tolerance and relTol, or directly with
//! `directSolveCoarsest`); going up, each level takes the coarser level's
//! correction (optionally `interpolateCorrection`), scales it
//! (`scaleCorrection`, on by default: x ← s x + (b − s A x)/diag(A) with
//! s = (b·x)/(x·A x), the energy-minimising factor followed by a Jacobi
//! step), adds the pre-smoothed part and is post-smoothed (`nPostSweeps`,
//! `postSweepsLevelMultiplier`, `maxPostSweeps`); the finest level adds the
//! scaled correction and is smoothed `nFinestSweeps` times. Smoothers:
//! `GaussSeidel` (forward sweeps), `symGaussSeidel`, `DIC`,
//! `DICGaussSeidel` (the DIC sweeps, then as many Gauss–Seidel sweeps).
//! The DIC smoothers keep 1/d* per level and form the scaled coefficients
//! in their sweeps from the level's split rows ([`DicFactor`]), as
//! OpenFOAM's DIC smoother does: no scaled copy of each level's triangles.
//!
//! The coarse matrices of a bitwise-symmetric fine matrix are made bitwise
//! symmetric ([`SplitPattern::mirror_upper`]), as OpenFOAM's hold one coefficient per
//! coarse face, so that every level takes [`SplitMatrix`]'s upper-triangle
//! products. The sweeps of one smoothing run interleaved
//! ([`SplitMatrix::gauss_seidel_sweeps`], the bits of one sweep after
//! another), the correction scaling in two passes and the residual after a
//! cycle in one product, into the vector the next cycle restricts.
//!
//! The solve loop and its stopping rules are OpenFOAM's (one cycle per
//! iteration, the residual checked after each; `smooth_solver`), and the log
//! line is `GAMG:  Solving for p, Initial residual = …, No Iterations N`.
//! With `cacheAgglomeration` (the default) the agglomeration is kept in a
//! [`GamgCache`] for the next solve of a matrix with the same pattern, as
//! OpenFOAM keeps it on the mesh (`faceAreaPair` weighs by the face areas:
//! the mesh, not the coefficients); the coarse matrices are summed again for
//! the new values every solve, through the kept addressing. The set-up's
//! phases are logged at debug level
//! (`RUST_LOG=fvpoisson::solve::gamg=debug`): wall clock, CPU time and the
//! page faults of each (the fresh memory it touched; a first set-up's
//! arrays are most of a run's new memory, and each fresh 4 KiB page costs
//! a trap and a clearing in the kernel).

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::amg::coarsest::CoarsestSolver;
use super::amg::galerkin::GalerkinAddressing;
use super::amg::{AmgSettings, MAX_DENSE_ROWS};
use super::checks::{check_inputs, check_symmetric};
use super::cpu::CpuBackend;
use super::diagonal::Identity;
use super::ic::{Dic, DicFactor};
use super::pcg::pcg_unlogged;
use super::smooth_solver::{smooth_loop, SmoothBackend};
use super::split::{SplitMatrix, SplitPattern};
use super::{CgBackend, InitialNorms, SolveError, SolverControls, SolverPerformance};
use crate::sparse::Csr;
use crate::timings::{process_cpu_seconds, process_minor_faults};

/// The smoother of every level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GamgSmoother {
    /// Forward Gauss–Seidel sweeps.
    GaussSeidel,
    /// Forward then backward sweeps.
    SymGaussSeidel,
    /// x ← x + M⁻¹(b − A x), M the DIC factorisation.
    Dic,
    /// The DIC sweeps, then as many Gauss–Seidel sweeps.
    DicGaussSeidel,
}

impl GamgSmoother {
    pub const ALL: [Self; 4] = [
        Self::GaussSeidel,
        Self::SymGaussSeidel,
        Self::Dic,
        Self::DicGaussSeidel,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Self::GaussSeidel => "GaussSeidel",
            Self::SymGaussSeidel => "symGaussSeidel",
            Self::Dic => "DIC",
            Self::DicGaussSeidel => "DICGaussSeidel",
        }
    }
}

impl FromStr for GamgSmoother {
    type Err = String;
    /// OpenFOAM's names; `nonBlockingGaussSeidel` is Gauss–Seidel on one
    /// process, `FDIC` the same factorisation as DIC.
    fn from_str(s: &str) -> Result<Self, String> {
        let alias = match s {
            "nonBlockingGaussSeidel" => Some(Self::GaussSeidel),
            "FDIC" => Some(Self::Dic),
            "FDICGaussSeidel" => Some(Self::DicGaussSeidel),
            _ => None,
        };
        alias
            .or_else(|| Self::ALL.into_iter().find(|k| k.name() == s))
            .ok_or_else(|| {
                format!(
                    "unknown GAMG smoother '{s}' (GaussSeidel, symGaussSeidel, DIC, \
                     DICGaussSeidel, nonBlockingGaussSeidel, FDIC)"
                )
            })
    }
}

/// How the faces of the fine level are weighted for pairing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agglomerator {
    /// Face areas (from the mesh; |a_ij| where the solve has no mesh).
    FaceAreaPair,
    /// Matrix coefficients |a_ij|.
    AlgebraicPair,
}

impl Agglomerator {
    pub fn name(self) -> &'static str {
        match self {
            Self::FaceAreaPair => "faceAreaPair",
            Self::AlgebraicPair => "algebraicPair",
        }
    }
}

impl FromStr for Agglomerator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "faceAreaPair" => Ok(Self::FaceAreaPair),
            "algebraicPair" => Ok(Self::AlgebraicPair),
            _ => Err(format!(
                "unknown GAMG agglomerator '{s}' (faceAreaPair, algebraicPair)"
            )),
        }
    }
}

/// OpenFOAM's GAMG controls, and the AMG that runs where GAMG does not
/// (GPU, distributed runs: `amg`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GamgSettings {
    pub smoother: GamgSmoother,
    pub agglomerator: Agglomerator,
    pub n_cells_in_coarsest_level: usize,
    pub merge_levels: usize,
    pub max_levels: usize,
    pub n_pre_sweeps: usize,
    pub pre_sweeps_level_multiplier: usize,
    pub max_pre_sweeps: usize,
    pub n_post_sweeps: usize,
    pub post_sweeps_level_multiplier: usize,
    pub max_post_sweeps: usize,
    pub n_finest_sweeps: usize,
    pub cache_agglomeration: bool,
    pub direct_solve_coarsest: bool,
    pub scale_correction: bool,
    pub interpolate_correction: bool,
    /// The aggregation AMG that replaces GAMG on the GPU and over ranks.
    pub amg: AmgSettings,
}

impl Default for GamgSettings {
    /// OpenFOAM's defaults (`GAMGSolver.C`, `GAMGAgglomeration.C`).
    fn default() -> Self {
        Self {
            smoother: GamgSmoother::GaussSeidel,
            agglomerator: Agglomerator::FaceAreaPair,
            n_cells_in_coarsest_level: 10,
            merge_levels: 1,
            max_levels: 50,
            n_pre_sweeps: 0,
            pre_sweeps_level_multiplier: 1,
            max_pre_sweeps: 4,
            n_post_sweeps: 2,
            post_sweeps_level_multiplier: 1,
            max_post_sweeps: 4,
            n_finest_sweeps: 2,
            cache_agglomeration: true,
            direct_solve_coarsest: false,
            scale_correction: true,
            interpolate_correction: false,
            amg: AmgSettings::default(),
        }
    }
}

impl GamgSettings {
    /// The OpenFOAM keys [`Self::set`] takes.
    pub const KEYS: [&'static str; 16] = [
        "smoother",
        "agglomerator",
        "nCellsInCoarsestLevel",
        "mergeLevels",
        "maxLevels",
        "nPreSweeps",
        "preSweepsLevelMultiplier",
        "maxPreSweeps",
        "nPostSweeps",
        "postSweepsLevelMultiplier",
        "maxPostSweeps",
        "nFinestSweeps",
        "cacheAgglomeration",
        "directSolveCoarsest",
        "scaleCorrection",
        "interpolateCorrection",
    ];

    /// Sets one OpenFOAM key (exact spelling) from its text.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn count(key: &str, value: &str) -> Result<usize, String> {
            value
                .parse()
                .map_err(|_| format!("GAMG {key} must be a whole number, got '{value}'"))
        }
        fn switch(key: &str, value: &str) -> Result<bool, String> {
            match value {
                "true" | "yes" | "on" | "1" => Ok(true),
                "false" | "no" | "off" | "0" => Ok(false),
                _ => Err(format!(
                    "GAMG {key} must be true or false (yes/no, on/off), got '{value}'"
                )),
            }
        }
        match key {
            "smoother" => self.smoother = value.parse()?,
            "agglomerator" => self.agglomerator = value.parse()?,
            "nCellsInCoarsestLevel" => self.n_cells_in_coarsest_level = count(key, value)?,
            "mergeLevels" => self.merge_levels = count(key, value)?,
            "maxLevels" => self.max_levels = count(key, value)?,
            "nPreSweeps" => self.n_pre_sweeps = count(key, value)?,
            "preSweepsLevelMultiplier" => self.pre_sweeps_level_multiplier = count(key, value)?,
            "maxPreSweeps" => self.max_pre_sweeps = count(key, value)?,
            "nPostSweeps" => self.n_post_sweeps = count(key, value)?,
            "postSweepsLevelMultiplier" => self.post_sweeps_level_multiplier = count(key, value)?,
            "maxPostSweeps" => self.max_post_sweeps = count(key, value)?,
            "nFinestSweeps" => self.n_finest_sweeps = count(key, value)?,
            "cacheAgglomeration" => self.cache_agglomeration = switch(key, value)?,
            "directSolveCoarsest" => self.direct_solve_coarsest = switch(key, value)?,
            "scaleCorrection" => self.scale_correction = switch(key, value)?,
            "interpolateCorrection" => self.interpolate_correction = switch(key, value)?,
            _ => {
                return Err(format!(
                    "unknown GAMG key '{key}' ({})",
                    Self::KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Checks the controls; the message names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("nCellsInCoarsestLevel", self.n_cells_in_coarsest_level),
            ("mergeLevels", self.merge_levels),
        ] {
            if v == 0 {
                return Err(format!("GAMG {name} must be at least 1"));
            }
        }
        if self.max_levels < 2 {
            return Err(format!(
                "GAMG maxLevels must be at least 2 (the fine and a coarse level), got {}",
                self.max_levels
            ));
        }
        self.amg.validate()
    }

    /// E.g. `GAMG (GaussSeidel, faceAreaPair, 0 pre-, 2 post-, 2 finest sweeps)`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "GAMG ({}, {}, {} pre-, {} post-, {} finest sweeps",
            self.smoother.name(),
            self.agglomerator.name(),
            self.n_pre_sweeps,
            self.n_post_sweeps,
            self.n_finest_sweeps
        );
        if self.merge_levels != 1 {
            s += &format!(", mergeLevels {}", self.merge_levels);
        }
        if self.direct_solve_coarsest {
            s += ", direct coarsest solve";
        }
        if !self.scale_correction {
            s += ", unscaled correction";
        }
        if self.interpolate_correction {
            s += ", interpolated correction";
        }
        s + ")"
    }
}

impl fmt::Display for GamgSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The agglomeration of a matrix pattern: per coarse level, the map from
/// the next finer level's cells to its cells, and the coarse addressing
/// that sums a finer level's matrix into its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Agglomeration {
    /// `restrict[k]`: cell of level k → cell of level k + 1.
    pub restrict: Vec<Vec<u32>>,
    /// Cells per level, the fine level first.
    pub sizes: Vec<usize>,
    /// `addressing[k]`: level k + 1's pattern and, for each entry of level
    /// k's, the coarse entry it adds to.
    pub addressing: Vec<GalerkinAddressing>,
    /// `splits[k]`: the split layout of level k + 1's pattern, into which
    /// each solve sums that level's matrix.
    pub splits: Vec<SplitPattern>,
}

impl Agglomeration {
    /// Agglomerates by the symmetric face weights `weights` (off-diagonal
    /// entries; the diagonal is ignored) with `settings`' pairing controls.
    pub fn new(weights: &Csr, settings: &GamgSettings) -> Self {
        let mut restrict: Vec<Vec<u32>> = Vec::new();
        let mut sizes = vec![weights.n_rows()];
        let mut addressing: Vec<GalerkinAddressing> = Vec::new();
        let mut coarse_weights: Option<Csr> = None;
        let mut forward = true;
        let mut n_pairs = 0;
        while restrict.len() + 1 < settings.max_levels {
            let w = coarse_weights.as_ref().unwrap_or(weights);
            let (map, n_coarse) = pair_cells(w, forward);
            forward = !forward;
            if n_coarse < settings.n_cells_in_coarsest_level || n_coarse >= w.n_rows() {
                break;
            }
            let (pass, next) = GalerkinAddressing::with_product(w, &map, n_coarse);
            match restrict.last_mut() {
                Some(last) if n_pairs % settings.merge_levels != 0 => {
                    last.iter_mut().for_each(|c| *c = map[*c as usize]);
                    *sizes.last_mut().expect("one size per level") = n_coarse;
                }
                _ => {
                    restrict.push(map);
                    sizes.push(n_coarse);
                    addressing.push(pass);
                }
            }
            n_pairs += 1;
            coarse_weights = Some(next);
        }
        if settings.merge_levels > 1 {
            // A level of merged passes sums its finer level in one step.
            addressing.clear();
            for (k, map) in restrict.iter().enumerate() {
                let finer = addressing.last().map_or(weights, |l| l.pattern());
                let level = GalerkinAddressing::new(finer, map, sizes[k + 1]);
                addressing.push(level);
            }
        }
        let splits = addressing
            .par_iter()
            .map(|level| SplitPattern::new(level.pattern()))
            .collect();
        Self {
            restrict,
            sizes,
            addressing,
            splits,
        }
    }

    /// Levels, the fine one included.
    pub fn n_levels(&self) -> usize {
        self.sizes.len()
    }

    /// E.g. `262144 → 131072 → … → 16 cells`.
    pub fn describe(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(ToString::to_string).collect();
        format!("{} levels: {} cells", self.n_levels(), sizes.join(" → "))
    }
}

const UNPAIRED: u32 = u32::MAX;

/// One pairing pass over the cells of `w` (forward or backward): the map
/// cell → cluster and the number of clusters, numbered in visiting order
/// (a backward pass numbers them from the end, so both start at the first
/// cells). Ties go to the first face in row order, as in OpenFOAM.
fn pair_cells(w: &Csr, forward: bool) -> (Vec<u32>, usize) {
    let n = w.n_rows();
    let mut map = vec![UNPAIRED; n];
    let mut n_coarse = 0u32;
    let cell = |k: usize| if forward { k } else { n - 1 - k };
    for k in 0..n {
        let i = cell(k);
        if map[i] != UNPAIRED {
            continue;
        }
        let (cols, weights) = w.row(i);
        let heaviest = |free_only: bool, map: &[u32]| {
            let mut best: Option<(usize, f64)> = None;
            for (&c, &weight) in cols.iter().zip(weights) {
                let c = c as usize;
                let free = map[c] == UNPAIRED;
                if c != i && (free || !free_only) && best.is_none_or(|(_, b)| weight > b) {
                    best = Some((c, weight));
                }
            }
            best.map(|b| b.0)
        };
        if let Some(j) = heaviest(true, &map) {
            map[i] = n_coarse;
            map[j] = n_coarse;
            n_coarse += 1;
        } else if let Some(j) = heaviest(false, &map) {
            map[i] = map[j];
        }
    }
    for k in 0..n {
        let i = cell(k);
        if map[i] == UNPAIRED {
            map[i] = n_coarse;
            n_coarse += 1;
        }
    }
    if !forward {
        map.iter_mut().for_each(|c| *c = n_coarse - 1 - *c);
    }
    (map, n_coarse as usize)
}

/// OpenFOAM's `faceAreaPair` weight of a face with area vector `s`:
/// |(s_x, 1.01 s_y, 1.02 s_z)| / √|s|.
pub fn face_area_pair_weight(s: [f64; 3]) -> f64 {
    let magnitude = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt();
    let skewed = [s[0], 1.01 * s[1], 1.02 * s[2]];
    (skewed[0] * skewed[0] + skewed[1] * skewed[1] + skewed[2] * skewed[2]).sqrt()
        / magnitude.sqrt()
}

/// The `faceAreaPair` weights on the pattern of `a`: each internal face
/// (owner, neighbour, its [`face_area_pair_weight`]) adds its weight to the
/// entries (o, n) and (n, o); faces between cells that `a` does not couple
/// are skipped.
///
/// Each row keeps a cursor on its entries: faces in OpenFOAM's order (owners
/// ascending, each owner's neighbours ascending) meet each row's entries in
/// column order, so the entry is found by stepping the cursor, not by a
/// search per face (two unpredictable searches per face were most of the
/// time); a face out of that order is found by a search.
pub fn face_area_weights(a: &Csr, faces: impl IntoIterator<Item = (usize, usize, f64)>) -> Csr {
    let mut w = a.filled_like(0.0);
    let n_rows = a.n_rows();
    let (row_ptr, cols) = (a.row_ptr(), a.cols());
    let mut cursor: Vec<usize> = row_ptr[..n_rows].to_vec();
    let values = w.values_mut();
    let mut slot = |r: usize, c: usize| {
        let end = row_ptr[r + 1];
        let mut k = cursor[r];
        while k < end && (cols[k] as usize) < c {
            k += 1;
        }
        if k < end && cols[k] as usize == c {
            cursor[r] = k + 1;
            return Some(k);
        }
        let row = &cols[row_ptr[r]..end];
        row.binary_search(&(c as u32)).ok().map(|i| row_ptr[r] + i)
    };
    for (o, n, weight) in faces.into_iter().filter(|f| f.0 < n_rows && f.1 < n_rows) {
        for (r, c) in [(o, n), (n, o)] {
            if let Some(k) = slot(r, c) {
                values[k] += weight;
            }
        }
    }
    w
}

/// |a_ij| on the pattern of `a` (`algebraicPair`).
fn coefficient_weights(a: &Csr) -> Csr {
    let mut w = a.clone();
    w.values_mut().iter_mut().for_each(|v| *v = v.abs());
    w
}

/// A fingerprint of the pattern of `a` and of the pairing controls.
fn pattern_key(a: &Csr, settings: &GamgSettings) -> u64 {
    // FNV-1a over the row pointers and the columns, in four lanes (words
    // k mod 4) folded at the end: one lane is a chain of dependent
    // multiplies, four run side by side.
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(PRIME);
    let mut lanes = [OFFSET, OFFSET ^ 1, OFFSET ^ 2, OFFSET ^ 3];
    for words in a.row_ptr().chunks(4) {
        for (lane, &v) in lanes.iter_mut().zip(words) {
            *lane = mix(*lane, v as u64);
        }
    }
    for words in a.cols().chunks(4) {
        for (lane, &v) in lanes.iter_mut().zip(words) {
            *lane = mix(*lane, u64::from(v));
        }
    }
    let mut h = lanes.iter().fold(OFFSET, |h, &lane| mix(h, lane));
    for v in [
        settings.n_cells_in_coarsest_level as u64,
        settings.merge_levels as u64,
        settings.max_levels as u64,
        settings.agglomerator as u64,
    ] {
        h = mix(h, v);
    }
    h
}

/// The internal faces of a mesh: owner, neighbour and `faceAreaPair`
/// weight ([`face_area_pair_weight`] of the area vector), 16 bytes a face:
/// the weight is all the agglomeration reads of the area.
#[derive(Clone, Debug, Default)]
pub struct MeshFaces {
    pub owner: Vec<u32>,
    pub neighbour: Vec<u32>,
    pub weight: Vec<f64>,
}

/// What GAMG keeps between solves: the mesh's faces (where the solve has a
/// mesh: `faceAreaPair` weights) and the last agglomeration
/// (`cacheAgglomeration`).
#[derive(Default)]
pub struct GamgCache {
    faces: Option<MeshFaces>,
    agglomeration: Mutex<Option<(u64, Arc<Agglomeration>)>>,
}

impl GamgCache {
    /// A cache for the systems of a mesh with these internal faces.
    pub fn for_mesh(faces: MeshFaces) -> Self {
        Self {
            faces: Some(faces),
            agglomeration: Mutex::new(None),
        }
    }

    /// The agglomeration of `a`'s pattern: the cached one, or a new one
    /// (kept when `cacheAgglomeration` is on).
    fn agglomeration(
        &self,
        a: &Csr,
        settings: &GamgSettings,
        clock: &mut SetupClock,
    ) -> Arc<Agglomeration> {
        let key = pattern_key(a, settings);
        let mut cached = self
            .agglomeration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((k, agglomeration)) = cached.as_ref() {
            if *k == key && settings.cache_agglomeration {
                clock.lap("cached agglomeration");
                return Arc::clone(agglomeration);
            }
        }
        let weights = match (&self.faces, settings.agglomerator) {
            (Some(f), Agglomerator::FaceAreaPair) => {
                let w = face_area_weights(
                    a,
                    f.owner
                        .iter()
                        .zip(&f.neighbour)
                        .zip(&f.weight)
                        .map(|((&o, &n), &w)| (o as usize, n as usize, w)),
                );
                if w.values().iter().any(|&v| v > 0.0) {
                    w
                } else {
                    log::debug!("GAMG: the mesh's faces do not match the matrix; |a_ij| weights");
                    coefficient_weights(a)
                }
            }
            (None, Agglomerator::FaceAreaPair) => {
                log::debug!("GAMG faceAreaPair without a mesh: faces weighted by |a_ij|");
                coefficient_weights(a)
            }
            (_, Agglomerator::AlgebraicPair) => coefficient_weights(a),
        };
        clock.lap("face weights");
        let agglomeration = Arc::new(Agglomeration::new(&weights, settings));
        clock.lap("agglomeration");
        log::debug!("GAMG agglomeration: {}", agglomeration.describe());
        if settings.cache_agglomeration {
            *cached = Some((key, Arc::clone(&agglomeration)));
        }
        agglomeration
    }
}

/// Wall-clock, CPU-time and page-fault laps of the set-up, logged at debug
/// level (`RUST_LOG=fvpoisson::solve::gamg=debug`). The CPU time is the
/// process's, over all threads: on a shared machine it is the one that
/// compares two builds. The page faults count the fresh memory each phase
/// touched (a cleared 4 KiB page each), a large part of a first set-up.
struct SetupClock {
    last: (Instant, f64, u64),
    laps: Vec<(&'static str, f64, f64, u64)>,
}

impl SetupClock {
    fn start() -> Self {
        Self {
            last: (
                Instant::now(),
                process_cpu_seconds(),
                process_minor_faults(),
            ),
            laps: Vec::new(),
        }
    }

    /// Ends the phase `name`, begun at the last lap.
    fn lap(&mut self, name: &'static str) {
        let now = (
            Instant::now(),
            process_cpu_seconds(),
            process_minor_faults(),
        );
        self.laps.push((
            name,
            (now.0 - self.last.0).as_secs_f64() * 1e3,
            (now.1 - self.last.1) * 1e3,
            now.2.saturating_sub(self.last.2),
        ));
        self.last = now;
    }

    /// E.g. `face weights 20.1 ms (cpu 19.8 ms, 5120 faults), …`.
    fn describe(&self) -> String {
        let laps: Vec<String> = self
            .laps
            .iter()
            .map(|(name, ms, cpu_ms, faults)| {
                format!("{name} {ms:.1} ms (cpu {cpu_ms:.1} ms, {faults} faults)")
            })
            .collect();
        laps.join(", ")
    }
}

/// One coarse level: its matrix and what its smoother needs.
struct Level {
    matrix: SplitMatrix,
    dic: Option<DicFactor>,
}

/// How the coarsest level is solved.
enum Coarsest {
    Direct(CoarsestSolver),
    /// PCG with DIC to the GAMG solver's tolerance and relTol.
    Iterative {
        matrix: Csr,
        dic: Dic<'static>,
    },
}

/// The tests' reference for the coarse levels' symmetry
/// ([`SplitPattern::mirror_upper`]): copies each upper entry a_ij (i < j)
/// onto its mirror a_ji, in the
/// `values` of a matrix of `pattern`, so that a coarse matrix of a
/// symmetric fine one is symmetric bit for bit, as OpenFOAM's coarse levels
/// are (they store one coefficient per coarse face): the Galerkin sums a_IJ
/// and a_JI add the same fine entries in different orders and can differ in
/// the last bit. The kernels then read the upper triangle alone
/// ([`SplitMatrix`]'s module docs). A lower entry without a mirror (a
/// pattern that is not symmetric) is left as it is. One pass: rows i are
/// visited ascending, so the lower entries (j, i) of each row j are met in
/// column order and a cursor per row finds them without a search.
#[cfg(test)]
fn mirror_upper(pattern: &Csr, values: &mut [f64]) {
    let (row_ptr, cols) = (pattern.row_ptr(), pattern.cols());
    assert_eq!(values.len(), cols.len(), "mirror_upper: values size");
    let mut cursor: Vec<usize> = row_ptr[..pattern.n_rows()].to_vec();
    for i in 0..pattern.n_rows() {
        for s in row_ptr[i]..row_ptr[i + 1] {
            let j = cols[s] as usize;
            if j <= i {
                continue;
            }
            let end = row_ptr[j + 1];
            let mut t = cursor[j];
            while t < end && (cols[t] as usize) < i {
                t += 1;
            }
            cursor[j] = t;
            if t < end && cols[t] as usize == i {
                values[t] = values[s];
            }
        }
    }
}

/// The cycle's work vectors, per coarse level.
struct Work {
    /// The finest residual b − A x of the current iterate.
    residual: Vec<f64>,
    finest_correction: Vec<f64>,
    finest_scratch: Vec<f64>,
    finest_update: Vec<f64>,
    correction: Vec<Vec<f64>>,
    source: Vec<Vec<f64>>,
    scratch: Vec<Vec<f64>>,
    /// The DIC smoother's update.
    update: Vec<Vec<f64>>,
    pre_smoothed: Vec<Vec<f64>>,
}

/// The GAMG hierarchy of one matrix and its V-cycle.
pub struct Gamg<'a> {
    settings: GamgSettings,
    controls: SolverControls,
    agglomeration: Arc<Agglomeration>,
    fine: CpuBackend<'a>,
    fine_dic: Option<DicFactor>,
    /// Coarse levels 1..; the last is the coarsest.
    levels: Vec<Level>,
    coarsest: Coarsest,
    work: Mutex<Work>,
}

impl<'a> Gamg<'a> {
    /// The hierarchy of `a` (square, positive diagonal; an error unless
    /// symmetric) with the
    /// agglomeration of `cache` (or a new one); `controls` are the solve's,
    /// whose tolerance and relTol the coarsest PCG solve uses.
    pub fn new(
        a: &'a Csr,
        identity: &'a Identity,
        settings: &GamgSettings,
        controls: &SolverControls,
        cache: &GamgCache,
    ) -> Result<Self, SolveError> {
        settings.validate().map_err(SolveError::InvalidControls)?;
        let mut clock = SetupClock::start();
        let fine = CpuBackend::new(a, identity);
        // A bitwise symmetric split (every assembled Laplacian) needs no
        // search for the mirrors of the entries.
        if !fine.split().is_symmetric() {
            check_symmetric(a)?;
        }
        clock.lap("fine split");
        let agglomeration = cache.agglomeration(a, settings, &mut clock);
        if agglomeration.n_levels() < 2 {
            return Err(SolveError::InvalidControls(format!(
                "GAMG: no coarse level for a matrix of {} rows with nCellsInCoarsestLevel {}; \
                 lower nCellsInCoarsestLevel or use PCG for so small a system",
                a.n_rows(),
                settings.n_cells_in_coarsest_level
            )));
        }
        let uses_dic = matches!(
            settings.smoother,
            GamgSmoother::Dic | GamgSmoother::DicGaussSeidel
        );
        let fine_dic = uses_dic
            .then(|| DicFactor::of_split(fine.split()))
            .transpose()?;
        clock.lap("fine DIC");
        // Each coarse matrix is summed straight into its level's split
        // layout (kept with the agglomeration) from the finer level's
        // values; a symmetric fine matrix gives coarse ones whose lower
        // triangle is copied from the upper, so that they are symmetric bit
        // for bit, as OpenFOAM's coarse levels are (they store one
        // coefficient per coarse face): the Galerkin sums a_IJ and a_JI add
        // the same fine entries in different orders and can differ in the
        // last bit. The kernels then read the upper triangle alone.
        let symmetric = fine.split().is_symmetric();
        let mut matrices: Vec<SplitMatrix> = Vec::with_capacity(agglomeration.splits.len());
        for (k, (addressing, split)) in agglomeration
            .addressing
            .iter()
            .zip(&agglomeration.splits)
            .enumerate()
        {
            let mut values = match matrices.last() {
                None => {
                    let fine_values = a.values();
                    addressing.split_product(a.row_ptr(), |e| fine_values[e], split)
                }
                Some(finer) => {
                    let finer_split = &agglomeration.splits[k - 1];
                    let finer_pattern = agglomeration.addressing[k - 1].pattern();
                    addressing.split_product(
                        finer_pattern.row_ptr(),
                        |e| finer.value_at(finer_split.position(e)),
                        split,
                    )
                }
            };
            let mirrored = symmetric && split.mirror_upper(&mut values);
            matrices.push(split.matrix(values, mirrored));
        }
        clock.lap("coarse matrices");
        let coarsest_split = matrices.pop().expect("at least one coarse level");
        let coarsest_matrix = {
            let pattern = agglomeration
                .addressing
                .last()
                .expect("at least one coarse level")
                .pattern();
            let mut m = pattern.zeros_like();
            let values = agglomeration
                .splits
                .last()
                .expect("one split per level")
                .csr_values(&coarsest_split);
            m.values_mut().copy_from_slice(&values);
            m
        };
        // The levels' factors are independent: in parallel.
        let mut levels = matrices
            .into_par_iter()
            .map(|matrix| {
                let dic = uses_dic.then(|| DicFactor::of_split(&matrix)).transpose()?;
                Ok(Level { matrix, dic })
            })
            .collect::<Result<Vec<_>, SolveError>>()?;
        levels.push(Level {
            matrix: coarsest_split,
            dic: None,
        });
        clock.lap("coarse DIC and coarsest");
        let coarsest =
            if settings.direct_solve_coarsest && coarsest_matrix.n_rows() <= MAX_DENSE_ROWS {
                Coarsest::Direct(CoarsestSolver::new(&coarsest_matrix)?)
            } else {
                let dic = Dic::owned(coarsest_matrix.clone(), "DIC")?;
                Coarsest::Iterative {
                    matrix: coarsest_matrix,
                    dic,
                }
            };
        let vectors =
            |with: fn(usize) -> Vec<f64>| levels.iter().map(|l| with(l.matrix.n())).collect();
        let zeros: fn(usize) -> Vec<f64> = |n| vec![0.0; n];
        // The DIC smoothers' updates and the pre-smoothed corrections stay
        // empty where the settings never use them: each fresh array costs
        // a page fault per 4 KiB on first touch.
        let unused: fn(usize) -> Vec<f64> = |_| Vec::new();
        let (updates, pre_smoothed) = (
            if uses_dic { zeros } else { unused },
            if settings.n_pre_sweeps > 0 {
                zeros
            } else {
                unused
            },
        );
        let n = a.n_rows();
        let work = Work {
            residual: zeros(n),
            finest_correction: zeros(n),
            finest_scratch: zeros(n),
            finest_update: updates(n),
            correction: vectors(zeros),
            source: vectors(zeros),
            scratch: vectors(zeros),
            update: vectors(updates),
            pre_smoothed: vectors(pre_smoothed),
        };
        clock.lap("coarsest and work vectors");
        log::debug!("GAMG set-up: {}", clock.describe());
        Ok(Self {
            settings: *settings,
            controls: *controls,
            agglomeration,
            fine,
            fine_dic,
            levels,
            coarsest,
            work: Mutex::new(work),
        })
    }

    pub fn agglomeration(&self) -> &Agglomeration {
        &self.agglomeration
    }

    /// `sweeps` sweeps of the smoother on `m` x = b.
    fn smooth(
        &self,
        (m, dic): (&SplitMatrix, Option<&DicFactor>),
        b: &[f64],
        x: &mut [f64],
        sweeps: usize,
        (scratch, update): (&mut [f64], &mut [f64]),
    ) {
        let gauss_seidel = |x: &mut [f64], symmetric: bool| {
            if !symmetric {
                return m.gauss_seidel_sweeps(b, x, sweeps);
            }
            for _ in 0..sweeps {
                m.gauss_seidel(b, x, true);
                m.gauss_seidel(b, x, false);
            }
        };
        let dic_sweeps = |x: &mut [f64], scratch: &mut [f64], update: &mut [f64]| {
            let dic = dic.expect("DIC smoothers are factored at setup");
            for _ in 0..sweeps {
                m.residual(b, x, scratch);
                dic.sweeps(m, scratch, update);
                x.iter_mut().zip(update.iter()).for_each(|(x, w)| *x += w);
            }
        };
        match self.settings.smoother {
            GamgSmoother::GaussSeidel => gauss_seidel(x, false),
            GamgSmoother::SymGaussSeidel => gauss_seidel(x, true),
            GamgSmoother::Dic => dic_sweeps(x, scratch, update),
            GamgSmoother::DicGaussSeidel => {
                dic_sweeps(x, scratch, update);
                gauss_seidel(x, false);
            }
        }
    }

    /// OpenFOAM's correction scaling: s = (b·x)/(x·A x), then
    /// x ← s x + (b − s A x)/diag(A), in two passes
    /// ([`SplitMatrix::scale_correction`]). `ax` is scratch.
    fn scale(m: &SplitMatrix, b: &[f64], x: &mut [f64], ax: &mut [f64]) {
        // OpenFOAM's stabilise(denominator, VSMALL).
        let stabilise = |d: f64| if d >= 0.0 { d + 1e-300 } else { d - 1e-300 };
        m.scale_correction(b, x, ax, stabilise);
    }

    /// OpenFOAM's `interpolateCorrection`: x_i ← −Σ_{j≠i} a_ij x_j / a_ii,
    /// then each cluster's diagonal-weighted mean is moved to the coarse
    /// correction `coarse` (`map`: cell → cluster).
    fn interpolate(m: &SplitMatrix, map: &[u32], coarse: &[f64], x: &mut [f64], ax: &mut [f64]) {
        for (i, ax) in ax.iter_mut().enumerate() {
            *ax = m.off_diagonal_times(i, x);
        }
        let d = m.diag();
        for i in 0..x.len() {
            x[i] = -ax[i] / d[i];
        }
        let mut corrections = vec![0.0; coarse.len()];
        let mut weights = vec![0.0; coarse.len()];
        for (i, &c) in map.iter().enumerate() {
            corrections[c as usize] += d[i] * x[i];
            weights[c as usize] += d[i];
        }
        for (c, correction) in corrections.iter_mut().enumerate() {
            *correction = coarse[c] - *correction / weights[c];
        }
        for (i, &c) in map.iter().enumerate() {
            x[i] += corrections[c as usize];
        }
    }

    fn restrict_into(map: &[u32], fine: &[f64], coarse: &mut [f64]) {
        coarse.fill(0.0);
        for (i, &c) in map.iter().enumerate() {
            coarse[c as usize] += fine[i];
        }
    }

    fn prolong_into(map: &[u32], coarse: &[f64], fine: &mut [f64]) {
        for (f, &c) in fine.iter_mut().zip(map) {
            *f = coarse[c as usize];
        }
    }

    fn solve_coarsest(&self, b: &[f64], x: &mut [f64]) -> Result<(), SolveError> {
        match &self.coarsest {
            Coarsest::Direct(solver) => solver.solve(b, x),
            Coarsest::Iterative { matrix, dic } => {
                x.fill(0.0);
                let backend = CpuBackend::new(matrix, dic);
                let controls = SolverControls {
                    min_iter: 0,
                    max_iter: SolverControls::default().max_iter,
                    ..self.controls
                };
                let mut y = x.to_vec();
                pcg_unlogged(
                    &backend,
                    &b.to_vec(),
                    &mut y,
                    &controls,
                    "coarsestLevelCorr",
                )?;
                x.copy_from_slice(&y);
            }
        }
        Ok(())
    }

    /// One V-cycle on x from the finest residual in `work.residual`.
    fn v_cycle(&self, b: &[f64], x: &mut [f64], work: &mut Work) -> Result<(), SolveError> {
        let s = &self.settings;
        let restrict = &self.agglomeration.restrict;
        let coarsest = self.levels.len() - 1;
        let Work {
            residual,
            finest_correction,
            finest_scratch,
            finest_update,
            correction,
            source,
            scratch,
            update,
            pre_smoothed,
        } = work;
        Self::restrict_into(&restrict[0], residual, &mut source[0]);
        for k in 0..coarsest {
            let level = &self.levels[k];
            if s.n_pre_sweeps > 0 {
                correction[k].fill(0.0);
                let sweeps =
                    (s.n_pre_sweeps + s.pre_sweeps_level_multiplier * k).min(s.max_pre_sweeps);
                self.smooth(
                    (&level.matrix, level.dic.as_ref()),
                    &source[k],
                    &mut correction[k],
                    sweeps,
                    (&mut scratch[k], &mut update[k]),
                );
                if s.scale_correction && k + 1 < coarsest {
                    Self::scale(
                        &level.matrix,
                        &source[k],
                        &mut correction[k],
                        &mut scratch[k],
                    );
                }
                level.matrix.apply(&correction[k], &mut scratch[k]);
                source[k]
                    .iter_mut()
                    .zip(&scratch[k])
                    .for_each(|(b, ax)| *b -= ax);
            }
            let (done, rest) = source.split_at_mut(k + 1);
            Self::restrict_into(&restrict[k + 1], &done[k], &mut rest[0]);
        }
        self.solve_coarsest(&source[coarsest], &mut correction[coarsest])?;
        for k in (0..coarsest).rev() {
            let level = &self.levels[k];
            if s.n_pre_sweeps > 0 {
                pre_smoothed[k].copy_from_slice(&correction[k]);
            }
            let (finer, coarser) = correction.split_at_mut(k + 1);
            let (field, coarse) = (&mut finer[k], &coarser[0]);
            Self::prolong_into(&restrict[k + 1], coarse, field);
            if s.interpolate_correction {
                Self::interpolate(
                    &level.matrix,
                    &restrict[k + 1],
                    coarse,
                    field,
                    &mut scratch[k],
                );
            }
            if s.scale_correction && (s.interpolate_correction || k + 1 < coarsest) {
                Self::scale(&level.matrix, &source[k], field, &mut scratch[k]);
            }
            if s.n_pre_sweeps > 0 {
                field
                    .iter_mut()
                    .zip(&pre_smoothed[k])
                    .for_each(|(c, p)| *c += p);
            }
            let sweeps =
                (s.n_post_sweeps + s.post_sweeps_level_multiplier * k).min(s.max_post_sweeps);
            self.smooth(
                (&level.matrix, level.dic.as_ref()),
                &source[k],
                field,
                sweeps,
                (&mut scratch[k], &mut update[k]),
            );
        }
        let fine = self.fine.split();
        Self::prolong_into(&restrict[0], &correction[0], finest_correction);
        if s.interpolate_correction {
            Self::interpolate(
                fine,
                &restrict[0],
                &correction[0],
                finest_correction,
                finest_scratch,
            );
        }
        if s.scale_correction {
            Self::scale(fine, residual, finest_correction, finest_scratch);
        }
        x.iter_mut()
            .zip(finest_correction.iter())
            .for_each(|(x, c)| *x += c);
        self.smooth(
            (fine, self.fine_dic.as_ref()),
            b,
            x,
            s.n_finest_sweeps,
            (finest_scratch, finest_update),
        );
        Ok(())
    }

    /// Rows per level and the smoother, for the log.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.settings, self.agglomeration.describe())
    }
}

impl SmoothBackend for Gamg<'_> {
    type Vector = Vec<f64>;
    fn new_vector(&self) -> Vec<f64> {
        self.fine.new_vector()
    }
    /// The finest residual and OpenFOAM's norms; the residual is kept for
    /// the next cycle.
    fn initialize(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> InitialNorms {
        let norms = self.fine.initialize(b, x, r);
        self.lock_work().residual.copy_from_slice(r);
        norms
    }
    /// The finest residual after a cycle, written where the next cycle
    /// reads it (`r` is not used): one product, no normFactor terms, the
    /// bits of [`Self::initialize`]'s residual and sum.
    fn residual_sum(&self, b: &Vec<f64>, x: &Vec<f64>, _r: &mut Vec<f64>) -> f64 {
        let residual = &mut self.lock_work().residual;
        self.fine.split().residual(b, x, residual)
    }
    /// `cycles` V-cycles (the loop asks for one at a time).
    fn smooth(&self, b: &Vec<f64>, x: &mut Vec<f64>, cycles: usize) -> Result<(), SolveError> {
        let mut work = self.lock_work();
        for c in 0..cycles {
            if c > 0 {
                let residual = &mut work.residual;
                self.fine.split().residual(b, x, residual);
            }
            self.v_cycle(b, x, &mut work)?;
        }
        Ok(())
    }
}

impl Gamg<'_> {
    fn lock_work(&self) -> std::sync::MutexGuard<'_, Work> {
        self.work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Solves A x = b by OpenFOAM's GAMG from the x given, after PCG's input
/// checks (square, sizes, finite; symmetric, in [`Gamg::new`]); the agglomeration comes from
/// (and, with `cacheAgglomeration`, goes to) `cache`. Logs OpenFOAM's
/// `GAMG:  Solving for …` line.
pub fn solve_gamg(
    a: &Csr,
    settings: &GamgSettings,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
    cache: &GamgCache,
) -> Result<SolverPerformance, SolveError> {
    check_inputs(a, b, x, controls)?;
    let identity = Identity(a.n_rows());
    let gamg = Gamg::new(a, &identity, settings, controls, cache)?;
    log::debug!("{}", gamg.describe());
    let mut x_work = x.to_vec();
    let perf = smooth_loop(&gamg, &b.to_vec(), &mut x_work, controls, 1, field, "GAMG")?;
    x.copy_from_slice(&x_work);
    perf.log("GAMG", "cycles", field, controls);
    Ok(perf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::amg::galerkin;
    use crate::sparse::testing::grid_laplacian as poisson_3d;

    /// Σ |b − A x|.
    fn residual_sum(a: &Csr, b: &[f64], x: &[f64]) -> f64 {
        let mut r = vec![0.0; b.len()];
        SplitMatrix::new(a).residual(b, x, &mut r)
    }

    #[test]
    fn pairing_pairs_across_the_heaviest_face_and_alternates_direction() {
        // A chain 0-1-2-3-4 with weights 1, 3, 2, 5.
        let cols = vec![1, 0, 2, 1, 3, 2, 4, 3];
        let w = Csr::new(
            5,
            vec![0, 1, 3, 5, 7, 8],
            cols,
            vec![1., 1., 3., 3., 2., 2., 5., 5.],
        )
        .unwrap();
        // Forward: 0 pairs with 1 (its only free neighbour), 2 with 3 (weight
        // 2 beats nothing else free), 4's neighbour is paired: joins it.
        let (map, n) = pair_cells(&w, true);
        assert_eq!((map, n), (vec![0, 0, 1, 1, 1], 2));
        // Backward: 4 pairs with 3, 2 with 1, 0 joins 1's cluster; numbered
        // from the end so that the first cells get the first clusters.
        let (map, n) = pair_cells(&w, false);
        assert_eq!((map, n), (vec![0, 0, 0, 1, 1], 2));
    }

    #[test]
    fn face_area_weights_prefer_z_then_y_then_x_on_a_cube() {
        let (x, y, z) = (
            face_area_pair_weight([1.0, 0.0, 0.0]),
            face_area_pair_weight([0.0, 1.0, 0.0]),
            face_area_pair_weight([0.0, 0.0, 1.0]),
        );
        assert!(x < y && y < z);
        assert!((z - 1.02).abs() < 1e-15);
    }

    #[test]
    fn face_weights_do_not_depend_on_the_order_of_the_faces() {
        let a = poisson_3d(5, 4, 3);
        // The faces of the grid in OpenFOAM's order (owners ascending, each
        // owner's neighbours ascending), with distinct area vectors.
        let faces: Vec<(usize, usize, f64)> = (0..a.n_rows())
            .flat_map(|o| {
                let (cols, _) = a.row(o);
                cols.iter()
                    .filter(move |&&c| c as usize > o)
                    .map(move |&c| (o, c as usize, 1.0 + o as f64 + 0.1 * c as f64))
            })
            .collect();
        let sorted = face_area_weights(&a, faces.iter().copied());
        for (f, &(o, n, w)) in faces.iter().enumerate() {
            assert_eq!(sorted.values()[sorted.slot(o, n).unwrap()], w, "face {f}");
            assert_eq!(sorted.values()[sorted.slot(n, o).unwrap()], w, "face {f}");
        }
        // Reversed, and with the owner and neighbour of every other face
        // swapped: the cursors miss and the search finds the entries.
        let shuffled =
            faces
                .iter()
                .rev()
                .enumerate()
                .map(|(k, &(o, n, s))| if k % 2 == 0 { (n, o, s) } else { (o, n, s) });
        assert_eq!(face_area_weights(&a, shuffled).values(), sorted.values());
        // A face the pattern does not hold adds nothing.
        let stray = faces.iter().copied().chain([(0, a.n_rows() - 1, 1.0)]);
        assert_eq!(face_area_weights(&a, stray).values(), sorted.values());
    }

    #[test]
    fn agglomeration_stops_above_the_coarsest_size_and_merges_levels() {
        let a = poisson_3d(8, 8, 8);
        let settings = GamgSettings::default();
        let agg = Agglomeration::new(&coefficient_weights(&a), &settings);
        assert_eq!(agg.sizes[0], 512);
        assert!(*agg.sizes.last().unwrap() >= settings.n_cells_in_coarsest_level);
        assert!(agg.sizes.windows(2).all(|s| s[1] < s[0]));
        let merged = Agglomeration::new(
            &coefficient_weights(&a),
            &GamgSettings {
                merge_levels: 2,
                ..settings
            },
        );
        assert!(merged.n_levels() < agg.n_levels());
        assert_eq!(merged.sizes[1], agg.sizes[2]);
    }

    #[test]
    fn every_smoother_converges_in_a_few_cycles_and_the_cache_is_reused() {
        let a = poisson_3d(16, 16, 16);
        let b: Vec<f64> = (0..a.n_rows())
            .map(|i| ((i * 37) % 11) as f64 - 5.0)
            .collect();
        let controls = SolverControls::absolute(1e-10, 100);
        for smoother in GamgSmoother::ALL {
            for direct in [false, true] {
                let settings = GamgSettings {
                    smoother,
                    direct_solve_coarsest: direct,
                    ..GamgSettings::default()
                };
                let cache = GamgCache::default();
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_gamg(&a, &settings, &b, &mut x, &controls, "p", &cache).unwrap();
                assert!(perf.converged, "{smoother:?}: {perf:?}");
                assert!(perf.iterations <= 20, "{smoother:?}: {}", perf.iterations);
                let b_sum: f64 = b.iter().map(|v| v.abs()).sum();
                assert!(residual_sum(&a, &b, &x) < 1e-9 * b_sum);
                assert!(cache.agglomeration.lock().unwrap().is_some());
            }
        }
    }

    #[test]
    fn a_new_matrix_of_the_pattern_reuses_the_agglomeration_and_sums_its_own_values() {
        let a = poisson_3d(12, 12, 12);
        // Other values on the same pattern: a Laplacian with a varying
        // coefficient (the agglomeration of faceAreaPair depends on the mesh
        // alone, so it must not be redone; the coarse matrices must).
        let mut b_matrix = a.clone();
        for i in 0..a.n_rows() {
            let mut off_diagonal_sum = 0.0;
            let mut diagonal_slot = None;
            for s in a.row_ptr()[i]..a.row_ptr()[i + 1] {
                let j = a.cols()[s] as usize;
                if j == i {
                    diagonal_slot = Some(s);
                    continue;
                }
                let coefficient = -(1.0 + ((7 * i.min(j) + i.max(j)) % 5) as f64 / 4.0);
                b_matrix.values_mut()[s] = coefficient;
                off_diagonal_sum -= coefficient;
            }
            b_matrix.values_mut()[diagonal_slot.unwrap()] = off_diagonal_sum + 0.01;
        }
        let rhs: Vec<f64> = (0..a.n_rows()).map(|i| (i % 5) as f64 - 2.0).collect();
        let controls = SolverControls::absolute(1e-10, 100);
        let settings = GamgSettings::default();
        let cache = GamgCache::default();
        let identity = Identity(a.n_rows());
        let first = Gamg::new(&a, &identity, &settings, &controls, &cache).unwrap();
        let second = Gamg::new(&b_matrix, &identity, &settings, &controls, &cache).unwrap();
        assert!(Arc::ptr_eq(&first.agglomeration, &second.agglomeration));
        // Each level of the second matrix is the Galerkin sum of its own
        // finer level, mirrored, bit for bit.
        let mut finer = b_matrix.clone();
        for (k, level) in second.levels.iter().enumerate() {
            let map = &second.agglomeration.restrict[k];
            let mut expected = galerkin(&finer, map, second.agglomeration.sizes[k + 1]);
            let pattern = expected.zeros_like();
            mirror_upper(&pattern, expected.values_mut());
            let bits = |m: &SplitMatrix| {
                let x: Vec<f64> = (0..m.n()).map(|i| 1.0 + i as f64 / 3.0).collect();
                let mut ax = vec![0.0; m.n()];
                m.apply(&x, &mut ax);
                let mut all: Vec<u64> = m.diag().iter().map(|v| v.to_bits()).collect();
                all.extend(ax.iter().map(|v| v.to_bits()));
                all
            };
            assert_eq!(
                bits(&level.matrix),
                bits(&SplitMatrix::new(&expected)),
                "level {k}"
            );
            finer = expected;
        }
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_gamg(&b_matrix, &settings, &rhs, &mut x, &controls, "p", &cache).unwrap();
        assert!(perf.converged, "{perf:?}");
        // The levels of the two matrices differ: the values were summed anew.
        assert_ne!(
            first.levels[0].matrix.diag(),
            second.levels[0].matrix.diag()
        );
    }

    /// The hierarchy of `a` with OpenFOAM's defaults.
    fn default_gamg<'a>(a: &'a Csr, identity: &'a Identity) -> Gamg<'a> {
        let controls = SolverControls::absolute(1e-10, 100);
        let settings = GamgSettings::default();
        Gamg::new(a, identity, &settings, &controls, &GamgCache::default()).unwrap()
    }

    #[test]
    fn coarse_levels_of_a_symmetric_matrix_are_symmetric_bit_for_bit() {
        let a = poisson_3d(16, 16, 16);
        let identity = Identity(a.n_rows());
        let gamg = default_gamg(&a, &identity);
        assert!(gamg.levels.len() >= 3);
        assert!(gamg.levels.iter().all(|l| l.matrix.is_symmetric()));
        // Galerkin sums alone need not be: cells 0, 1, 2 form cluster 0 and
        // 3, 4, 5 cluster 1, coupled by faces 0-5, 1-4 and 2-3 of weights
        // 0.1, 0.2, 0.3; a_01 sums them in the order of its rows, (0.1 + 0.2)
        // + 0.3, and a_10 in the order of its own, (0.3 + 0.2) + 0.1.
        let mut triplets: Vec<(u32, u32, f64)> = (0..6).map(|i| (i, i, 1.0)).collect();
        for (i, j, v) in [(0, 5, -0.1), (1, 4, -0.2), (2, 3, -0.3)] {
            triplets.extend([(i, j, v), (j, i, v)]);
        }
        let fine = Csr::from_triplets(6, 6, triplets).unwrap();
        let mut coarse = galerkin(&fine, &[0, 0, 0, 1, 1, 1], 2);
        assert!(!SplitMatrix::new(&coarse).is_symmetric());
        let pattern = coarse.zeros_like();
        mirror_upper(&pattern, coarse.values_mut());
        assert!(SplitMatrix::new(&coarse).is_symmetric());
        assert_eq!(coarse.values()[2], coarse.values()[1]);
        assert_eq!(coarse.values()[1], (-0.1 - 0.2) - 0.3);
    }

    #[test]
    fn the_residual_after_a_cycle_has_the_bits_of_the_initial_one_and_feeds_the_next() {
        let a = poisson_3d(12, 12, 12);
        let n = a.n_rows();
        let identity = Identity(n);
        let gamg = default_gamg(&a, &identity);
        let b: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        let x: Vec<f64> = (0..n).map(|i| ((i * 13) % 7) as f64).collect();
        let mut r = vec![0.0; n];
        let initial = gamg.initialize(&b, &x, &mut r);
        let mut unused = vec![0.0; n];
        let after = gamg.residual_sum(&b, &x, &mut unused);
        assert_eq!(after.to_bits(), initial.residual_sum.to_bits());
        assert_eq!(gamg.lock_work().residual, r);
    }

    #[test]
    fn pre_sweeps_interpolation_and_no_scaling_still_converge() {
        let a = poisson_3d(12, 12, 12);
        let b = vec![1.0; a.n_rows()];
        let controls = SolverControls::absolute(1e-9, 200);
        for (pre, interpolate, scale) in [(2, false, true), (0, true, true), (1, false, false)] {
            let settings = GamgSettings {
                n_pre_sweeps: pre,
                interpolate_correction: interpolate,
                scale_correction: scale,
                ..GamgSettings::default()
            };
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_gamg(
                &a,
                &settings,
                &b,
                &mut x,
                &controls,
                "p",
                &GamgCache::default(),
            )
            .unwrap();
            assert!(perf.converged, "{pre} {interpolate} {scale}: {perf:?}");
        }
    }

    #[test]
    fn too_small_a_matrix_is_a_clear_error() {
        let a = poisson_3d(2, 2, 2);
        let mut x = vec![0.0; 8];
        let err = solve_gamg(
            &a,
            &GamgSettings::default(),
            &[1.0; 8],
            &mut x,
            &SolverControls::default(),
            "p",
            &GamgCache::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("nCellsInCoarsestLevel"), "{err}");
    }

    #[test]
    fn keys_parse_and_bad_values_name_the_key() {
        let mut s = GamgSettings::default();
        s.set("smoother", "DICGaussSeidel").unwrap();
        s.set("nPostSweeps", "3").unwrap();
        s.set("directSolveCoarsest", "yes").unwrap();
        assert_eq!(s.smoother, GamgSmoother::DicGaussSeidel);
        assert_eq!(s.n_post_sweeps, 3);
        assert!(s.direct_solve_coarsest);
        assert!(s
            .set("nPostSweeps", "two")
            .unwrap_err()
            .contains("nPostSweeps"));
        assert!(s
            .set("smoother", "Jacobi")
            .unwrap_err()
            .contains("GaussSeidel"));
        assert!(s
            .set("agglomerator", "MGridGen")
            .unwrap_err()
            .contains("faceAreaPair"));
        s.merge_levels = 0;
        assert!(s.validate().unwrap_err().contains("mergeLevels"));
    }
}
