//! Block-IC on the device (block Jacobi with inner DIC or IC(0) per block,
//! `solve::block_jacobi`): the in-slice counts and in-block levels computed
//! on the device ([`BlockIcStructure`]), the factor and its sweeps
//! (`kernels/block_ic.cu`), equal bit for bit to the CPU's `BlockIc`.

use cudarc::driver::CudaSlice;

use super::amg::unzeroed;
use super::matrix::DeviceModSell;
use super::setup::{checked_diagonal, SetupSpans};
use super::smooth::block_shared_bytes;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::block_jacobi::BlockIc;
use crate::solve::{InnerSolver, Precision, SolveError};
use crate::sparse::blocks::{block_diagonal, in_slice_counts};
use crate::sparse::levels::LevelSchedule;
use crate::sparse::Csr;

/// Block-IC on the device (`kernels/block_ic.cu`): DIC or IC(0) of each
/// mod-SELL slice's diagonal block, factorised once and swept inside one
/// thread block per slice (in-slice entries in shared memory, the triangular
/// sweeps level-scheduled inside the block, one `__syncthreads` per level).
/// Equal bit for bit to `solve::block_jacobi::BlockIc` on the same matrix,
/// row order and block size (= slice height) in f64; in mixed precision the
/// factors are rounded to f32 and the sweeps run in f32 (the residual and
/// the update of x stay f64).
pub struct DeviceBlockIc {
    inner: InnerSolver,
    precision: Precision,
    slice_mnz: CudaSlice<i32>,
    /// The factorisation's dynamic shared memory per block.
    shared_bytes: u32,
    /// The sweep's (`block_ic_sweep_shared_bytes`).
    sweep_shared_bytes: u32,
    /// Forward and backward level of each row inside its block.
    levels: CudaSlice<i32>,
    /// Forward and backward level counts of each slice.
    slice_levels: CudaSlice<i32>,
    /// DIC: 1/d*; IC(0): L's diagonal.
    diag: CudaSlice<f64>,
    /// IC(0) in double precision: the factor at the in-slice mod-SELL slots
    /// (lower: L; upper: the transposed entry). DIC reads A's values.
    off: Option<CudaSlice<f64>>,
    /// Mixed precision: `diag` and the off-diagonal factor (DIC: A's
    /// values) in f32, written by the factorisation at the in-slice slots
    /// only; IC(0)'s off-diagonal factor is kept in f32 alone.
    f32_factors: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    max_levels: (usize, usize),
}

/// The kernels block-IC launches (their limits decide the slice height).
pub const BLOCK_IC_KERNELS: [&str; 3] = [
    "block_ic_factor",
    "block_ic_sweep_f64",
    "block_ic_sweep_f32",
];

/// Rows of a slice per thread of the sweep (`BLOCK_IC_SWEEP_ROWS` in
/// `kernels/block_ic.cu`): a slice of h rows is swept by ⌈h / 2⌉ threads.
/// (A mod-SELL slice holds at most 1024 rows, so the sweep's 16-bit local
/// columns hold every in-slice index.)
const SWEEP_ROWS_PER_THREAD: usize = 2;

/// Bytes of dynamic shared memory of one block of the sweep
/// (`block_ic_sweep`) on `h`-row slices whose rows have at most `mnz`
/// in-slice off-diagonals, with factors of `value_bytes` bytes: w (8 B per
/// row), each entry's factor and its 16-bit local column.
fn block_ic_sweep_shared_bytes(h: usize, mnz: usize, value_bytes: usize) -> usize {
    h * (8 + mnz * (value_bytes + 2))
}

/// Block-IC's structure (`block_ic_structure`): per slice its largest
/// in-slice count and its forward and backward level counts, per row its
/// two levels, and the maxima over slices [count, forward, backward] (the
/// only numbers the host reads).
pub struct BlockIcStructure {
    pub slice_mnz: CudaSlice<i32>,
    pub levels: CudaSlice<i32>,
    pub slice_levels: CudaSlice<i32>,
    pub maxima: [i32; 3],
}

