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
//! `maxLevels` levels. Each coarse level is made from the finer level's
//! faces (its upper coefficients, each once), as OpenFOAM's
//! `agglomerateLduAddressing` makes it ([`levels`]): the agglomeration
//! keeps, per level, the coarse face of each finer face and the level's
//! split layout ([`SplitPattern`](super::split::SplitPattern): the faces as
//! upper rows, their mirrors as lower rows), which its smoothers read. The
//! coarse matrices are the agglomerated sums (Galerkin products with
//! piecewise-constant transfers) in OpenFOAM's order: the diagonal, then
//! one coefficient per coarse face summed in face order, copied onto the
//! lower rows; no coarse level is held in a second layout (the coarsest
//! excepted, in CSR for its solver), and the levels' pattern arrays are
//! shared across the solves of a cached agglomeration.
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
//! The coarse matrices of a bitwise-symmetric fine matrix are bitwise
//! symmetric (one coefficient per coarse face, as OpenFOAM's), so that
//! every level takes [`SplitMatrix`]'s upper-triangle products. The sweeps
//! of one smoothing run interleaved
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

use super::algorithm::{parse_switch, parse_value};
use super::amg::coarsest::{project_zero_mean, rows_sum_to_zero, CoarsestSolver};
use super::amg::{AmgSettings, MAX_DENSE_ROWS};
use super::checks::{check_inputs, check_symmetric, on_copies};
use super::cpu::CpuBackend;
use super::executor::vectors_and_reductions_of;
use super::ic::{Dic, DicFactor};
use super::pcg::pcg_unlogged;
use super::smooth_solver::{smooth_loop, SmoothBackend};
use super::split::{SplitMatrix, TriangleRows};
use super::{Executor, InitialNorms, SolveError, SolverControls, SolverPerformance};
use crate::sparse::Csr;
use crate::timings::{process_cpu_seconds, process_minor_faults};
use levels::CoarseLevel;

pub mod levels;

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
            parse_value(format_args!("GAMG {key}"), value, "a whole number")
        }
        fn switch(key: &str, value: &str) -> Result<bool, String> {
            parse_switch(value).ok_or_else(|| {
                format!("GAMG {key} must be true or false (yes/no, on/off), got '{value}'")
            })
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
/// the next finer level's cells to its cells, and the level's faces with
/// the coarse face of each finer face ([`levels`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Agglomeration {
    /// `restrict[k]`: cell of level k → cell of level k + 1.
    pub restrict: Vec<Vec<u32>>,
    /// Cells per level, the fine level first.
    pub sizes: Vec<usize>,
    /// `levels[k]`: level k + 1, addressed by level k's faces; each solve
    /// sums that level's matrix through it.
    pub levels: Vec<CoarseLevel>,
}

impl Agglomeration {
    /// Agglomerates by the fine level's face weights, `lower` and `upper`
    /// in the layout of its split rows (the same weight in both entries of
    /// a face), with `settings`' pairing controls. Each level is made from
    /// the faces of the finer one ([`CoarseLevel::build`]).
    pub fn new(lower: &TriangleRows, upper: &TriangleRows, settings: &GamgSettings) -> Self {
        Self::agglomerate(upper, upper.values(), settings, || {
            pair_cells(lower, upper, true)
        })
    }

    /// [`Self::new`] with the fine level's weights given one per face: the
    /// upper entries of `split` in their order, whose lower entries mirror
    /// them (a bitwise symmetric matrix: [`SplitMatrix::is_symmetric`]).
    /// The first pairing reads a lower entry's weight from its face
    /// ([`pair_cells_by_faces`]), so that no weight is written per triangle
    /// entry: the same agglomeration as [`Self::new`] on the weights of
    /// both triangles, without their 16 bytes a face of fresh memory.
    pub fn from_faces(split: &SplitMatrix, weights: &[f64], settings: &GamgSettings) -> Self {
        assert!(
            split.is_symmetric(),
            "Agglomeration::from_faces: the lower entries must mirror the faces"
        );
        assert_eq!(
            weights.len(),
            split.upper_rows().values().len(),
            "Agglomeration::from_faces: one weight a face"
        );
        Self::agglomerate(split.upper_rows(), weights, settings, || {
            pair_cells_by_faces(split, weights)
        })
    }

