//! The [`AssemblyMap`] built on the device (kernels/assembly_map.cu): the
//! same arrays as [`AssemblyMap::new`], made where they are read. The host
//! uploads the owner–neighbour addressing and the ordering (about 12 bytes
//! per internal face and 8 per cell) instead of building the map, about
//! 90 bytes per cell of face codes, slots and pattern codes and a cell–face
//! list, and sending it over the bus; what comes back is the device face
//! and boundary face numbering (4 bytes per face) that the host's gathers
//! of the face arrays read.

use cudarc::driver::CudaSlice;
use rayon::prelude::*;

use super::{check_map_sizes, upload, AssemblyError, AssemblyMap, DeviceMap, NO_SLOT};
use crate::gpu::matrix::DeviceModSell;
use crate::gpu::scan::{read_at, unzeroed, Scan};
use crate::gpu::{Gpu, GpuError};
use crate::mesh::{Mesh, PatchKind};
use crate::sparse::{ModSell, Permutation};

/// `rows` of a boundary face of an empty patch (kernels/assembly_map.cu).
const INACTIVE: u32 = u32::MAX;
/// The read-back value of a flag no row set.
const NO_ROW: u32 = u32::MAX;

/// The map as the device set-up keeps it: its arrays and the pattern on the
/// device, the face numbering on the host for the gathers.
pub(in crate::gpu) struct DeviceBuiltMap {
    pub map: DeviceMap,
    pub pattern: DeviceModSell,
    /// Device face d is internal face `device_faces[d]`.
    pub device_faces: Vec<u32>,
    /// Device boundary face i is boundary face `device_boundary[i]`.
    pub device_boundary: Vec<u32>,
    /// What the map was built from, for the set-up's gathers on the device.
    pub addressing: DeviceAddressing,
}

/// The addressing a device map was built from, kept on the device while the
/// set-up gathers the face and cell arrays into device order there: the host
/// uploads those arrays in mesh order (sequential copies, no gather), the
/// device reads them at random.
pub(in crate::gpu) struct DeviceAddressing {
    /// Owner and neighbour of each internal face, in face order.
    owner: CudaSlice<u32>,
    neighbour: CudaSlice<u32>,
    old_to_new: CudaSlice<u32>,
    new_to_old: CudaSlice<u32>,
    /// Device face d is internal face `faces[d]`.
    faces: CudaSlice<u32>,
    n_faces: usize,
    n_cells: usize,
}

impl DeviceAddressing {
    /// The row of each device face's owner.
    pub fn owner_rows(&self, gpu: &Gpu) -> Result<CudaSlice<u32>, GpuError> {
        self.rows(gpu, &self.owner)
    }

    /// The row of each device face's neighbour.
    pub fn neighbour_rows(&self, gpu: &Gpu) -> Result<CudaSlice<u32>, GpuError> {
        self.rows(gpu, &self.neighbour)
    }

    fn rows(&self, gpu: &Gpu, cells: &CudaSlice<u32>) -> Result<CudaSlice<u32>, GpuError> {
        let rows = unzeroed::<u32>(gpu, self.n_faces)?;
        let n = self.n_faces as i32;
        gpu.launch_vector("amap_gather_rows", self.n_faces, |a| {
            a.arg(&n)
                .arg(&self.faces)
                .arg(cells)
                .arg(&self.old_to_new)
                .arg(&rows);
        })?;
        Ok(rows)
    }

    /// An array of `width` doubles per internal face, given in face order,
    /// in device face order.
    pub fn faces_in_device_order(
        &self,
        gpu: &Gpu,
        width: usize,
        in_face_order: &CudaSlice<f64>,
    ) -> Result<CudaSlice<f64>, GpuError> {
        gather(gpu, self.n_faces, width, &self.faces, in_face_order)
    }