impl BlockIcStructure {
    /// Computed on the device from the pattern of `m` (its slices are the blocks).
    pub fn on_device(gpu: &Gpu, m: &DeviceModSell) -> Result<Self, GpuError> {
        let (n, h, slices) = (m.n, m.slice_height, m.n_slices());
        // Written by block_ic_structure for every row and slice (not
        // zero-filled); the maxima are raised from zero.
        let slice_mnz = unzeroed::<i32>(gpu, slices)?;
        let levels = unzeroed::<i32>(gpu, 2 * n)?;
        let slice_levels = unzeroed::<i32>(gpu, 2 * slices)?;
        let maxima = gpu.zeros::<i32>(3)?;
        let n32 = n as i32;
        gpu.launch(
            "block_ic_structure",
            slices as u32,
            h as u32,
            (2 * h * size_of::<i32>()) as u32,
            |a| {
                a.arg(&n32).arg(&m.slice_ptr).arg(&m.codes);
                a.arg(&slice_mnz)
                    .arg(&levels)
                    .arg(&slice_levels)
                    .arg(&maxima);
            },
        )?;
        let read = gpu.download(&maxima)?;
        Ok(Self {
            slice_mnz,
            levels,
            slice_levels,
            maxima: [read[0], read[1], read[2]],
        })
    }

    /// The same on the host from `a` with slices of `h` rows (the CPU
    /// reference: `LevelSchedule` on the block diagonal, `in_slice_counts`).
    pub fn host_reference(a: &Csr, h: usize) -> HostBlockIcStructure {
        let n = a.n_rows();
        let blocks = block_diagonal(a, h);
        let (fw, bw) = (LevelSchedule::lower(&blocks), LevelSchedule::upper(&blocks));
        let (fw_rows, bw_rows) = (fw.row_levels(), bw.row_levels());
        let levels: Vec<i32> = (0..n)
            .flat_map(|r| [fw_rows[r] as i32, bw_rows[r] as i32])
            .collect();
        let slice_levels: Vec<i32> = (0..n.div_ceil(h))
            .flat_map(|s| {
                let rows = s * h..((s + 1) * h).min(n);
                let most = |l: &[u32]| rows.clone().map(|r| l[r] as i32 + 1).max().unwrap_or(0);
                [most(&fw_rows), most(&bw_rows)]
            })
            .collect();
        let slice_mnz: Vec<i32> = in_slice_counts(a, h).iter().map(|&c| c as i32).collect();
        HostBlockIcStructure {
            slice_mnz,
            levels,
            slice_levels,
        }
    }

    /// The device arrays of `m`'s structure read back.
    pub fn download(&self, gpu: &Gpu, m: &DeviceModSell) -> Result<HostBlockIcStructure, GpuError> {
        let read = |v: &CudaSlice<i32>, len: usize| -> Result<Vec<i32>, GpuError> {
            let mut host = gpu.download(v)?;
            host.truncate(len);
            Ok(host)
        };
        let slices = m.n_slices();
        Ok(HostBlockIcStructure {
            slice_mnz: read(&self.slice_mnz, slices)?,
            levels: read(&self.levels, 2 * m.n)?,
            slice_levels: read(&self.slice_levels, 2 * slices)?,
        })
    }
}

/// [`BlockIcStructure`]'s arrays on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostBlockIcStructure {
    /// Per slice its largest in-slice off-diagonal count.
    pub slice_mnz: Vec<i32>,
    /// Per row its forward then backward level in its block.
    pub levels: Vec<i32>,
    /// Per slice its forward then backward level count.
    pub slice_levels: Vec<i32>,
}

