//! Sparse matrices in device memory and their SpMV launches.

use crate::gpu::KernelArgs;
use cudarc::driver::CudaSlice;

use super::{Gpu, GpuError};
use crate::sparse::{Csr, ModSell, Sell};

/// Which storage format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csr,
    Sell,
    ModSell,
}

impl Format {
    pub const ALL: [Self; 3] = [Self::Csr, Self::Sell, Self::ModSell];
    pub fn name(self) -> &'static str {
        match self {
            Self::Csr => "CSR",
            Self::Sell => "SELL",
            Self::ModSell => "mod-SELL",
        }
    }
}

/// A square matrix on the device in one of the formats.
pub enum DeviceMatrix {
    Csr {
        n: usize,
        row_ptr: CudaSlice<u64>,
        cols: CudaSlice<u32>,
        values: CudaSlice<f64>,
    },
    Sell {
        n: usize,
        slice_height: usize,
        slice_ptr: CudaSlice<u64>,
        cols: CudaSlice<i32>,
        values: CudaSlice<f64>,
    },
    ModSell(DeviceModSell),
}

/// An f64 array rounded to f32 on the device (`cast_f64_to_f32`, as `as f32`).
pub fn f32_copy(gpu: &Gpu, from: &CudaSlice<f64>) -> Result<CudaSlice<f32>, GpuError> {
    let to = gpu.zeros::<f32>(from.len())?;
    f32_copy_into(gpu, from, &to)?;
    Ok(to)
}

/// [`f32_copy`] into an existing array of the same length (value updates:
/// no allocation).
pub fn f32_copy_into(
    gpu: &Gpu,
    from: &CudaSlice<f64>,
    to: &CudaSlice<f32>,
) -> Result<(), GpuError> {
    // `Gpu::zeros` allocates one element for an empty array (an upload of
    // none has none), so empty arrays compare as one element.
    if to.len().max(1) != from.len().max(1) {
        return Err(GpuError::Invalid(format!(
            "f32 copy of {} values into an array of {}",
            from.len(),
            to.len()
        )));
    }
    let len = i32::try_from(from.len()).map_err(|_| {
        GpuError::Invalid(format!(
            "{} values are too many for an f32 copy (at most 2^31)",
            from.len()
        ))
    })?;
    gpu.launch_vector("cast_f64_to_f32", from.len(), |a| {
        a.arg(&len).arg(from).arg(to);
    })
}

/// Minimum bytes one mod-SELL SpMV y = A x moves on n rows with
/// `off_diagonal` stored off-diagonal entries: each entry's value and code
/// (12), the diagonal, x and y (24 per row), each array once.
pub fn mod_sell_spmv_bytes(n: usize, off_diagonal: usize) -> f64 {
    12.0 * off_diagonal as f64 + 24.0 * n as f64
}

/// Modified SELL on the device (see `sparse::modsell`).
pub struct DeviceModSell {
    pub n: usize,
    pub slice_height: usize,
    pub slice_ptr: CudaSlice<u64>,
    pub codes: CudaSlice<i32>,
    pub values: CudaSlice<f64>,
    pub diag: CudaSlice<f64>,
}

/// The f32 twin of a [`DeviceModSell`]'s values and diagonal (its slice
/// pointers and column codes are shared): the mixed-precision polynomial
/// preconditioner's matrix (`gpu::polynomial`).
pub struct DeviceModSellF32 {
    pub values: CudaSlice<f32>,
    pub diag: CudaSlice<f32>,
}

impl DeviceModSell {
    /// The values and the diagonal rounded to f32 on the device.
    pub fn f32_twin(&self, gpu: &Gpu) -> Result<DeviceModSellF32, GpuError> {
        Ok(DeviceModSellF32 {
            values: f32_copy(gpu, &self.values)?,
            diag: f32_copy(gpu, &self.diag)?,
        })
    }

    /// A copy on the device (pattern and values), nothing through the host.
    pub fn device_copy(&self, gpu: &Gpu) -> Result<Self, GpuError> {
        let mut copy = Self {
            n: self.n,
            slice_height: self.slice_height,
            slice_ptr: gpu.zeros(self.slice_ptr.len())?,
            codes: gpu.zeros(self.codes.len())?,
            values: gpu.zeros(self.values.len())?,
            diag: gpu.zeros(self.diag.len())?,
        };
        gpu.copy(&self.slice_ptr, &mut copy.slice_ptr)?;
        gpu.copy(&self.codes, &mut copy.codes)?;
        gpu.copy(&self.values, &mut copy.values)?;
        gpu.copy(&self.diag, &mut copy.diag)?;
        Ok(copy)
    }

