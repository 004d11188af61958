//! Polynomial preconditioners on the GPU (`kernels/polynomial.cu`); the CPU
//! reference and the mathematics are in `solve::polynomial`.
//!
//! One application is `poly_start` (t_0 = D⁻¹ r) and one fused kernel per
//! degree: the mod-SELL row product of spmv.cu (`modsell_row_t`, shared x of
//! the slice's own rows) followed by the Chebyshev-basis three-term update and
//! the accumulation of z, so a degree-m application reads the matrix m times
//! and makes m + 1 launches, with no allocation, copy or host synchronisation
//! (it can be captured into a CUDA graph). The upper eigenvalue bound and the
//! coefficients are computed at set-up on the host, from the same CSR matrix
//! the CPU reference uses, so both run the same polynomial. The kernels read
//! the coefficients from device memory, so that a value re-set-up (new
//! bound, new coefficients) keeps a captured graph valid.
//!
//! As a smoother ([`DevicePolynomial::sweep`], `gpu::smooth`), the first
//! kernel computes D⁻¹(b − A x) with the f64 matrix and the last adds z to x.
//!
//! Mixed precision (Zhang and Zhang 2013, §2.7): an f32 twin of the mod-SELL values and
//! diagonal ([`DeviceModSellF32`], indices shared), f32 work vectors; r is
//! read and z written in f64 by the first and last kernels.

use std::rc::Rc;

use crate::gpu::kernel_args::KernelElement;
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

use super::levels::in_original_rows;
use super::matrix::{f32_copy_into, DeviceModSell, DeviceModSellF32};
use super::pcg::{DeviceSolve, GpuSolver};
use super::setup::SetupSpans;
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError, NULL};
use crate::solve::polynomial::{EigenBound, PolynomialSettings, Recurrence};
use crate::solve::scalar::Precision;
use crate::solve::smoother::check_diagonal;
use crate::solve::{Preconditioner, SolveError, SolverPerformance};
use crate::sparse::Csr;

/// The vectors of one precision: 1/a_ii, the two recurrence vectors and the
/// running sum of z; and the recurrence's coefficients, five per step.
struct Work<T> {
    inv_diag: CudaSlice<T>,
    t: [CudaSlice<T>; 2],
    acc: CudaSlice<T>,
    coefficients: CudaSlice<T>,
}

impl<T: DeviceRepr + ValidAsZeroBits + KernelElement + crate::gpu::HostElement + Copy> Work<T> {
    fn new(
        gpu: &Gpu,
        m: &DeviceModSell,
        inverse_kernel: &'static str,
        recurrence: &Recurrence,
        to_t: fn(f64) -> T,
    ) -> Result<Self, GpuError> {
        let n = m.n;
        let work = Self {
            inv_diag: gpu.zeros::<T>(n)?,
            t: [gpu.zeros(n)?, gpu.zeros(n)?],
            acc: gpu.zeros(n)?,
            coefficients: gpu.upload(&step_coefficients(recurrence, to_t))?,
        };
        work.invert_diagonal(gpu, m, inverse_kernel)?;
        Ok(work)
    }

    /// The coefficients of `recurrence` into their buffer (the caller
    /// checks that the degree is the set-up's).
    fn write_coefficients(
        &mut self,
        gpu: &Gpu,
        recurrence: &Recurrence,
        to_t: fn(f64) -> T,
    ) -> Result<(), GpuError> {
        gpu.write(&step_coefficients(recurrence, to_t), &mut self.coefficients)
    }

    /// 1/a_ii of `m` into `inv_diag` (in place: the value update's too).
    fn invert_diagonal(
        &self,
        gpu: &Gpu,
        m: &DeviceModSell,
        inverse_kernel: &'static str,
    ) -> Result<(), GpuError> {
        let n32 = m.n as i32;
        gpu.launch_vector(inverse_kernel, m.n, |a| {
            a.arg(&n32).arg(&m.diag).arg(&self.inv_diag);
        })
    }
}

/// mat, id, old, d_in, d_out of each step in T (kernels/polynomial.cu
/// `poly_step`).
fn step_coefficients<T>(recurrence: &Recurrence, to_t: fn(f64) -> T) -> Vec<T> {
    recurrence
        .steps
        .iter()
        .flat_map(|s| [s.mat, s.id, s.old, s.d_in, s.d_out].map(to_t))
        .collect()
}

fn to_f32(x: f64) -> f32 {
    x as f32
}

enum Evaluation {
    Double(Work<f64>),
    Mixed {
        twin: DeviceModSellF32,
        work: Work<f32>,
    },
}