impl DeviceBlockIc {
    /// Factorises the slices of `m`, the device copy of `a` (same row order),
    /// with `inner` (DIC or IC0). A missing or non-positive diagonal or a
    /// breakdown is the CPU's error for the same row.
    pub fn new(
        gpu: &Gpu,
        a: &Csr,
        m: &DeviceModSell,
        inner: InnerSolver,
        precision: Precision,
    ) -> Result<Self, SolveError> {
        m.check_rows("block-IC", a)?;
        let (n, h) = (m.n, m.slice_height);
        let name = match inner {
            InnerSolver::Dic => "block-DIC",
            InnerSolver::Ic0 => "block-IC",
            other => {
                return Err(SolveError::InvalidControls(format!(
                    "block-IC factorises with DIC or IC0, not {}",
                    other.name()
                )))
            }
        };
        let mut spans = SetupSpans::new(name, Some(gpu));
        // The diagonal is checked only if the factorisation fails: a
        // diagonal entry that is not positive (or not a number) fails its
        // row's pivot or an earlier one (a pivot of a block's DIC is at most
        // its diagonal entry once the earlier pivots are positive, IC(0)'s
        // likewise), so the check's launch and read-back are saved.
        let structure = BlockIcStructure::on_device(gpu, m)?;
        spans.device("structure: in-slice counts and levels (1 read-back)");
        let mnz = structure.maxima[0] as usize;
        let bytes = block_shared_bytes(h, mnz);
        let value_bytes = match precision {
            Precision::Double => size_of::<f64>(),
            Precision::Mixed => size_of::<f32>(),
        };
        let sweep_bytes = block_ic_sweep_shared_bytes(h, mnz, value_bytes);
        for kernel in BLOCK_IC_KERNELS {
            let limits = gpu.kernel_limits(kernel)?;
            if h > limits.threads_per_block || bytes > limits.dynamic_shared_bytes {
                return Err(SolveError::Device(format!(
                    "block-IC: {h}-row slices need {h} threads (limit {}) and {bytes} bytes of \
                     shared memory (limit {}) in {kernel}; choose the slice height with \
                     block_layout",
                    limits.threads_per_block, limits.dynamic_shared_bytes
                )));
            }
            // Above the default 48 KB a kernel must opt in.
            if bytes > 48 * 1024 {
                gpu.allow_dynamic_shared(kernel, bytes)?;
            }
        }
        let ic0 = inner == InnerSolver::Ic0;
        let upload = || -> Result<Self, GpuError> {
            Ok(Self {
                inner,
                precision,
                slice_mnz: structure.slice_mnz,
                shared_bytes: bytes as u32,
                sweep_shared_bytes: sweep_bytes as u32,
                levels: structure.levels,
                slice_levels: structure.slice_levels,
                // Not zero-filled: block_ic_factor writes every row's
                // diagonal and every in-slice slot of `off`, the only slots
                // the sweeps (and the f32 copy's readers) read.
                diag: unzeroed(gpu, n)?,
                // IC(0)'s f64 factor; mixed precision sweeps with the f32
                // one only, so it is not kept (8 bytes a slot).
                off: match (ic0, precision) {
                    (true, Precision::Double) => Some(unzeroed(gpu, m.values.len())?),
                    _ => None,
                },
                // Mixed precision: written by block_ic_factor at every row
                // and in-slice slot, the only slots the f32 sweep reads.
                f32_factors: match precision {
                    Precision::Mixed => Some((unzeroed(gpu, n)?, unzeroed(gpu, m.values.len())?)),
                    Precision::Double => None,
                },
                max_levels: (structure.maxima[1] as usize, structure.maxima[2] as usize),
            })
        };
        let ic = upload()?;
        let failed = gpu.upload(&[n as i32 + 1])?;
        let ic0_flag = i32::from(ic0);
        let n32 = n as i32;
        gpu.launch(
            "block_ic_factor",
            m.n_slices() as u32,
            h as u32,
            ic.shared_bytes,
            |args| {
                args.arg(&n32);
                m.push_args(args);
                args.arg(&ic.slice_mnz)
                    .arg(&ic.levels)
                    .arg(&ic.slice_levels)
                    .arg(&ic0_flag)
                    .arg(&ic.diag);
                arg_or_null(args, ic.off.as_ref());
                arg_or_null(args, ic.f32_factors.as_ref().map(|f| &f.0));
                arg_or_null(args, ic.f32_factors.as_ref().map(|f| &f.1));
                args.arg(&failed);
            },
        )?;
        let failed_row = gpu.download(&failed)?[0] as usize;
        if failed_row <= n {
            // A diagonal entry that is not positive is named first, as the
            // CPU's block-IC does.
            checked_diagonal(gpu, m, name)?;
            // The CPU factorisation names the row and its pivot.
            return Err(BlockIc::new(a, inner, h).err().unwrap_or(
                SolveError::FactorizationBreakdown {
                    precond: name,
                    row: failed_row - 1,
                    value: f64::NAN,
                },
            ));
        }
        spans.device(match precision {
            Precision::Mixed => "factorisation, its factor written in f32 (1 read-back)",
            Precision::Double => "factorisation (1 read-back)",
        });
        spans.finish();
        Ok(ic)
    }

