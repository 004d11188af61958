//! Restricted additive Schwarz over METIS sub-domains (Yang 2015, §2.4–2.8,
//! Cai & Sarkis), with Yang 2015's nested variant, and its symmetric
//! counterpart for PCG.
//!
//! Sub-domains W_b⁰ come from a METIS k-way partition of the matrix graph
//! (`sparse::partition::graph_parts`); each grows by `overlap` layers of the
//! graph (Algorithm 8 as a breadth-first expansion), rows kept in ascending
//! global order. Nested (§2.7): each grown sub-domain is cut again by METIS
//! into `nested` inner blocks, grown by `inner_overlap` layers inside the
//! sub-domain's own graph; a row of an inner block is *owned* when the inner
//! block owns it and the outer sub-domain owns it, so every row of A is owned
//! by exactly one block.
//!
//! All blocks' principal submatrices A[W, W] are concatenated head to tail
//! into one block-diagonal matrix B (Yang 2015's per-GPU L and U, §2.7). Its
//! factors are the blocks' factors, and a level schedule of B merges the
//! blocks' levels: as many levels as the deepest block, each as wide as all
//! blocks together — the point of the inner blocks. One application:
//! - gather r_B[c] = r[row(c)] over the concatenated rows c;
//! - y_B = M_B⁻¹ r_B (ILU(k) for RAS, IC(0) for the symmetric AS);
//! - RAS (restricted): z[row(c)] = y_B[c] for the owned c only;
//!   AS (additive): z[row(c)] += y_B[c] for every c, which keeps
//!   M⁻¹ = Σ_b R_bᵀ B_b⁻¹ R_b symmetric; with overlap 0 it is block Jacobi.
//!
//! RAS with overlap > 0 is not symmetric and belongs to GMRES/BiCGStab (note
//! §7); PCG takes the AS form.
//!
//! Layout: this folder is the algorithm's home. `mod.rs` holds the settings,
//! their one parser ([`SchwarzSettings::from_keys`], which the registry's
//! `RAS` / `AS` registrations call: the command line
//! `ras:subdomains=64:overlap=1`, case.toml `preconditioner = { name = "RAS",
//! subdomains = 64 }` and fvSolution `preconditioner { preconditioner RAS;
//! subdomains 64; }`; its `FromStr` reads the command line's
//! own `ras:...` / `as:...` form), the decomposition both sides build on the
//! host ([`Decomposition`]) and these docs; `cpu.rs` the CPU application;
//! `cuda.rs` the device application (compiled as `gpu::schwarz`, so `solve`
//! does not depend on `gpu`), whose gather and scatter kernels are in
//! `kernels/schwarz.cu` and whose block factors are `gpu::ilu`'s ILU(k) and
//! `gpu::ic`'s IC(0); `tests.rs` the tests. The settings stay
//! `Preconditioner::Schwarz` (not a `Registered` algorithm): the GPU's PCG
//! and Krylov paths match that value.

mod cpu;

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

pub use cpu::Schwarz;

use super::algorithm::{parse_value, set_pairs, KeyValues};
use super::checks::check_square;
use super::ilu::check_fill_level;
use super::SolveError;
use crate::sparse::ordering::Graph;
use crate::sparse::partition::graph_parts;
use crate::sparse::Csr;

/// How the block solutions combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchwarzKind {
    /// RAS: ILU(k) blocks, each row written by its owner only.
    Restricted,
    /// AS: IC(0) blocks, overlapping solutions summed (symmetric, for PCG;
    /// overlap 0 is block Jacobi).
    Additive,
}

/// The Schwarz preconditioner's parameters (fvSolution keys in brackets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchwarzSettings {
    pub kind: SchwarzKind,
    /// Number of METIS sub-domains (`subdomains`, default 64).
    pub subdomains: usize,
    /// Layers of the matrix graph added to each sub-domain (`overlap`,
    /// default 1 for RAS, 0 for AS).
    pub overlap: usize,
    /// ILU(k) fill level of the blocks (`fillLevel`, RAS only, default 0).
    pub fill_level: u32,
    /// Inner blocks per sub-domain (`nested`, default 1: not nested).
    pub nested: usize,
    /// Layers added to each inner block (`innerOverlap`, default 1).
    pub inner_overlap: usize,
}