    /// An array of one double per cell, given in cell order, in row order.
    pub fn cells_in_row_order(
        &self,
        gpu: &Gpu,
        in_cell_order: &CudaSlice<f64>,
    ) -> Result<CudaSlice<f64>, GpuError> {
        gather(gpu, self.n_cells, 1, &self.new_to_old, in_cell_order)
    }
}

/// `dst[i·width + c] = src[index[i]·width + c]` for `i < n` on the device.
pub(super) fn gather(
    gpu: &Gpu,
    n: usize,
    width: usize,
    index: &CudaSlice<u32>,
    src: &CudaSlice<f64>,
) -> Result<CudaSlice<f64>, GpuError> {
    let dst = unzeroed::<f64>(gpu, n * width)?;
    let (n32, width32) = (n as i32, width as i32);
    gpu.launch_vector("amap_gather_f64", n * width, |a| {
        a.arg(&n32).arg(&width32).arg(index).arg(src).arg(&dst);
    })?;
    Ok(dst)
}

/// [`AssemblyMap::new`] of `mesh` in `ordering`, slices of `slice_height`
/// rows, built on the device: the same arrays, the same refusals.
pub(in crate::gpu) fn build(
    gpu: &Gpu,
    mesh: &Mesh,
    ordering: &Permutation,
    slice_height: usize,
) -> Result<DeviceBuiltMap, AssemblyError> {
    check_map_sizes(mesh, ordering, slice_height)?;
    let n = mesh.n_cells();
    let h = slice_height;
    let n_internal = mesh.n_internal_faces();
    let n_boundary = mesh.n_faces() - n_internal;
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let (new_to_old, old_to_new) = (ordering.new_to_old(), ordering.old_to_new());
    let (n32, h32, nf32) = (n as i32, h as i32, n_internal as i32);
    // Empty arrays (no internal or no boundary faces) go up as one unread
    // zero: the driver refuses zero-byte allocations.
    let d_owner = upload(gpu, &owner[..n_internal])?;
    let d_neighbour = upload(gpu, neighbour)?;
    let d_old_to_new = upload(gpu, old_to_new)?;
    let d_new_to_old = upload(gpu, new_to_old)?;
    let scan = Scan::new(gpu, n)?;

    // Each row's internal faces, ascending: counted, placed, sorted.
    let count = gpu.zeros::<u32>(n)?;
    gpu.launch_vector("amap_count_faces", n_internal, |a| {
        a.arg(&nf32)
            .arg(&d_owner)
            .arg(&d_neighbour)
            .arg(&d_old_to_new)
            .arg(&count);
    })?;
    let row_ptr = unzeroed::<u64>(gpu, n + 1)?;
    scan.launch(gpu, &count, n, &row_ptr)?;
    let fill = gpu.zeros::<u32>(n)?;
    let row_faces = unzeroed::<u32>(gpu, 2 * n_internal)?;
    gpu.launch_vector("amap_place_faces", n_internal, |a| {
        a.arg(&nf32)
            .arg(&d_owner)
            .arg(&d_neighbour)
            .arg(&d_old_to_new)
            .arg(&row_ptr)
            .arg(&fill)
            .arg(&row_faces);
    })?;
    drop(fill);

    // Slice widths; a row too long for a slot code is refused before the
    // rows are read.
    let n_slices = n.div_ceil(h);
    let widths = unzeroed::<u32>(gpu, n_slices)?;
    let first_long = gpu.upload(&[NO_ROW])?;
    gpu.launch_vector("amap_slice_widths", n_slices, |a| {
        a.arg(&n32)
            .arg(&h32)
            .arg(&count)
            .arg(&widths)
            .arg(&first_long);
    })?;
    let long_row = read_at(gpu, &first_long, 0)?;
    if long_row != NO_ROW {
        let faces = read_at(gpu, &count, long_row as usize)?;
        return Err(AssemblyError::Unsupported(format!(
            "cell {} has {faces} neighbours; the device assembly handles up to {NO_SLOT}",
            new_to_old[long_row as usize]
        )));
    }
    gpu.launch_vector("amap_sort_lists", n, |a| {
        a.arg(&n32).arg(&row_ptr).arg(&row_faces);
    })?;
    let widths = gpu.download_prefix(&widths, n_slices)?;
    let mut slice_ptr = Vec::with_capacity(n_slices + 1);
    slice_ptr.push(0u64);
    for (s, &width) in widths.iter().enumerate() {
        slice_ptr.push(slice_ptr[s] + u64::from(width) * h as u64);
    }
    let slots = *slice_ptr.last().expect("one pointer at least") as usize;
    let d_slice_ptr = gpu.upload(&slice_ptr)?;

    // Codes, slots and the pattern per row (the rows past the last cell of
    // the last slice included, as padding); the faces each row meets first.
    let face_codes = unzeroed::<u32>(gpu, slots)?;
    let face_slots = unzeroed::<u8>(gpu, slots)?;
    let pattern_codes = unzeroed::<i32>(gpu, slots)?;
    let first_met = unzeroed::<u32>(gpu, n)?;
    let bad_row = gpu.upload(&[NO_ROW])?;
    gpu.launch_vector("amap_rows", n_slices * h, |a| {
        a.arg(&n32)
            .arg(&h32)
            .arg(&d_slice_ptr)
            .arg(&row_ptr)
            .arg(&row_faces)
            .arg(&d_owner)
            .arg(&d_neighbour)
            .arg(&d_new_to_old)
            .arg(&d_old_to_new)
            .arg(&face_codes)
            .arg(&face_slots)
            .arg(&pattern_codes)
            .arg(&first_met)
            .arg(&bad_row);
    })?;
    drop(row_faces);
    let bad = read_at(gpu, &bad_row, 0)?;
    if bad != NO_ROW {
        return Err(shared_faces_error(mesh, new_to_old[bad as usize]).into());
    }

    // Device faces numbered in the order the rows first meet them.
    let face_start = unzeroed::<u64>(gpu, n + 1)?;
    scan.launch(gpu, &first_met, n, &face_start)?;
    let device_faces = unzeroed::<u32>(gpu, n_internal)?;
    let device_id = unzeroed::<u32>(gpu, n_internal)?;
    gpu.launch_vector("amap_number_faces", n, |a| {
        a.arg(&n32)
            .arg(&h32)
            .arg(&d_slice_ptr)
            .arg(&row_ptr)
            .arg(&face_start)
            .arg(&face_codes)
            .arg(&device_faces)
            .arg(&device_id);
    })?;
    gpu.launch_vector("amap_other_sides", n, |a| {
        a.arg(&n32)
            .arg(&h32)
            .arg(&d_slice_ptr)
            .arg(&row_ptr)
            .arg(&device_id)
            .arg(&face_codes);
    })?;
    drop((first_met, face_start, device_id, row_ptr));

    // Active boundary faces per row, ascending.
    let mut active_rows = vec![0u32; n_boundary];
    active_rows
        .par_iter_mut()
        .enumerate()
        .for_each(|(b, row)| *row = old_to_new[owner[n_internal + b] as usize]);
    for patch in mesh.patches().iter().filter(|p| p.kind == PatchKind::Empty) {
        active_rows[patch.boundary_faces(n_internal)].fill(INACTIVE);
    }
    let nb32 = n_boundary as i32;
    let d_rows = upload(gpu, &active_rows)?;
    drop(active_rows);
    drop(count);
    let boundary_count = gpu.zeros::<u32>(n)?;
    gpu.launch_vector("amap_count_boundary", n_boundary, |a| {
        a.arg(&nb32).arg(&d_rows).arg(&boundary_count);
    })?;
    let boundary_ptr64 = unzeroed::<u64>(gpu, n + 1)?;
    let n_active = scan.run(gpu, &boundary_count, n, &boundary_ptr64)? as usize;
    let device_boundary = unzeroed::<u32>(gpu, n_active)?;
    let boundary_fill = gpu.zeros::<u32>(n)?;
    gpu.launch_vector("amap_place_boundary", n_boundary, |a| {
        a.arg(&nb32)
            .arg(&d_rows)
            .arg(&boundary_ptr64)
            .arg(&boundary_fill)
            .arg(&device_boundary);
    })?;
    gpu.launch_vector("amap_sort_lists", n, |a| {
        a.arg(&n32).arg(&boundary_ptr64).arg(&device_boundary);
    })?;
    let boundary_ptr = unzeroed::<u32>(gpu, n + 1)?;
    let n_ptr = (n + 1) as i32;
    gpu.launch_vector("amap_narrow", n + 1, |a| {
        a.arg(&n_ptr).arg(&boundary_ptr64).arg(&boundary_ptr);
    })?;

    let host_faces = gpu.download_prefix(&device_faces, n_internal)?;
    let device_boundary = gpu.download_prefix(&device_boundary, n_active)?;
    let pattern = DeviceModSell {
        n,
        slice_height: h,
        slice_ptr: d_slice_ptr,
        codes: pattern_codes,
        values: gpu.zeros(slots)?,
        diag: gpu.zeros(n)?,
    };
    Ok(DeviceBuiltMap {
        map: DeviceMap {
            face_codes,
            face_slots,
            boundary_ptr,
        },
        pattern,
        device_faces: host_faces,
        device_boundary,
        addressing: DeviceAddressing {
            owner: d_owner,
            neighbour: d_neighbour,
            old_to_new: d_old_to_new,
            new_to_old: d_new_to_old,
            faces: device_faces,
            n_faces: n_internal,
            n_cells: n,
        },
    })
}

