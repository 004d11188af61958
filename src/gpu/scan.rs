//! Exclusive prefix sums of counts on the device (kernels/scan.cu), and the
//! small buffer helpers the device set-ups share: a buffer left unzeroed
//! for kernels that write all of it, one element read back.

use std::mem::size_of;

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

use super::{driver, Gpu, GpuError};

/// Threads and elements per thread of the scan kernels (kernels/scan.cu
/// SCAN_BLOCK, SCAN_ITEMS).
const SCAN_BLOCK: u32 = 256;
const SCAN_TILE: usize = SCAN_BLOCK as usize * 8;
/// Threads of the one-block scan of the tile sums.
const SCAN_OFFSETS_BLOCK: u32 = 1024;

/// Element `index` of a device buffer (a synchronising read: set-up only).
pub(super) fn read_at<T: DeviceRepr + Default + Copy>(
    gpu: &Gpu,
    buffer: &CudaSlice<T>,
    index: usize,
) -> Result<T, GpuError> {
    let v = driver(
        "cuMemcpyDtoH",
        gpu.stream().clone_dtoh(&buffer.slice(index..index + 1)),
    )?;
    Ok(v.first().copied().unwrap_or_default())
}

/// A buffer of `n` elements as the memory pool hands it out, not zeroed
/// (`Gpu::zeros` adds a memset): for set-up arrays whose kernels write every
/// element before anything reads one (plain integers and floats, for which
/// any bits are a value).
pub(super) fn unzeroed<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    n: usize,
) -> Result<CudaSlice<T>, GpuError> {
    // SAFETY: device memory, never read on the host before a kernel has
    // written it (each caller's kernels write all of it, see their comments);
    // `T: ValidAsZeroBits` limits it to the plain types of the set-up.
    let r = unsafe { gpu.stream().alloc::<T>(n.max(1)) };
    gpu.allocation("cuMemAllocAsync", n.max(1) * size_of::<T>(), r)
}

/// Exclusive prefix sums of unsigned counts on the device (`scan_*`):
/// per tile sums, one block scanning them, then each tile's offsets.
/// Integer sums, so the result does not depend on the launch shape.
pub(super) struct Scan {
    tile_sums: CudaSlice<u64>,
}

impl Scan {
    /// Room for scans of up to `n` counts.
    pub(super) fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        Ok(Self {
            tile_sums: gpu.zeros(n.div_ceil(SCAN_TILE))?,
        })
    }

    /// offsets[0..=n] = exclusive prefix sums of counts[0..n]; returns the
    /// total offsets[n] (read back).
    pub(super) fn run(
        &self,
        gpu: &Gpu,
        counts: &CudaSlice<u32>,
        n: usize,
        offsets: &CudaSlice<u64>,
    ) -> Result<u64, GpuError> {
        self.launch(gpu, counts, n, offsets)?;
        read_at(gpu, offsets, n)
    }

    /// [`Self::run`] without reading the total back (`offsets[n]` holds
    /// it once the scan has run).
    pub(super) fn launch(
        &self,
        gpu: &Gpu,
        counts: &CudaSlice<u32>,
        n: usize,
        offsets: &CudaSlice<u64>,
    ) -> Result<(), GpuError> {
        let tiles = n.div_ceil(SCAN_TILE);
        if tiles > self.tile_sums.len() || offsets.len() < n + 1 || counts.len() < n {
            return Err(GpuError::Invalid(format!(
                "scan of {n} counts: buffers too small (tiles {}, offsets {}, counts {})",
                self.tile_sums.len(),
                offsets.len(),
                counts.len()
            )));
        }
        let (n32, tiles32) = (n as i32, tiles as i32);
        if tiles <= 1 {
            return gpu.launch("scan_single", 1, SCAN_BLOCK, 0, |a| {
                a.arg(&n32).arg(counts).arg(offsets);
            });
        }
        gpu.launch("scan_tiles", tiles as u32, SCAN_BLOCK, 0, |a| {
            a.arg(&n32).arg(counts).arg(&self.tile_sums);
        })?;
        gpu.launch("scan_tile_offsets", 1, SCAN_OFFSETS_BLOCK, 0, |a| {
            a.arg(&tiles32).arg(&self.tile_sums).arg(&n32).arg(offsets);
        })?;
        gpu.launch("scan_apply", tiles as u32, SCAN_BLOCK, 0, |a| {
            a.arg(&n32).arg(counts).arg(&self.tile_sums).arg(offsets);
        })
    }
}