impl SchwarzSettings {
    pub fn new(kind: SchwarzKind) -> Self {
        Self {
            kind,
            subdomains: 64,
            overlap: match kind {
                SchwarzKind::Restricted => 1,
                SchwarzKind::Additive => 0,
            },
            fill_level: 0,
            nested: 1,
            inner_overlap: 1,
        }
    }

    /// The specification head: `ras` or `as`.
    pub fn head(&self) -> &'static str {
        match self.kind {
            SchwarzKind::Restricted => "ras",
            SchwarzKind::Additive => "as",
        }
    }

    /// The keys [`SchwarzSettings::set`] takes, as the registry lists them.
    pub const KEYS: &'static [&'static str] = &[
        "subdomains",
        "overlap",
        "fillLevel",
        "fill",
        "nested",
        "innerOverlap",
        "inner-overlap",
    ];

    /// RAS's (`name` `RAS`, any case) or AS's settings from a registered
    /// name and its keys ([`SchwarzSettings::set`]), validated.
    pub fn from_keys(name: &str, keys: &KeyValues) -> Result<Self, String> {
        let kind = if name.eq_ignore_ascii_case("ras") {
            SchwarzKind::Restricted
        } else {
            SchwarzKind::Additive
        };
        let mut s = Self::new(kind);
        for (key, value) in keys.iter() {
            s.set(key, value)?;
        }
        s.validate()?;
        Ok(s)
    }

    /// Sets one parameter by its command-line name (`subdomains`, `overlap`,
    /// `fill`, `nested`, `inner-overlap`) or fvSolution name (`fillLevel`,
    /// `innerOverlap`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let count = |what: &str| {
            parse_value::<usize>(format_args!("Schwarz {what}"), value, "a whole number")
        };
        match key {
            "subdomains" => self.subdomains = count("subdomains")?,
            "overlap" => self.overlap = count("overlap")?,
            "fill" | "fillLevel" | "k" => self.fill_level = count("fill level")? as u32,
            "nested" => self.nested = count("nested")?,
            "inner-overlap" | "innerOverlap" => self.inner_overlap = count("inner overlap")?,
            _ => {
                return Err(format!(
                    "unknown Schwarz parameter '{key}' (use subdomains, overlap, fill, nested, \
                     inner-overlap)"
                ))
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.subdomains == 0 {
            return Err("Schwarz needs at least 1 sub-domain (subdomains 0 given)".into());
        }
        if self.nested == 0 {
            return Err("Schwarz nested is the number of inner blocks, at least 1".into());
        }
        check_fill_level(self.fill_level)?;
        if self.kind == SchwarzKind::Additive && self.fill_level != 0 {
            return Err("AS uses IC(0) blocks: fillLevel must be 0 (use RAS for ILU(k))".into());
        }
        Ok(())
    }

    /// Whether M⁻¹ is symmetric (PCG accepts it).
    pub fn is_symmetric(&self) -> bool {
        self.kind == SchwarzKind::Additive
    }
}

impl fmt::Display for SchwarzSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:subdomains={}:overlap={}",
            self.head(),
            self.subdomains,
            self.overlap
        )?;
        if self.kind == SchwarzKind::Restricted {
            write!(f, ":fill={}", self.fill_level)?;
        }
        if self.nested > 1 {
            write!(
                f,
                ":nested={}:inner-overlap={}",
                self.nested, self.inner_overlap
            )?;
        }
        Ok(())
    }
}

impl FromStr for SchwarzSettings {
    type Err = String;
    /// `ras[:key=value]...` or `as[:key=value]...` with the keys of
    /// [`SchwarzSettings::set`], e.g. `ras:subdomains=64:overlap=1:nested=8`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let head = parts.next().unwrap_or_default();
        let kind = if head.eq_ignore_ascii_case("ras") {
            SchwarzKind::Restricted
        } else if head.eq_ignore_ascii_case("as") {
            SchwarzKind::Additive
        } else {
            return Err(format!(
                "'{s}' is not a Schwarz specification (ras[:key=value]... or as[:key=value]...)"
            ));
        };
        let mut settings = Self::new(kind);
        set_pairs(parts, "Schwarz", |key, value| settings.set(key, value))?;
        settings.validate()?;
        Ok(settings)
    }
}

