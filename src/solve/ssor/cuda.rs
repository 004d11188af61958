//! SSOR on the device (compiled as `gpu::ssor`; see `solve::ssor`): the
//! host sets up the multicolour SSOR of `solve::ssor::Ssor::in_colours`
//! with the Jones–Plassmann colouring, and each sweep launches
//! `ssor_colour` (kernels/ssor.cu) once per colour, forward then backward.

use cudarc::driver::CudaSlice;

use super::amg::DeviceCsr;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::colouring::Colouring;
use crate::solve::ssor::{Ssor, SsorSettings};
use crate::solve::SolveError;
use crate::sparse::Csr;

/// Multicolour SSOR on the device.
pub struct DeviceSsor<'g> {
    gpu: &'g Gpu,
    lower: DeviceCsr,
    upper: DeviceCsr,
    /// Rows colour by colour; colour k is `rows[colour_ptr[k]..colour_ptr[k + 1]]`.
    rows: CudaSlice<u32>,
    colour_ptr: Vec<usize>,
    /// ω / a_ii.
    w: CudaSlice<f64>,
    /// (2 − ω) / ω.
    scale: f64,
    /// The forward sweep's result.
    y: CudaSlice<f64>,
}

impl<'g> DeviceSsor<'g> {
    /// SSOR of `a` with `settings` in the Jones–Plassmann colouring of `a`.
    pub fn new(gpu: &'g Gpu, a: &Csr, settings: &SsorSettings) -> Result<Self, SolveError> {
        Self::in_colours(gpu, a, settings, &Colouring::jones_plassmann(a))
    }

    /// SSOR of `a` with `settings` in `colouring`: the device form of
    /// `Ssor::in_colours(a, settings.omega, colouring)`.
    pub fn in_colours(
        gpu: &'g Gpu,
        a: &Csr,
        settings: &SsorSettings,
        colouring: &Colouring,
    ) -> Result<Self, SolveError> {
        let host = Ssor::in_colours(a, settings.omega, colouring)?;
        let mut colour_ptr = vec![0];
        for k in 0..colouring.n_colours() {
            colour_ptr.push(colour_ptr[k] + colouring.rows_of(k).len());
        }
        Ok(Self {
            gpu,
            lower: DeviceCsr::upload(gpu, host.lower())?,
            upper: DeviceCsr::upload(gpu, host.upper())?,
            rows: gpu.upload(host.order())?,
            colour_ptr,
            w: gpu.upload(&host.scaled_inverse_diagonal)?,
            scale: host.backward_scale,
            y: gpu.zeros::<f64>(a.n_rows())?,
        })
    }

    /// Number of colours (kernel launches per sweep).
    pub fn n_colours(&self) -> usize {
        self.colour_ptr.len() - 1
    }

    /// One colour of a sweep: x_i = first_i − w_i Σ part_ij x_j.
    fn colour(
        &self,
        k: usize,
        part: &DeviceCsr,
        scale: f64,
        rhs: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (offset, count) = (
            self.colour_ptr[k],
            self.colour_ptr[k + 1] - self.colour_ptr[k],
        );
        let (offset, count_i) = (offset as i32, count as i32);
        self.gpu.launch_vector("ssor_colour", count, |a| {
            a.arg(&count_i)
                .arg(&self.rows)
                .arg(&offset)
                .arg(&part.row_ptr)
                .arg(&part.cols)
                .arg(&part.vals)
                .arg(&self.w)
                .arg(&scale)
                .arg(rhs)
                .arg(x);
            arg_or_null(a, done);
        })
    }
}

impl DevicePreconditioner for DeviceSsor<'_> {
    fn n(&self) -> usize {
        self.y.len()
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        for k in 0..self.n_colours() {
            self.colour(k, &self.lower, 0.0, r, &self.y, done)?;
        }
        for k in (0..self.n_colours()).rev() {
            self.colour(k, &self.upper, self.scale, &self.y, z, done)?;
        }
        Ok(())
    }

    fn is_linear(&self) -> bool {
        true
    }
}
