//! The Laplacian assembled on the GPU, straight into mod-SELL (Wikberg 2024, §2.5
//! and §9.2 "GPU assembly directly into mod. SELL", its future-work
//! item; kernels in `kernels/assembly.cu`).
//!
//! [`DeviceLaplacian::new`] takes a CPU [`LaplacianSystem`] (its face
//! geometry, boundary data and gradient scheme; its CSR pattern only for the
//! default ordering) and a row ordering (reverse Cuthill–McKee by default, as
//! `solve_pcg_gpu` uses). The device builds the [`AssemblyMap`] once
//! (`device_map`, kernels in `kernels/assembly_map.cu`), from the mesh's
//! owner–neighbour addressing and the ordering, which the host uploads (never
//! from the host's pattern or slot map, which a device run does not build);
//! only the face numbering comes back, for the host's gathers of the face
//! geometry in device order. [`AssemblyMap::new`] builds the same map on the
//! host: the reference the tests compare with, and the map a caller may lend
//! ([`DeviceLaplacian::with_map`]). After that a (re)assembly moves only
//! values:
//!
//! - Γ and q per cell and the boundary data per boundary face are evaluated on
//!   the host ([`LaplacianSystem::evaluate`]: the same checks and the same
//!   numbers as the CPU path; a `CellField` may be a Rust closure, which only
//!   the host can run) and uploaded, 16 bytes per cell (8 when Γ is uniform:
//!   then no Γ array at all). A deferred host system evaluated them for its
//!   check already: the constructors ending in `_evaluated` take those values
//!   ([`LaplacianSystem::take_evaluated`]) and drop them once uploaded, so a
//!   run's first assembly evaluates its problem once;
//! - `asm_face_coefficients`: Γ_f|S_f| and Γ_f|S_f|Δ_f per internal face;
//! - `asm_matrix_rows`: one thread per row writes its off-diagonal slots, its
//!   diagonal (faces, boundary faces, V/Δt, setReference) and its explicit
//!   right-hand side straight into the resident [`DeviceModSell`].
//!
//! [`DeviceLaplacian::update_rhs`] is `LaplacianSystem::update_rhs` on the
//! device: the cell gradient (`asm_gradient`, Gauss linear or least squares),
//! the face correction (`asm_correction_flux`), the right-hand side gather
//! (`asm_rhs`), and the all-Neumann treatment (a device sum read back, then the
//! projection or the consistency error, and the reference).
//!
//! Every value is a gather (no atomics) in the CPU's order of summation, and
//! the kernels use round-to-nearest intrinsics that are never fused into FMAs,
//! so the device assembly equals the CPU's bit for bit. One exception: the sum
//! of the right-hand side that an all-Neumann problem checks or projects is a
//! fixed-order tree sum on the device, a sequential one on the CPU (the
//! projected values differ in the last bits).
//!
//! The systems of other problems on the same mesh and schemes (a flow case's
//! momentum components next to its pressure) share the ordering, map, face
//! numbering and geometry on the device ([`DeviceLaplacian::sharing_set_up_of`]):
//! one gather and upload serves them all, each keeping its own matrix values,
//! problem values and work buffers.
//!
//! Cases the device does not assemble (a cell with more than 255 neighbours,
//! 2^30 internal faces or more) give [`AssemblyError::Unsupported`], and the
//! caller assembles on the CPU instead.

use std::rc::Rc;

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

use super::matrix::DeviceModSell;
use super::pcg::{GpuCgBackend, GpuSolveOptions, GpuVector};
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, vector_grid, DeferredRead, Gpu, GpuError, HostElement, VECTOR_BLOCK};
use crate::fvm::{
    BoundaryCoeffs, CellGradient, FaceGeometry, FvmError, GammaInterpolation, GradScheme,
    LaplacianProblem, LaplacianSystem, ProblemValues, Reference, Schemes, SingularPolicy,
    SnGradScheme, TimeScheme,
};
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use crate::sparse::ordering::reverse_cuthill_mckee;
use crate::sparse::{Csr, ModSell, Permutation};
use crate::timings::Phase;
use device_map::DeviceAddressing;

/// `Invalid` unless `values` are of `mesh`'s size (a problem evaluated on
/// another mesh would index past the arrays).
fn check_values_fit(values: &ProblemValues, mesh: &Mesh) -> Result<(), GpuError> {
    let (n, n_boundary) = (mesh.n_cells(), mesh.n_faces() - mesh.n_internal_faces());
    let sizes = [
        (values.gamma.len(), n),
        (values.source.len(), n),
        (values.gamma_boundary.len(), n_boundary),
        (values.bc.active.len(), n_boundary),
    ];
    if sizes.iter().any(|(len, expected)| len != expected) {
        return Err(GpuError::Invalid(format!(
            "problem values of {} cells and {} boundary faces for a mesh of {n} cells and \
             {n_boundary} boundary faces",
            values.gamma.len(),
            values.gamma_boundary.len()
        )));
    }
    Ok(())
}

/// `face_slots` value that ends a row (kernels/assembly.cu `ASM_NO_SLOT`).
pub const NO_SLOT: u8 = 0xFF;
/// Threads of the one-block reduction (pcg.cu `reduce_partials`).
const REDUCE_BLOCK: u32 = 1024;

