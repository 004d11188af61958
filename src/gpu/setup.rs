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
//! A benchmark that cannot reach the spans of a set-up (they live inside
//! the preconditioner's constructor) wraps the constructor in
//! [`collect_phases`]: every span made inside it on this thread is timed
//! and its phases are handed back in order. Spans nested in another (a
//! block-IC set-up inside a smoother's) are not counted twice: the outer
//! phase that contains them keeps only its own time. Outside
//! `collect_phases` nothing changes: the product's set-ups gain no
//! synchronisation.
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

use std::cell::RefCell;
use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::amg::read_at;
use super::matrix::DeviceModSell;
use super::Gpu;
use crate::solve::SolveError;

/// One timed phase of a set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupPhase {
    pub name: String,
    /// "host" or "device".
    pub place: &'static str,
    pub ms: f64,
}

impl SetupPhase {
    /// `phases` as a benchmark's note gives them: "name (place) x ms = y
    /// SpMVs", comma-separated, each also in times of one SpMV of
    /// `spmv_ms`.
    pub fn describe(phases: &[SetupPhase], spmv_ms: f64) -> String {
        phases
            .iter()
            .map(|p| {
                format!(
                    "{} ({}) {:.2} ms = {:.1} SpMVs",
                    p.name,
                    p.place,
                    p.ms,
                    p.ms / spmv_ms
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

thread_local! {
    /// The phases [`collect_phases`] gathers on this thread (None: not
    /// collecting).
    static COLLECTED: RefCell<Option<Vec<SetupPhase>>> = const { RefCell::new(None) };
}

fn collecting() -> bool {
    COLLECTED.with(|c| c.borrow().is_some())
}

/// Phases collected so far (0 when not collecting).
fn collected_len() -> usize {
    COLLECTED.with(|c| c.borrow().as_ref().map_or(0, Vec::len))
}

/// Runs `build` with every [`SetupSpans`] made inside it on this thread
/// timed (each device phase synchronises the stream), and returns its
/// result and the phases of those spans in the order they ended (nested
/// spans' time is not counted again in the phase around them). For
/// benchmarks; calls do not nest (an inner call collects for itself).
pub fn collect_phases<T>(build: impl FnOnce() -> T) -> (T, Vec<SetupPhase>) {
    let outer = COLLECTED.with(|c| c.borrow_mut().replace(Vec::new()));
    let result = build();
    let phases = COLLECTED.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    (result, phases.unwrap_or_default())
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
    /// Inside [`collect_phases`]: the collected phases' count at this
    /// span's last phase end; those collected since were nested spans'.
    collected_at: Option<usize>,
}

impl<'g> SetupSpans<'g> {
    /// Spans of `what`'s set-up; `gpu`: synchronised before a device phase
    /// is timed (debug logging only).
    pub fn new(what: &'static str, gpu: Option<&'g Gpu>) -> Self {
        let now = Instant::now();
        let collected_at = collecting().then(collected_len);
        Self {
            what,
            gpu,
            start: now,
            last: now,
            enabled: collected_at.is_some() || log::log_enabled!(log::Level::Debug),
            phases: None,
            collected_at,
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
        let mut ms = (now - self.last).as_secs_f64() * 1e3;
        if let Some(at) = self.collected_at {
            // Spans nested in this phase have collected their own phases.
            let nested: f64 = COLLECTED.with(|c| {
                c.borrow()
                    .as_ref()
                    .map_or(0.0, |p| p.iter().skip(at).map(|p| p.ms).sum())
            });
            ms = (ms - nested).max(0.0);
        }
        log::debug!("{} set-up: {phase} ({place}) {ms:.3} ms", self.what);
        let record = SetupPhase {
            name: phase.to_string(),
            place,
            ms,
        };
        if self.collected_at.is_some() {
            COLLECTED.with(|c| {
                if let Some(p) = c.borrow_mut().as_mut() {
                    p.push(record.clone());
                    self.collected_at = Some(p.len());
                }
            });
        }
        if let Some(phases) = &mut self.phases {
            phases.push(record);
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
    let n = m.n;
    let failed = gpu.upload(&[n as u64 + 1])?;
    let n32 = n as i32;
    gpu.launch(
        "diag_check",
        super::vector_grid(n),
        super::VECTOR_BLOCK,
        0,
        |a| {
            a.arg(&n32).arg(&m.diag).arg(&failed);
        },
    )?;
    let first = gpu.download(&failed)?[0] as usize;
    if first <= n {
        let row = first - 1;
        let value = read_at(gpu, &m.diag, row)?;
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
    let scale = gpu.zeros::<f64>(m.n)?;
    let rounded = match f32 {
        true => Some(gpu.zeros::<f32>(m.n)?),
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
    })?;
    Ok((scale, rounded))
}

#[cfg(test)]
mod tests {
    use super::{collect_phases, SetupPhase, SetupSpans};
    use std::time::{Duration, Instant};

    #[test]
    fn collected_phases_come_in_order_and_nested_spans_count_once() {
        let t = Instant::now();
        let (value, phases) = collect_phases(|| {
            let mut outer = SetupSpans::new("outer", None);
            outer.host("first");
            let mut inner = SetupSpans::new("inner", None);
            std::thread::sleep(Duration::from_millis(20));
            inner.host("nested work");
            inner.finish();
            outer.host("around the nested set-up");
            outer.finish();
            7
        });
        let whole = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(value, 7);
        let names: Vec<&str> = phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["first", "nested work", "around the nested set-up"]);
        assert!(phases[1].ms >= 20.0, "{phases:?}");
        // The outer phase holds the nested one; it is counted once.
        let sum: f64 = phases.iter().map(|p| p.ms).sum();
        assert!(sum <= whole + 1e-6, "{sum} of {whole} ms: {phases:?}");
    }

    #[test]
    fn nothing_is_collected_outside_collect_phases() {
        let mut spans = SetupSpans::new("alone", None);
        spans.host("a phase");
        assert!(spans.finish().is_empty());
        let ((), phases) = collect_phases(|| ());
        assert!(phases.is_empty());
        let ((), phases) = collect_phases(|| {
            let mut s = SetupSpans::new("inside", None);
            s.device("a device phase");
            s.finish();
        });
        assert_eq!(phases.len(), 1);
        assert_eq!(phases[0].place, "device");
        let note = SetupPhase::describe(&phases, 0.5);
        assert!(note.starts_with("a device phase (device) "), "{note}");
        assert!(note.contains(" SpMVs"), "{note}");
    }
}