    pub fn upload(gpu: &Gpu, m: &ModSell) -> Result<Self, GpuError> {
        Ok(Self {
            n: m.n_rows(),
            slice_height: m.slice_height(),
            slice_ptr: gpu.upload(m.slice_ptr())?,
            codes: gpu.upload(m.codes())?,
            values: gpu.upload(m.values())?,
            diag: gpu.upload(m.diag())?,
        })
    }

    /// Pushes the matrix as the mod-SELL kernels take it: slice pointers,
    /// column codes, values, diagonal.
    pub fn push_args<'a>(&'a self, a: &mut KernelArgs<'a>) {
        a.arg(&self.slice_ptr)
            .arg(&self.codes)
            .arg(&self.values)
            .arg(&self.diag);
    }

    /// n and the slice height as the kernels take them, for
    /// [`Self::launch_pattern`].
    pub fn dims(&self) -> [i32; 2] {
        [self.n as i32, self.slice_height as i32]
    }

    /// Launches `kernel` with a thread per row over the pattern: n and the
    /// slice height (`dims`, from [`Self::dims`]), the slice pointers and
    /// column codes, then the arguments `push` adds.
    pub fn launch_pattern<'a>(
        &'a self,
        gpu: &'a Gpu,
        kernel: &'static str,
        dims: &'a [i32; 2],
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        gpu.launch_vector(kernel, self.n, |a| {
            a.arg(&dims[0])
                .arg(&dims[1])
                .arg(&self.slice_ptr)
                .arg(&self.codes);
            push(a);
        })
    }

    /// Checks that the host matrix `a` a preconditioner is built from has
    /// this matrix's rows (`what`: the preconditioner, named in the error).
    pub fn check_rows(&self, what: &str, a: &Csr) -> Result<(), GpuError> {
        if a.n_rows() != self.n {
            return Err(GpuError::Invalid(format!(
                "the {what}'s matrix has {} rows, the device matrix {}",
                a.n_rows(),
                self.n
            )));
        }
        Ok(())
    }

    /// Minimum bytes of one SpMV with this matrix: [`mod_sell_spmv_bytes`]
    /// with the stored slots (the padding the kernel reads) as entries.
    pub fn spmv_bytes(&self) -> f64 {
        mod_sell_spmv_bytes(self.n, self.codes.len())
    }

    pub fn n_slices(&self) -> usize {
        self.n.div_ceil(self.slice_height)
    }

    /// Dynamic shared memory of a mod-SELL launch: one slice of x.
    pub fn shared_bytes(&self) -> u32 {
        self.slice_height as u32 * 8
    }

    /// The matrix read back (e.g. to check a device assembly).
    pub fn download(&self, gpu: &Gpu) -> Result<ModSell, GpuError> {
        let slice_ptr = gpu.download(&self.slice_ptr)?;
        let slots = slice_ptr.last().copied().unwrap_or(0) as usize;
        // Empty arrays are allocated with one element.
        let codes = gpu.download_prefix(&self.codes, slots)?;
        let values = gpu.download_prefix(&self.values, slots)?;
        let diag = gpu.download_prefix(&self.diag, self.n)?;
        ModSell::from_parts(self.slice_height, diag, slice_ptr, codes, values)
            .map_err(GpuError::Invalid)
    }

    /// rowSum(A) (diagonal first, then the off-diagonals by column, as
    /// `GpuCgBackend::new` sums them on the host) and 1/a_ii, on the device.
    pub fn row_sums_and_inverse_diagonal(
        &self,
        gpu: &Gpu,
    ) -> Result<(CudaSlice<f64>, CudaSlice<f64>), GpuError> {
        let row_sums = gpu.zeros(self.n)?;
        let inv_diag = gpu.zeros(self.n)?;
        self.row_sums_and_inverse_diagonal_into(gpu, &row_sums, Some(&inv_diag))?;
        Ok((row_sums, inv_diag))
    }

    /// [`Self::row_sums_and_inverse_diagonal`] into buffers of n values (the
    /// inverse diagonal only when given), e.g. after the values changed in
    /// place.
    pub fn row_sums_and_inverse_diagonal_into(
        &self,
        gpu: &Gpu,
        row_sums: &CudaSlice<f64>,
        inv_diag: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let lengths = std::iter::once(row_sums.len()).chain(inv_diag.map(|d| d.len()));
        if let Some(len) = lengths.into_iter().find(|&len| len != self.n) {
            return Err(GpuError::Invalid(format!(
                "a row sum or diagonal buffer has {len} entries for a matrix of {} rows",
                self.n
            )));
        }
        let h = self.slice_height as u32;
        let n = self.n as i32;
        gpu.launch("modsell_row_sums", self.n_slices() as u32, h, 0, |a| {
            a.arg(&n);
            self.push_args(a);
            a.arg(row_sums);
            super::arg_or_null(a, inv_diag);
        })
    }

    /// y = A x.
    pub fn spmv(&self, gpu: &Gpu, x: &CudaSlice<f64>, y: &CudaSlice<f64>) -> Result<(), GpuError> {
        let n = self.n as i32;
        self.launch_slices(gpu, "spmv_modsell", &n, |a| {
            a.arg(x).arg(y);
        })
    }

    /// Launches the mod-SELL kernel `kernel` as `spmv_modsell` is launched
    /// (one block per slice, blockDim = the slice height,
    /// [`Self::shared_bytes`] of shared memory) with the row count `n` and
    /// the matrix ([`Self::push_args`]) first, then the arguments `push`
    /// adds.
    pub fn launch_slices<'a>(
        &'a self,
        gpu: &'a Gpu,
        kernel: &'static str,
        n: &'a i32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let (grid, h) = (self.n_slices() as u32, self.slice_height as u32);
        gpu.launch(kernel, grid, h, self.shared_bytes(), |a| {
            a.arg(n);
            self.push_args(a);
            push(a);
        })
    }
}