/// Why the device did not assemble.
#[derive(Debug, thiserror::Error)]
pub enum AssemblyError {
    /// The mesh is outside what the device assembly handles; assemble on the
    /// CPU instead.
    #[error("the GPU assembly does not handle this mesh: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Fvm(#[from] FvmError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// The index data of the device assembly, built on the host once per mesh
/// and ordering. Row r is the permuted row (cell `ordering.new_to_old()[r]`).
///
/// Step k of a row is its k-th internal face in face order (two cells share
/// at most one face: `Mesh::new` checks strictly upper-triangular order), stored
/// at the mod-SELL position of the row's slot k (same `slice_ptr`), so the
/// face arrays read coalesced like the matrix. `face_slots` holds the slot j
/// (0..) of the row that the face's coefficient fills (`NO_SLOT` after the
/// last face) and `face_codes` the code `(d << 1) | s` of device face d, s = 1
/// when the row's cell is the face's neighbour. Device faces are numbered in
/// the order the rows first meet them, so a slice's faces lie close together.
#[derive(Clone, Debug, PartialEq)]
pub struct AssemblyMap {
    /// The permuted matrix pattern in mod-SELL, its values and diagonal zero.
    pub pattern: ModSell,
    pub face_codes: Vec<u32>,
    pub face_slots: Vec<u8>,
    /// Device face d is internal face `device_faces[d]`.
    pub device_faces: Vec<u32>,
    /// Row r's boundary faces are device boundary faces
    /// `boundary_ptr[r]..boundary_ptr[r + 1]`, in face order.
    pub boundary_ptr: Vec<u32>,
    /// Device boundary face i is boundary face `device_boundary[i]` (index
    /// `face − n_internal_faces`); faces of empty patches are left out.
    pub device_boundary: Vec<u32>,
}

impl AssemblyMap {
    /// The map for `mesh`, rows reordered by `ordering`, slices of
    /// `slice_height` rows, straight from the mesh's owner–neighbour
    /// addressing: no host CSR pattern is read. Row r's off-diagonals are
    /// the cells across its internal faces (`Mesh::new` allows one face per
    /// pair of cells), in ascending new column; the pattern's values and
    /// diagonal are zero (the device assembly writes every one of them).
    pub fn new(
        mesh: &Mesh,
        ordering: &Permutation,
        slice_height: usize,
    ) -> Result<Self, AssemblyError> {
        check_map_sizes(mesh, ordering, slice_height)?;
        let n = mesh.n_cells();
        let n_internal = mesh.n_internal_faces();
        let mut active = vec![true; mesh.n_faces() - n_internal];
        for patch in mesh.patches().iter().filter(|p| p.kind == PatchKind::Empty) {
            active[patch.boundary_faces(n_internal)].fill(false);
        }
        let (offsets, cell_faces) = crate::timings::span("cell faces", || mesh.cell_faces());
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let (new_to_old, old_to_new) = (ordering.new_to_old(), ordering.old_to_new());
        let h = slice_height;
        let n_slices = n.div_ceil(h);
        let slice_rows = |slice: usize| slice * h..((slice + 1) * h).min(n);
        let internal_faces = |cell: usize| {
            cell_faces[offsets[cell] as usize..offsets[cell + 1] as usize]
                .iter()
                .map(|&f| f as usize)
                .filter(|&f| f < n_internal)
        };
        // Each slice as long as its row of most internal faces: the counts
        // per cell read in cell order, then looked up per row (one access
        // per row in the new order rather than a walk of its faces).
        let (slice_ptr, too_long) = crate::timings::span("slice lengths", || {
            let counts: Vec<u32> = (0..n)
                .into_par_iter()
                .map(|cell| internal_faces(cell).count() as u32)
                .collect();
            let lens: Vec<u32> = (0..n_slices)
                .into_par_iter()
                .map(|slice| {
                    let cells = &new_to_old[slice_rows(slice)];
                    cells.iter().map(|&c| counts[c as usize]).max().unwrap_or(0)
                })
                .collect();
            let mut slice_ptr = Vec::with_capacity(n_slices + 1);
            slice_ptr.push(0u64);
            for (slice, &len) in lens.iter().enumerate() {
                slice_ptr.push(slice_ptr[slice] + len as u64 * h as u64);
            }
            let longest = lens.iter().copied().max().unwrap_or(0) as usize;
            if longest > NO_SLOT as usize {
                // The first such row in row order.
                let cell = *new_to_old
                    .iter()
                    .find(|&&c| counts[c as usize] > NO_SLOT as u32)
                    .expect("a row longer than a slot code holds");
                return (slice_ptr, Some((cell, counts[cell as usize])));
            }
            (slice_ptr, None)
        });
        if let Some((cell, count)) = too_long {
            return Err(AssemblyError::Unsupported(format!(
                "cell {cell} has {count} neighbours; the device assembly handles up to {NO_SLOT}"
            )));
        }
        // Pass 1, slices in parallel, each row once: its internal faces in
        // face order (step k at mod-SELL position i + k·H) and the columns
        // across them sorted, which gives the pattern's column codes and
        // each face's slot. At a face's position: its slot and, until pass
        // 3, the face itself, `(f << 1) | s`, with FIRST_MET set where the
        // row meets the face first (the row before the other side's). Per
        // row, the count of faces it meets first.
        const FIRST_MET: u32 = 1 << 31;
        let slots = *slice_ptr.last().expect("one pointer at least") as usize;
        let mut pattern_codes = vec![0i32; slots];
        let (mut face_codes, mut face_slots) = (vec![0u32; slots], vec![NO_SLOT; slots]);
        let mut first_met = vec![0u32; n];
        let lengths = || slice_ptr.windows(2).map(|w| (w[1] - w[0]) as usize);
        let pass_1 = || {
            crate::slices::split_lengths(&mut face_codes, lengths())
                .into_par_iter()
                .zip(crate::slices::split_lengths(&mut face_slots, lengths()))
                .zip(crate::slices::split_lengths(&mut pattern_codes, lengths()))
                .zip(first_met.par_chunks_mut(h))
                .enumerate()
                .filter_map(|(slice, (((codes, slots), pattern), met))| {
                    let first = slice * h;
                    let cells = &new_to_old[first..first + met.len()];
                    // The slice's rows gathered a stage at a time (their
                    // face lists, the faces' other cells, those cells'
                    // rows): the loads of a stage do not wait on each
                    // other, where a walk of one row at a time waits on a
                    // chain of five random reads per face (row → cell →
                    // face list → face → other cell → its row).
                    let lists: Vec<(usize, usize)> = cells
                        .iter()
                        .map(|&c| {
                            (
                                offsets[c as usize] as usize,
                                offsets[c as usize + 1] as usize,
                            )
                        })
                        .collect();
                    let mut row_faces: Vec<u32> = Vec::with_capacity(8 * cells.len());
                    let mut row_end = Vec::with_capacity(cells.len());
                    for &(start, end) in &lists {
                        row_faces.extend(
                            cell_faces[start..end]
                                .iter()
                                .filter(|&&f| (f as usize) < n_internal),
                        );
                        row_end.push(row_faces.len());
                    }
                    // Per face of each row: the other cell, and whether the
                    // row's cell is the face's neighbour (bit 31; cells
                    // number fewer than 2^31).
                    const NEIGHBOUR: u32 = 1 << 31;
                    let mut others: Vec<u32> = Vec::with_capacity(row_faces.len());
                    let mut done = 0;
                    for (&cell, &end) in cells.iter().zip(&row_end) {
                        others.extend(row_faces[done..end].iter().map(|&f| {
                            let nb = neighbour[f as usize];
                            if nb == cell {
                                owner[f as usize] | NEIGHBOUR
                            } else {
                                nb
                            }
                        }));
                        done = end;
                    }
                    let across: Vec<(usize, bool)> = others
                        .iter()
                        .map(|&o| {
                            (
                                old_to_new[(o & !NEIGHBOUR) as usize] as usize,
                                o & NEIGHBOUR != 0,
                            )
                        })
                        .collect();
                    // (new column, step) of the row's internal faces.
                    let mut columns: Vec<(usize, usize)> = Vec::new();
                    let mut done = 0;
                    for ((i, met), (&cell, &end)) in
                        met.iter_mut().enumerate().zip(cells.iter().zip(&row_end))
                    {
                        let row = first + i;
                        columns.clear();
                        let mut count = 0;
                        let faces = row_faces[done..end].iter().zip(&across[done..end]);
                        done = end;
                        for (step, (&f, &(column, is_neighbour))) in faces.enumerate() {
                            let first_here = row < column;
                            codes[i + step * h] = (f << 1)
                                | u32::from(is_neighbour)
                                | if first_here { FIRST_MET } else { 0 };
                            count += u32::from(first_here);
                            columns.push((column, step));
                        }
                        // Insertion sort: rows are short, and nearly sorted
                        // where faces are in upper-triangular order.
                        for k in 1..columns.len() {
                            let mut at = k;
                            while at > 0 && columns[at - 1].0 > columns[at].0 {
                                columns.swap(at - 1, at);
                                at -= 1;
                            }
                        }
                        for (j, &(column, step)) in columns.iter().enumerate() {
                            if column == row || (j > 0 && columns[j - 1].0 == column) {
                                let other = new_to_old[column];
                                return Some((
                                    row,
                                    GpuError::Invalid(format!(
                                        "assembly map: cells {cell} and {other} share more \
                                         than one face, or a face joins a cell to itself"
                                    )),
                                ));
                            }
                            slots[i + step * h] = j as u8;
                            pattern[i + j * h] = if (first..first + h).contains(&column) {
                                -((column - first) as i32) - 1
                            } else {
                                column as i32 + 1
                            };
                        }
                        *met = count;
                    }
                    None
                })
                // The first failing row, as a pass in row order reports it.
                .min_by_key(|(row, _)| *row)
        };
        if let Some((_, e)) = crate::timings::span("rows: faces, slots and columns", pass_1) {
            return Err(e.into());
        }
        let pattern = ModSell::from_parts(
            h,
            vec![0.0; n],
            slice_ptr.clone(),
            pattern_codes,
            vec![0.0; slots],
        )
        .map_err(GpuError::Invalid)?;
        // Device faces in the order the rows first meet them: offsets of
        // each row's share (each internal face is met first by one of its
        // two rows).
        let mut face_start = Vec::with_capacity(n + 1);
        face_start.push(0u32);
        for &met in &first_met {
            face_start.push(face_start.last().unwrap() + met);
        }
        drop(first_met);
        debug_assert_eq!(face_start[n] as usize, n_internal);
        // Pass 2, slices in parallel: each numbers the faces its rows meet
        // first, reading its own part of `face_codes` (a slice's share of
        // the device faces is contiguous), and records the number per face.
        let mut device_faces = vec![0u32; n_internal];
        let number_faces = || {
            let device_id: Vec<AtomicU32> = (0..n_internal).map(|_| AtomicU32::new(0)).collect();
            let face_parts = crate::slices::split_lengths(
                &mut device_faces,
                (0..n_slices).map(|s| {
                    let rows = slice_rows(s);
                    (face_start[rows.end] - face_start[rows.start]) as usize
                }),
            );
            face_parts
                .into_par_iter()
                .zip(crate::slices::split_lengths(&mut face_codes, lengths()))
                .zip(crate::slices::split_lengths(&mut face_slots, lengths()))
                .enumerate()
                .for_each(|(slice, ((faces, codes), slots))| {
                    let rows = slice_rows(slice);
                    let mut next = 0;
                    for (i, row) in rows.enumerate() {
                        let mut id = face_start[row];
                        let positions = (i..slots.len()).step_by(h);
                        for position in positions.take_while(|&p| slots[p] != NO_SLOT) {
                            let code = codes[position];
                            if code & FIRST_MET != 0 {
                                let f = (code & !FIRST_MET) >> 1;
                                faces[next] = f;
                                device_id[f as usize].store(id, Ordering::Relaxed);
                                // Numbered: FIRST_MET stays as pass 3's mark.
                                codes[position] = FIRST_MET | (id << 1) | (code & 1);
                                id += 1;
                                next += 1;
                            }
                        }
                    }
                });
            // Pass 3, in parallel: the other side of each face takes the number
            // its first row gave it.
            face_codes
                .par_iter_mut()
                .zip(&face_slots)
                .filter(|(_, &slot)| slot != NO_SLOT)
                .for_each(|(code, _)| {
                    *code = if *code & FIRST_MET != 0 {
                        *code & !FIRST_MET
                    } else {
                        (device_id[(*code >> 1) as usize].load(Ordering::Relaxed) << 1)
                            | (*code & 1)
                    };
                });
        };
        crate::timings::span("device face numbers", number_faces);
        // Device boundary faces in row order, each row's in face order: the
        // active boundary faces sorted by (row, face).
        let boundary_faces = || {
            let mut boundary: Vec<(u32, u32)> = (0..active.len())
                .into_par_iter()
                .filter(|&b| active[b])
                .map(|b| (old_to_new[owner[n_internal + b] as usize], b as u32))
                .collect();
            boundary.par_sort_unstable();
            let mut boundary_ptr = vec![0u32; n + 1];
            for &(row, _) in &boundary {
                boundary_ptr[row as usize + 1] += 1;
            }
            for r in 0..n {
                boundary_ptr[r + 1] += boundary_ptr[r];
            }
            let device_boundary = boundary.into_par_iter().map(|(_, b)| b).collect();
            (boundary_ptr, device_boundary)
        };
        let (boundary_ptr, device_boundary) =
            crate::timings::span("boundary faces", boundary_faces);
        Ok(Self {
            pattern,
            face_codes,
            face_slots,
            device_faces,
            boundary_ptr,
            device_boundary,
        })
    }
}

/// The refusals of a map's sizes, before any array is made: an ordering of
/// another mesh, a slice height mod-SELL does not take, more cells or faces
/// than the codes hold.
fn check_map_sizes(
    mesh: &Mesh,
    ordering: &Permutation,
    slice_height: usize,
) -> Result<(), AssemblyError> {
    let n = mesh.n_cells();
    if ordering.len() != n {
        return Err(GpuError::Invalid(format!(
            "assembly map: the mesh has {n} cells, the ordering {}",
            ordering.len()
        ))
        .into());
    }
    crate::sparse::modsell::check_slice_height(slice_height).map_err(GpuError::Invalid)?;
    if n >= i32::MAX as usize {
        return Err(AssemblyError::Unsupported(format!(
            "{n} cells; mod-SELL column codes hold fewer than 2^31"
        )));
    }
    let n_internal = mesh.n_internal_faces();
    if n_internal >= 1 << 30 {
        return Err(AssemblyError::Unsupported(format!(
            "{n_internal} internal faces; face codes hold fewer than 2^30"
        )));
    }
    Ok(())
}

/// Vectors as 3 consecutive doubles, in the order `index` gives (`offset`
/// added to each index), gathered in parallel.
pub(super) fn flatten(vectors: &[Vec3], index: &[u32], offset: usize) -> Vec<f64> {
    let mut flat = vec![0.0; 3 * index.len()];
    flat.par_chunks_mut(3)
        .zip(index.par_iter())
        .for_each(|(out, &i)| {
            let v = vectors[i as usize + offset];
            out.copy_from_slice(&[v.x, v.y, v.z]);
        });
    flat
}

/// Values of a per-face or per-boundary-face array in device order,
/// gathered in parallel.
fn gather(values: &[f64], index: &[u32]) -> Vec<f64> {
    index.par_iter().map(|&i| values[i as usize]).collect()
}

/// Every array of [`StaticSource`] at once: the host's copy the emulated
/// kernels' tests read.
#[cfg(test)]
#[derive(Clone, Debug)]
struct StaticArrays {
    face_owner: Vec<u32>,
    face_neighbour: Vec<u32>,
    weights: Vec<f64>,
    mag_sf: Vec<f64>,
    delta_coeffs: Vec<f64>,
    /// S_f (Gauss gradient).
    sf: Vec<f64>,
    /// Correction vectors k (corrected schemes).
    k: Vec<f64>,
    b_mag_sf: Vec<f64>,
    /// S_b (Gauss gradient).
    b_sf: Vec<f64>,
    /// k_b and the patch deltaCoeffs (boundaryCorrected).
    b_k: Vec<f64>,
    b_delta_coeffs: Vec<f64>,
    volumes: Vec<f64>,
}

#[cfg(test)]
impl StaticArrays {
    fn new(system: &LaplacianSystem, map: &AssemblyMap, ordering: &Permutation) -> Self {
        let source = StaticSource::new(system, &map.device_faces, &map.device_boundary, ordering);
        let (mag_sf, delta_coeffs, k) = source.face_entries().to_vecs(map.device_faces.len());
        Self {
            face_owner: source.face_owner(),
            face_neighbour: source.face_neighbour(),
            weights: source.weights().to_vec(),
            mag_sf,
            delta_coeffs,
            sf: source.sf().to_vec(),
            k,
            b_mag_sf: source.b_mag_sf().to_vec(),
            b_sf: source.b_sf().to_vec(),
            b_k: source.b_k().to_vec(),
            b_delta_coeffs: source.b_delta_coeffs().to_vec(),
            volumes: source.volumes().to_vec(),
        }
    }
}

/// The fixed device arrays, one method per array: internal faces in device
/// order, boundary faces in device boundary order, cells in row order;
/// vectors as 3 doubles; arrays a scheme does not use are empty. Each method
/// says where its elements come from ([`Gathered`]); the device set-up
/// gathers and uploads each a piece at a time ([`DeviceGeometry::upload`],
/// [`Gpu::upload_with`]), so that no array exists whole in host memory (at
/// 8 M hex cells their sum is about 2 GB, the largest 0.6 GB) and gathering
/// overlaps the copies.
struct StaticSource<'a> {
    system: &'a LaplacianSystem<'a>,
    /// The map's device faces and device boundary faces.
    faces: &'a [u32],
    boundary: &'a [u32],
    ordering: &'a Permutation,
}

/// Where the elements of one fixed device array come from.
#[derive(Clone, Copy)]
enum Gathered<'a> {
    /// `values[index[i]]`.
    Values(&'a [f64], &'a [u32]),
    /// The 3 components of `vectors[index[i] + offset]`.
    Vectors(&'a [Vec3], &'a [u32], usize),
    /// The interpolation weight of face `index[i]`, stored or computed
    /// ([`Geometry::weight`]).
    Weights(&'a Mesh, &'a Geometry, &'a [u32]),
    /// The 3 components of face `index[i] + offset`'s area vector, stored
    /// or computed ([`Geometry::area_vector`]).
    AreaVectors(&'a Mesh, &'a Geometry, &'a [u32], usize),
    /// Not read by the schemes: an empty array.
    Unused,
}

impl Gathered<'_> {
    fn len(&self) -> usize {
        match self {
            Self::Values(_, index) | Self::Weights(_, _, index) => index.len(),
            Self::Vectors(_, index, _) | Self::AreaVectors(_, _, index, _) => 3 * index.len(),
            Self::Unused => 0,
        }
    }

    /// Elements `start..start + piece.len()` into `piece`, in parallel.
    fn fill(&self, start: usize, piece: &mut [f64]) {
        match *self {
            Self::Values(values, index) => {
                let index = &index[start..start + piece.len()];
                piece
                    .par_iter_mut()
                    .zip(index)
                    .for_each(|(out, &i)| *out = values[i as usize])
            }
            Self::Vectors(vectors, index, offset) => {
                fill_vectors(start, piece, |i| vectors[index[i] as usize + offset])
            }
            Self::Weights(mesh, geometry, index) => {
                let index = &index[start..start + piece.len()];
                piece
                    .par_iter_mut()
                    .zip(index)
                    .for_each(|(out, &f)| *out = geometry.weight(mesh, f as usize))
            }
            Self::AreaVectors(mesh, geometry, index, offset) => fill_vectors(start, piece, |i| {
                geometry.area_vector(mesh, index[i] as usize + offset)
            }),
            Self::Unused => {}
        }
    }

    /// The whole array in host memory.
    fn to_vec(self) -> Vec<f64> {
        let mut v = vec![0.0; self.len()];
        self.fill(0, &mut v);
        v
    }

    /// The array on the device, gathered a piece at a time; an empty one
    /// becomes one zero, never read (as [`upload`]).
    fn upload(self, gpu: &Gpu) -> Result<CudaSlice<f64>, GpuError> {
        match self.len() {
            0 => gpu.zeros(1),
            len => gpu.upload_with(len, |start, piece| self.fill(start, piece)),
        }
    }

    /// [`Self::upload`], or nothing for an empty array.
    fn upload_nonempty(self, gpu: &Gpu) -> Result<Option<CudaSlice<f64>>, GpuError> {
        (self.len() > 0).then(|| self.upload(gpu)).transpose()
    }
}

