//! A case split over ranks, in OpenFOAM's `processorK` layout:
//!
//! ```text
//! CASE/processorK/constant/polyMesh/cellProcAddressing   local → global cell (labelList)
//! CASE/processorK/<time>/<field>                          rank K's cell values, in that order
//! ```
//!
//! `fvpoisson decompose` writes the addressing ([`write_decomposition`]); a
//! distributed `run` reads it ([`read_decomposition`], METIS in memory when
//! there is none) and each rank writes its cells' values; `reconstruct`
//! ([`reconstruct`]) assembles them into `CASE/<time>/<field>`. The ranks'
//! local meshes are not written: every rank rebuilds its part from the
//! global mesh.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::run::{write_reconstructed, Device, Ranks};
use super::{CaseError, CaseSetup};
use crate::foam::write::{write_atomic, write_header, write_list, HeaderSpec};
use crate::foam::FoamFile;
use crate::gpu::Gpu;
use crate::io::foam_field::{write_internal_field, FieldValues, ScalarFieldFile};
use crate::mesh::{Label, Mesh};
use crate::parallel::collective::agreed;
use crate::parallel::Communicator;
use crate::sparse::distribute::Decomposition;
use crate::sparse::ordering::Graph;
use crate::sparse::partition::graph_parts;

/// How `decompose` splits the cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecomposeMethod {
    /// METIS k-way over the cell graph (fewest interface faces).
    Metis,
    /// Equal slabs of cell centres along the longest axis of the mesh's
    /// bounding box, like OpenFOAM's `simple` with n × 1 × 1.
    Simple,
}

impl fmt::Display for DecomposeMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Metis => "metis",
            Self::Simple => "simple",
        })
    }
}

impl FromStr for DecomposeMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "metis" => Ok(Self::Metis),
            "simple" => Ok(Self::Simple),
            _ => Err(format!(
                "unknown decomposition method '{s}' (choose metis or simple)"
            )),
        }
    }
}

/// The cells' face-neighbour graph.
pub fn cell_graph(mesh: &Mesh) -> Graph {
    let mut lists = vec![Vec::new(); mesh.n_cells()];
    for (&o, &n) in mesh.owner().iter().zip(mesh.neighbour()) {
        lists[o as usize].push(n);
        lists[n as usize].push(o);
    }
    Graph::from_lists(lists).expect("cells of the mesh")
}

/// Splits the cells of `mesh` over `n_ranks` ranks.
/// `Err` unless `n_ranks` is between 1 and `n_cells` (every rank owns a
/// cell): checked before anything per rank, or per pair of ranks, is built.
pub fn check_rank_count(n_cells: usize, n_ranks: usize) -> Result<(), CaseError> {
    if n_ranks == 0 || n_ranks > n_cells {
        return Err(CaseError::invalid(format!(
            "cannot split {n_cells} cells over {n_ranks} ranks; give between 1 and {n_cells} ranks"
        )));
    }
    Ok(())
}

pub fn decompose_mesh(
    mesh: &Mesh,
    n_ranks: usize,
    method: DecomposeMethod,
) -> Result<Decomposition, CaseError> {
    check_rank_count(mesh.n_cells(), n_ranks)?;
    let owner = match method {
        DecomposeMethod::Metis => {
            graph_parts(&cell_graph(mesh), n_ranks).map_err(CaseError::Invalid)?
        }
        DecomposeMethod::Simple => {
            let centres = mesh.geometry()?.cell_centres;
            let (lo, hi) = centres.iter().fold(
                ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]),
                |(lo, hi), c| {
                    (
                        std::array::from_fn(|k| lo[k].min(c[k])),
                        std::array::from_fn(|k| hi[k].max(c[k])),
                    )
                },
            );
            let axis = (0..3)
                .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
                .unwrap_or(0);
            // Sorted by the coordinate (ties by cell number), cut into equal counts.
            let mut order: Vec<usize> = (0..centres.len()).collect();
            order.sort_by(|&a, &b| {
                centres[a][axis]
                    .total_cmp(&centres[b][axis])
                    .then(a.cmp(&b))
            });
            let mut owner = vec![0u32; centres.len()];
            for (k, &c) in order.iter().enumerate() {
                owner[c] = (k * n_ranks / centres.len()) as u32;
            }
            owner
        }
    };
    Decomposition::from_owners(owner, n_ranks).map_err(CaseError::Invalid)
}

/// `CASE/processorK`.
pub fn processor_dir(case_dir: &Path, rank: usize) -> PathBuf {
    case_dir.join(format!("processor{rank}"))
}

fn addressing_path(case_dir: &Path, rank: usize) -> PathBuf {
    processor_dir(case_dir, rank).join("constant/polyMesh/cellProcAddressing")
}

/// Rank `rank`'s cells, ascending: its local cell order.
pub fn cells_of(d: &Decomposition, rank: usize) -> Vec<Label> {
    let me = rank as u32;
    (0..d.owners().len() as Label)
        .filter(|&c| d.owners()[c as usize] == me)
        .collect()
}

