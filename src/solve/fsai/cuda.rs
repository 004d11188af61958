//! FSAI on the GPU: the application z = Gᵀ (G r) inside PCG's fused loop
//! (`kernels/fsai_apply.cu`), with G and Gᵀ both stored as CSR
//! ([`DeviceCsr`]). The setup runs where [`FsaiSetupPlace`] says: on the host
//! (the CPU reference `solve::fsai::fsai_setup`, then an upload), or on the
//! device (`gpu::fsai_setup`, which hands over G and Gᵀ through
//! [`DeviceFsai::from_device`]).
//!
//! Each product is one thread per row summing in stored column order with
//! `__dmul_rn`/`__dadd_rn`, the order of `Csr::spmv`, so the device
//! application equals the CPU's bit for bit for the same G, from CSR or from
//! 32-row slices ([`FsaiStorage`]; `bench --fsai` measures both).

use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::amg::DeviceCsr;
use super::fsai_setup::{fsai_setup_gpu, fsai_setup_gpu_resident, FsaiSetupStats};
use super::matrix::DeviceModSell;
#[cfg(doc)]
use super::pcg::GpuSolver;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError, KernelArgs};
use crate::solve::fsai::{fsai_setup, FsaiFactor, FsaiSettings};
use crate::solve::SolveError;
use crate::sparse::Csr;

/// Where G is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsaiSetupPlace {
    /// The CPU reference setup (rayon), then G and Gᵀ uploaded.
    #[default]
    Host,
    /// The GPU setup (`gpu::fsai_setup`).
    Device,
}

impl FsaiSetupPlace {
    pub fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Device => "device",
        }
    }
}

/// Where GPU solves compute G.
pub const SETUP_PLACE: FsaiSetupPlace = FsaiSetupPlace::Device;

/// How G and Gᵀ are stored for the application (both give the same bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsaiStorage {
    /// CSR, one thread per row (`fsai_csr_product`).
    #[default]
    Csr,
    /// 32-row slices, entries interleaved (`fsai_sell_product`): coalesced
    /// loads, padding to the longest row of each slice.
    Sell,
}

impl FsaiStorage {
    pub fn name(self) -> &'static str {
        match self {
            Self::Csr => "CSR",
            Self::Sell => "SELL-32",
        }
    }
}

/// The storage GPU solves use (`bench --fsai` measures both).
pub const STORAGE: FsaiStorage = FsaiStorage::Csr;

/// Rows per slice of [`DeviceSell`] (a warp).
const SLICE: usize = 32;

/// A matrix in 32-row slices on the device: entry k of row i at
/// `slice_ptr[i / 32] + 32 k + i % 32`.
pub struct DeviceSell {
    pub n: usize,
    /// Stored slots, padding included.
    pub slots: usize,
    pub slice_ptr: CudaSlice<u64>,
    pub row_len: CudaSlice<u32>,
    pub cols: CudaSlice<u32>,
    pub vals: CudaSlice<f64>,
}

/// The host arrays of [`DeviceSell`]: slice pointers, row lengths, columns
/// and values (padding: column 0, value 0, never read).
#[derive(Debug, PartialEq)]
pub struct SellLayout {
    pub slice_ptr: Vec<u64>,
    pub row_len: Vec<u32>,
    pub cols: Vec<u32>,
    pub vals: Vec<f64>,
}

impl SellLayout {
    pub fn new(m: &Csr) -> Self {
        let n = m.n_rows();
        let len = |r: usize| m.row_ptr()[r + 1] - m.row_ptr()[r];
        let mut slice_ptr = vec![0u64];
        for s in 0..n.div_ceil(SLICE) {
            let width = (s * SLICE..((s + 1) * SLICE).min(n))
                .map(len)
                .max()
                .unwrap_or(0);
            slice_ptr.push(slice_ptr[s] + (width * SLICE) as u64);
        }
        let slots = *slice_ptr.last().expect("starts at 0") as usize;
        let (mut cols, mut vals) = (vec![0u32; slots], vec![0.0; slots]);
        for r in 0..n {
            let base = slice_ptr[r / SLICE] as usize + r % SLICE;
            let (rc, rv) = m.row(r);
            for (k, (&c, &v)) in rc.iter().zip(rv).enumerate() {
                cols[base + SLICE * k] = c;
                vals[base + SLICE * k] = v;
            }
        }
        Self {
            slice_ptr,
            row_len: (0..n).map(|r| len(r) as u32).collect(),
            cols,
            vals,
        }
    }

    /// (column, value) of entry k of row i.
    pub fn entry(&self, i: usize, k: usize) -> (u32, f64) {
        let at = self.slice_ptr[i / SLICE] as usize + i % SLICE + SLICE * k;
        (self.cols[at], self.vals[at])
    }
}