/// Every internal face's arrays of the device set-up in face order: the
/// interpolation weight, |S_f|, the Δ coefficient, the correction vector
/// (corrected schemes) and the area vector (Gauss gradient), made from one
/// evaluation of each face's geometry ([`Geometry::internal_area_and_weight`],
/// [`FaceGeometry::internal_face_of`]: the bits of the host's arrays, stored
/// or not) and uploaded a piece of faces at a time.
struct InternalFaceArrays {
    weights: CudaSlice<f64>,
    mag_sf: CudaSlice<f64>,
    delta_coeffs: CudaSlice<f64>,
    k: Option<CudaSlice<f64>>,
    sf: Option<CudaSlice<f64>>,
}

impl InternalFaceArrays {
    fn upload(
        gpu: &Gpu,
        mesh: &Mesh,
        geometry: &Geometry,
        sn_grad: SnGradScheme,
        gauss: bool,
    ) -> Result<Self, GpuError> {
        let (corrected, n) = (sn_grad.is_corrected(), mesh.n_internal_faces());
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let centres = &geometry.cell_centres;
        // weight, |S_f|, Δ coefficient, then k and S_f where read.
        let mut widths = vec![1, 1, 1];
        widths.extend(corrected.then_some(3));
        widths.extend(gauss.then_some(3));
        const BLOCK: usize = 4096;
        let mut arrays = gpu
            .upload_units_with(n, &widths, |first, pieces| {
                let faces = pieces[0].len();
                let mut blocks: Vec<Vec<&mut [f64]>> = (0..faces.div_ceil(BLOCK))
                    .map(|_| Vec::with_capacity(widths.len()))
                    .collect();
                for (piece, &w) in pieces.iter_mut().zip(&widths) {
                    for (block, chunk) in blocks.iter_mut().zip(piece.chunks_mut(BLOCK * w)) {
                        block.push(chunk);
                    }
                }
                blocks.into_par_iter().enumerate().for_each(|(b, mut out)| {
                    for i in 0..out[0].len() {
                        let f = first + b * BLOCK + i;
                        let (sf, weight) = geometry.internal_area_and_weight(mesh, f);
                        let d = centres[neighbour[f] as usize] - centres[owner[f] as usize];
                        let face = FaceGeometry::internal_face_of(sf, d, sn_grad);
                        out[0][i] = weight;
                        out[1][i] = face.mag_sf;
                        out[2][i] = face.delta_coeff;
                        let mut next = 3;
                        for (on, v) in [(corrected, face.correction), (gauss, sf)] {
                            if on {
                                out[next][3 * i..3 * i + 3].copy_from_slice(&[v.x, v.y, v.z]);
                                next += 1;
                            }
                        }
                    }
                });
            })?
            .into_iter();
        let mut next = || arrays.next().expect("one array per width");
        let (weights, mag_sf, delta_coeffs) = (next(), next(), next());
        let k = corrected.then(&mut next);
        let sf = gauss.then(&mut next);
        Ok(Self {
            weights,
            mag_sf,
            delta_coeffs,
            k,
            sf,
        })
    }
}

/// The face geometry's |S_f|, Δ coefficient and, for corrected schemes,
/// correction vector of each device face, computed once per face where they
/// are read ([`FaceGeometry::internal_face`], the bits of the host's
/// arrays): the host never builds the face geometry's arrays of a device
/// run, and the three device arrays come from one computation per face.
struct FaceEntries<'a> {
    mesh: &'a Mesh,
    geometry: &'a Geometry,
    sn_grad: SnGradScheme,
    /// Device face d is internal face `index[d]`.
    index: &'a [u32],
}

impl FaceEntries<'_> {
    /// Doubles per face of each array: |S_f|, Δ coefficient and, where the
    /// scheme corrects, the correction vector.
    fn widths(&self) -> &'static [usize] {
        match self.sn_grad.is_corrected() {
            true => &[1, 1, 3],
            false => &[1, 1],
        }
    }

    /// Device faces `first..` of each array (as many as `pieces[0]` holds),
    /// in parallel.
    fn fill(&self, first: usize, pieces: &mut [&mut [f64]]) {
        let face = |d: usize| {
            let f = self.index[d] as usize;
            FaceGeometry::internal_face(self.mesh, self.geometry, self.sn_grad, f)
        };
        match pieces {
            [mag_sf, delta, k] => mag_sf
                .par_iter_mut()
                .zip(delta.par_iter_mut())
                .zip(k.par_chunks_mut(3))
                .enumerate()
                .for_each(|(i, ((mag_sf, delta), k))| {
                    let face = face(first + i);
                    (*mag_sf, *delta) = (face.mag_sf, face.delta_coeff);
                    let c = face.correction;
                    k.copy_from_slice(&[c.x, c.y, c.z]);
                }),
            [mag_sf, delta] => mag_sf
                .par_iter_mut()
                .zip(delta.par_iter_mut())
                .enumerate()
                .for_each(|(i, (mag_sf, delta))| {
                    let face = face(first + i);
                    (*mag_sf, *delta) = (face.mag_sf, face.delta_coeff);
                }),
            _ => unreachable!("the widths of FaceEntries::widths"),
        }
    }

    /// The arrays of `len` faces on the device (|S_f|, Δ coefficients,
    /// correction vectors where the scheme corrects), made and uploaded a
    /// piece of faces at a time; no faces give one zero each, never read.
    #[allow(clippy::type_complexity)]
    fn upload(
        &self,
        gpu: &Gpu,
        len: usize,
    ) -> Result<(CudaSlice<f64>, CudaSlice<f64>, Option<CudaSlice<f64>>), GpuError> {
        if len == 0 {
            return Ok((gpu.zeros(1)?, gpu.zeros(1)?, None));
        }
        let mut arrays = gpu
            .upload_units_with(len, self.widths(), |first, pieces| self.fill(first, pieces))?
            .into_iter();
        let (Some(mag_sf), Some(delta)) = (arrays.next(), arrays.next()) else {
            unreachable!("two arrays at least")
        };
        Ok((mag_sf, delta, arrays.next()))
    }

    /// The arrays whole in host memory (the correction vectors empty where
    /// the scheme does not correct).
    #[cfg(test)]
    fn to_vecs(&self, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut arrays: Vec<Vec<f64>> = self.widths().iter().map(|w| vec![0.0; n * w]).collect();
        self.fill(
            0,
            &mut arrays.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(),
        );
        let k = if arrays.len() == 3 {
            arrays.pop().unwrap()
        } else {
            Vec::new()
        };
        let delta = arrays.pop().unwrap();
        (arrays.pop().unwrap(), delta, k)
    }
}

/// Elements `start..start + piece.len()` of an array of vectors as 3
/// doubles each, `vector(i)` the i-th, into `piece` (which may start and end
/// inside a vector); the whole vectors made once each, in parallel, and a
/// vector cut by the piece's start or end made for its components there.
fn fill_vectors(start: usize, piece: &mut [f64], vector: impl Fn(usize) -> Vec3 + Sync) {
    let component = |v: Vec3, c: usize| [v.x, v.y, v.z][c];
    let lead = ((3 - start % 3) % 3).min(piece.len());
    let (head, rest) = piece.split_at_mut(lead);
    for (k, out) in head.iter_mut().enumerate() {
        let e = start + k;
        *out = component(vector(e / 3), e % 3);
    }
    let first = (start + lead) / 3;
    let whole = rest.len() / 3 * 3;
    let (body, tail) = rest.split_at_mut(whole);
    body.par_chunks_mut(3).enumerate().for_each(|(i, out)| {
        let v = vector(first + i);
        out.copy_from_slice(&[v.x, v.y, v.z]);
    });
    if !tail.is_empty() {
        let v = vector(first + whole / 3);
        for (c, out) in tail.iter_mut().enumerate() {
            *out = component(v, c);
        }
    }
}

impl<'a> StaticSource<'a> {
    fn new(
        system: &'a LaplacianSystem<'a>,
        faces: &'a [u32],
        boundary: &'a [u32],
        ordering: &'a Permutation,
    ) -> Self {
        Self {
            system,
            faces,
            boundary,
            ordering,
        }
    }

    /// Rows (new numbering) of `cells` (a cell per mesh face) per device
    /// face, gathered a piece at a time into the device.
    fn upload_rows(&self, gpu: &Gpu, cells: &[u32]) -> Result<CudaSlice<u32>, GpuError> {
        let (old_to_new, faces) = (self.ordering.old_to_new(), self.faces);
        if faces.is_empty() {
            return gpu.zeros(1);
        }
        gpu.upload_with(faces.len(), |start, piece: &mut [u32]| {
            let faces = &faces[start..start + piece.len()];
            piece
                .par_iter_mut()
                .zip(faces)
                .for_each(|(out, &f)| *out = old_to_new[cells[f as usize] as usize])
        })
    }

    /// Rows (new numbering) of `cells` per device face, on the host (the
    /// tests' copy of [`Self::upload_rows`]).
    #[cfg(test)]
    fn rows(&self, cells: &[u32]) -> Vec<u32> {
        let old_to_new = self.ordering.old_to_new();
        let row = |&f: &u32| old_to_new[cells[f as usize] as usize];
        self.faces.iter().map(row).collect()
    }

    #[cfg(test)]
    fn face_owner(&self) -> Vec<u32> {
        self.rows(self.system.mesh().owner())
    }

    #[cfg(test)]
    fn face_neighbour(&self) -> Vec<u32> {
        self.rows(self.system.mesh().neighbour())
    }

    /// Vectors per face as 3 doubles in the order of `index` (`offset`
    /// added to each), or nothing where the schemes do not read them.
    fn vectors(
        &self,
        used: bool,
        vectors: &'a [Vec3],
        index: &'a [u32],
        offset: usize,
    ) -> Gathered<'a> {
        match used {
            true => Gathered::Vectors(vectors, index, offset),
            false => Gathered::Unused,
        }
    }

    fn gauss(&self) -> bool {
        self.system.schemes().grad == GradScheme::GaussLinear
    }

    fn boundary_corrected(&self) -> bool {
        self.system.schemes().sn_grad == SnGradScheme::BoundaryCorrected
    }

    fn first_boundary_face(&self) -> usize {
        self.system.mesh().n_internal_faces()
    }

    fn weights(&self) -> Gathered<'a> {
        Gathered::Weights(self.system.mesh(), self.system.geometry(), self.faces)
    }

    fn face_entries(&self) -> FaceEntries<'a> {
        FaceEntries {
            mesh: self.system.mesh(),
            geometry: self.system.geometry(),
            sn_grad: self.system.schemes().sn_grad,
            index: self.faces,
        }
    }

    fn sf(&self) -> Gathered<'a> {
        self.area_vectors(self.faces, 0)
    }

    /// The area vectors of faces `index[i] + offset` where the gradient
    /// scheme (Gauss) reads them; else nothing.
    fn area_vectors(&self, index: &'a [u32], offset: usize) -> Gathered<'a> {
        match self.gauss() {
            true => {
                Gathered::AreaVectors(self.system.mesh(), self.system.geometry(), index, offset)
            }
            false => Gathered::Unused,
        }
    }

    fn b_mag_sf(&self) -> Gathered<'a> {
        let mag_sf = &self.system.boundary_face_geometry().mag_sf;
        Gathered::Values(mag_sf, self.boundary)
    }

    fn b_sf(&self) -> Gathered<'a> {
        self.area_vectors(self.boundary, self.first_boundary_face())
    }

    fn b_k(&self) -> Gathered<'a> {
        let k = &self
            .system
            .boundary_face_geometry()
            .patch_correction_vectors;
        self.vectors(self.boundary_corrected(), k, self.boundary, 0)
    }

    fn b_delta_coeffs(&self) -> Gathered<'a> {
        match self.boundary_corrected() {
            true => {
                let faces = self.system.boundary_face_geometry();
                Gathered::Values(&faces.patch_delta_coeffs, self.boundary)
            }
            false => Gathered::Unused,
        }
    }

    /// Cell volumes in row order.
    fn volumes(&self) -> Gathered<'a> {
        let volumes = &self.system.geometry().cell_volumes;
        Gathered::Values(volumes, self.ordering.new_to_old())
    }
}