impl DeviceMatrix {
    /// Uploads `a` in `format` (`slice_height` for the SELL formats).
    pub fn upload(
        gpu: &Gpu,
        a: &Csr,
        format: Format,
        slice_height: usize,
    ) -> Result<Self, GpuError> {
        let n = a.n_rows();
        if n >= i32::MAX as usize || a.n_cols() != n {
            return Err(GpuError::Invalid(format!(
                "the GPU SpMV needs a square matrix of fewer than 2^31 rows, this one is {} x {}",
                n,
                a.n_cols()
            )));
        }
        Ok(match format {
            Format::Csr => {
                let row_ptr: Vec<u64> = a.row_ptr().iter().map(|&p| p as u64).collect();
                Self::Csr {
                    n,
                    row_ptr: gpu.upload(&row_ptr)?,
                    cols: gpu.upload(a.cols())?,
                    values: gpu.upload(a.values())?,
                }
            }
            Format::Sell => {
                let s = Sell::from_csr(a, slice_height).map_err(GpuError::Invalid)?;
                Self::Sell {
                    n,
                    slice_height,
                    slice_ptr: gpu.upload(s.slice_ptr())?,
                    cols: gpu.upload(s.cols())?,
                    values: gpu.upload(s.values())?,
                }
            }
            Format::ModSell => {
                let m = ModSell::from_csr(a, slice_height).map_err(GpuError::Invalid)?;
                Self::ModSell(DeviceModSell::upload(gpu, &m)?)
            }
        })
    }

    pub fn format(&self) -> Format {
        match self {
            Self::Csr { .. } => Format::Csr,
            Self::Sell { .. } => Format::Sell,
            Self::ModSell(_) => Format::ModSell,
        }
    }

    /// y = A x (y fully overwritten).
    pub fn spmv(&self, gpu: &Gpu, x: &CudaSlice<f64>, y: &CudaSlice<f64>) -> Result<(), GpuError> {
        match self {
            Self::Csr {
                n,
                row_ptr,
                cols,
                values,
            } => {
                let n32 = *n as i32;
                gpu.launch_vector("spmv_csr", *n, |a| {
                    a.arg(&n32).arg(row_ptr).arg(cols).arg(values).arg(x).arg(y);
                })
            }
            Self::Sell {
                n,
                slice_height,
                slice_ptr,
                cols,
                values,
            } => {
                let n32 = *n as i32;
                let grid = n.div_ceil(*slice_height) as u32;
                gpu.launch("spmv_sell", grid, *slice_height as u32, 0, |a| {
                    a.arg(&n32)
                        .arg(slice_ptr)
                        .arg(cols)
                        .arg(values)
                        .arg(x)
                        .arg(y);
                })
            }
            Self::ModSell(m) => m.spmv(gpu, x, y),
        }
    }
}