/// z = s(D⁻¹A) D⁻¹ r on the device (`solve::polynomial::PolynomialPreconditioner`).
pub struct DevicePolynomial<'g> {
    gpu: &'g Gpu,
    matrix: Rc<DeviceModSell>,
    settings: PolynomialSettings,
    recurrence: Recurrence,
    evaluation: Evaluation,
    /// [`DevicePreconditioner::graph_key`]: value updates write the same
    /// buffers (the coefficients too, which the kernels read from memory).
    graph_key: u64,
}

impl<'g> DevicePolynomial<'g> {
    /// The preconditioner of `settings` for `matrix`, the device copy of `a`
    /// (same row order); the eigenvalue bound is computed from `a`.
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        matrix: Rc<DeviceModSell>,
        settings: &PolynomialSettings,
    ) -> Result<Self, GpuError> {
        settings.validate().map_err(GpuError::Invalid)?;
        matrix.check_rows("polynomial", a)?;
        let invalid = |e: SolveError| GpuError::Invalid(e.to_string());
        let mut spans = SetupSpans::new("polynomial", Some(gpu));
        let upper = match settings.bound {
            EigenBound::Gershgorin => {
                let bound = device_gershgorin(gpu, &matrix).map_err(invalid)?;
                spans.device("Gershgorin bound");
                bound
            }
            EigenBound::Lanczos { .. } => {
                let bound = settings.upper_bound(a).map_err(invalid)?;
                spans.host("Lanczos bound");
                bound
            }
        };
        let polynomial = Self::with_upper_bound(gpu, matrix, settings, upper)?;
        spans.device("coefficients, work vectors and f32 twin");
        spans.finish();
        Ok(polynomial)
    }

    /// With the upper eigenvalue bound of D⁻¹A given (positive diagonal assumed).
    pub fn with_upper_bound(
        gpu: &'g Gpu,
        matrix: Rc<DeviceModSell>,
        settings: &PolynomialSettings,
        upper: f64,
    ) -> Result<Self, GpuError> {
        let recurrence = settings
            .checked_recurrence(upper)
            .map_err(GpuError::Invalid)?;
        let evaluation = match settings.precision {
            Precision::Double => Evaluation::Double(Work::new(
                gpu,
                &matrix,
                "poly_inverse_diagonal_f64",
                &recurrence,
                |x| x,
            )?),
            Precision::Mixed => Evaluation::Mixed {
                twin: matrix.f32_twin(gpu)?,
                work: Work::new(
                    gpu,
                    &matrix,
                    "poly_inverse_diagonal_f32",
                    &recurrence,
                    to_f32,
                )?,
            },
        };
        Ok(Self {
            gpu,
            matrix,
            settings: *settings,
            recurrence,
            evaluation,
            graph_key: super::unique_buffers_id(),
        })
    }

    /// With the Gershgorin bound computed on the device from `matrix`
    /// alone (no host copy: a device-assembled matrix). The Lanczos bound
    /// needs the matrix on the host ([`Self::new`]) and is refused.
    pub fn on_device(
        gpu: &'g Gpu,
        matrix: Rc<DeviceModSell>,
        settings: &PolynomialSettings,
    ) -> Result<Self, GpuError> {
        let upper = device_bound(gpu, &matrix, settings)?;
        Self::with_upper_bound(gpu, matrix, settings, upper)
    }

    /// Value-only re-set-up for `matrix`, the same pattern with new values
    /// (e.g. the resident pressure matrix after a re-assembly): 1/a_ii, the
    /// device Gershgorin bound, the coefficients and the f32 twin's values
    /// recomputed on the device into the arrays in place, no host copy of the
    /// matrix and no allocation but the bound's two words. The result equals
    /// [`Self::on_device`] on `matrix` bit for bit. Refused for a Lanczos
    /// bound or a different pattern.
    pub fn update_values(&mut self, matrix: Rc<DeviceModSell>) -> Result<(), GpuError> {
        let old = &self.matrix;
        if matrix.n != old.n
            || matrix.slice_height != old.slice_height
            || matrix.codes.len() != old.codes.len()
            || matrix.values.len() != old.values.len()
        {
            return Err(GpuError::Invalid(format!(
                "polynomial update: the matrix has {} rows in slices of {} ({} slots) but the \
                 preconditioner was set up for {} rows in slices of {} ({} slots); set it up \
                 again for a new pattern",
                matrix.n,
                matrix.slice_height,
                matrix.values.len(),
                old.n,
                old.slice_height,
                old.values.len()
            )));
        }
        let upper = device_bound(self.gpu, &matrix, &self.settings)?;
        let recurrence = self
            .settings
            .checked_recurrence(upper)
            .map_err(GpuError::Invalid)?;
        // Checked before any buffer changes: an error leaves the
        // preconditioner as it was.
        let steps = match &self.evaluation {
            Evaluation::Double(work) => work.coefficients.len(),
            Evaluation::Mixed { work, .. } => work.coefficients.len(),
        } / 5;
        if recurrence.steps.len() != steps {
            return Err(GpuError::Invalid(format!(
                "polynomial update: {} recurrence steps instead of {steps}",
                recurrence.steps.len()
            )));
        }
        match &mut self.evaluation {
            Evaluation::Double(work) => {
                work.invert_diagonal(self.gpu, &matrix, "poly_inverse_diagonal_f64")?;
                work.write_coefficients(self.gpu, &recurrence, |x| x)?;
            }
            Evaluation::Mixed { twin, work } => {
                f32_copy_into(self.gpu, &matrix.values, &twin.values)?;
                f32_copy_into(self.gpu, &matrix.diag, &twin.diag)?;
                work.invert_diagonal(self.gpu, &matrix, "poly_inverse_diagonal_f32")?;
                work.write_coefficients(self.gpu, &recurrence, to_f32)?;
            }
        }
        if !Rc::ptr_eq(&matrix, &self.matrix) {
            // The steps read the matrix's own buffers.
            self.graph_key = super::unique_buffers_id();
        }
        self.recurrence = recurrence;
        self.matrix = matrix;
        Ok(())
    }

    pub fn settings(&self) -> &PolynomialSettings {
        &self.settings
    }

    /// The interval and coefficients in use (the upper bound is `hi`).
    pub fn recurrence(&self) -> &Recurrence {
        &self.recurrence
    }

    /// The launches of z = M⁻¹ r (`add_to_z` false) or of a smoother sweep
    /// x += M⁻¹ (b − A x) (`Start::Residual`, z = x, `add_to_z` true) in
    /// precision T.
    #[allow(clippy::too_many_arguments)]
    fn launch<T: DeviceRepr + KernelElement + Copy>(
        &self,
        kernels: &Kernels,
        values: &CudaSlice<T>,
        diag: &CudaSlice<T>,
        work: &Work<T>,
        start: Start<'_>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (gpu, m) = (self.gpu, &*self.matrix);
        let n = m.n as i32;
        let h = m.slice_height as u32;
        let add_to_z = i32::from(matches!(start, Start::Residual { .. }));
        match start {
            Start::Precondition(r) => gpu.launch_vector(kernels.start, m.n, |a| {
                a.arg(&n).arg(&work.inv_diag).arg(r).arg(&work.t[0]);
                arg_or_null(a, done);
            })?,
            Start::Residual { b, x } => gpu.launch(
                kernels.residual_start,
                m.n_slices() as u32,
                h,
                m.shared_bytes(),
                |a| {
                    a.arg(&n);
                    m.push_args(a);
                    a.arg(x).arg(b).arg(&work.inv_diag).arg(&work.t[0]);
                },
            )?,
        }
        let shared = h * size_of::<T>() as u32;
        let last = self.recurrence.steps.len() - 1;
        for j in 0..self.recurrence.steps.len() {
            // Step j reads t[j % 2] and overwrites t[(j + 1) % 2] (t_{j−1}).
            let (t_in, t_io) = (&work.t[j % 2], &work.t[(j + 1) % 2]);
            let coefficients = work.coefficients.slice(5 * j..5 * j + 5);
            let first = i32::from(j == 0);
            gpu.launch(kernels.step, m.n_slices() as u32, h, shared, |a| {
                a.arg(&n)
                    .arg(&m.slice_ptr)
                    .arg(&m.codes)
                    .arg(values)
                    .arg(diag)
                    .arg(&work.inv_diag)
                    .arg(t_in)
                    .arg(t_io)
                    .arg(&work.acc)
                    .arg(&first);
                match j == last {
                    true => a.arg(z),
                    false => a.arg(&NULL),
                };
                a.arg(&add_to_z).arg(&coefficients);
                arg_or_null(a, done);
            })?;
        }
        Ok(())
    }

    /// z = M⁻¹ r, or x += M⁻¹ (b − A x); `done`: the fused loop's gate.
    fn run(
        &self,
        start: Start<'_>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        match &self.evaluation {
            Evaluation::Double(work) => self.launch(
                &F64_KERNELS,
                &self.matrix.values,
                &self.matrix.diag,
                work,
                start,
                z,
                done,
            ),
            Evaluation::Mixed { twin, work } => {
                self.launch(&F32_KERNELS, &twin.values, &twin.diag, work, start, z, done)
            }
        }
    }

    /// One smoother sweep x ← x + M⁻¹ (b − A x) (the residual in f64 with
    /// the f64 matrix; `solve::smoother::PreconditionerSmoother` on the host).
    pub fn sweep(&self, b: &CudaSlice<f64>, x: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.run(Start::Residual { b, x }, x, None)
    }
}