/// Least-squares vectors in device order (empty for Gauss linear).
#[derive(Clone, Debug, Default)]
struct GradientArrays {
    ls_owner: Vec<f64>,
    ls_neighbour: Vec<f64>,
    b_ls: Vec<f64>,
}

impl GradientArrays {
    /// The vectors of `gradient` for device faces `faces` and device
    /// boundary faces `boundary` ([`AssemblyMap`] numbering).
    fn new(gradient: &CellGradient, faces: &[u32], boundary: &[u32]) -> Self {
        match gradient {
            CellGradient::GaussLinear => Self::default(),
            CellGradient::LeastSquares {
                owner,
                neighbour,
                boundary: on_boundary,
            } => Self {
                ls_owner: flatten(owner, faces, 0),
                ls_neighbour: flatten(neighbour, faces, 0),
                b_ls: flatten(on_boundary, boundary, 0),
            },
        }
    }
}

/// One problem's device arrays in host memory (cells in row order, boundary
/// faces in device boundary order).
#[derive(Clone, Debug)]
struct ProblemArrays {
    /// `None`: Γ is `gamma_uniform` everywhere.
    gamma: Option<Vec<f64>>,
    gamma_uniform: f64,
    source: Vec<f64>,
    b_gamma: Vec<f64>,
    b_value_internal: Vec<f64>,
    b_value_boundary: Vec<f64>,
    b_gradient_internal: Vec<f64>,
    b_gradient_boundary: Vec<f64>,
    /// Rebuilt least-squares vectors (boundaryCorrected least squares).
    gradient: Option<GradientArrays>,
}

impl ProblemArrays {
    /// The arrays of `values` for rows in `ordering` and `faces`, `boundary`
    /// numbered as the [`AssemblyMap`] numbers them.
    fn new(
        values: &ProblemValues,
        faces: &[u32],
        boundary: &[u32],
        ordering: &Permutation,
    ) -> Self {
        let on_boundary = |v: &[f64]| gather(v, boundary);
        Self {
            gamma: match values.uniform_gamma {
                Some(_) => None,
                None => Some(ordering.to_new(&values.gamma)),
            },
            gamma_uniform: values.uniform_gamma.unwrap_or(f64::NAN),
            source: ordering.to_new(&values.source),
            b_gamma: on_boundary(&values.gamma_boundary),
            b_value_internal: on_boundary(&values.bc.value_internal),
            b_value_boundary: on_boundary(&values.bc.value_boundary),
            b_gradient_internal: on_boundary(&values.bc.gradient_internal),
            b_gradient_boundary: on_boundary(&values.bc.gradient_boundary),
            gradient: values
                .gradient
                .as_ref()
                .map(|g| GradientArrays::new(g, faces, boundary)),
        }
    }
}

/// `LaplacianSystem::make_consistent`'s test of a right-hand side with sum
/// `sum` and absolute sum `scale` that is not projected.
fn check_consistency(sum: f64, scale: f64, policy: SingularPolicy) -> Result<(), AssemblyError> {
    if sum.abs() > policy.tolerance * scale {
        return Err(FvmError::InconsistentRhs {
            sum,
            scale,
            tolerance: policy.tolerance,
        }
        .into());
    }
    Ok(())
}

/// `v` on the device; an empty array becomes one zero (the driver refuses
/// zero-byte allocations), never read.
fn upload<T: HostElement + ValidAsZeroBits>(gpu: &Gpu, v: &[T]) -> Result<CudaSlice<T>, GpuError> {
    if v.is_empty() {
        gpu.zeros(1)
    } else {
        gpu.upload(v)
    }
}

/// `v` into `dev` (which [`upload`] sized).
fn write<T: DeviceRepr>(gpu: &Gpu, v: &[T], dev: &mut CudaSlice<T>) -> Result<(), GpuError> {
    if v.is_empty() {
        Ok(())
    } else {
        gpu.write(v, dev)
    }
}

/// `v` on the device when it is not empty.
fn upload_nonempty(gpu: &Gpu, v: &[f64]) -> Result<Option<CudaSlice<f64>>, GpuError> {
    (!v.is_empty()).then(|| gpu.upload(v)).transpose()
}

/// A host map's face codes, face slots, boundary pointers and pattern on
/// the device, and copies of its device faces and device boundary faces for
/// the host's gathers.
fn upload_map(
    gpu: &Gpu,
    map: &AssemblyMap,
) -> Result<(DeviceMap, DeviceModSell, Vec<u32>, Vec<u32>), GpuError> {
    Ok((
        DeviceMap {
            face_codes: upload(gpu, &map.face_codes)?,
            face_slots: upload(gpu, &map.face_slots)?,
            boundary_ptr: upload(gpu, &map.boundary_ptr)?,
        },
        DeviceModSell::upload(gpu, &map.pattern)?,
        map.device_faces.clone(),
        map.device_boundary.clone(),
    ))
}

/// Where a system's assembly map comes from.
enum MapSource<'m> {
    /// Built on the host ([`AssemblyMap::new`]) and lent.
    Host(&'m AssemblyMap),
    /// Built on the device ([`device_map::build`]).
    Device(Box<device_map::DeviceBuiltMap>),
}

/// The assembly map on the device.
struct DeviceMap {
    face_codes: CudaSlice<u32>,
    face_slots: CudaSlice<u8>,
    boundary_ptr: CudaSlice<u32>,
}

/// The fixed geometry on the device (see [`StaticSource`]).
struct DeviceGeometry {
    face_owner: CudaSlice<u32>,
    face_neighbour: CudaSlice<u32>,
    weights: CudaSlice<f64>,
    mag_sf: CudaSlice<f64>,
    delta_coeffs: CudaSlice<f64>,
    sf: Option<CudaSlice<f64>>,
    k: Option<CudaSlice<f64>>,
    b_mag_sf: CudaSlice<f64>,
    b_k: Option<CudaSlice<f64>>,
    b_delta_coeffs: Option<CudaSlice<f64>>,
    volumes: CudaSlice<f64>,
}

impl DeviceGeometry {
    /// Each array of `source` on the device, made and uploaded a piece at a
    /// time. The boundary faces' arrays are gathered in device order on the
    /// host ([`Gathered::upload`]). So are the internal faces' arrays and the
    /// cell volumes, unless the map's `addressing` is still on the device:
    /// then they go up in mesh order and are put into device order there
    /// ([`DeviceAddressing`]), so that the host copies and computes in face
    /// order, reading its arrays in sequence, where a gather into device
    /// order reads them at random (on a renumbered mesh, every face's cells
    /// far apart). The same values either way; the face geometry's three
    /// arrays are computed together ([`FaceEntries::upload`]).
    fn upload(
        gpu: &Gpu,
        source: &StaticSource,
        addressing: Option<&DeviceAddressing>,
    ) -> Result<Self, GpuError> {
        let (mesh, geometry) = (source.system.mesh(), source.system.geometry());
        let n_internal = source.faces.len();
        let (face_owner, face_neighbour, weights, (mag_sf, delta_coeffs, k), sf, volumes) =
            match addressing.filter(|_| n_internal > 0) {
                Some(addressing) => {
                    let in_device_order = |width: usize, in_face_order: CudaSlice<f64>| {
                        addressing.faces_in_device_order(gpu, width, &in_face_order)
                    };
                    let faces = InternalFaceArrays::upload(
                        gpu,
                        mesh,
                        geometry,
                        source.system.schemes().sn_grad,
                        source.gauss(),
                    )?;
                    let (mag_sf, delta_coeffs, k) = (faces.mag_sf, faces.delta_coeffs, faces.k);
                    let sf = faces.sf.map(|sf| in_device_order(3, sf)).transpose()?;
                    let weights = faces.weights;
                    let volumes = gpu.upload(&geometry.cell_volumes)?;
                    (
                        addressing.owner_rows(gpu)?,
                        addressing.neighbour_rows(gpu)?,
                        in_device_order(1, weights)?,
                        (
                            in_device_order(1, mag_sf)?,
                            in_device_order(1, delta_coeffs)?,
                            k.map(|k| in_device_order(3, k)).transpose()?,
                        ),
                        sf,
                        addressing.cells_in_row_order(gpu, &volumes)?,
                    )
                }
                None => (
                    source.upload_rows(gpu, mesh.owner())?,
                    source.upload_rows(gpu, mesh.neighbour())?,
                    source.weights().upload(gpu)?,
                    source.face_entries().upload(gpu, n_internal)?,
                    source.sf().upload_nonempty(gpu)?,
                    source.volumes().upload(gpu)?,
                ),
            };
        Ok(Self {
            face_owner,
            face_neighbour,
            weights,
            mag_sf,
            delta_coeffs,
            sf,
            k,
            b_mag_sf: source.b_mag_sf().upload(gpu)?,
            b_k: source.b_k().upload_nonempty(gpu)?,
            b_delta_coeffs: source.b_delta_coeffs().upload_nonempty(gpu)?,
            volumes,
        })
    }
}

/// The gradient scheme's vectors on the device: the least-squares vectors
/// (`None` for Gauss linear) and per device boundary face S_b (Gauss) or the
/// boundary least-squares vectors. Shared by the systems of one mesh unless
/// a problem brings its own (`boundaryCorrected` least squares).
struct DeviceGradient {
    ls_owner: Option<CudaSlice<f64>>,
    ls_neighbour: Option<CudaSlice<f64>>,
    b_vectors: CudaSlice<f64>,
}

impl DeviceGradient {
    /// Uploads the least-squares vectors of `ls` (empty for Gauss linear)
    /// and the boundary vectors `b_vectors`.
    fn upload(gpu: &Gpu, ls: &GradientArrays, b_vectors: &[f64]) -> Result<Self, GpuError> {
        Ok(Self {
            ls_owner: upload_nonempty(gpu, &ls.ls_owner)?,
            ls_neighbour: upload_nonempty(gpu, &ls.ls_neighbour)?,
            b_vectors: upload(gpu, b_vectors)?,
        })
    }
}

/// One problem's values on the device (see [`ProblemArrays`]).
struct DeviceValues {
    /// `None` while Γ is uniform.
    gamma: Option<CudaSlice<f64>>,
    gamma_uniform: f64,
    source: CudaSlice<f64>,
    b_gamma: CudaSlice<f64>,
    b_value_internal: CudaSlice<f64>,
    b_value_boundary: CudaSlice<f64>,
    b_gradient_internal: CudaSlice<f64>,
    b_gradient_boundary: CudaSlice<f64>,
}

/// Results and scratch of the kernels.
struct DeviceWork {
    coeffs: CudaSlice<f64>,
    /// Γ_f|S_f| and the correction flux (corrected schemes).
    gamma_mag_sf: Option<CudaSlice<f64>>,
    flux: Option<CudaSlice<f64>>,
    /// Γ_b|S_b| (boundaryCorrected).
    b_gamma_mag_sf: Option<CudaSlice<f64>>,
    /// Cell gradient, 3 doubles per row.
    grad: CudaSlice<f64>,
    explicit_rhs: CudaSlice<f64>,
    /// A PCG vector: solves take it as it is.
    rhs: GpuVector,
    reference_diag: CudaSlice<f64>,
    partials: CudaSlice<f64>,
    sums: CudaSlice<f64>,
}

/// The device arrays of a [`DeviceLaplacian`] ([`DeviceLaplacian::arrays`]):
/// the matrix, the assembly map (rows, faces in device order, boundary faces
/// in device boundary order), geometry, the boundary coefficients of the last
/// evaluation and the right-hand side of the last update.
pub struct LaplacianArrays<'a> {
    pub matrix: &'a DeviceModSell,
    pub face_codes: &'a CudaSlice<u32>,
    pub face_slots: &'a CudaSlice<u8>,
    pub boundary_ptr: &'a CudaSlice<u32>,
    pub face_owner: &'a CudaSlice<u32>,
    pub face_neighbour: &'a CudaSlice<u32>,
    pub weights: &'a CudaSlice<f64>,
    pub b_value_internal: &'a CudaSlice<f64>,
    pub b_value_boundary: &'a CudaSlice<f64>,
    /// snGrad's coefficients per device boundary face: gradientInternal,
    /// gradientBoundary.
    pub b_gradient_internal: &'a CudaSlice<f64>,
    pub b_gradient_boundary: &'a CudaSlice<f64>,
    pub volumes: &'a CudaSlice<f64>,
    pub rhs: &'a CudaSlice<f64>,
}