impl DeviceSell {
    /// `m` in slices, copied to the device.
    pub fn upload(gpu: &Gpu, m: &Csr) -> Result<Self, GpuError> {
        let l = SellLayout::new(m);
        // A zero-length upload is not an allocation: keep one slot.
        let pad = |v: Vec<u32>| if v.is_empty() { vec![0] } else { v };
        Ok(Self {
            n: m.n_rows(),
            slots: l.cols.len(),
            slice_ptr: gpu.upload(&l.slice_ptr)?,
            row_len: gpu.upload(&l.row_len)?,
            vals: gpu.upload(if l.vals.is_empty() { &[0.0] } else { &l.vals })?,
            cols: gpu.upload(&pad(l.cols))?,
        })
    }
}

/// What the setup did.
#[derive(Clone, Debug, PartialEq)]
pub struct FsaiSetupReport {
    pub place: FsaiSetupPlace,
    /// Wall time of the setup, G and Gᵀ on the device (seconds).
    pub seconds: f64,
    /// μ = nnz(G) / nnz(A).
    pub density: f64,
    /// μ₀, before the postfilter.
    pub density_before_postfilter: f64,
    /// The device setup's kernel times and statistics (`FsaiSetupPlace::Device`).
    pub device: Option<FsaiSetupStats>,
}

/// z = Gᵀ (G r) on the device (`solve::fsai::FsaiPreconditioner`).
pub struct DeviceFsai<'g> {
    gpu: &'g Gpu,
    g: DeviceCsr,
    gt: DeviceCsr,
    /// G r.
    t: CudaSlice<f64>,
    /// G and Gᵀ in slices when the storage is [`FsaiStorage::Sell`].
    sell: Option<(DeviceSell, DeviceSell)>,
}

impl<'g> DeviceFsai<'g> {
    /// G of a host setup, with its transpose, copied to the device.
    pub fn from_host(gpu: &'g Gpu, factor: &FsaiFactor) -> Result<Self, GpuError> {
        let g = DeviceCsr::upload(gpu, &factor.g)?;
        let gt = DeviceCsr::upload(gpu, &factor.g.transpose())?;
        Self::from_device(gpu, g, gt)
    }

    /// G and Gᵀ already on the device (the GPU setup).
    pub fn from_device(gpu: &'g Gpu, g: DeviceCsr, gt: DeviceCsr) -> Result<Self, GpuError> {
        if g.n != gt.n || g.nnz != gt.nnz {
            return Err(GpuError::Invalid(format!(
                "FSAI: G is {} rows with {} entries but its transpose {} rows with {}",
                g.n, g.nnz, gt.n, gt.nnz
            )));
        }
        let t = gpu.zeros(g.n)?;
        Ok(Self {
            gpu,
            g,
            gt,
            t,
            sell: None,
        })
    }

    /// The application from `storage` (SELL: slices built on the host from
    /// G and Gᵀ read back; CSR: the slices dropped).
    pub fn with_storage(mut self, storage: FsaiStorage) -> Result<Self, GpuError> {
        self.sell = match storage {
            FsaiStorage::Csr => None,
            FsaiStorage::Sell => {
                let g = DeviceSell::upload(self.gpu, &self.g.download(self.gpu)?)?;
                let gt = DeviceSell::upload(self.gpu, &self.gt.download(self.gpu)?)?;
                Some((g, gt))
            }
        };
        Ok(self)
    }

    pub fn storage(&self) -> FsaiStorage {
        match self.sell {
            Some(_) => FsaiStorage::Sell,
            None => FsaiStorage::Csr,
        }
    }

    /// Stored slots of the application's G and Gᵀ (padding included).
    pub fn stored_slots(&self) -> usize {
        match &self.sell {
            Some((g, gt)) => g.slots + gt.slots,
            None => self.g.nnz + self.gt.nnz,
        }
    }

    /// Sets up G for `a` at `place` and puts it on the device; `resident`:
    /// `a`'s copy on the device in the same row order, which a set-up on
    /// the device reads instead of `a` ([`fsai_setup_gpu_resident`]).
    pub fn setup(
        gpu: &'g Gpu,
        a: &Csr,
        resident: Option<&DeviceModSell>,
        settings: &FsaiSettings,
        place: FsaiSetupPlace,
    ) -> Result<(Self, FsaiSetupReport), SolveError> {
        let start = Instant::now();
        let mut device_stats = None;
        let (fsai, density, density_before_postfilter) = match place {
            FsaiSetupPlace::Host => {
                let factor = fsai_setup(a, settings)?;
                let s = &factor.stats;
                let (d, d0) = (s.density, s.density_before_postfilter);
                let fsai = Self::from_host(gpu, &factor).and_then(|f| f.with_storage(STORAGE))?;
                (fsai, d, d0)
            }
            FsaiSetupPlace::Device => {
                // Every setting the CPU reference accepts runs on the device.
                let (g, gt, stats) = match resident {
                    Some(m) => fsai_setup_gpu_resident(gpu, a, m, settings)?,
                    None => fsai_setup_gpu(gpu, a, settings)?,
                };
                let (d, d0) = (stats.density, stats.density_before_postfilter);
                device_stats = Some(stats);
                (Self::from_device(gpu, g, gt)?, d, d0)
            }
        };
        gpu.synchronize()?;
        let report = FsaiSetupReport {
            place,
            seconds: start.elapsed().as_secs_f64(),
            density,
            density_before_postfilter,
            device: device_stats,
        };
        Ok((fsai, report))
    }