/// The blocks of a Schwarz decomposition, concatenated.
#[derive(Clone, Debug)]
pub struct Decomposition {
    /// Row of A of each concatenated row.
    pub gather: Vec<u32>,
    /// Whether each concatenated row is written back by RAS.
    pub owned: Vec<bool>,
    /// Block b holds concatenated rows `block_ptr[b]..block_ptr[b + 1]`.
    pub block_ptr: Vec<usize>,
    /// The block-diagonal matrix of the blocks' A[W, W].
    pub matrix: Csr,
}

impl Decomposition {
    /// The decomposition of `a` (square) by `settings`.
    pub fn new(a: &Csr, settings: &SchwarzSettings) -> Result<Self, SolveError> {
        settings.validate().map_err(SolveError::InvalidControls)?;
        check_square(a)?;
        let n = a.n_rows();
        let graph = Graph::of_matrix(a);
        let parts =
            graph_parts(&graph, settings.subdomains).map_err(SolveError::InvalidControls)?;
        let outer = group(&parts, settings.subdomains.min(n.max(1)));
        // (rows, owned) of each block, rows ascending.
        let blocks: Vec<Vec<(Vec<u32>, Vec<bool>)>> = outer
            .par_iter()
            .map_init(
                || vec![u32::MAX; n],
                |mark, owned_rows| -> Result<_, SolveError> {
                    let rows = grow(&graph, owned_rows, settings.overlap, mark);
                    let in_outer = membership(&rows, owned_rows);
                    if settings.nested <= 1 {
                        return Ok(vec![(rows, in_outer)]);
                    }
                    // The sub-domain's own graph, cut into inner blocks.
                    for (i, &r) in rows.iter().enumerate() {
                        mark[r as usize] = i as u32;
                    }
                    let sub = graph.induced(&rows, |u| {
                        let l = mark[u as usize];
                        (l != u32::MAX).then_some(l)
                    });
                    for &r in &rows {
                        mark[r as usize] = u32::MAX;
                    }
                    let inner_parts =
                        graph_parts(&sub, settings.nested).map_err(SolveError::InvalidControls)?;
                    let mut local_mark = vec![u32::MAX; rows.len()];
                    Ok(group(&inner_parts, settings.nested.min(rows.len().max(1)))
                        .iter()
                        .map(|inner_owned| {
                            let local =
                                grow(&sub, inner_owned, settings.inner_overlap, &mut local_mark);
                            let owned = membership(&local, inner_owned)
                                .into_iter()
                                .zip(&local)
                                .map(|(own, &l)| own && in_outer[l as usize])
                                .collect();
                            (local.iter().map(|&l| rows[l as usize]).collect(), owned)
                        })
                        .collect())
                },
            )
            .collect::<Result<_, _>>()?;
        let blocks: Vec<(Vec<u32>, Vec<bool>)> = blocks.into_iter().flatten().collect();
        Ok(Self::concatenate(a, blocks))
    }