/// The matrix alone, or inside the PCG backend that solves with it. The
/// matrix may be shared ([`DeviceLaplacian::shared_matrix`]): a re-assembly
/// writes its values in place. The backend survives re-assemblies, with
/// its work vectors and captured CUDA graphs: a re-assembly takes a lent
/// preconditioner back from it (its owner re-sets it up) and marks it
/// `stale`, and the next solve refreshes its row sums and inverse diagonal
/// from the new values. One per device system, so the variants' sizes do
/// not matter.
#[allow(clippy::large_enum_variant)]
enum Held<'g> {
    Matrix(Rc<DeviceModSell>),
    Backend {
        backend: GpuCgBackend<'g>,
        preconditioner: BackendPreconditioner,
        check_interval: usize,
        stale: bool,
    },
}

/// The preconditioner a held PCG backend was built with.
#[derive(Clone, Copy, PartialEq)]
enum BackendPreconditioner {
    /// Jacobi (`true`) or none.
    Jacobi(bool),
    /// A lent one ([`DeviceLaplacian::preconditioned_solver`]), by address.
    Lent(*const ()),
}

/// The fixed part of a [`DeviceLaplacian`], shared by the systems of one
/// mesh and schemes.
struct SharedSetUp {
    ordering: Rc<Permutation>,
    schemes: Schemes,
    n_faces: usize,
    device_faces: Rc<Vec<u32>>,
    device_boundary: Rc<Vec<u32>>,
    n_mesh_boundary: usize,
    device_map: Rc<DeviceMap>,
    geometry: Rc<DeviceGeometry>,
    gradient: Rc<DeviceGradient>,
    total_volume: f64,
}

/// The Laplacian system assembled and kept on one GPU: the mod-SELL matrix
/// and the right-hand side in the row ordering, re-assembled and updated in
/// place (see the module documentation).
pub struct DeviceLaplacian<'g> {
    gpu: &'g Gpu,
    ordering: Rc<Permutation>,
    schemes: Schemes,
    n: usize,
    n_faces: usize,
    /// The map's face numbering: device face d is internal face
    /// `device_faces[d]`, device boundary face i boundary face `device_boundary[i]`.
    /// Shared with the systems of [`Self::sharing_set_up_of`], as are the
    /// ordering, the map and the geometry.
    device_faces: Rc<Vec<u32>>,
    device_boundary: Rc<Vec<u32>>,
    /// Boundary faces of the mesh, empty ones included.
    n_mesh_boundary: usize,
    /// `None` only after a device failure lost the matrix.
    held: Option<Held<'g>>,
    device_map: Rc<DeviceMap>,
    geometry: Rc<DeviceGeometry>,
    /// Shared until a problem brings gradient vectors of its own.
    gradient: Rc<DeviceGradient>,
    values: DeviceValues,
    work: DeviceWork,
    /// The conditions, time scheme and singular policy of the last assembly.
    bc: BoundaryCoeffs,
    time: TimeScheme,
    singular: Option<SingularPolicy>,
    /// ΣV in the CPU's order (the singular projection and the zero mean).
    total_volume: f64,
    /// [`Self::mesh_order`], once used.
    rows_of_cells: std::cell::OnceCell<CudaSlice<u32>>,
    /// The right-hand side's consistency sums (Σb, Σ|b|) of the last
    /// [`Self::update_rhs_deferred`], checked by
    /// [`Self::deferred_consistency`]; made at the first deferred update.
    consistency: Option<DeferredRead<f64>>,
}

impl<'g> DeviceLaplacian<'g> {
    /// Assembles `problem` on the device for the mesh and schemes of
    /// `system`, rows in reverse Cuthill–McKee order of its matrix, in
    /// mod-SELL slices of `slice_height` rows.
    pub fn new(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
        slice_height: usize,
    ) -> Result<Self, AssemblyError> {
        let ordering = reverse_cuthill_mckee(&system.matrix);
        Self::with_ordering(gpu, system, problem, ordering, slice_height)
    }

    /// [`Self::new`] with the rows in `ordering`.
    pub fn with_ordering(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
        ordering: Permutation,
        slice_height: usize,
    ) -> Result<Self, AssemblyError> {
        let values = Self::evaluated(system, problem)?;
        Self::with_ordering_evaluated(gpu, system, values, ordering, slice_height)
    }

    /// [`Self::with_ordering`] with its problem evaluated already (`values`
    /// as [`Self::with_map_evaluated`] takes them).
    pub fn with_ordering_evaluated(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        values: ProblemValues,
        ordering: Permutation,
        slice_height: usize,
    ) -> Result<Self, AssemblyError> {
        Self::check_supported(system)?;
        let map = crate::timings::span_synced(
            "assembly map and mod-SELL pattern built on the device",
            gpu,
            || device_map::build(gpu, system.mesh(), &ordering, slice_height),
        )?;
        Self::with_map_source(
            gpu,
            system,
            values,
            ordering,
            MapSource::Device(Box::new(map)),
        )
    }

    /// [`Self::with_ordering`] with its assembly map given: `map` is
    /// [`AssemblyMap::new`] of the mesh of `system` in
    /// `ordering` (the systems of one mesh share it, so a flow case builds
    /// it once for the pressure and the momentum components). Device faces
    /// are numbered as `map` numbers them.
    pub fn with_map(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
        ordering: Permutation,
        map: &AssemblyMap,
    ) -> Result<Self, AssemblyError> {
        let values = Self::evaluated(system, problem)?;
        Self::with_map_evaluated(gpu, system, values, ordering, map)
    }

    /// [`Self::with_map`] with its problem evaluated already: `values` of
    /// `system`'s mesh ([`LaplacianSystem::take_evaluated`] of a deferred
    /// system, which kept them from its check, so that the problem is not
    /// evaluated a second time). They are dropped once on the device.
    pub fn with_map_evaluated(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        values: ProblemValues,
        ordering: Permutation,
        map: &AssemblyMap,
    ) -> Result<Self, AssemblyError> {
        Self::with_map_source(gpu, system, values, ordering, MapSource::Host(map))
    }

    /// [`Self::with_map_evaluated`] with the map lent or built on the
    /// device.
    fn with_map_source(
        gpu: &'g Gpu,
        system: &LaplacianSystem,
        values: ProblemValues,
        ordering: Permutation,
        map: MapSource<'_>,
    ) -> Result<Self, AssemblyError> {
        let mesh = system.mesh();
        let n = mesh.n_cells();
        Self::check_supported(system)?;
        check_values_fit(&values, mesh)?;
        if let MapSource::Host(map) = &map {
            if map.pattern.n_rows() != n
                || ordering.len() != n
                || map.device_faces.len() != mesh.n_internal_faces()
            {
                return Err(GpuError::Invalid(format!(
                    "assembly map of {} rows and {} faces for a mesh of {n} cells and {} \
                     internal faces",
                    map.pattern.n_rows(),
                    map.device_faces.len(),
                    mesh.n_internal_faces()
                ))
                .into());
            }
        }
        let schemes = system.schemes();
        let uploaded = crate::timings::span_synced(
            "face and cell arrays gathered in device order and uploaded, the map and pattern \
             uploaded",
            gpu,
            || {
                let (device_map, matrix, faces, boundary, addressing) = match map {
                    MapSource::Host(map) => {
                        let (device_map, matrix, faces, boundary) = upload_map(gpu, map)?;
                        (device_map, matrix, faces, boundary, None)
                    }
                    MapSource::Device(built) => {
                        let built = *built;
                        (
                            built.map,
                            built.pattern,
                            built.device_faces,
                            built.device_boundary,
                            Some(built.addressing),
                        )
                    }
                };
                let source = StaticSource::new(system, &faces, &boundary, &ordering);
                let device_gradient = match schemes.grad {
                    GradScheme::GaussLinear => DeviceGradient::upload(
                        gpu,
                        &GradientArrays::default(),
                        &source.b_sf().to_vec(),
                    )?,
                    GradScheme::LeastSquares => {
                        let gradient =
                            GradientArrays::new(system.cell_gradient(), &faces, &boundary);
                        DeviceGradient::upload(gpu, &gradient, &gradient.b_ls)?
                    }
                };
                let geometry = DeviceGeometry::upload(gpu, &source, addressing.as_ref())?;
                drop(addressing);
                Ok::<_, GpuError>((
                    device_map,
                    geometry,
                    device_gradient,
                    matrix,
                    faces,
                    boundary,
                ))
            },
        );
        let (device_map, geometry, device_gradient, matrix, faces, boundary) = uploaded?;
        let set_up = SharedSetUp {
            ordering: Rc::new(ordering),
            schemes,
            n_faces: faces.len(),
            device_faces: Rc::new(faces),
            device_boundary: Rc::new(boundary),
            n_mesh_boundary: mesh.n_faces() - mesh.n_internal_faces(),
            device_map: Rc::new(device_map),
            geometry: Rc::new(geometry),
            gradient: Rc::new(device_gradient),
            total_volume: system.geometry().cell_volumes.iter().sum(),
        };
        Self::with_set_up(gpu, set_up, matrix, values)
    }

    /// The system of another problem on the same mesh and schemes as
    /// `other` (a flow case's momentum components next to its pressure):
    /// the row ordering, assembly map, face numbering and geometry on the
    /// device are `other`'s, shared rather than built and uploaded again;
    /// the matrix starts as a device copy of `other`'s (the pattern), then
    /// `problem` is assembled into it. `system` is the host system of
    /// `problem` on that mesh (its structure shared with `other`'s).
    pub fn sharing_set_up_of(
        other: &DeviceLaplacian<'g>,
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
    ) -> Result<Self, AssemblyError> {
        let values = Self::evaluated(system, problem)?;
        Self::sharing_set_up_evaluated(other, system, values)
    }

    /// [`Self::sharing_set_up_of`] with its problem evaluated already
    /// (`values` as [`Self::with_map_evaluated`] takes them).
    pub fn sharing_set_up_evaluated(
        other: &DeviceLaplacian<'g>,
        system: &LaplacianSystem,
        values: ProblemValues,
    ) -> Result<Self, AssemblyError> {
        Self::check_supported(system)?;
        let mesh = system.mesh();
        check_values_fit(&values, mesh)?;
        if mesh.n_cells() != other.n
            || mesh.n_internal_faces() != other.n_faces
            || mesh.n_faces() - mesh.n_internal_faces() != other.n_mesh_boundary
            || system.schemes() != other.schemes
        {
            return Err(GpuError::Invalid(
                "a device system sharing the set-up of another of another mesh or other schemes"
                    .into(),
            )
            .into());
        }
        let gpu = other.gpu;
        let set_up = SharedSetUp {
            ordering: Rc::clone(&other.ordering),
            schemes: other.schemes,
            n_faces: other.n_faces,
            device_faces: Rc::clone(&other.device_faces),
            device_boundary: Rc::clone(&other.device_boundary),
            n_mesh_boundary: other.n_mesh_boundary,
            device_map: Rc::clone(&other.device_map),
            geometry: Rc::clone(&other.geometry),
            gradient: Rc::clone(&other.gradient),
            total_volume: other.total_volume,
        };
        let matrix = other.matrix()?.device_copy(gpu)?;
        Self::with_set_up(gpu, set_up, matrix, values)
    }

    /// The system on `set_up` with `matrix` (of its pattern): the values and
    /// work buffers allocated, then `problem`'s values uploaded and assembled.
    fn with_set_up(
        gpu: &'g Gpu,
        set_up: SharedSetUp,
        matrix: DeviceModSell,
        problem: ProblemValues,
    ) -> Result<Self, AssemblyError> {
        let n = matrix.n;
        let n_faces = set_up.n_faces;
        let n_boundary = set_up.device_boundary.len();
        let corrected = set_up.schemes.sn_grad.is_corrected();
        let boundary_corrected = set_up.schemes.sn_grad == SnGradScheme::BoundaryCorrected;
        let optional = |on: bool, len: usize| on.then(|| gpu.zeros::<f64>(len)).transpose();
        let values = DeviceValues {
            gamma: None,
            gamma_uniform: f64::NAN,
            source: gpu.zeros(n)?,
            b_gamma: gpu.zeros(n_boundary)?,
            b_value_internal: gpu.zeros(n_boundary)?,
            b_value_boundary: gpu.zeros(n_boundary)?,
            b_gradient_internal: gpu.zeros(n_boundary)?,
            b_gradient_boundary: gpu.zeros(n_boundary)?,
        };
        let work = DeviceWork {
            coeffs: gpu.zeros(n_faces)?,
            gamma_mag_sf: optional(corrected, n_faces)?,
            flux: optional(corrected, n_faces)?,
            b_gamma_mag_sf: optional(boundary_corrected, n_boundary)?,
            grad: gpu.zeros(3 * n)?,
            explicit_rhs: gpu.zeros(n)?,
            rhs: GpuVector::from(gpu.zeros(n)?),
            reference_diag: gpu.zeros(1)?,
            partials: gpu.zeros(2 * vector_grid(n) as usize)?,
            sums: gpu.zeros(2)?,
        };
        let SharedSetUp {
            ordering,
            schemes,
            n_faces,
            device_faces,
            device_boundary,
            n_mesh_boundary,
            device_map,
            geometry,
            gradient,
            total_volume,
        } = set_up;
        let mut device = Self {
            gpu,
            ordering,
            schemes,
            n,
            n_faces,
            device_faces,
            device_boundary,
            n_mesh_boundary,
            held: Some(Held::Matrix(Rc::new(matrix))),
            device_map,
            geometry,
            gradient,
            values,
            work,
            bc: BoundaryCoeffs::default(),
            time: TimeScheme::SteadyState,
            singular: None,
            total_volume,
            consistency: None,
            rows_of_cells: std::cell::OnceCell::new(),
        };
        let _assembly = crate::timings::enter_synced(Phase::Assembly, gpu);
        device.assemble_values(problem)?;
        Ok(device)
    }