/// Writes `processorK/constant/polyMesh/cellProcAddressing` for every rank
/// (atomically) and removes `processorK` directories of an earlier, larger
/// decomposition; returns the files written.
pub fn write_decomposition(case_dir: &Path, d: &Decomposition) -> Result<Vec<PathBuf>, CaseError> {
    let mut written = Vec::new();
    for rank in 0..d.n_ranks() {
        let path = addressing_path(case_dir, rank);
        let dir = path.parent().expect("a file in polyMesh");
        std::fs::create_dir_all(dir).map_err(|e| crate::io::OutputError::io(dir, e))?;
        let cells = cells_of(d, rank);
        let content = |w: &mut dyn std::io::Write| {
            write_header(
                w,
                &HeaderSpec {
                    format: crate::foam::FoamFormat::Ascii,
                    class: "labelList",
                    note: Some("local to global cell"),
                    location: "constant/polyMesh",
                    object: "cellProcAddressing",
                },
            )?;
            write_list(w, &cells, crate::foam::FoamFormat::Ascii)?;
            crate::foam::write::write_footer(w)
        };
        written.push(write_atomic(&path, false, content)?);
    }
    let mut stale = d.n_ranks();
    while processor_dir(case_dir, stale).is_dir() {
        let dir = processor_dir(case_dir, stale);
        std::fs::remove_dir_all(&dir).map_err(|e| crate::io::OutputError::io(&dir, e))?;
        stale += 1;
    }
    Ok(written)
}

/// The decomposition written by `decompose`, if `CASE/processor0` has one.
pub fn read_decomposition(
    case_dir: &Path,
    n_cells: usize,
) -> Result<Option<Decomposition>, CaseError> {
    if !addressing_path(case_dir, 0).exists() {
        return Ok(None);
    }
    let mut owner = vec![u32::MAX; n_cells];
    let mut rank = 0;
    while addressing_path(case_dir, rank).exists() {
        let path = addressing_path(case_dir, rank);
        let cells: Vec<Label> = FoamFile::read(&path)?.list()?;
        for c in cells {
            let slot = owner.get_mut(c as usize).ok_or_else(|| {
                CaseError::invalid(format!(
                    "{}: cell {c} does not exist (the mesh has {n_cells} cells); run \
                     `fvpoisson decompose` again",
                    path.display()
                ))
            })?;
            if *slot != u32::MAX {
                return Err(CaseError::invalid(format!(
                    "{}: cell {c} is also on rank {slot}; run `fvpoisson decompose` again",
                    path.display()
                )));
            }
            *slot = rank as u32;
        }
        rank += 1;
    }
    if let Some(c) = owner.iter().position(|&o| o == u32::MAX) {
        return Err(CaseError::invalid(format!(
            "{}: cell {c} is on no processor; run `fvpoisson decompose` again",
            case_dir.display()
        )));
    }
    Decomposition::from_owners(owner, rank)
        .map(Some)
        .map_err(|e| CaseError::invalid(format!("{}: {e}", case_dir.display())))
}

/// Writes rank `rank`'s cells of `field` (the global field) to
/// `processorK/<time>/<name>`.
pub fn write_rank_field(
    setup: &CaseSetup,
    ranks: &Ranks,
    time: f64,
    field: &[f64],
) -> Result<PathBuf, CaseError> {
    let rank = ranks.comm.rank();
    let values: Vec<f64> = cells_of(ranks.decomposition, rank)
        .iter()
        .map(|&c| field[c as usize])
        .collect();
    Ok(write_internal_field(
        &processor_dir(&setup.case_dir, rank),
        time,
        &setup.field,
        &values,
        &setup.output.foam,
    )?)
}