    /// The most levels of a block's forward and backward sweep (one
    /// `__syncthreads` each).
    pub fn levels(&self) -> (usize, usize) {
        self.max_levels
    }

    pub fn inner(&self) -> InnerSolver {
        self.inner
    }

    /// The factor as the CPU's `BlockIc::factor` stores it: DIC 1/d* per
    /// row; IC(0) L's strictly lower values per CSR slot of `a`'s block
    /// diagonal (`sparse::blocks::block_diagonal`), then L's diagonal.
    /// Mixed-precision IC(0) keeps no f64 factor to read: an error.
    pub fn download_factor(
        &self,
        gpu: &Gpu,
        a: &Csr,
        m: &DeviceModSell,
    ) -> Result<Vec<f64>, GpuError> {
        let diag = gpu.download(&self.diag)?;
        let Some(off) = &self.off else {
            return match self.inner {
                InnerSolver::Ic0 => Err(GpuError::Invalid(
                    "block-IC in mixed precision keeps only its f32 factor; set it up in \
                     double precision to read the f64 one"
                        .into(),
                )),
                _ => Ok(diag),
            };
        };
        let off = gpu.download(off)?;
        let (h, slice_ptr) = (m.slice_height, gpu.download(&m.slice_ptr)?);
        let blocks = block_diagonal(a, h);
        let mut f = vec![0.0; blocks.nnz()];
        for r in 0..a.n_rows() {
            let (s, t) = (r / h, r % h);
            let mut slot = slice_ptr[s] as usize + t;
            let (cols, _) = a.row(r);
            for &c in cols.iter().filter(|&&c| c as usize != r) {
                if (c as usize) < r && c as usize / h == s {
                    f[blocks.slot(r, c as usize).expect("in the block")] = off[slot];
                }
                slot += h;
            }
        }
        f.extend(diag);
        Ok(f)
    }

    /// One sweep x_out = x_in + M⁻¹ (b − A x_in) on `m` (x_in None: x = 0,
    /// x_out = M⁻¹ b); `done`: the fused loop's gate.
    pub fn sweep(
        &self,
        gpu: &Gpu,
        m: &DeviceModSell,
        b: &CudaSlice<f64>,
        x_in: Option<&CudaSlice<f64>>,
        x_out: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let n = m.n as i32;
        let ic0 = i32::from(self.inner == InnerSolver::Ic0);
        let kernel = match self.precision {
            Precision::Double => "block_ic_sweep_f64",
            Precision::Mixed => "block_ic_sweep_f32",
        };
        let h = m.slice_height;
        let threads = h.div_ceil(SWEEP_ROWS_PER_THREAD) as u32;
        let h32 = h as i32;
        let slices = m.n_slices() as u32;
        gpu.launch(kernel, slices, threads, self.sweep_shared_bytes, |a| {
            a.arg(&n).arg(&h32);
            m.push_args(a);
            a.arg(&self.slice_mnz).arg(b);
            arg_or_null(a, x_in);
            a.arg(x_out);
            match &self.f32_factors {
                Some((diag, off)) => a.arg(diag).arg(off),
                None => a
                    .arg(&self.diag)
                    .arg(self.off.as_ref().unwrap_or(&m.values)),
            };
            a.arg(&ic0).arg(&self.levels).arg(&self.slice_levels);
            arg_or_null(a, done);
        })
    }
}

#[cfg(test)]
mod tests {
    /// The launch gives each thread the rows the kernel's loop holds.
    #[test]
    fn the_sweep_launch_and_kernel_agree_on_rows_per_thread() {
        let kernel = include_str!("../../../kernels/block_ic.cu");
        let define = format!(
            "\n#define BLOCK_IC_SWEEP_ROWS {}\n",
            super::SWEEP_ROWS_PER_THREAD
        );
        assert!(kernel.contains(&define), "kernels/block_ic.cu: {define:?}");
    }
}