    /// Whether `other` shares this system's device set-up (map, geometry,
    /// face numbering: [`Self::sharing_set_up_of`]).
    pub fn shares_set_up_with(&self, other: &DeviceLaplacian) -> bool {
        Rc::ptr_eq(&self.device_map, &other.device_map)
            && Rc::ptr_eq(&self.geometry, &other.geometry)
            && Rc::ptr_eq(&self.device_faces, &other.device_faces)
    }

    /// `problem` evaluated for `system` (timed as assembly) once the device
    /// is known to assemble the system ([`Self::check_supported`] first: an
    /// unsupported mesh is refused before any evaluation).
    fn evaluated(
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
    ) -> Result<ProblemValues, AssemblyError> {
        Self::check_supported(system)?;
        Ok(crate::timings::timed(Phase::Assembly, || {
            system.evaluate(problem)
        })?)
    }

    /// `Unsupported` where the device assembly does not handle the system's mesh.
    fn check_supported(system: &LaplacianSystem) -> Result<(), AssemblyError> {
        let n = system.mesh().n_cells();
        if n >= i32::MAX as usize {
            return Err(AssemblyError::Unsupported(format!(
                "{n} cells; the device kernels index rows with 32-bit integers"
            )));
        }
        if system.n_regions() > 1 {
            // The device fixes one level for the whole matrix; the host fixes
            // one per singular region (`LaplacianSystem`).
            return Err(AssemblyError::Unsupported(format!(
                "the mesh has {} disconnected regions",
                system.n_regions()
            )));
        }
        Ok(())
    }

    /// Re-assembles for new physical data: evaluates and checks `problem` on
    /// the host as the CPU path does, uploads the values, assembles on the
    /// device. `system` is the one the device system was built from (or one
    /// on the same mesh with the same schemes).
    pub fn reassemble(
        &mut self,
        system: &LaplacianSystem,
        problem: &LaplacianProblem,
    ) -> Result<(), AssemblyError> {
        let _assembly = crate::timings::enter_synced(Phase::Assembly, self.gpu);
        let mesh = system.mesh();
        if mesh.n_cells() != self.n
            || mesh.n_internal_faces() != self.n_faces
            || system.schemes() != self.schemes
        {
            return Err(GpuError::Invalid(
                "re-assembly with a system of another mesh or other schemes than the device \
                 system was built from"
                    .into(),
            )
            .into());
        }
        let values = system.evaluate(problem)?;
        Ok(self.assemble_values(values)?)
    }

    /// Uploads `values` (then drops them) and assembles on the device.
    fn assemble_values(&mut self, values: ProblemValues) -> Result<(), GpuError> {
        crate::timings::span_synced("values to the device", self.gpu, || {
            self.upload_values(&values)
        })?;
        drop(values);
        crate::timings::span_synced("device assembly", self.gpu, || self.assemble())
    }