/// The refusal of a cell that shares two faces with one cell, or has a face
/// to itself, as [`AssemblyMap::new`] words it (found on the host: only a
/// mesh that `Mesh::new` would refuse gets here).
fn shared_faces_error(mesh: &Mesh, cell: u32) -> GpuError {
    let n_internal = mesh.n_internal_faces();
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let mut others: Vec<u32> = (0..n_internal)
        .into_par_iter()
        .filter_map(|f| match (owner[f] == cell, neighbour[f] == cell) {
            (true, true) => Some(cell),
            (true, false) => Some(neighbour[f]),
            (false, true) => Some(owner[f]),
            (false, false) => None,
        })
        .collect();
    others.sort_unstable();
    let other = others
        .windows(2)
        .find(|w| w[0] == w[1])
        .map(|w| w[0])
        .or_else(|| others.iter().copied().find(|&o| o == cell))
        .unwrap_or(cell);
    GpuError::Invalid(format!(
        "assembly map: cells {cell} and {other} share more than one face, or a face joins a \
         cell to itself"
    ))
}

impl AssemblyMap {
    /// [`AssemblyMap::new`] built on the device and read back whole: what
    /// the tests compare with the host's construction.
    pub fn built_on_device(
        gpu: &Gpu,
        mesh: &Mesh,
        ordering: &Permutation,
        slice_height: usize,
    ) -> Result<Self, AssemblyError> {
        let built = build(gpu, mesh, ordering, slice_height)?;
        let slice_ptr = gpu.download(&built.pattern.slice_ptr)?;
        let slots = *slice_ptr.last().expect("one pointer at least") as usize;
        let pattern = ModSell::from_parts(
            slice_height,
            gpu.download(&built.pattern.diag)?,
            slice_ptr,
            gpu.download_prefix(&built.pattern.codes, slots)?,
            gpu.download_prefix(&built.pattern.values, slots)?,
        )
        .map_err(GpuError::Invalid)?;
        let face_codes = gpu.download_prefix(&built.map.face_codes, slots)?;
        let face_slots = gpu.download_prefix(&built.map.face_slots, slots)?;
        Ok(Self {
            pattern,
            face_codes,
            face_slots,
            device_faces: built.device_faces,
            boundary_ptr: gpu.download(&built.map.boundary_ptr)?,
            device_boundary: built.device_boundary,
        })
    }
}
