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
use crate::mesh::{Label, Mesh, Vec3};
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
    /// OpenFOAM's `simple` (`simpleCoeffs { n (nx ny nz); delta 0.001; }`):
    /// `None` is `n (N 1 1)`, slabs across x, as OpenFOAM's tutorials give it.
    Simple(Option<[usize; 3]>),
}

impl fmt::Display for DecomposeMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Metis => f.write_str("metis"),
            Self::Simple(None) => f.write_str("simple"),
            Self::Simple(Some([x, y, z])) => write!(f, "simple:{x}x{y}x{z}"),
        }
    }
}

impl FromStr for DecomposeMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        match lower.split_once(':') {
            None if lower == "metis" => Ok(Self::Metis),
            None if lower == "simple" => Ok(Self::Simple(None)),
            Some(("simple", n)) => {
                let parts: Vec<Option<usize>> = n
                    .split('x')
                    .map(|p| p.parse().ok().filter(|&v| v > 0))
                    .collect();
                match parts[..] {
                    [Some(x), Some(y), Some(z)] => Ok(Self::Simple(Some([x, y, z]))),
                    _ => Err(format!(
                        "'{s}': give the divisions as simple:NXxNYxNZ (positive, e.g. \
                         simple:2x2x1, OpenFOAM's `n (2 2 1)`)"
                    )),
                }
            }
            _ => Err(format!(
                "unknown decomposition method '{s}' (choose metis, simple or simple:NXxNYxNZ)"
            )),
        }
    }
}

/// OpenFOAM's `simple` decomposition of the points `centres` into
/// `n[0] * n[1] * n[2]` parts: the points are turned by OpenFOAM's small
/// rotation of angle `delta` (0.001 by default in `simpleCoeffs`, which breaks
/// the ties of a Cartesian mesh's aligned cell centres), ordered by their
/// turned x, cut into `n[0]` groups of equal count (the first `count % n[0]`
/// groups one larger), and likewise along y and z over all points; a point's
/// part is `gx + n[0] gy + n[0] n[1] gz`. Equal coordinates keep the cells'
/// order (OpenFOAM's sort leaves their order unspecified; the rotation makes
/// them rare).
pub fn simple_parts(centres: &[Vec3], n: [usize; 3], delta: f64) -> Vec<u32> {
    let d = 1.0 - 0.5 * delta * delta;
    let (d2, a, a2) = (d * d, delta, delta * delta);
    let rotation = [
        [d2, -a * d, a],
        [a * d - a2 * d, a * a2 + d2, -2.0 * a * d],
        [a * d2 + a2, a * d - a2 * d, d2 - a2],
    ];
    let turned: Vec<[f64; 3]> = centres
        .iter()
        .map(|c| rotation.map(|row| row[0] * c[0] + row[1] * c[1] + row[2] * c[2]))
        .collect();
    let count = centres.len();
    let mut part = vec![0u32; count];
    let mut order: Vec<usize> = (0..count).collect();
    let mut stride = 1;
    for (axis, &groups) in n.iter().enumerate() {
        order.sort_by(|&p, &q| turned[p][axis].total_cmp(&turned[q][axis]).then(p.cmp(&q)));
        let (size, larger) = (count / groups, count % groups);
        for (k, &p) in order.iter().enumerate() {
            // The first `larger` groups hold size + 1 points each.
            let group = if k < larger * (size + 1) {
                k / (size + 1)
            } else {
                larger + (k - larger * (size + 1)) / size.max(1)
            };
            part[p] += (group * stride) as u32;
        }
        stride *= groups;
    }
    part
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
        DecomposeMethod::Simple(n) => {
            let n = n.unwrap_or([n_ranks, 1, 1]);
            let parts = n.iter().try_fold(1usize, |p, &k| p.checked_mul(k));
            if parts != Some(n_ranks) {
                return Err(CaseError::invalid(format!(
                    "simple:{}x{}x{} does not make {n_ranks} parts; give divisions whose \
                     product is the rank count",
                    n[0], n[1], n[2]
                )));
            }
            simple_parts(&mesh.geometry()?.cell_centres, n, 0.001)
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
    let (setup, mesh) = super::read_case_dir_and_mesh(case_dir)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_parse_and_bad_divisions_are_named() {
        assert_eq!("METIS".parse(), Ok(DecomposeMethod::Metis));
        assert_eq!("simple".parse(), Ok(DecomposeMethod::Simple(None)));
        assert_eq!(
            "simple:2x3x1".parse(),
            Ok(DecomposeMethod::Simple(Some([2, 3, 1])))
        );
        for bad in ["simple:2x0x1", "simple:2x2", "simple:axbxc", "hierarchical"] {
            let e = bad.parse::<DecomposeMethod>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let mesh = crate::mesh::source::load("box:4x4x2").unwrap();
        let e = decompose_mesh(&mesh, 3, DecomposeMethod::Simple(Some([2, 2, 1])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("simple:2x2x1 does not make 3 parts"), "{e}");
    }

    /// Counts that do not divide: the first `count % n` groups are one
    /// larger, in the order of the turned coordinate.
    #[test]
    fn simple_parts_give_the_first_groups_the_extra_points() {
        let centres: Vec<Vec3> = (0..7)
            .map(|i| Vec3::new(f64::from(6 - i), 0.0, 0.0))
            .collect();
        assert_eq!(
            simple_parts(&centres, [3, 1, 1], 0.001),
            vec![2, 2, 1, 1, 0, 0, 0]
        );
        // x then y: part = gx + 2 gy.
        let grid: Vec<Vec3> = [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)]
            .iter()
            .map(|&(x, y)| Vec3::new(x, y, 0.0))
            .collect();
        assert_eq!(simple_parts(&grid, [2, 2, 1], 0.001), vec![0, 1, 2, 3]);
    }
}