/// The Gershgorin bound max_i Σ_j |a_ij| / a_ii ≥ λ_max(D⁻¹A) of `m`,
/// computed on the device (`gershgorin_rows`: the CPU's row sums in its
/// order, the maximum by integer atomics on the bits), equal to
/// `solve::polynomial::gershgorin_bound` of the same matrix. A diagonal that
/// is not positive is the CPU's error (the row in `m`'s order).
pub fn device_gershgorin(gpu: &Gpu, m: &DeviceModSell) -> Result<f64, SolveError> {
    let n = m.n;
    let out = gpu.upload(&[0u64, n as u64 + 1])?;
    let dims = m.dims();
    m.launch_pattern(gpu, "gershgorin_rows", &dims, |a| {
        a.arg(&m.values).arg(&m.diag).arg(&out);
    })?;
    let out = gpu.download(&out)?;
    if out[1] <= n as u64 {
        let row = out[1] as usize - 1;
        let diag = gpu.download(&m.diag)?;
        return Err(SolveError::NonPositiveDiagonal {
            precond: "polynomial",
            row,
            value: diag[row],
        });
    }
    // The CPU's reduction starts at 0 (no rows: 0).
    Ok(f64::from_bits(out[0]))
}

/// The device Gershgorin bound of `m` for `settings` (a Lanczos bound is
/// refused: it needs the matrix on the host).
fn device_bound(
    gpu: &Gpu,
    m: &DeviceModSell,
    settings: &PolynomialSettings,
) -> Result<f64, GpuError> {
    match settings.bound {
        EigenBound::Gershgorin => {
            device_gershgorin(gpu, m).map_err(|e| GpuError::Invalid(e.to_string()))
        }
        EigenBound::Lanczos { .. } => Err(GpuError::Invalid(format!(
            "{settings}: the Lanczos bound is computed from the matrix on the host; on a \
             device-assembled matrix use eigenBound Gershgorin"
        ))),
    }
}