    /// B = blockdiag(A[W_b, W_b]) and the gather/ownership maps.
    fn concatenate(a: &Csr, blocks: Vec<(Vec<u32>, Vec<bool>)>) -> Self {
        let n = a.n_rows();
        let mut block_ptr = vec![0usize];
        for (rows, _) in &blocks {
            block_ptr.push(block_ptr.last().unwrap() + rows.len());
        }
        // Each block's rows of B, built in parallel, then joined.
        let pieces: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> = blocks
            .par_iter()
            .zip(&block_ptr[..blocks.len()])
            .map_init(
                || vec![u32::MAX; n],
                |local, ((rows, _), &offset)| {
                    for (i, &r) in rows.iter().enumerate() {
                        local[r as usize] = (offset + i) as u32;
                    }
                    let (mut lens, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
                    for &r in rows {
                        let (c, v) = a.row(r as usize);
                        let before = cols.len();
                        for (&c, &v) in c.iter().zip(v) {
                            let l = local[c as usize];
                            if l != u32::MAX {
                                cols.push(l);
                                vals.push(v);
                            }
                        }
                        lens.push(cols.len() - before);
                    }
                    for &r in rows {
                        local[r as usize] = u32::MAX;
                    }
                    (lens, cols, vals)
                },
            )
            .collect();
        let total = *block_ptr.last().unwrap();
        let mut row_ptr = Vec::with_capacity(total + 1);
        row_ptr.push(0);
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for (lens, c, v) in pieces {
            for len in lens {
                row_ptr.push(row_ptr.last().unwrap() + len);
            }
            cols.extend(c);
            vals.extend(v);
        }
        let (mut gather, mut owned) = (Vec::with_capacity(total), Vec::with_capacity(total));
        for (rows, own) in blocks {
            gather.extend(rows);
            owned.extend(own);
        }
        // Ascending global rows keep each row's columns ascending in B.
        let matrix = Csr::new(total, row_ptr, cols, vals).expect("blocks keep rows sorted");
        Self {
            gather,
            owned,
            block_ptr,
            matrix,
        }
    }

    pub fn n_blocks(&self) -> usize {
        self.block_ptr.len() - 1
    }
    /// Concatenated rows over rows of A (1 without overlap).
    pub fn expansion(&self) -> f64 {
        self.gather.len() as f64 / self.owned.iter().filter(|&&o| o).count().max(1) as f64
    }

    /// r_B = r gathered to the concatenated rows.
    pub fn gather(&self, r: &[f64]) -> Vec<f64> {
        self.gather.par_iter().map(|&g| r[g as usize]).collect()
    }

    /// For each row g of A the concatenated rows whose block values make
    /// z_g, as `(ptr, list)` (row g: `list[ptr[g]..ptr[g + 1]]`): its owner
    /// (restricted) or every block row holding it, ascending (additive).
    pub fn scatter_lists(&self, kind: SchwarzKind, n: usize) -> (Vec<usize>, Vec<u32>) {
        let mut ptr = vec![0usize; n + 1];
        let counted = |c: usize| kind == SchwarzKind::Additive || self.owned[c];
        for (c, &g) in self.gather.iter().enumerate() {
            if counted(c) {
                ptr[g as usize + 1] += 1;
            }
        }
        for g in 0..n {
            ptr[g + 1] += ptr[g];
        }
        let mut next = ptr.clone();
        let mut list = vec![0u32; ptr[n]];
        for (c, &g) in self.gather.iter().enumerate() {
            if counted(c) {
                list[next[g as usize]] = c as u32;
                next[g as usize] += 1;
            }
        }
        (ptr, list)
    }
}

/// The vertices of each part, ascending; empty parts dropped.
fn group(parts: &[u32], n_parts: usize) -> Vec<Vec<u32>> {
    let mut groups = vec![Vec::new(); n_parts];
    for (v, &p) in parts.iter().enumerate() {
        groups[p as usize].push(v as u32);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// `seed` grown by `layers` layers of `graph`, ascending. `mark` is all
/// `u32::MAX` on entry and on return.
fn grow(graph: &Graph, seed: &[u32], layers: usize, mark: &mut [u32]) -> Vec<u32> {
    let mut set = seed.to_vec();
    for &v in seed {
        mark[v as usize] = 0;
    }
    let mut frontier = 0..set.len();
    for _ in 0..layers {
        let start = set.len();
        for f in frontier.clone() {
            for &u in graph.neighbours(set[f] as usize) {
                if mark[u as usize] == u32::MAX {
                    mark[u as usize] = 0;
                    set.push(u);
                }
            }
        }
        frontier = start..set.len();
    }
    for &v in &set {
        mark[v as usize] = u32::MAX;
    }
    set.sort_unstable();
    set
}

/// For each of `rows` (ascending) whether it is in `subset` (ascending).
fn membership(rows: &[u32], subset: &[u32]) -> Vec<bool> {
    let mut it = subset.iter().peekable();
    rows.iter()
        .map(|r| {
            while it.next_if(|&&s| s < *r).is_some() {}
            it.next_if(|&&s| s == *r).is_some()
        })
        .collect()
}

#[cfg(test)]
mod tests;