/// The decomposition a distributed run uses: the case's (`decompose`), which
/// must be for `comm.size()` ranks, else METIS in memory, written down for
/// `reconstruct`. Rank 0 alone reads or makes it and sends it to the others,
/// so that no rank reads files rank 0 is writing.
pub fn decomposition_for_run(
    case_dir: &Path,
    mesh: &Mesh,
    comm: &dyn Communicator,
) -> Result<Decomposition, CaseError> {
    let n = mesh.n_cells();
    let decided = match comm.rank() {
        0 => match read_decomposition(case_dir, n) {
            Ok(Some(d)) => {
                log::info!(
                    "Decomposition: {} (processor0..{})",
                    case_dir.display(),
                    d.n_ranks() - 1
                );
                Ok(Some(d))
            }
            Ok(None) => {
                log::info!(
                    "Decomposition: METIS k-way in memory (no processor0 in the case), written \
                     to {}/processorK for reconstruct",
                    case_dir.display()
                );
                decompose_mesh(mesh, comm.size(), DecomposeMethod::Metis)
                    .and_then(|d| write_decomposition(case_dir, &d).map(|_| d))
                    .map(Some)
            }
            Err(e) => Err(e),
        },
        _ => Ok(None),
    };
    // Every rank stops with rank 0's error (a corrupt cellProcAddressing, a
    // processorK it cannot write) rather than wait for the owners.
    let decided = agreed(comm, decided, |_| 1, |f| CaseError::invalid(f.to_string()))?;
    // The owner of each cell, then the decomposition's rank count.
    let mut message = vec![0.0; n + 1];
    if let Some(d) = decided {
        for (m, &r) in message.iter_mut().zip(d.owners()) {
            *m = f64::from(r);
        }
        message[n] = d.n_ranks() as f64;
    }
    comm.merge(&mut message);
    let n_ranks = message[n] as usize;
    if n_ranks != comm.size() {
        return Err(CaseError::invalid(format!(
            "{} is decomposed for {n_ranks} ranks but the run has {}; run with {n_ranks} ranks \
             or `fvpoisson decompose {} -n {}`",
            case_dir.display(),
            comm.size(),
            case_dir.display(),
            comm.size()
        )));
    }
    Decomposition::from_owners(message[..n].iter().map(|&o| o as u32).collect(), n_ranks)
        .map_err(CaseError::Invalid)
}

/// Runs the case on this rank of `comm` (every rank calls it) and returns
/// the run's summary (the field is the whole, gathered field on every rank).
/// With `gpu` this rank's linear solves run on that GPU.
pub fn run_distributed(
    setup: &CaseSetup,
    mesh: Mesh,
    comm: &dyn Communicator,
    gpu: Option<&Gpu>,
) -> Result<super::RunSummary, CaseError> {
    // The split of the rows over the ranks is this run's row ordering.
    let decomposition = crate::timings::timed(crate::timings::Phase::Ordering, || {
        decomposition_for_run(&setup.case_dir, &mesh, comm)
    })?;
    let counts = decomposition.counts();
    let on = match gpu {
        Some(g) => format!("GPUs; rank 0 on device {} {}", g.ordinal(), g.name()),
        None => "CPU".to_string(),
    };
    log::info!(
        "Linear solves distributed over {} ranks ({on}), {}..{} cells per rank",
        comm.size(),
        counts.iter().min().unwrap_or(&0),
        counts.iter().max().unwrap_or(&0)
    );
    let ranks = Ranks {
        comm,
        decomposition: &decomposition,
        gpu,
    };
    super::run_case_with_mesh(setup, Some(mesh), Device::Distributed(ranks))
}

/// Assembles `processorK/<time>/<field>` of every time written by the ranks
/// into `CASE/<time>/<field>` (boundary values recomputed from the case's
/// conditions); returns the files written.
pub fn reconstruct(case_dir: &Path) -> Result<Vec<PathBuf>, CaseError> {
    let (setup, mesh) = super::read_case_dir_with_mesh(case_dir)?;
    let mesh = match mesh {
        Some(mesh) => mesh,
        None => setup.mesh.load()?,
    };
    let d = read_decomposition(case_dir, mesh.n_cells())?.ok_or_else(|| {
        CaseError::invalid(format!(
            "{}: no processor0/constant/polyMesh/cellProcAddressing; run `fvpoisson \
             decompose` and a distributed run first",
            case_dir.display()
        ))
    })?;
    let cells: Vec<Vec<Label>> = (0..d.n_ranks()).map(|r| cells_of(&d, r)).collect();
    // Time directories of rank 0 holding the field.
    let p0 = processor_dir(case_dir, 0);
    let mut times: Vec<(f64, PathBuf)> = std::fs::read_dir(&p0)
        .map_err(|e| crate::io::OutputError::io(&p0, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let t: f64 = name.parse().ok()?;
            Some((t, e.path()))
        })
        .filter(|(_, dir)| {
            dir.join(&setup.field).exists() || dir.join(format!("{}.gz", setup.field)).exists()
        })
        .collect();
    if times.is_empty() {
        return Err(CaseError::invalid(format!(
            "{}: no time directory with field {}; run the case distributed first",
            p0.display(),
            setup.field
        )));
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut written = Vec::new();
    for (time, dir0) in times {
        let name = dir0.file_name().expect("a directory name").to_owned();
        let mut field = vec![0.0; mesh.n_cells()];
        for (rank, cells) in cells.iter().enumerate() {
            let path = processor_dir(case_dir, rank).join(&name).join(&setup.field);
            let file = ScalarFieldFile::read(&path, cells.len())?;
            match file.internal {
                FieldValues::Uniform(v) => cells.iter().for_each(|&c| field[c as usize] = v),
                FieldValues::NonUniform(values) => {
                    for (&c, v) in cells.iter().zip(values) {
                        field[c as usize] = v;
                    }
                }
            }
        }
        written.push(write_reconstructed(&setup, &mesh, time, field)?);
    }
    Ok(written)
}