    /// G on the device.
    pub fn g(&self) -> &DeviceCsr {
        &self.g
    }

    /// Gᵀ on the device.
    pub fn gt(&self) -> &DeviceCsr {
        &self.gt
    }

    /// y = M x for M = G or Gᵀ in either layout: one thread per row, n, the
    /// matrix, x, y and PCG's gate.
    fn product<M: FactorLayout>(
        &self,
        m: &M,
        x: &CudaSlice<f64>,
        y: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let rows = m.rows();
        let n = rows as i32;
        self.gpu.launch_vector(M::PRODUCT, rows, |a| {
            a.arg(&n);
            m.push_matrix(a);
            a.arg(x).arg(y);
            arg_or_null(a, done);
        })
    }
}

/// A layout G and Gᵀ are stored in on the device, as its product kernel
/// (kernels/fsai_apply.cu) takes it.
trait FactorLayout {
    /// The kernel y = M x.
    const PRODUCT: &'static str;
    /// The rows of M.
    fn rows(&self) -> usize;
    /// Pushes M's arrays in the kernel's order.
    fn push_matrix<'a>(&'a self, a: &mut KernelArgs<'a>);
}

impl FactorLayout for DeviceCsr {
    const PRODUCT: &'static str = "fsai_csr_product";
    fn rows(&self) -> usize {
        self.n
    }
    fn push_matrix<'a>(&'a self, a: &mut KernelArgs<'a>) {
        self.push_args(a);
    }
}

impl FactorLayout for DeviceSell {
    const PRODUCT: &'static str = "fsai_sell_product";
    fn rows(&self) -> usize {
        self.n
    }
    fn push_matrix<'a>(&'a self, a: &mut KernelArgs<'a>) {
        a.arg(&self.slice_ptr)
            .arg(&self.row_len)
            .arg(&self.cols)
            .arg(&self.vals);
    }
}

impl DevicePreconditioner for DeviceFsai<'_> {
    fn n(&self) -> usize {
        self.t.len()
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        match &self.sell {
            Some((g, gt)) => {
                self.product(g, r, &self.t, done)?;
                self.product(gt, &self.t, z, done)
            }
            None => {
                self.product(&self.g, r, &self.t, done)?;
                self.product(&self.gt, &self.t, z, done)
            }
        }
    }
    fn is_linear(&self) -> bool {
        true
    }
}

/// FSAI for PCG on the device ([`GpuSolver::pcg_preconditioned`]): G set
/// up at [`SETUP_PLACE`] for `a`, the system equilibrated in the solve's row
/// order (FSAI depends on the order: G is lower triangular in it).
pub(crate) fn pcg_fsai<'g>(
    gpu: &'g Gpu,
    a: &Csr,
    resident: &DeviceModSell,
    settings: &FsaiSettings,
) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError> {
    let (fsai, report) = DeviceFsai::setup(gpu, a, Some(resident), settings, SETUP_PLACE)?;
    log::info!(
        "{settings}: set up on the {} in {:.3} s, density {:.3}",
        report.place.name(),
        report.seconds,
        report.density
    );
    Ok(Box::new(fsai))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    #[test]
    fn sell_layout_holds_every_row_in_order() {
        for n in [1, 31, 32, 33, 200] {
            let m = random_symmetric(n, 6, n as u64);
            let l = SellLayout::new(&m);
            assert_eq!(l.slice_ptr.len(), n.div_ceil(SLICE) + 1);
            for i in 0..n {
                let (cols, vals) = m.row(i);
                assert_eq!(l.row_len[i] as usize, cols.len());
                for k in 0..cols.len() {
                    assert_eq!(l.entry(i, k), (cols[k], vals[k]), "n {n} row {i} entry {k}");
                }
            }
            // Each slice is as wide as its longest row.
            for s in 0..n.div_ceil(SLICE) {
                let width = (s * SLICE..((s + 1) * SLICE).min(n))
                    .map(|r| l.row_len[r] as u64)
                    .max()
                    .unwrap();
                assert_eq!(l.slice_ptr[s + 1] - l.slice_ptr[s], width * SLICE as u64);
            }
        }
    }
}