/// Where an application starts: from r, or from the residual of x.
enum Start<'a> {
    Precondition(&'a CudaSlice<f64>),
    Residual {
        b: &'a CudaSlice<f64>,
        x: &'a CudaSlice<f64>,
    },
}

/// The kernels of one precision.
struct Kernels {
    start: &'static str,
    residual_start: &'static str,
    step: &'static str,
}

const F64_KERNELS: Kernels = Kernels {
    start: "poly_start_f64",
    residual_start: "poly_residual_start_f64",
    step: "poly_step_f64",
};

const F32_KERNELS: Kernels = Kernels {
    start: "poly_start_f32",
    residual_start: "poly_residual_start_f32",
    step: "poly_step_f32",
};

impl DevicePreconditioner for DevicePolynomial<'_> {
    fn n(&self) -> usize {
        self.matrix.n
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        self.run(Start::Precondition(r), z, done)
    }

    /// A fixed polynomial: linear (in mixed precision up to f32 rounding,
    /// with which Zhang & Zhang's (2013) Algorithm 6 keeps the standard β).
    fn is_linear(&self) -> bool {
        true
    }
    fn graph_key(&self) -> Option<u64> {
        Some(self.graph_key)
    }
}

impl GpuSolver<'_> {
    /// PCG with a polynomial preconditioner on the device, on the system `s`
    /// equilibrated (the polynomial then acts on S A S), in the row order of
    /// `s.options.ordering`. The convergence test and the
    /// returned performance are those of the original system, as in
    /// `solve::solve_pcg_scaled`.
    pub fn solve_polynomial(
        &mut self,
        settings: &PolynomialSettings,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        s.check()?;
        Preconditioner::Polynomial(*settings).check()?;
        // The CPU's checks (positive diagonal) and Lanczos bound, on the
        // unpermuted system; Gershgorin's on the device.
        let host = |system: &Csr| match settings.bound {
            EigenBound::Gershgorin => check_diagonal(system, "polynomial").map(|()| None),
            EigenBound::Lanczos { .. } => settings.upper_bound(system).map(Some),
        };
        self.pcg_reordered(s, false, host, |gpu, ordered, backend, host_bound| {
            let upper = match host_bound {
                Some(b) => b,
                None => device_gershgorin(gpu, backend.matrix())
                    .map_err(|e| in_original_rows(e, ordered.permutation()))?,
            };
            let polynomial =
                DevicePolynomial::with_upper_bound(gpu, backend.shared_matrix(), settings, upper)?;
            backend.set_preconditioner(Box::new(polynomial));
            Ok(())
        })
    }
}