    /// Uploads one problem's values (the host part of a re-assembly); a
    /// uniform Γ (`values.uniform_gamma`) moves no Γ array.
    pub fn upload_values(&mut self, values: &ProblemValues) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let arrays = ProblemArrays::new(
            values,
            &self.device_faces,
            &self.device_boundary,
            &self.ordering,
        );
        let v = &mut self.values;
        match &arrays.gamma {
            None => v.gamma = None,
            Some(g) => {
                if let Some(dev) = v.gamma.as_mut() {
                    write(gpu, g, dev)?;
                } else {
                    v.gamma = Some(upload(gpu, g)?);
                }
            }
        }
        v.gamma_uniform = arrays.gamma_uniform;
        write(gpu, &arrays.source, &mut v.source)?;
        write(gpu, &arrays.b_gamma, &mut v.b_gamma)?;
        write(gpu, &arrays.b_value_internal, &mut v.b_value_internal)?;
        write(gpu, &arrays.b_value_boundary, &mut v.b_value_boundary)?;
        write(gpu, &arrays.b_gradient_internal, &mut v.b_gradient_internal)?;
        write(gpu, &arrays.b_gradient_boundary, &mut v.b_gradient_boundary)?;
        if let Some(g) = &arrays.gradient {
            match Rc::get_mut(&mut self.gradient) {
                Some(own) => {
                    for (host, dev) in [
                        (&g.ls_owner, &mut own.ls_owner),
                        (&g.ls_neighbour, &mut own.ls_neighbour),
                    ] {
                        if let Some(dev) = dev {
                            write(gpu, host, dev)?;
                        }
                    }
                    write(gpu, &g.b_ls, &mut own.b_vectors)?;
                }
                // Shared with other systems: this problem's vectors are its own.
                None => self.gradient = Rc::new(DeviceGradient::upload(gpu, g, &g.b_ls)?),
            }
        }
        self.bc = values.bc.clone();
        self.time = values.time;
        self.singular = values.singular;
        Ok(())
    }

    /// The device part of a (re)assembly: face coefficients, then matrix and
    /// explicit right-hand side from the values on the device.
    pub fn assemble(&mut self) -> Result<(), GpuError> {
        self.values_changing()?;
        let gpu = self.gpu;
        let (g, v, w) = (&self.geometry, &self.values, &self.work);
        let n_faces = self.n_faces as i32;
        let harmonic = i32::from(self.schemes.gamma_interpolation == GammaInterpolation::Harmonic);
        gpu.launch_vector("asm_face_coefficients", self.n_faces, |a| {
            a.arg(&n_faces).arg(&harmonic).arg(&v.gamma_uniform);
            arg_or_null(a, v.gamma.as_ref());
            a.arg(&g.face_owner)
                .arg(&g.face_neighbour)
                .arg(&g.weights)
                .arg(&g.mag_sf)
                .arg(&g.delta_coeffs)
                .arg(&w.coeffs);
            arg_or_null(a, w.gamma_mag_sf.as_ref());
        })?;
        let m = self.matrix()?;
        let dm = &self.device_map;
        let n = self.n as i32;
        let dt = match self.time {
            TimeScheme::Euler { dt } => dt,
            TimeScheme::SteadyState => 0.0,
        };
        let reference_row = self.reference().map_or(-1, |(row, _)| row as i32);
        let h = m.slice_height as u32;
        let rhs = w.rhs.dev()?;
        gpu.launch("asm_matrix_rows", m.n_slices() as u32, h, 0, |a| {
            a.arg(&n)
                .arg(&m.slice_ptr)
                .arg(&dm.face_codes)
                .arg(&dm.face_slots)
                .arg(&w.coeffs);
            a.arg(&dm.boundary_ptr)
                .arg(&v.b_gamma)
                .arg(&g.b_mag_sf)
                .arg(&v.b_gradient_internal)
                .arg(&v.b_gradient_boundary);
            arg_or_null(a, w.b_gamma_mag_sf.as_ref());
            a.arg(&g.volumes).arg(&v.source).arg(&dt);
            a.arg(&reference_row).arg(&w.reference_diag);
            a.arg(&m.values).arg(&m.diag).arg(&w.explicit_rhs).arg(rhs);
        })
    }

    /// The reference row and value when the last assembly pinned a cell.
    fn reference(&self) -> Option<(usize, f64)> {
        pinned_row(self.singular, &self.ordering)
    }

    /// Cell gradient of `p` (device, row order) into the gradient buffer.
    pub fn gradient(&self, p: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.check_vector(p, "field")?;
        let m = self.matrix()?;
        let (g, v, w, dm) = (&self.geometry, &self.values, &self.work, &self.device_map);
        let gradient = &self.gradient;
        let n = self.n as i32;
        let h = m.slice_height as u32;
        let gauss = i32::from(self.schemes.grad == GradScheme::GaussLinear);
        self.gpu
            .launch("asm_gradient", m.n_slices() as u32, h, h * 8, |a| {
                a.arg(&n)
                    .arg(&m.slice_ptr)
                    .arg(&m.codes)
                    .arg(&dm.face_codes)
                    .arg(&dm.face_slots)
                    .arg(&gauss)
                    .arg(&g.weights);
                arg_or_null(a, g.sf.as_ref());
                arg_or_null(a, gradient.ls_owner.as_ref());
                arg_or_null(a, gradient.ls_neighbour.as_ref());
                a.arg(&dm.boundary_ptr)
                    .arg(&v.b_value_internal)
                    .arg(&v.b_value_boundary)
                    .arg(&gradient.b_vectors)
                    .arg(&g.volumes)
                    .arg(p)
                    .arg(&w.grad);
            })
    }

    /// `LaplacianSystem::update_rhs` on the device: the right-hand side for
    /// the current field `p` and (Euler) the old-time field `old`, both in row
    /// order on the device.
    pub fn update_rhs(
        &mut self,
        p: &CudaSlice<f64>,
        old: Option<&CudaSlice<f64>>,
    ) -> Result<(), AssemblyError> {
        self.update_rhs_checked(p, old, false)
    }

    /// [`Self::update_rhs`] without waiting for the consistency check of a
    /// singular problem that does not project its right-hand side: the
    /// sums are copied behind the launches and checked by
    /// [`Self::deferred_consistency`], which the caller calls after the
    /// solve (whose residual read-backs drain the stream anyway). The
    /// right-hand side has the same bits; only the moment the error is
    /// reported moves: an inconsistent system is refused after its solve
    /// has run instead of before it. A time step's pressure equation uses
    /// it, so that the step waits only for residuals and logged numbers.
    pub fn update_rhs_deferred(
        &mut self,
        p: &CudaSlice<f64>,
        old: Option<&CudaSlice<f64>>,
    ) -> Result<(), AssemblyError> {
        self.update_rhs_checked(p, old, true)
    }

    /// The consistency check of the last [`Self::update_rhs_deferred`] if
    /// nobody made it yet: the error [`Self::update_rhs`] would have
    /// returned, or `Ok`. A second call is `Ok`.
    pub fn deferred_consistency(&self) -> Result<(), AssemblyError> {
        let (Some(read), Some(policy)) = (&self.consistency, self.singular) else {
            return Ok(());
        };
        match read.take()? {
            Some(sums) => check_consistency(sums[0], sums[1], policy),
            None => Ok(()),
        }
    }

    fn update_rhs_checked(
        &mut self,
        p: &CudaSlice<f64>,
        old: Option<&CudaSlice<f64>>,
        defer: bool,
    ) -> Result<(), AssemblyError> {
        self.check_vector(p, "field")?;
        let (dt, old) = match self.time {
            TimeScheme::Euler { dt } => {
                let old = old.ok_or_else(|| {
                    FvmError::invalid("the Euler time term needs the old-time field")
                })?;
                self.check_vector(old, "old-time field")?;
                (dt, Some(old))
            }
            TimeScheme::SteadyState => (0.0, None),
        };
        let gpu = self.gpu;
        let corrected = self.schemes.sn_grad.is_corrected();
        let (g, w) = (&self.geometry, &self.work);
        if corrected {
            self.gradient(p)?;
            let psi = match self.schemes.sn_grad {
                SnGradScheme::Limited(psi) => psi,
                _ => -1.0,
            };
            let n_faces = self.n_faces as i32;
            self.launch_faces("asm_correction_flux", &n_faces, |a| {
                a.arg(&g.weights);
                arg_or_null(a, g.k.as_ref());
                arg_or_null(a, w.gamma_mag_sf.as_ref());
                a.arg(&w.grad).arg(&psi).arg(&g.delta_coeffs).arg(p);
                arg_or_null(a, w.flux.as_ref());
            })?;
        }
        let m = self.matrix()?;
        let (v, dm) = (&self.values, &self.device_map);
        let n = self.n as i32;
        let h = m.slice_height as u32;
        let rhs = w.rhs.dev()?;
        gpu.launch("asm_rhs", m.n_slices() as u32, h, 0, |a| {
            a.arg(&n)
                .arg(&m.slice_ptr)
                .arg(&dm.face_codes)
                .arg(&dm.face_slots);
            arg_or_null(a, if corrected { w.flux.as_ref() } else { None });
            a.arg(&dm.boundary_ptr).arg(&v.b_gradient_internal);
            arg_or_null(a, g.b_delta_coeffs.as_ref());
            arg_or_null(a, w.b_gamma_mag_sf.as_ref());
            arg_or_null(a, g.b_k.as_ref());
            a.arg(&w.grad).arg(&g.volumes).arg(&dt);
            arg_or_null(a, old);
            a.arg(&w.explicit_rhs).arg(rhs);
        })?;
        if let Some(policy) = self.singular {
            if defer && !policy.project {
                self.queue_sums(rhs, None)?;
                let read = match self.consistency.take() {
                    Some(read) => read,
                    None => DeferredRead::new(gpu, 2)?,
                };
                let read = self.consistency.insert(read);
                read.start(gpu, &self.work.sums)?;
            } else {
                self.make_consistent(policy)?;
            }
            let w = &self.work;
            let rhs = w.rhs.dev()?;
            if let Some((row, value)) = self.reference() {
                let row = row as i32;
                gpu.launch("asm_add_reference", 1, 32, 0, |a| {
                    a.arg(&row).arg(&value).arg(&w.reference_diag).arg(rhs);
                })?;
            }
        }
        Ok(())
    }

    /// Σ x_i·y_i (y `None`: Σ x_i) and Σ|x_i| on the device (a fixed-order
    /// tree sum), read back.
    pub fn sums(
        &self,
        x: &CudaSlice<f64>,
        y: Option<&CudaSlice<f64>>,
    ) -> Result<[f64; 2], GpuError> {
        self.queue_sums(x, y)?;
        let sums = self.gpu.download(&self.work.sums)?;
        Ok([sums[0], sums[1]])
    }

    /// [`Self::sums`] into the work buffer `sums` on the device, not read.
    fn queue_sums(&self, x: &CudaSlice<f64>, y: Option<&CudaSlice<f64>>) -> Result<(), GpuError> {
        let w = &self.work;
        let n = self.n as i32;
        let grid = vector_grid(self.n);
        self.gpu
            .launch("asm_sum_partials", grid, VECTOR_BLOCK, 0, |a| {
                a.arg(&n).arg(x);
                arg_or_null(a, y);
                a.arg(&w.partials);
            })?;
        let (m, count) = (grid as i32, 2i32);
        self.gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
            a.arg(&m).arg(&count).arg(&w.partials).arg(&w.sums);
        })
    }

    /// x_i −= w_i·s (w `None`: x_i −= s).
    fn subtract(
        &self,
        weights: Option<&CudaSlice<f64>>,
        s: f64,
        x: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n = self.n as i32;
        self.gpu.launch_vector("asm_subtract", self.n, |a| {
            a.arg(&n);
            arg_or_null(a, weights);
            a.arg(&s).arg(x);
        })
    }

    /// `LaplacianSystem::make_consistent` on the device right-hand side.
    fn make_consistent(&self, policy: SingularPolicy) -> Result<(), AssemblyError> {
        let rhs = self.work.rhs.dev()?;
        let [sum, scale] = self.sums(rhs, None)?;
        if policy.project {
            let per_volume = sum / self.total_volume;
            self.subtract(Some(&self.geometry.volumes), per_volume, rhs)?;
            return Ok(());
        }
        check_consistency(sum, scale, policy)
    }

    /// Shifts `x` (device, row order) to zero volume-weighted mean, as the CPU
    /// loop does after each solve of a `ZeroMean` singular problem.
    pub fn shift_to_zero_mean(&self, x: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.check_vector(x, "field")?;
        let [weighted, _] = self.sums(x, Some(&self.geometry.volumes))?;
        self.subtract(None, weighted / self.total_volume, x)
    }

    /// Re-assembles with Γ and q per cell from the device (row order; Γ
    /// positive), as a host re-assembly with `CellField::PerCell` values
    /// would: Γ on a boundary face is its cell's, the boundary conditions,
    /// time scheme and singular policy of the last host evaluation stay.
    /// Nothing moves between host and device.
    pub fn reassemble_from_device(
        &mut self,
        gamma: &CudaSlice<f64>,
        source: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.check_vector(gamma, "gamma")?;
        self.check_vector(source, "source")?;
        let gpu = self.gpu;
        let v = &mut self.values;
        if v.gamma.is_none() {
            v.gamma = Some(gpu.zeros(self.n)?);
        }
        if let Some(dev) = v.gamma.as_mut() {
            gpu.copy(gamma, dev)?;
        }
        v.gamma_uniform = f64::NAN;
        gpu.copy(source, &mut v.source)?;
        let n = self.n as i32;
        let dm = &self.device_map;
        gpu.launch_vector("asm_boundary_gamma", self.n, |a| {
            a.arg(&n).arg(&dm.boundary_ptr).arg(gamma).arg(&v.b_gamma);
        })?;
        self.assemble()
    }

    /// A re-assembly with a new source q per cell (row order on the device)
    /// and the Γ, boundary conditions and time scheme of the last assembly:
    /// only the right-hand side changes. The matrix stays as it is, and so do
    /// a held solver's preconditioner and the graphs it captured; the
    /// right-hand side has the bits of a full re-assembly. PISO's correctors
    /// after the first of a time step re-assemble this way, since their rAU
    /// is the momentum equation's (Issa, 1986).
    pub fn reassemble_source_from_device(
        &mut self,
        source: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.check_vector(source, "source")?;
        let gpu = self.gpu;
        gpu.copy(source, &mut self.values.source)?;
        let (g, v, w, dm) = (&self.geometry, &self.values, &self.work, &self.device_map);
        let n = self.n as i32;
        let rhs = w.rhs.dev()?;
        gpu.launch_vector("asm_source_rhs", self.n, |a| {
            a.arg(&n)
                .arg(&dm.boundary_ptr)
                .arg(&v.b_gamma)
                .arg(&g.b_mag_sf)
                .arg(&v.b_gradient_boundary)
                .arg(&g.volumes)
                .arg(&v.source)
                .arg(&w.explicit_rhs)
                .arg(rhs);
        })
    }

    /// Values on the faces in the device's face layout: the internal faces
    /// in device order, then the non-empty boundary faces in device boundary
    /// order ([`AssemblyMap`]); this many.
    pub fn n_face_values(&self) -> usize {
        self.n_faces + self.device_boundary.len()
    }

    /// `phi` (one per mesh face) in the device face layout.
    pub fn to_device_faces(&self, phi: &[f64]) -> Result<Vec<f64>, GpuError> {
        let n_mesh = self.n_faces + self.n_mesh_boundary;
        if phi.len() != n_mesh {
            return Err(GpuError::Invalid(format!(
                "{} face values given for {n_mesh} faces",
                phi.len()
            )));
        }
        let boundary = &phi[self.n_faces..];
        Ok(gather(phi, &self.device_faces)
            .into_iter()
            .chain(gather(boundary, &self.device_boundary))
            .collect())
    }

    /// Device face values ([`Self::n_face_values`]) read back per mesh face
    /// (0 on empty faces).
    pub fn to_mesh_faces(&self, dev: &CudaSlice<f64>) -> Result<Vec<f64>, GpuError> {
        self.check_faces(dev)?;
        let values = self.gpu.download(dev)?;
        let mut phi = vec![0.0; self.n_faces + self.n_mesh_boundary];
        for (&f, &v) in self.device_faces.iter().zip(&values) {
            phi[f as usize] = v;
        }
        let boundary = &values[self.n_faces..];
        for (&b, &v) in self.device_boundary.iter().zip(boundary) {
            phi[self.n_faces + b as usize] = v;
        }
        Ok(phi)
    }

    fn check_faces(&self, v: &CudaSlice<f64>) -> Result<(), GpuError> {
        if v.len() != self.n_face_values() {
            return Err(GpuError::Invalid(format!(
                "{} face values on the device, the device face layout has {}",
                v.len(),
                self.n_face_values()
            )));
        }
        Ok(())
    }

    /// Σ_f φ_f out of every cell (row order) from face values in the device
    /// face layout: the row's internal faces in face order, then its
    /// boundary faces, as the CPU sums them.
    pub fn divergence(&self, phi: &CudaSlice<f64>, div: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.check_faces(phi)?;
        self.check_vector(div, "divergence")?;
        let m = self.matrix()?;
        let dm = &self.device_map;
        let (n, n_faces) = (self.n as i32, self.n_faces as i32);
        let h = m.slice_height as u32;
        self.gpu
            .launch("asm_divergence", m.n_slices() as u32, h, 0, |a| {
                a.arg(&n)
                    .arg(&m.slice_ptr)
                    .arg(&dm.face_codes)
                    .arg(&dm.face_slots)
                    .arg(&dm.boundary_ptr)
                    .arg(&n_faces)
                    .arg(phi)
                    .arg(div);
            })
    }

    /// φ = φ_pre − the equation's face flux for `p` (`fvMatrix::flux`): on
    /// internal faces Γ_f|S_f|Δ_f (p_N − p_P) and the non-orthogonal
    /// correction of the last [`Self::update_rhs`]; on boundary faces
    /// Γ_P|S_b| snGrad p with the cell's Γ (`gamma`, as assembled). Face
    /// values in the device face layout, cells in row order.
    pub fn subtract_flux(
        &self,
        p: &CudaSlice<f64>,
        gamma: &CudaSlice<f64>,
        phi_pre: &CudaSlice<f64>,
        phi: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.check_vector(p, "field")?;
        self.check_vector(gamma, "gamma")?;
        self.check_faces(phi_pre)?;
        self.check_faces(phi)?;
        let w = &self.work;
        let corrected = self.schemes.sn_grad.is_corrected();
        let n_faces = self.n_faces as i32;
        self.launch_faces("asm_subtract_flux", &n_faces, |a| {
            a.arg(&w.coeffs);
            arg_or_null(a, if corrected { w.flux.as_ref() } else { None });
            a.arg(p).arg(phi_pre).arg(phi);
        })?;
        self.boundary_flux(gamma, p, phi_pre, phi, true)
    }

    /// The device arrays of the assembly (read-only), for kernels that walk
    /// the same rows and faces (`gpu::simple`).
    pub fn arrays(&self) -> Result<LaplacianArrays<'_>, GpuError> {
        let (g, v, dm) = (&self.geometry, &self.values, &self.device_map);
        Ok(LaplacianArrays {
            matrix: self.matrix()?,
            face_codes: &dm.face_codes,
            face_slots: &dm.face_slots,
            boundary_ptr: &dm.boundary_ptr,
            face_owner: &g.face_owner,
            face_neighbour: &g.face_neighbour,
            weights: &g.weights,
            b_value_internal: &v.b_value_internal,
            b_value_boundary: &v.b_value_boundary,
            b_gradient_internal: &v.b_gradient_internal,
            b_gradient_boundary: &v.b_gradient_boundary,
            volumes: &g.volumes,
            rhs: self.work.rhs.dev()?,
        })
    }

    /// Device face d is internal face `device_faces()[d]`.
    pub fn device_faces(&self) -> &[u32] {
        &self.device_faces
    }

    /// Device boundary face i is boundary face `device_boundary()[i]` (index
    /// `face − n_internal_faces`).
    pub fn device_boundary(&self) -> &[u32] {
        &self.device_boundary
    }

    /// φ += the face flux of c_P|S_f| snGrad p with c linear to internal faces
    /// (SIMPLEC's (rAtU − rAU)_f|S_f| snGrad p): w c_o + (1 − w) c_n times
    /// |S_f| Δ_f (p_N − p_P) inside, c_P |S_b| (gradientInternal p_P +
    /// gradientBoundary) on boundary faces. Face values in the device face
    /// layout, cells in row order.
    pub fn add_gradient_flux(
        &self,
        p: &CudaSlice<f64>,
        c: &CudaSlice<f64>,
        phi: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.check_vector(p, "field")?;
        self.check_vector(c, "coefficient")?;
        self.check_faces(phi)?;
        let g = &self.geometry;
        let n_faces = self.n_faces as i32;
        self.launch_faces("asm_add_gradient_flux", &n_faces, |a| {
            a.arg(&g.weights).arg(&g.mag_sf).arg(&g.delta_coeffs);
            a.arg(c).arg(p).arg(phi);
        })?;
        self.boundary_flux(c, p, phi, phi, false)
    }

    /// Launches `kernel` with a thread per internal face (device order):
    /// the face count, the owners and neighbours, then the arguments `push`
    /// adds.
    fn launch_faces<'a>(
        &'a self,
        kernel: &'static str,
        n_faces: &'a i32,
        push: impl FnOnce(&mut crate::gpu::KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let g = &self.geometry;
        self.gpu.launch_vector(kernel, self.n_faces, |a| {
            a.arg(n_faces).arg(&g.face_owner).arg(&g.face_neighbour);
            push(a);
        })
    }

    /// The boundary faces' part of [`Self::subtract_flux`] (`subtract`:
    /// φ_b = base_b − c_P|S_b| snGrad p) and [`Self::add_gradient_flux`]
    /// (φ_b = base_b + c_P|S_b| snGrad p, base = φ).
    fn boundary_flux(
        &self,
        c: &CudaSlice<f64>,
        p: &CudaSlice<f64>,
        base: &CudaSlice<f64>,
        phi: &CudaSlice<f64>,
        subtract: bool,
    ) -> Result<(), GpuError> {
        let (g, v, dm) = (&self.geometry, &self.values, &self.device_map);
        let (n, n_faces, subtract) = (self.n as i32, self.n_faces as i32, subtract as i32);
        self.gpu.launch_vector("asm_boundary_flux", self.n, |a| {
            a.arg(&n)
                .arg(&dm.boundary_ptr)
                .arg(&n_faces)
                .arg(&g.b_mag_sf)
                .arg(&v.b_gradient_internal)
                .arg(&v.b_gradient_boundary)
                .arg(c)
                .arg(p)
                .arg(base)
                .arg(phi)
                .arg(&subtract);
        })
    }

    /// Cell volumes in row order.
    pub fn volumes(&self) -> &CudaSlice<f64> {
        &self.geometry.volumes
    }

    /// The gradient buffer ([`Self::gradient`]): 3 doubles per row.
    pub fn gradient_buffer(&self) -> &CudaSlice<f64> {
        &self.work.grad
    }

    /// ΣV in the CPU's order.
    pub fn total_volume(&self) -> f64 {
        self.total_volume
    }

    /// The row ordering (row r is cell `ordering().new_to_old()[r]`).
    pub fn ordering(&self) -> &Permutation {
        &self.ordering
    }

    /// Adds `values` (one per cell, mesh order) to the diagonal, as
    /// `Run::apply_implicit_source` adds an implicit source after assembly.
    pub fn add_to_diagonal(&mut self, values: &[f64]) -> Result<(), GpuError> {
        let add = self.to_device_order(values)?;
        self.values_changing()?;
        let m = self.matrix()?;
        let n = self.n as i32;
        self.gpu.launch_vector("asm_add_vector", self.n, |a| {
            a.arg(&n).arg(&add).arg(&m.diag);
        })
    }

    /// rhs += s∘x (an explicit source proportional to the field, added as
    /// the CPU run adds it to the right-hand side it solves with; all in row
    /// order on the device). The next `update_rhs` starts afresh.
    pub fn add_product_to_rhs(
        &self,
        s: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        for v in [s, x] {
            self.check_vector(v, "vector")?;
        }
        let n = self.n as i32;
        let rhs = self.work.rhs.dev()?;
        self.gpu.launch_vector("asm_add_product", self.n, |a| {
            a.arg(&n).arg(s).arg(x).arg(rhs);
        })
    }

    fn check_vector(&self, v: &CudaSlice<f64>, what: &str) -> Result<(), GpuError> {
        if v.len() != self.n {
            return Err(GpuError::Invalid(format!(
                "{what} has {} values on the device but the mesh has {} cells",
                v.len(),
                self.n
            )));
        }
        Ok(())
    }

    /// The assembled matrix (row order).
    pub fn matrix(&self) -> Result<&DeviceModSell, GpuError> {
        match &self.held {
            Some(Held::Matrix(m)) => Ok(m),
            Some(Held::Backend { backend, .. }) => Ok(backend.matrix()),
            None => Err(lost()),
        }
    }

    /// The assembled matrix, shared: each re-assembly overwrites its values
    /// in place (e.g. an AMG hierarchy built on it then updates its values,
    /// `DeviceAmg::update_values`).
    pub fn shared_matrix(&self) -> Result<Rc<DeviceModSell>, GpuError> {
        match &self.held {
            Some(Held::Matrix(m)) => Ok(Rc::clone(m)),
            Some(Held::Backend { backend, .. }) => Ok(backend.shared_matrix()),
            None => Err(lost()),
        }
    }

    /// Before the matrix's values change in place: a held PCG backend gives
    /// its lent preconditioner back and refreshes its values at the next
    /// solve.
    fn values_changing(&mut self) -> Result<(), GpuError> {
        match &mut self.held {
            Some(Held::Backend { backend, stale, .. }) => {
                drop(backend.take_preconditioner());
                *stale = true;
                Ok(())
            }
            Some(Held::Matrix(_)) => Ok(()),
            None => Err(lost()),
        }
    }

    /// A Jacobi (`jacobi`) or unpreconditioned PCG backend on the resident
    /// matrix, kept (and returned again) until the matrix changes, with the
    /// right-hand side to solve.
    pub fn solver(
        &mut self,
        jacobi: bool,
        options: &GpuSolveOptions,
    ) -> Result<(&GpuCgBackend<'g>, &GpuVector), GpuError> {
        self.held_or_new_solver(BackendPreconditioner::Jacobi(jacobi), None, options)
    }

    /// [`Self::solver`] preconditioned by `preconditioner` (built on this
    /// system's matrix, e.g. on [`Self::shared_matrix`], and brought up to
    /// date by its owner after each re-assembly): the backend lends it until
    /// the matrix changes or another preconditioner is asked for.
    pub fn preconditioned_solver<P: DevicePreconditioner + ?Sized + 'g>(
        &mut self,
        preconditioner: &Rc<P>,
        options: &GpuSolveOptions,
    ) -> Result<(&GpuCgBackend<'g>, &GpuVector), GpuError> {
        let lent = BackendPreconditioner::Lent(Rc::as_ptr(preconditioner) as *const ());
        let boxed: Box<dyn DevicePreconditioner + 'g> = Box::new(Rc::clone(preconditioner));
        self.held_or_new_solver(lent, Some(boxed), options)
    }

    fn held_or_new_solver(
        &mut self,
        preconditioner: BackendPreconditioner,
        lent: Option<Box<dyn DevicePreconditioner + 'g>>,
        options: &GpuSolveOptions,
    ) -> Result<(&GpuCgBackend<'g>, &GpuVector), GpuError> {
        let check_interval = options.check_interval;
        let matrix = match self.held.take() {
            Some(Held::Matrix(m)) => m,
            Some(Held::Backend {
                mut backend,
                preconditioner: p,
                check_interval: c,
                stale,
            }) => {
                if (p, c) == (preconditioner, check_interval) {
                    let refreshed = if stale {
                        backend.refresh_values()
                    } else {
                        Ok(())
                    };
                    if let Err(e) = refreshed {
                        self.held = Some(Held::Matrix(backend.shared_matrix()));
                        return Err(e);
                    }
                    // Lent again after a re-assembly took it back.
                    if let Some(lent) = lent {
                        if !backend.has_preconditioner() {
                            backend.set_preconditioner(lent);
                        }
                    }
                    self.held = Some(Held::Backend {
                        backend,
                        preconditioner,
                        check_interval,
                        stale: false,
                    });
                    return self.held_solver();
                }
                backend.shared_matrix()
            }
            None => return Err(lost()),
        };
        let jacobi = preconditioner == BackendPreconditioner::Jacobi(true);
        let built =
            GpuCgBackend::from_shared_resident(self.gpu, Rc::clone(&matrix), jacobi, options);
        let mut backend = match built {
            Ok(backend) => backend,
            Err(e) => {
                self.held = Some(Held::Matrix(matrix));
                return Err(e);
            }
        };
        if let Some(p) = lent {
            backend.set_preconditioner(p);
        }
        self.held = Some(Held::Backend {
            backend,
            preconditioner,
            check_interval,
            stale: false,
        });
        self.held_solver()
    }

    fn held_solver(&self) -> Result<(&GpuCgBackend<'g>, &GpuVector), GpuError> {
        match &self.held {
            Some(Held::Backend { backend, .. }) => Ok((backend, &self.work.rhs)),
            _ => Err(lost()),
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }
    /// Whether the matrix without reference is singular (all-Neumann steady problem).
    pub fn is_singular(&self) -> bool {
        self.singular.is_some()
    }
    pub fn singular_policy(&self) -> Option<SingularPolicy> {
        self.singular
    }
    /// The boundary coefficients of the last assembly (for boundary face values).
    pub fn boundary_coeffs(&self) -> &BoundaryCoeffs {
        &self.bc
    }

    /// `v` (one per cell, mesh order) on the device in row order.
    pub fn to_device_order(&self, v: &[f64]) -> Result<CudaSlice<f64>, GpuError> {
        if v.len() != self.n {
            return Err(GpuError::Invalid(format!(
                "{} values given for {} cells",
                v.len(),
                self.n
            )));
        }
        self.gpu.upload(&self.ordering.to_new(v))
    }

    /// A device vector (row order) read back in mesh order.
    pub fn to_mesh_order(&self, v: &CudaSlice<f64>) -> Result<Vec<f64>, GpuError> {
        let mut out = vec![0.0; self.n];
        self.to_mesh_order_into(v, &mut out)?;
        Ok(out)
    }

    /// [`Self::to_mesh_order`] into `out` (one value per cell), with no host
    /// copy in row order.
    pub fn to_mesh_order_into(&self, v: &CudaSlice<f64>, out: &mut [f64]) -> Result<(), GpuError> {
        self.check_vector(v, "vector")?;
        self.rows_into_mesh_order(1, v, out)
    }

    /// `width` values per row of `rows` into `out` in mesh order: put in
    /// mesh order on the device (device row r holds cell `new_to_old[r]`),
    /// then copied straight into `out`.
    fn rows_into_mesh_order(
        &self,
        width: usize,
        rows: &CudaSlice<f64>,
        out: &mut [f64],
    ) -> Result<(), GpuError> {
        let in_mesh_order = device_map::gather(self.gpu, self.n, width, self.mesh_order()?, rows)?;
        self.gpu.download_into(&in_mesh_order, out)
    }

    /// The row of each cell (the ordering's `old_to_new`) on the device,
    /// uploaded at its first use and kept: it puts row-ordered arrays in
    /// mesh order for the output.
    fn mesh_order(&self) -> Result<&CudaSlice<u32>, GpuError> {
        if let Some(rows) = self.rows_of_cells.get() {
            return Ok(rows);
        }
        let rows = self.gpu.upload(self.ordering.old_to_new())?;
        Ok(self.rows_of_cells.get_or_init(|| rows))
    }

    /// The assembled matrix read back as CSR in mesh order (for checks).
    pub fn download_matrix(&self) -> Result<Csr, GpuError> {
        let csr = self.matrix()?.download(self.gpu)?.to_csr();
        Ok(self.ordering.inverse().apply_symmetric(&csr))
    }

    /// The right-hand side in mesh order.
    pub fn download_rhs(&self) -> Result<Vec<f64>, GpuError> {
        self.to_mesh_order(self.work.rhs.dev()?)
    }

    /// The explicit right-hand side (q·V and boundary terms) in mesh order.
    pub fn download_explicit_rhs(&self) -> Result<Vec<f64>, GpuError> {
        self.to_mesh_order(&self.work.explicit_rhs)
    }

    /// The gradient last computed ([`Self::gradient`], or by `update_rhs` of
    /// a corrected scheme) in mesh order.
    pub fn download_gradient(&self) -> Result<Vec<Vec3>, GpuError> {
        // Straight into the host's vectors: no second host copy.
        let mut gradient = vec![Vec3::zeros(); self.n];
        self.rows_into_mesh_order(3, &self.work.grad, bytemuck::cast_slice_mut(&mut gradient))?;
        Ok(gradient)
    }
}

fn lost() -> GpuError {
    GpuError::Invalid("the device matrix was lost in an earlier device failure".into())
}

/// The device row and value of the cell that `singular` pins (rows in
/// `ordering`), if it pins one.
fn pinned_row(singular: Option<SingularPolicy>, ordering: &Permutation) -> Option<(usize, f64)> {
    match singular {
        Some(SingularPolicy {
            reference: Reference::Cell { cell, value },
            ..
        }) => Some((ordering.old_to_new()[cell] as usize, value)),
        _ => None,
    }
}

mod device_map;

#[cfg(test)]
mod tests;