    /// The passes of [`Self::new`]: the first pairing by `first_pairing`
    /// (forward), over the fine faces `fine` (upper rows) with `weights`
    /// (one a face), the later ones over the coarse face weights.
    fn agglomerate(
        fine: &TriangleRows,
        weights: &[f64],
        settings: &GamgSettings,
        first_pairing: impl FnOnce() -> (Vec<u32>, usize),
    ) -> Self {
        let mut restrict: Vec<Vec<u32>> = Vec::new();
        let mut sizes = vec![fine.n()];
        let mut levels: Vec<CoarseLevel> = Vec::new();
        let mut coarse_weights: Option<(TriangleRows, TriangleRows)> = None;
        let mut first_pairing = Some(first_pairing);
        let mut forward = true;
        let mut n_pairs = 0;
        while restrict.len() + 1 < settings.max_levels {
            let ((map, n_coarse), faces, n) = match &coarse_weights {
                Some((lw, uw)) => (pair_cells(lw, uw, forward), uw, uw.n()),
                None => {
                    let pair = first_pairing.take().expect("one first pairing");
                    (pair(), fine, fine.n())
                }
            };
            let face_weights = coarse_weights
                .as_ref()
                .map_or(weights, |(_, uw)| uw.values());
            forward = !forward;
            if n_coarse < settings.n_cells_in_coarsest_level || n_coarse >= n {
                break;
            }
            let (level, coarse) =
                CoarseLevel::build(faces.pattern(), &map, n_coarse, Some(face_weights));
            let next = level
                .layout
                .triangles(level.layout.mirror_upper(&coarse), coarse);
            match restrict.last_mut() {
                Some(last) if n_pairs % settings.merge_levels != 0 => {
                    last.iter_mut().for_each(|c| *c = map[*c as usize]);
                    *sizes.last_mut().expect("one size per level") = n_coarse;
                }
                _ => {
                    restrict.push(map);
                    sizes.push(n_coarse);
                    levels.push(level);
                }
            }
            n_pairs += 1;
            coarse_weights = Some(next);
        }
        if settings.merge_levels > 1 {
            // A level of merged passes is addressed by its finer level's
            // faces in one step.
            levels.clear();
            for (k, map) in restrict.iter().enumerate() {
                let finer = levels.last().map_or(fine.pattern(), |l| l.layout.upper());
                let level = CoarseLevel::build(finer, map, sizes[k + 1], None).0;
                levels.push(level);
            }
        }
        Self {
            restrict,
            sizes,
            levels,
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

/// Cell `i`'s decision once its row is scanned: a new cluster with its
/// heaviest free neighbour `free`, else the cluster of its heaviest
/// neighbour `any` (UNPAIRED: none).
fn settle(map: &mut [u32], n_coarse: &mut u32, i: usize, free: u32, any: u32) {
    if free != UNPAIRED {
        map[i] = *n_coarse;
        map[free as usize] = *n_coarse;
        *n_coarse += 1;
    } else if any != UNPAIRED {
        map[i] = map[any as usize];
    }
}

/// One pairing pass over the cells of the face weights `lower`, `upper`
/// (a level's split layout: row i's neighbours are its lower entries, then
/// its upper ones, columns ascending) forward or backward: the map cell →
/// cluster and the number of clusters, numbered in visiting order (a
/// backward pass numbers them from the end, so both start at the first
/// cells). Ties go to the first face in row order, as in OpenFOAM.
///
/// An unpaired cell pairs with its heaviest unpaired neighbour, or, where
/// every neighbour is paired, joins the cluster of its heaviest one: one
/// scan of the row keeps both candidates (each the first of equal weights,
/// as a scan for each would find it), reading the row's two slices side
/// by side.
fn pair_cells(lower: &TriangleRows, upper: &TriangleRows, forward: bool) -> (Vec<u32>, usize) {
    let n = upper.n();
    assert_eq!(lower.n(), n, "pair_cells: the triangles' rows");
    let mut map = vec![UNPAIRED; n];
    let mut n_coarse = 0u32;
    let cell = |k: usize| if forward { k } else { n - 1 - k };
    for k in 0..n {
        let i = cell(k);
        if map[i] != UNPAIRED {
            continue;
        }
        // (column, weight) of the heaviest free and of the heaviest
        // neighbour; UNPAIRED while there is none.
        let (mut free, mut any) = ((UNPAIRED, 0.0), (UNPAIRED, 0.0));
        for (cols, weights) in [lower.row_slices(i), upper.row_slices(i)] {
            for (&c, &weight) in cols.iter().zip(weights) {
                if any.0 == UNPAIRED || weight > any.1 {
                    any = (c, weight);
                }
                if map[c as usize] == UNPAIRED && (free.0 == UNPAIRED || weight > free.1) {
                    free = (c, weight);
                }
            }
        }
        settle(&mut map, &mut n_coarse, i, free.0, any.0);
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

/// The first (forward) pairing pass of [`pair_cells`] on the weights of
/// the faces, one per upper entry of `split` in their order, whose lower
/// entries mirror them: a lower entry (i, c) is the face (c, i), and rows
/// ascending meet each row c's faces in column order, so a cursor per row
/// gives each lower entry its face's weight (as in `mirrors`). The same
/// decisions as [`pair_cells`] on the weights of both triangles.
fn pair_cells_by_faces(split: &SplitMatrix, weights: &[f64]) -> (Vec<u32>, usize) {
    let n = split.n();
    let (lower, upper) = (split.lower_rows(), split.upper_rows());
    assert_eq!(
        weights.len(),
        upper.values().len(),
        "pair_cells_by_faces: one weight a face"
    );
    // next[c]: row c's first face that no row has read as a lower entry.
    let mut next: Vec<usize> = upper.pattern().0[..n].to_vec();
    let mut map = vec![UNPAIRED; n];
    let mut n_coarse = 0u32;
    for i in 0..n {
        let (lower_cols, _) = lower.row_slices(i);
        if map[i] != UNPAIRED {
            lower_cols.iter().for_each(|&c| next[c as usize] += 1);
            continue;
        }
        // As in `pair_cells`: the heaviest free and the heaviest neighbour,
        // the lower entries first, then the upper ones.
        let (mut free, mut any) = ((UNPAIRED, 0.0), (UNPAIRED, 0.0));
        let mut consider = |c: u32, weight: f64, map: &[u32]| {
            if any.0 == UNPAIRED || weight > any.1 {
                any = (c, weight);
            }
            if map[c as usize] == UNPAIRED && (free.0 == UNPAIRED || weight > free.1) {
                free = (c, weight);
            }
        };
        for &c in lower_cols {
            let face = &mut next[c as usize];
            debug_assert_eq!(upper.pattern().1[*face] as usize, i, "a mirrored face");
            consider(c, weights[*face], &map);
            *face += 1;
        }
        let (upper_cols, _) = upper.row_slices(i);
        for (&c, &weight) in upper_cols.iter().zip(&weights[upper.row(i)]) {
            consider(c, weight, &map);
        }
        settle(&mut map, &mut n_coarse, i, free.0, any.0);
    }
    for c in map.iter_mut().filter(|c| **c == UNPAIRED) {
        *c = n_coarse;
        n_coarse += 1;
    }
    (map, n_coarse as usize)
}

/// Whether the internal faces (`owner`, `neighbour`) are the upper entries
/// of `split`, one each, in their stored order (a mesh's faces in
/// OpenFOAM's order, owners ascending, each owner's neighbours ascending,
/// on the matrix assembled from them): then the faces' weights are the
/// upper triangle's, in its order.
fn faces_are_upper_entries(split: &SplitMatrix, owner: &[u32], neighbour: &[u32]) -> bool {
    let (start, cols) = split.upper_rows().pattern();
    if owner.len() != cols.len() || neighbour.len() != cols.len() {
        return false;
    }
    (0..split.n()).all(|r| {
        let faces = start[r]..start[r + 1];
        owner[faces.clone()].iter().all(|&o| o as usize == r)
            && neighbour[faces.clone()] == cols[faces]
    })
}

/// OpenFOAM's `faceAreaPair` weight of a face with area vector `s`:
/// |(s_x, 1.01 s_y, 1.02 s_z)| / √|s|.
pub fn face_area_pair_weight(s: [f64; 3]) -> f64 {
    let magnitude = (s[0] * s[0] + s[1] * s[1] + s[2] * s[2]).sqrt();
    let skewed = [s[0], 1.01 * s[1], 1.02 * s[2]];
    (skewed[0] * skewed[0] + skewed[1] * skewed[1] + skewed[2] * skewed[2]).sqrt()
        / magnitude.sqrt()
}

/// The `faceAreaPair` weights on the split rows of `m` (lower, upper):
/// each internal face (owner, neighbour, its [`face_area_pair_weight`])
/// adds its weight to the entries (o, n) and (n, o), one in each triangle;
/// faces between cells that `m` does not couple are skipped.
///
/// Faces in OpenFOAM's order (owners ascending, each owner's neighbours
/// ascending) are the upper entries in their stored order, and meet each
/// row's lower entries in column order: one cursor over the upper entries
/// and one per row of the lower triangle find each face's two entries by
/// stepping, not by a search per face (two unpredictable searches per face
/// were most of the time); a face out of that order is found by a search.
pub fn face_area_weights(
    m: &SplitMatrix,
    faces: impl IntoIterator<Item = (usize, usize, f64)>,
) -> (TriangleRows, TriangleRows) {
    let n = m.n();
    let (lower_rows, upper_rows) = (m.lower_rows(), m.upper_rows());
    // Written before they are summed into: a fresh page whose first touch
    // is a read is mapped twice (the zero page, then a copy).
    let zeros = |len: usize| {
        let mut v = Vec::with_capacity(len);
        v.resize(len, 0.0);
        v
    };
    let (mut lower, mut upper) = (
        zeros(lower_rows.values().len()),
        zeros(upper_rows.values().len()),
    );
    let (lower_start, lower_cols) = lower_rows.pattern();
    let (upper_start, upper_cols) = upper_rows.pattern();
    let mut lower_cursor: Vec<usize> = lower_start[..n].to_vec();
    let mut next_upper = 0;
    for (o, nb, weight) in faces {
        if o >= n || nb >= n || o == nb {
            continue;
        }
        let (r, c) = (o.min(nb), o.max(nb));
        if let Some(found) = find_entry((upper_start, upper_cols), next_upper, r, c) {
            let (Ok(k) | Err(k)) = found;
            upper[k] += weight;
            next_upper = k + 1;
        }
        if let Some(found) = find_entry((lower_start, lower_cols), lower_cursor[c], c, r) {
            match found {
                Ok(k) => {
                    lower[k] += weight;
                    lower_cursor[c] = k + 1;
                }
                Err(k) => lower[k] += weight,
            }
        }
    }
    (lower_rows.with_values(lower), upper_rows.with_values(upper))
}

/// Entry (r, c) of a triangle (row starts, columns), scanning row r from
/// `from` (clamped to the row) past the entries of smaller columns, else
/// searched: `Ok` where the scan found it, `Err` where the search did.
/// Inlined into [`face_area_weights`]' loop, which calls it twice a face.
#[inline(always)]
fn find_entry(
    (start, cols): (&[usize], &[u32]),
    from: usize,
    r: usize,
    c: usize,
) -> Option<Result<usize, usize>> {
    let (first, end) = (start[r], start[r + 1]);
    let mut k = from.clamp(first, end);
    while k < end && (cols[k] as usize) < c {
        k += 1;
    }
    if k < end && cols[k] as usize == c {
        return Some(Ok(k));
    }
    let row = &cols[first..end];
    row.binary_search(&(c as u32)).ok().map(|i| Err(first + i))
}

/// |a_ij| on the split rows of `m` (`algebraicPair`).
fn coefficient_weights(m: &SplitMatrix) -> (TriangleRows, TriangleRows) {
    let abs = |t: &TriangleRows| t.with_values(t.values().iter().map(|v| v.abs()).collect());
    (abs(m.lower_rows()), abs(m.upper_rows()))
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

    /// The agglomeration of `a`'s pattern (`split`: its split rows): the
    /// cached one, or a new one (kept when `cacheAgglomeration` is on).
    fn agglomeration(
        &self,
        a: &Csr,
        split: &SplitMatrix,
        settings: &GamgSettings,
        clock: &mut SetupClock,
    ) -> Arc<Agglomeration> {
        let key = pattern_key(a, settings);
        let cached = self
            .agglomeration
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((k, agglomeration)) = cached.as_ref() {
            if *k == key && settings.cache_agglomeration {
                clock.lap("cached agglomeration");
                return Arc::clone(agglomeration);
            }
        }
        // A mesh's faces in OpenFOAM's order on the matrix assembled from
        // them are its upper entries: their weights are read in place (the
        // first pairing finds each lower entry's face), and no weight is
        // written per triangle entry.
        if let (Some(f), Agglomerator::FaceAreaPair) = (&self.faces, settings.agglomerator) {
            if split.is_symmetric()
                && f.weight.len() == f.owner.len()
                && f.weight.iter().any(|&w| w > 0.0)
                && faces_are_upper_entries(split, &f.owner, &f.neighbour)
            {
                clock.lap("face weights");
                let agglomeration = Arc::new(Agglomeration::from_faces(split, &f.weight, settings));
                clock.lap("agglomeration");
                return Self::keep(cached, key, agglomeration, settings);
            }
        }
        let weights = match (&self.faces, settings.agglomerator) {
            (Some(f), Agglomerator::FaceAreaPair) => {
                let w = face_area_weights(
                    split,
                    f.owner
                        .iter()
                        .zip(&f.neighbour)
                        .zip(&f.weight)
                        .map(|((&o, &n), &w)| (o as usize, n as usize, w)),
                );
                let positive = |t: &TriangleRows| t.values().iter().any(|&v| v > 0.0);
                if positive(&w.0) || positive(&w.1) {
                    w
                } else {
                    log::debug!("GAMG: the mesh's faces do not match the matrix; |a_ij| weights");
                    coefficient_weights(split)
                }
            }
            (None, Agglomerator::FaceAreaPair) => {
                log::debug!("GAMG faceAreaPair without a mesh: faces weighted by |a_ij|");
                coefficient_weights(split)
            }
            (_, Agglomerator::AlgebraicPair) => coefficient_weights(split),
        };
        clock.lap("face weights");
        let agglomeration = Arc::new(Agglomeration::new(&weights.0, &weights.1, settings));
        drop(weights);
        clock.lap("agglomeration");
        Self::keep(cached, key, agglomeration, settings)
    }

    /// Logs the new `agglomeration` and keeps it (under the pattern's
    /// fingerprint `key`) where `cacheAgglomeration` is on.
    fn keep(
        mut cached: std::sync::MutexGuard<'_, Option<(u64, Arc<Agglomeration>)>>,
        key: u64,
        agglomeration: Arc<Agglomeration>,
        settings: &GamgSettings,
    ) -> Arc<Agglomeration> {
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
        /// Every row sums to zero (the agglomerates of an all-Neumann
        /// problem): the constants are the null space, and the right-hand
        /// side's mean is removed before the solve.
        singular: bool,
    },
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
        settings: &GamgSettings,
        controls: &SolverControls,
        cache: &GamgCache,
    ) -> Result<Self, SolveError> {
        settings.validate().map_err(SolveError::InvalidControls)?;
        let mut clock = SetupClock::start();
        let fine = CpuBackend::unpreconditioned(a);
        // A bitwise symmetric split (every assembled Laplacian) needs no
        // search for the mirrors of the entries.
        if !fine.split().is_symmetric() {
            check_symmetric(a)?;
        }
        clock.lap("fine split");
        let agglomeration = cache.agglomeration(a, fine.split(), settings, &mut clock);
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
        // Each coarse matrix is summed from the finer level's faces into
        // its level's split rows (`levels`); a bitwise symmetric fine
        // matrix gives coarse ones with one coefficient a coarse face, as
        // OpenFOAM's coarse levels are, so that the kernels read the upper
        // triangle alone.
        let mut matrices: Vec<SplitMatrix> = Vec::with_capacity(agglomeration.levels.len());
        for (level, map) in agglomeration.levels.iter().zip(&agglomeration.restrict) {
            let finer = matrices.last().unwrap_or(fine.split());
            let matrix = level.matrix(finer, map);
            matrices.push(matrix);
        }
        clock.lap("coarse matrices");
        let coarsest_split = matrices.pop().expect("at least one coarse level");
        let coarsest_matrix = coarsest_split.to_csr();
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
                    singular: rows_sum_to_zero(&coarsest_matrix),
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
            Coarsest::Iterative {
                matrix,
                dic,
                singular,
            } => {
                x.fill(0.0);
                let backend = CpuBackend::new(matrix, dic);
                let controls = SolverControls {
                    min_iter: 0,
                    max_iter: SolverControls::default().max_iter,
                    ..self.controls
                };
                let mut y = x.to_vec();
                let mut b = b.to_vec();
                if *singular {
                    // The restricted residual of a singular system has a
                    // round-off component along the constants, which CG
                    // cannot reduce: it grows until p·Ap turns negative.
                    // Only its part in A's range is solvable.
                    project_zero_mean(&mut b);
                }
                pcg_unlogged(&backend, &b, &mut y, &controls, "coarsestLevelCorr")?;
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

/// The finest level's CPU backend.
impl Executor for Gamg<'_> {
    type Vector = Vec<f64>;
    vectors_and_reductions_of!(fine);
    /// The finest residual and OpenFOAM's norms; the residual is kept for
    /// the next cycle.
    fn initialize(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> InitialNorms {
        let norms = self.fine.initialize(b, x, r);
        self.lock_work().residual.copy_from_slice(r);
        norms
    }
}

impl SmoothBackend for Gamg<'_> {
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
    let gamg = Gamg::new(a, settings, controls, cache)?;
    log::debug!("{}", gamg.describe());
    let perf = on_copies(b, x, |b, x| {
        smooth_loop(&gamg, b, x, controls, 1, field, "GAMG")
    })?;
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
        let w = SplitMatrix::new(&w);
        let (lower, upper) = (w.lower_rows(), w.upper_rows());
        // Forward: 0 pairs with 1 (its only free neighbour), 2 with 3 (weight
        // 2 beats nothing else free), 4's neighbour is paired: joins it.
        let (map, n) = pair_cells(lower, upper, true);
        assert_eq!((map, n), (vec![0, 0, 1, 1, 1], 2));
        // Backward: 4 pairs with 3, 2 with 1, 0 joins 1's cluster; numbered
        // from the end so that the first cells get the first clusters.
        let (map, n) = pair_cells(lower, upper, false);
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
        let split = SplitMatrix::new(&a);
        let sorted = face_area_weights(&split, faces.iter().copied());
        let weight =
            |t: &TriangleRows, r: usize, c: usize| t.entries(r).find(|e| e.0 == c).map(|e| e.1);
        for (f, &(o, n, w)) in faces.iter().enumerate() {
            assert_eq!(weight(&sorted.1, o, n), Some(w), "face {f}");
            assert_eq!(weight(&sorted.0, n, o), Some(w), "face {f}");
        }
        let values = |w: &(TriangleRows, TriangleRows)| {
            let mut all = w.0.values().to_vec();
            all.extend(w.1.values());
            all
        };
        // Reversed, and with the owner and neighbour of every other face
        // swapped: the cursors miss and the search finds the entries.
        let shuffled =
            faces
                .iter()
                .rev()
                .enumerate()
                .map(|(k, &(o, n, s))| if k % 2 == 0 { (n, o, s) } else { (o, n, s) });
        let shuffled = face_area_weights(&split, shuffled);
        assert_eq!(values(&shuffled), values(&sorted));
        // A face the pattern does not hold adds nothing.
        let stray = faces.iter().copied().chain([(0, a.n_rows() - 1, 1.0)]);
        assert_eq!(values(&face_area_weights(&split, stray)), values(&sorted));
    }

    #[test]
    fn agglomeration_stops_above_the_coarsest_size_and_merges_levels() {
        let a = poisson_3d(8, 8, 8);
        let settings = GamgSettings::default();
        let (lower, upper) = coefficient_weights(&SplitMatrix::new(&a));
        let agg = Agglomeration::new(&lower, &upper, &settings);
        assert_eq!(agg.sizes[0], 512);
        assert!(*agg.sizes.last().unwrap() >= settings.n_cells_in_coarsest_level);
        assert!(agg.sizes.windows(2).all(|s| s[1] < s[0]));
        let merged = Agglomeration::new(
            &lower,
            &upper,
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
        let first = Gamg::new(&a, &settings, &controls, &cache).unwrap();
        let second = Gamg::new(&b_matrix, &settings, &controls, &cache).unwrap();
        assert!(Arc::ptr_eq(&first.agglomeration, &second.agglomeration));
        // Each level of the second matrix is the sum of its own finer level
        // in face order, bit for bit, and the Galerkin product to rounding.
        let mut finer = b_matrix.clone();
        for (k, level) in second.levels.iter().enumerate() {
            let map = &second.agglomeration.restrict[k];
            let n_coarse = second.agglomeration.sizes[k + 1];
            let expected = face_order_sums(&finer, map, n_coarse);
            let galerkin = galerkin(&finer, map, n_coarse);
            assert_eq!(galerkin.cols(), expected.cols(), "level {k}");
            for (g, e) in galerkin.values().iter().zip(expected.values()) {
                assert!(
                    (g - e).abs() <= 1e-14 * g.abs().max(1.0),
                    "level {k}: {g} {e}"
                );
            }
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

    /// The coarse matrix of the symmetric `a` under `map` summed as
    /// OpenFOAM sums it: each cluster's diagonal from its cells' diagonals
    /// (cells ascending), then the faces (a_ij, i < j, rows ascending): a
    /// face inside a cluster adds a_ij + a_ji to its diagonal, one between
    /// clusters a_ij to the coarse face, whose two entries are equal.
    fn face_order_sums(a: &Csr, map: &[u32], n_coarse: usize) -> Csr {
        let mut diag = vec![-0.0; n_coarse];
        for i in 0..a.n_rows() {
            diag[map[i] as usize] += a.values()[a.slot(i, i).unwrap()];
        }
        let mut faces: std::collections::BTreeMap<(u32, u32), f64> = Default::default();
        for i in 0..a.n_rows() {
            let (cols, values) = a.row(i);
            for (&j, &v) in cols.iter().zip(values).filter(|e| *e.0 as usize > i) {
                let (ci, cj) = (map[i], map[j as usize]);
                if ci == cj {
                    diag[ci as usize] += v + v;
                } else {
                    *faces.entry((ci.min(cj), ci.max(cj))).or_insert(-0.0) += v;
                }
            }
        }
        let mut triplets: Vec<(u32, u32, f64)> = diag
            .iter()
            .enumerate()
            .map(|(c, &d)| (c as u32, c as u32, d))
            .collect();
        for (&(ci, cj), &v) in &faces {
            triplets.extend([(ci, cj, v), (cj, ci, v)]);
        }
        Csr::from_triplets(n_coarse, n_coarse, triplets).unwrap()
    }

    /// The agglomeration as it was made on the matrix rows before it was
    /// made from the faces: each pass pairs on the rows of a CSR of face
    /// weights (its split rows list each row's neighbours by column, as
    /// the CSR row does), and the next pass's weights are the Galerkin
    /// product of the pass's (a CSR, summed in row order).
    fn row_wise_agglomeration(weights: &Csr, settings: &GamgSettings) -> Vec<Vec<u32>> {
        let (mut restrict, mut w, mut n_pairs): (Vec<Vec<u32>>, Csr, usize) =
            (Vec::new(), weights.clone(), 0);
        while restrict.len() + 1 < settings.max_levels {
            let rows = SplitMatrix::new(&w);
            let (map, n_coarse) =
                pair_cells(rows.lower_rows(), rows.upper_rows(), n_pairs % 2 == 0);
            if n_coarse < settings.n_cells_in_coarsest_level || n_coarse >= w.n_rows() {
                break;
            }
            match restrict.last_mut() {
                Some(last) if n_pairs % settings.merge_levels != 0 => {
                    last.iter_mut().for_each(|c| *c = map[*c as usize]);
                }
                _ => restrict.push(map.clone()),
            }
            w = galerkin(&w, &map, n_coarse);
            n_pairs += 1;
        }
        restrict
    }

    #[test]
    fn the_agglomeration_from_faces_pairs_the_cells_of_the_row_wise_one() {
        let mut faces_in_order = false;
        for spec in ["box:14x12x10:tet:perturb=0.2:renumber", "box:24x20x16"] {
            let mesh = crate::mesh::load(spec).unwrap();
            let geometry = crate::mesh::Geometry::compute(&mesh);
            let faces: Vec<(usize, usize, f64)> = (0..mesh.n_internal_faces())
                .map(|f| {
                    let s = geometry.face_area_vectors[f];
                    (
                        mesh.owner()[f] as usize,
                        mesh.neighbour()[f] as usize,
                        face_area_pair_weight([s.x, s.y, s.z]),
                    )
                })
                .collect();
            let n = mesh.n_cells();
            let mut triplets: Vec<(u32, u32, f64)> = (0..n as u32).map(|i| (i, i, 0.0)).collect();
            for &(o, nb, w) in &faces {
                triplets.extend([(o as u32, nb as u32, w), (nb as u32, o as u32, w)]);
            }
            let weights = Csr::from_triplets(n, n, triplets).unwrap();
            let split = SplitMatrix::new(&weights);
            let (owner, neighbour): (Vec<u32>, Vec<u32>) =
                faces.iter().map(|f| (f.0 as u32, f.1 as u32)).unzip();
            let face_weights: Vec<f64> = faces.iter().map(|f| f.2).collect();
            let in_order = faces_are_upper_entries(&split, &owner, &neighbour);
            faces_in_order |= in_order;
            // The faces backwards are the upper entries in another order.
            let (mut owner_back, mut neighbour_back) = (owner.clone(), neighbour.clone());
            owner_back.reverse();
            neighbour_back.reverse();
            assert!(
                !faces_are_upper_entries(&split, &owner_back, &neighbour_back) || owner.len() < 2
            );
            let (lower, upper) = face_area_weights(&split, faces);
            for merge_levels in [1, 2] {
                let settings = GamgSettings {
                    merge_levels,
                    ..GamgSettings::default()
                };
                let agglomeration = Agglomeration::new(&lower, &upper, &settings);
                assert!(agglomeration.n_levels() >= 3, "{spec}");
                if in_order {
                    // The faces' weights read in place pair the same cells.
                    assert_eq!(
                        Agglomeration::from_faces(&split, &face_weights, &settings),
                        agglomeration,
                        "{spec}, mergeLevels {merge_levels}"
                    );
                }
                assert_eq!(
                    agglomeration.restrict,
                    row_wise_agglomeration(&weights, &settings),
                    "{spec}, mergeLevels {merge_levels}"
                );
                // Each level's faces are the couplings of the Galerkin
                // pattern of its finer level.
                let mut finer = weights.clone();
                for (k, level) in agglomeration.levels.iter().enumerate() {
                    let map = &agglomeration.restrict[k];
                    let coarse = galerkin(&finer, map, agglomeration.sizes[k + 1]);
                    let split = SplitMatrix::new(&coarse);
                    assert_eq!(level.layout.upper(), split.upper_rows().pattern());
                    finer = coarse;
                }
            }
        }
        assert!(
            faces_in_order,
            "no mesh's faces were its upper entries in order"
        );
    }

    /// The hierarchy of `a` with OpenFOAM's defaults.
    fn default_gamg(a: &Csr) -> Gamg<'_> {
        let controls = SolverControls::absolute(1e-10, 100);
        let settings = GamgSettings::default();
        Gamg::new(a, &settings, &controls, &GamgCache::default()).unwrap()
    }

    #[test]
    fn coarse_levels_of_a_symmetric_matrix_are_symmetric_bit_for_bit() {
        let a = poisson_3d(16, 16, 16);
        let gamg = default_gamg(&a);
        assert!(gamg.levels.len() >= 3);
        assert!(gamg.levels.iter().all(|l| l.matrix.is_symmetric()));
        // Galerkin sums by rows need not be: cells 0, 1, 2 form cluster 0
        // and 3, 4, 5 cluster 1, coupled by faces 0-5, 1-4 and 2-3 of
        // weights 0.1, 0.2, 0.3; a_01 summed in the order of its rows is
        // (0.1 + 0.2) + 0.3, and a_10 in the order of its own (0.3 + 0.2) +
        // 0.1. Summed by faces, the coarse face's one coefficient is both.
        let mut triplets: Vec<(u32, u32, f64)> = (0..6).map(|i| (i, i, 1.0)).collect();
        for (i, j, v) in [(0, 5, -0.1), (1, 4, -0.2), (2, 3, -0.3)] {
            triplets.extend([(i, j, v), (j, i, v)]);
        }
        let fine = Csr::from_triplets(6, 6, triplets).unwrap();
        let rows = galerkin(&fine, &[0, 0, 0, 1, 1, 1], 2);
        assert!(!SplitMatrix::new(&rows).is_symmetric());
        let fine = SplitMatrix::new(&fine);
        let map = [0, 0, 0, 1, 1, 1];
        let (level, _) = CoarseLevel::build(fine.upper_rows().pattern(), &map, 2, None);
        let coarse = level.matrix(&fine, &map);
        assert!(coarse.is_symmetric());
        assert_eq!(coarse.upper_rows().values(), &[(-0.1 - 0.2) - 0.3]);
        assert_eq!(coarse.lower_rows().values(), &[(-0.1 - 0.2) - 0.3]);
        assert_eq!(coarse.diag(), &[3.0, 3.0]);
    }

    #[test]
    fn the_residual_after_a_cycle_has_the_bits_of_the_initial_one_and_feeds_the_next() {
        let a = poisson_3d(12, 12, 12);
        let n = a.n_rows();
        let gamg = default_gamg(&a);
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
