//! Preconditioner set-up on the device, and where set-up time goes.
//!
//! [`SetupSpans`] times the phases of a preconditioner's set-up and logs
//! them at debug level (`RUST_LOG=fvpoisson::gpu::setup=debug`), each marked host or
//! device, so that a slow set-up names the phase to move. Device phases are
//! timed only when debug logging is on or the spans were made with
//! [`SetupSpans::timed`] (the span then synchronises the stream; otherwise
//! it costs nothing and synchronises nothing); timed spans also hand their
//! phases back ([`SetupSpans::finish`], [`SetupPhase`]) for a benchmark to
//! print.
//!
//! The device set-ups here read the resident mod-SELL matrix and hand the
//! host only sizes and error flags:
//!
//! - [`checked_diagonal`]: every diagonal entry positive (the CPU's
//!   `Triangles::new` check), the first failing row read back as one integer.
//! - [`jacobi_scales`]: weighted-Jacobi (ω / a_ii), L1-Jacobi
//!   (1 / (a_ii + Σ |a_ij|)) and reciprocal-diagonal (Neumann) row scales,
//!   in f64 and optionally rounded to f32, one thread per row, equal bit for
//!   bit to the CPU's `PointJacobi` and `TruncatedNeumann` scales (the same
//!   operations in the same order; the mod-SELL keeps a row's off-diagonals
//!   in column order).

use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::amg::read_at;
use super::matrix::DeviceModSell;
use super::{Gpu, GpuError};
use crate::solve::SolveError;

/// One timed phase of a set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupPhase {
    pub name: String,
    /// "host" or "device".
    pub place: &'static str,
    pub ms: f64,
}

/// The timed phases of one set-up (module documentation).
pub struct SetupSpans<'g> {
    what: &'static str,
    gpu: Option<&'g Gpu>,
    start: Instant,
    last: Instant,
    enabled: bool,
    /// Kept only when made with [`Self::timed`].
    phases: Option<Vec<SetupPhase>>,
}

impl<'g> SetupSpans<'g> {
    /// Spans of `what`'s set-up; `gpu`: synchronised before a device phase
    /// is timed (debug logging only).
    pub fn new(what: &'static str, gpu: Option<&'g Gpu>) -> Self {
        let now = Instant::now();
        Self {
            what,
            gpu,
            start: now,
            last: now,
            enabled: log::log_enabled!(log::Level::Debug),
            phases: None,
        }
    }

    /// Spans that are always timed (each device phase synchronises the
    /// stream) and kept for [`Self::finish`], as well as logged.
    pub fn timed(what: &'static str, gpu: Option<&'g Gpu>) -> Self {
        Self {
            enabled: true,
            phases: Some(Vec::new()),
            ..Self::new(what, gpu)
        }
    }

    fn end(&mut self, phase: &str, place: &'static str) {
        if !self.enabled {
            return;
        }
        if place == "device" {
            if let Some(gpu) = self.gpu {
                // Only the timing depends on it: an error shows at the next call.
                let _ = gpu.synchronize();
            }
        }
        let now = Instant::now();
        let ms = (now - self.last).as_secs_f64() * 1e3;
        log::debug!("{} set-up: {phase} ({place}) {ms:.3} ms", self.what);
        if let Some(phases) = &mut self.phases {
            phases.push(SetupPhase {
                name: phase.to_string(),
                place,
                ms,
            });
        }
        self.last = now;
    }

    /// Ends a phase of host work (including host → device uploads of what
    /// the host derived).
    pub fn host(&mut self, phase: &str) {
        self.end(phase, "host");
    }

    /// Ends a phase of device work (kernels, device allocations).
    pub fn device(&mut self, phase: &str) {
        self.end(phase, "device");
    }

    /// Logs the whole set-up's time; the phases of [`Self::timed`] spans
    /// (empty otherwise).
    pub fn finish(self) -> Vec<SetupPhase> {
        if self.enabled {
            log::debug!(
                "{} set-up: total {:.3} ms",
                self.what,
                self.start.elapsed().as_secs_f64() * 1e3
            );
        }
        self.phases.unwrap_or_default()
    }
}

/// Fails, as the CPU's preconditioners do (`SolveError::NonPositiveDiagonal`
/// naming `precond` and the first row), when a diagonal entry of `m` is
/// missing (stored as 0) or not positive. One launch and one integer read
/// back (`diag_check`); the value is read only for the error.
pub fn checked_diagonal(
    gpu: &Gpu,
    m: &DeviceModSell,
    precond: &'static str,
) -> Result<(), SolveError> {
    let device = |e: GpuError| SolveError::Device(e.to_string());
    let n = m.n;
    let failed = gpu.upload(&[n as u64 + 1]).map_err(device)?;
    let n32 = n as i32;
    gpu.launch(
        "diag_check",
        super::vector_grid(n),
        super::VECTOR_BLOCK,
        0,
        |a| {
            a.arg(&n32).arg(&m.diag).arg(&failed);
        },
    )
    .map_err(device)?;
    let first = gpu.download(&failed).map_err(device)?[0] as usize;
    if first <= n {
        let row = first - 1;
        let value = read_at(gpu, &m.diag, row).map_err(device)?;
        return Err(SolveError::NonPositiveDiagonal {
            precond,
            row,
            value,
        });
    }
    Ok(())
}

/// Which row scale [`jacobi_scales`] computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowScale {
    /// ω / a_ii (weighted Jacobi).
    Weighted(f64),
    /// 1 / (a_ii + Σ_{j≠i} |a_ij|), the off-diagonals in column order (L1 Jacobi).
    L1,
    /// 1 / a_ii (truncated Neumann, Jacobi).
    Reciprocal,
}

/// The row scales `kind` of `m` on the device (`jacobi_scales`), after
/// [`checked_diagonal`] (`precond` names the preconditioner in its error),
/// and, with `f32`, the same rounded to f32 (`as f32`).
pub fn jacobi_scales(
    gpu: &Gpu,
    m: &DeviceModSell,
    kind: RowScale,
    f32: bool,
    precond: &'static str,
) -> Result<(CudaSlice<f64>, Option<CudaSlice<f32>>), SolveError> {
    checked_diagonal(gpu, m, precond)?;
    let device = |e: GpuError| SolveError::Device(e.to_string());
    let scale = gpu.zeros::<f64>(m.n).map_err(device)?;
    let rounded = match f32 {
        true => Some(gpu.zeros::<f32>(m.n).map_err(device)?),
        false => None,
    };
    let (mode, omega) = match kind {
        RowScale::Weighted(omega) => (0i32, omega),
        RowScale::L1 => (1, 1.0),
        RowScale::Reciprocal => (2, 1.0),
    };
    let dims = m.dims();
    m.launch_pattern(gpu, "jacobi_scales", &dims, |a| {
        a.arg(&m.values).arg(&m.diag).arg(&mode).arg(&omega);
        a.arg(&scale);
        super::arg_or_null(a, rounded.as_ref());
    })
    .map_err(device)?;
    Ok((scale, rounded))
}
