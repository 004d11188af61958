//! Where the wall time of a run goes: a [`PhaseClock`] started at launch
//! accounts every second to one [`Phase`] (mesh read, geometry, ordering,
//! device set-up, assembly, solves, output) or to "other", and
//! [`Timings::table`] prints the account (`run`, `bench --end-to-end`).
//!
//! The code being timed marks its phases with [`enter`] (a guard) or
//! [`timed`]; they are recorded on the clock of the current thread, and cost
//! nothing where none is started (library use, tests, rayon workers, whose
//! time the marking thread's phase already holds). Phases nest and the
//! account is exclusive: time inside an inner phase is taken out of the
//! outer one (the assembly of a corrector loop minus its linear solves), so
//! the phases and "other" add up to the total wall time.
//!
//! Device work is asynchronous: a phase that launches it is marked with
//! [`enter_synced`], which synchronises the GPU's stream when the phase
//! starts and ends (only while a clock runs), so that kernels are charged to
//! the phase that launched them rather than to the next one that waits.
//!
//! Each phase's end also reads the process's resident memory ([`Rss`]: its
//! peak so far, VmHWM, and its current size, VmRSS), so that the table says
//! after which phase the peak was reached and what stayed alive. The read is
//! one `getrusage` and one `pread` of `/proc/self/statm` (a few
//! microseconds), made only where a clock runs.

use crate::gpu::Gpu;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A part of a run, as the phase table lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Reading (polyMesh, Gmsh, the case's dictionaries) or generating the mesh.
    Mesh,
    /// Cell and face geometry (centres, volumes, areas, weights) and its checks.
    Geometry,
    /// The row ordering of a GPU solve (RCM, METIS, ...).
    Ordering,
    /// Device structures: sparsity pattern, assembly maps, mod-SELL build and
    /// upload, preconditioner set-up.
    DeviceSetup,
    /// Discretisation: matrix and right-hand side, on the host or the device.
    Assembly,
    /// Linear solves.
    Solve,
    /// Result files (VTK, OpenFOAM fields) and what they are computed from.
    Output,
}

const N_PHASES: usize = 7;

impl Phase {
    /// Every phase, in table order.
    pub const ALL: [Phase; N_PHASES] = [
        Phase::Mesh,
        Phase::Geometry,
        Phase::Ordering,
        Phase::DeviceSetup,
        Phase::Assembly,
        Phase::Solve,
        Phase::Output,
    ];

    /// The row label of the table.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Mesh => "mesh read/generate",
            Phase::Geometry => "geometry",
            Phase::Ordering => "ordering",
            Phase::DeviceSetup => "device set-up",
            Phase::Assembly => "assembly",
            Phase::Solve => "solves",
            Phase::Output => "output",
        }
    }

    /// The key of the JSON account.
    pub fn key(self) -> &'static str {
        match self {
            Phase::Mesh => "mesh",
            Phase::Geometry => "geometry",
            Phase::Ordering => "ordering",
            Phase::DeviceSetup => "device_setup",
            Phase::Assembly => "assembly",
            Phase::Solve => "solve",
            Phase::Output => "output",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Wall seconds by phase and in all, from a [`PhaseClock`], and the CPU
/// seconds of the process (all its threads) in the same spans: their ratio
/// shows a phase's parallelism (or its waiting for the device), and they
/// stay meaningful on a machine other processes load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    phases: [f64; N_PHASES],
    total: f64,
    cpu: [f64; N_PHASES],
    cpu_total: f64,
    /// The process's memory at the last end of each phase (None: the phase
    /// never ended, or the system does not say).
    rss_after: [Option<Rss>; N_PHASES],
    /// The process's memory when the account was taken.
    rss_end: Option<Rss>,
}

/// Gives the memory the process has freed back to the system. The binary
/// keeps freed memory for its next allocations (`main.rs`: fewer first-touch
/// page faults in the CPU solvers), but a GPU run's host set-up frees large
/// arrays (the cells' face lists, the geometry's passes) whose room the
/// later, differently sized arrays of the output do not fit into whole: they
/// would come on top of it. Called where such a set-up ends, it keeps the
/// run's peak at what is live.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only hands free pages of the heap back to the
    // kernel; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The resident memory of the process at a moment, in bytes: its peak since
/// the process started (VmHWM of `/proc/self/status`) and its current size
/// (VmRSS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rss {
    pub peak: u64,
    pub current: u64,
}

impl Rss {
    /// The process's memory now; None where the system does not say (no
    /// `/proc`).
    pub fn now() -> Option<Rss> {
        thread_local! {
            /// `/proc/self/statm`, kept open: a `pread` at offset 0 reads it
            /// afresh without an open and a close per reading.
            static STATM: Option<std::fs::File> = std::fs::File::open("/proc/self/statm").ok();
        }
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: getrusage writes one rusage, which is read only on success.
        let peak_kib = match unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } {
            0 => unsafe { usage.assume_init() }.ru_maxrss,
            _ => return None,
        };
        let mut text = [0u8; 128];
        let n = STATM.with(|f| f.as_ref().and_then(|f| f.read_at(&mut text, 0).ok()))?;
        // statm: sizes in pages, "size resident shared text lib data dt".
        let resident_pages: u64 = std::str::from_utf8(&text[..n])
            .ok()?
            .split_ascii_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let current = resident_pages * page;
        // The kernel updates the peak it reports (ru_maxrss, in KiB) lazily:
        // a current size read earlier can be above it. The peak is the
        // largest of every size seen, so that it never falls.
        static PEAK_SEEN: AtomicU64 = AtomicU64::new(0);
        let reported = u64::try_from(peak_kib).ok()? * 1024;
        let peak = PEAK_SEEN
            .fetch_max(reported.max(current), Ordering::Relaxed)
            .max(reported.max(current));
        Some(Rss { peak, current })
    }
}

/// `bytes` in MB (10^6 bytes) for the table, "-" for none.
fn megabytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_string(), |b| format!("{:.0} MB", b as f64 / 1e6))
}

/// `bytes` in MB for the JSON account, null for none.
fn megabytes_json(bytes: Option<u64>) -> serde_json::Value {
    bytes.map_or(serde_json::Value::Null, |b| (b as f64 / 1e6).round().into())
}

/// CPU seconds the process has used so far, over all its threads.
pub(crate) fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    match unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } {
        0 => ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9,
        _ => 0.0,
    }
}

/// Page faults the process has taken so far that needed no I/O (its
/// fresh memory touched for the first time, mostly): each costs a cleared
/// 4 KiB page and a trap into the kernel. 0 where the system does not say.
pub(crate) fn process_minor_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes one rusage, which is read only on success.
    match unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } {
        0 => u64::try_from(unsafe { usage.assume_init() }.ru_minflt).unwrap_or(0),
        _ => 0,
    }
}

impl Timings {
    /// Seconds spent in `phase` (outside the phases nested in it).
    pub fn seconds(&self, phase: Phase) -> f64 {
        self.phases[phase.index()]
    }

    /// Wall seconds from the start of the clock.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// Seconds in no phase: the total less every phase.
    pub fn other(&self) -> f64 {
        (self.total - self.phases.iter().sum::<f64>()).max(0.0)
    }

    /// CPU seconds of the process while in `phase`.
    pub fn cpu_seconds(&self, phase: Phase) -> f64 {
        self.cpu[phase.index()]
    }

    /// CPU seconds of the process from the start of the clock.
    pub fn cpu_total(&self) -> f64 {
        self.cpu_total
    }

    /// CPU seconds in no phase.
    pub fn cpu_other(&self) -> f64 {
        (self.cpu_total - self.cpu.iter().sum::<f64>()).max(0.0)
    }

    /// The process's memory at the last end of `phase` (None: it never
    /// ended, or the system does not say).
    pub fn rss_after(&self, phase: Phase) -> Option<Rss> {
        self.rss_after[phase.index()]
    }

    /// The process's memory when the account was taken: its peak is the
    /// run's.
    pub fn rss_end(&self) -> Option<Rss> {
        self.rss_end
    }

    /// What happened between `earlier` (a snapshot of the same clock) and
    /// `self` (the memory as of `self`).
    pub fn since(&self, earlier: &Timings) -> Timings {
        let minus = |now: &[f64; N_PHASES], then: &[f64; N_PHASES]| {
            let mut d = *now;
            for (p, e) in d.iter_mut().zip(then) {
                *p = (*p - e).max(0.0);
            }
            d
        };
        Timings {
            phases: minus(&self.phases, &earlier.phases),
            total: (self.total - earlier.total).max(0.0),
            cpu: minus(&self.cpu, &earlier.cpu),
            cpu_total: (self.cpu_total - earlier.cpu_total).max(0.0),
            rss_after: self.rss_after,
            rss_end: self.rss_end,
        }
    }

    /// The rows of the table: every phase, then "other", with wall seconds.
    pub fn rows(&self) -> impl Iterator<Item = (&'static str, &'static str, f64)> + '_ {
        self.rows_with_cpu()
            .map(|(label, key, s, _)| (label, key, s))
    }

    /// [`Self::rows`] with the CPU seconds of each row.
    pub fn rows_with_cpu(
        &self,
    ) -> impl Iterator<Item = (&'static str, &'static str, f64, f64)> + '_ {
        Phase::ALL
            .iter()
            .map(|&p| (p.label(), p.key(), self.seconds(p), self.cpu_seconds(p)))
            .chain(std::iter::once((
                "other",
                "other",
                self.other(),
                self.cpu_other(),
            )))
    }

    /// The phase table: wall seconds and share of the total per phase, the
    /// CPU seconds, and the process's peak and current resident memory
    /// after the phase's last end (total: at the end of the account).
    pub fn table(&self) -> String {
        let share = |s: f64| {
            if self.total > 0.0 {
                100.0 * s / self.total
            } else {
                0.0
            }
        };
        let mut text = format!(
            "{:<20} {:>10} {:>7} {:>10} {:>15} {:>10}\n",
            "phase", "wall s", "share", "cpu s", "peak RSS after", "RSS after"
        );
        let row =
            |text: &mut String, label: &str, s: f64, share: f64, cpu: f64, rss: Option<Rss>| {
                let _ = write!(
                    text,
                    "{label:<20} {s:>10.3} {share:>6.1}% {cpu:>10.3} {:>15} {:>10}",
                    megabytes(rss.map(|r| r.peak)),
                    megabytes(rss.map(|r| r.current))
                );
            };
        for (phase, (label, _, s, cpu)) in Phase::ALL
            .iter()
            .map(Some)
            .chain([None])
            .zip(self.rows_with_cpu())
        {
            let rss = phase.and_then(|&p| self.rss_after(p));
            row(&mut text, label, s, share(s), cpu, rss);
            text.push('\n');
        }
        row(
            &mut text,
            "total",
            self.total,
            100.0,
            self.cpu_total,
            self.rss_end,
        );
        text
    }

    /// Total wall time over the time of the linear solves (None without any).
    pub fn wall_over_solve(&self) -> Option<f64> {
        let solve = self.seconds(Phase::Solve);
        (solve > 0.0).then(|| self.total / solve)
    }

    /// The account as a JSON object: `{"total_s": T, "phases_s": {"mesh":
    /// s, ..., "other": s}, "wall_over_solve": r, "total_cpu_s": C,
    /// "phases_cpu_s": {...}, "peak_rss_mb": P, "rss_mb": R,
    /// "phases_peak_rss_after_mb": {"mesh": p, ...}, "phases_rss_after_mb":
    /// {...}}` (r null without solves; memory in MB of 10^6 bytes, null where
    /// a phase never ended or the system does not say).
    pub fn to_json_value(&self) -> serde_json::Value {
        let (mut wall, mut cpu) = (serde_json::Map::new(), serde_json::Map::new());
        for (_, key, s, c) in self.rows_with_cpu() {
            wall.insert(key.to_string(), s.into());
            cpu.insert(key.to_string(), c.into());
        }
        let (mut peak_after, mut rss_after) = (serde_json::Map::new(), serde_json::Map::new());
        for p in Phase::ALL {
            let rss = self.rss_after(p);
            peak_after.insert(p.key().to_string(), megabytes_json(rss.map(|r| r.peak)));
            rss_after.insert(p.key().to_string(), megabytes_json(rss.map(|r| r.current)));
        }
        serde_json::json!({
            "total_s": self.total,
            "phases_s": wall,
            "wall_over_solve": self.wall_over_solve(),
            "total_cpu_s": self.cpu_total,
            "phases_cpu_s": cpu,
            "peak_rss_mb": megabytes_json(self.rss_end.map(|r| r.peak)),
            "rss_mb": megabytes_json(self.rss_end.map(|r| r.current)),
            "phases_peak_rss_after_mb": peak_after,
            "phases_rss_after_mb": rss_after,
        })
    }

    /// [`Self::to_json_value`] as one line of text.
    pub fn to_json(&self) -> String {
        self.to_json_value().to_string()
    }
}

/// The clock of a thread, while a [`PhaseClock`] is started there.
struct Clock {
    /// Tells this clock's guards from those of a clock it replaced.
    id: u64,
    start: Mark,
    phases: [f64; N_PHASES],
    cpu: [f64; N_PHASES],
    /// The process's memory at the last end of each phase.
    rss_after: [Option<Rss>; N_PHASES],
    /// The phases entered and not left, innermost last, with the time from
    /// which the innermost is being charged.
    open: Vec<(Phase, Mark)>,
}

/// A moment in wall and process CPU time.
#[derive(Clone, Copy)]
struct Mark {
    wall: Instant,
    cpu: f64,
}

impl Mark {
    fn now() -> Self {
        Self {
            wall: Instant::now(),
            cpu: process_cpu_seconds(),
        }
    }

    /// Wall and CPU seconds from `self` to `later`.
    fn until(&self, later: &Mark) -> (f64, f64) {
        (
            later.wall.duration_since(self.wall).as_secs_f64(),
            (later.cpu - self.cpu).max(0.0),
        )
    }
}

impl Clock {
    fn charge_innermost(&mut self, now: Mark) {
        if let Some((phase, since)) = self.open.last_mut() {
            let (wall, cpu) = since.until(&now);
            self.phases[phase.index()] += wall;
            self.cpu[phase.index()] += cpu;
            *since = now;
        }
    }

    fn snapshot(&self, now: Mark) -> Timings {
        let (mut phases, mut cpu) = (self.phases, self.cpu);
        if let Some((phase, since)) = self.open.last() {
            let (w, c) = since.until(&now);
            phases[phase.index()] += w;
            cpu[phase.index()] += c;
        }
        let (total, cpu_total) = self.start.until(&now);
        Timings {
            phases,
            total,
            cpu,
            cpu_total,
            rss_after: self.rss_after,
            rss_end: Rss::now(),
        }
    }
}

thread_local! {
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
    static NEXT_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// The phase account of this thread from [`PhaseClock::start`] on; the
/// clock it replaced, if any, runs on when this one finishes (so a run
/// timed inside a timed bench keeps the bench's account apart).
pub struct PhaseClock {
    id: u64,
    replaced: Option<Clock>,
    /// Bound to its thread, as the thread-local clock is.
    _thread: PhantomData<*const ()>,
}

impl PhaseClock {
    /// Starts the account on this thread now.
    pub fn start() -> PhaseClock {
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        let clock = Clock {
            id,
            start: Mark::now(),
            phases: [0.0; N_PHASES],
            cpu: [0.0; N_PHASES],
            rss_after: [None; N_PHASES],
            open: Vec::new(),
        };
        let replaced = CLOCK.with(|c| c.borrow_mut().replace(clock));
        PhaseClock {
            id,
            replaced,
            _thread: PhantomData,
        }
    }

    /// The account so far (a phase in progress counted up to now).
    pub fn now(&self) -> Timings {
        snapshot().unwrap_or_default()
    }

    /// Stops the clock: the account from its start to now.
    pub fn finish(mut self) -> Timings {
        self.take().unwrap_or_default()
    }

    fn take(&mut self) -> Option<Timings> {
        let now = Mark::now();
        CLOCK.with(|c| {
            let mut c = c.borrow_mut();
            let timings = c
                .as_ref()
                .filter(|clock| clock.id == self.id)
                .map(|clock| clock.snapshot(now));
            if timings.is_some() {
                *c = self.replaced.take();
            }
            timings
        })
    }
}

impl Drop for PhaseClock {
    fn drop(&mut self) {
        self.take();
    }
}

/// The account of this thread's clock so far, if one runs.
pub fn snapshot() -> Option<Timings> {
    let now = Mark::now();
    CLOCK.with(|c| c.borrow().as_ref().map(|clock| clock.snapshot(now)))
}

/// Adds `inner`, the account of work done on another thread while this one
/// waited for it (a rank of a distributed run), to this thread's clock:
/// the wait moves from "other" to those phases.
pub fn absorb(inner: &Timings) {
    CLOCK.with(|c| {
        if let Some(clock) = c.borrow_mut().as_mut() {
            for (p, i) in clock.phases.iter_mut().zip(&inner.phases) {
                *p += i;
            }
            // The CPU time of the other thread is the process's already.
            for (p, i) in clock.cpu.iter_mut().zip(&inner.cpu) {
                *p += i;
            }
            // Memory is the process's too: the later reading has the higher
            // peak (the peak never falls).
            for (mine, theirs) in clock.rss_after.iter_mut().zip(&inner.rss_after) {
                if theirs.map(|r| r.peak) > mine.map(|r| r.peak) {
                    *mine = *theirs;
                }
            }
        }
    });
}

/// Moves `seconds` of `from` to `to` on this thread's clock: for a part of
/// a phase that the work timed itself (synchronised), such as the linear
/// solves inside a device loop marked as assembly. Never moves more than
/// `from` holds.
pub fn reassign(from: Phase, to: Phase, seconds: f64) {
    CLOCK.with(|c| {
        if let Some(clock) = c.borrow_mut().as_mut() {
            let moved = seconds.clamp(0.0, clock.phases[from.index()]);
            clock.phases[from.index()] -= moved;
            clock.phases[to.index()] += moved;
            // The CPU time in the same proportion.
            let (from_cpu, ratio) = (
                clock.cpu[from.index()],
                moved / (moved + clock.phases[from.index()]).max(f64::MIN_POSITIVE),
            );
            let moved_cpu = from_cpu * ratio;
            clock.cpu[from.index()] -= moved_cpu;
            clock.cpu[to.index()] += moved_cpu;
        }
    });
}

/// The start of a step's account at debug level (None otherwise): pass it
/// to [`log_step`] when the step ends.
pub fn step_start() -> Option<Timings> {
    log::log_enabled!(log::Level::Debug)
        .then(snapshot)
        .flatten()
}

/// Logs (debug) the phase table of the step that began at `start`.
pub fn log_step(start: Option<Timings>, step: impl std::fmt::Display) {
    if let (Some(start), Some(now)) = (start, snapshot()) {
        log::debug!("phases of {step}:\n{}", now.since(&start).table());
    }
}

/// Whether a clock runs on this thread.
pub fn is_running() -> bool {
    CLOCK.with(|c| c.borrow().is_some())
}

/// Marks `phase` until the guard drops (see the module documentation).
#[must_use = "the phase ends when the guard drops"]
pub struct PhaseGuard<'g> {
    /// The clock the phase was entered on; None where none ran.
    clock: Option<u64>,
    gpu: Option<&'g Gpu>,
}

/// Enters `phase` on this thread's clock (a no-op where none runs).
pub fn enter(phase: Phase) -> PhaseGuard<'static> {
    enter_with(phase, None)
}

/// [`enter`] for a phase that launches work on `gpu`: its stream is
/// synchronised as the phase starts and ends, while a clock runs.
pub fn enter_synced(phase: Phase, gpu: &Gpu) -> PhaseGuard<'_> {
    enter_with(phase, Some(gpu))
}

fn enter_with(phase: Phase, gpu: Option<&Gpu>) -> PhaseGuard<'_> {
    if !is_running() {
        return PhaseGuard { clock: None, gpu };
    }
    sync(gpu);
    let now = Mark::now();
    let clock = CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        let clock = c.as_mut()?;
        clock.charge_innermost(now);
        clock.open.push((phase, now));
        Some(clock.id)
    });
    PhaseGuard { clock, gpu }
}

/// Runs `work` as `phase`.
pub fn timed<T>(phase: Phase, work: impl FnOnce() -> T) -> T {
    let _phase = enter(phase);
    work()
}

/// Runs `work`, one step of the phase in progress, and at debug level logs
/// its wall and CPU time under the phase's label, with the process's memory
/// after it (`device set-up: assembly map 812.3 ms (cpu 790.1 ms, peak RSS
/// 912 MB, RSS 640 MB)`): the sub-spans that say which steps a phase's
/// seconds went to, (cpu ≈ wall) which of them run on one thread, and which
/// raised the peak.
/// Costs nothing but the call below the debug level.
pub fn span<T>(step: &str, work: impl FnOnce() -> T) -> T {
    span_with(step, None, work)
}

/// [`span`] for a step that launches work on `gpu`: at debug level the
/// stream is synchronised before and after, so that its kernels and copies
/// are charged to it.
pub fn span_synced<T>(step: &str, gpu: &Gpu, work: impl FnOnce() -> T) -> T {
    span_with(step, Some(gpu), work)
}

fn span_with<T>(step: &str, gpu: Option<&Gpu>, work: impl FnOnce() -> T) -> T {
    if !log::log_enabled!(log::Level::Debug) {
        return work();
    }
    sync(gpu);
    let start = Mark::now();
    let out = work();
    sync(gpu);
    let (wall, cpu) = start.until(&Mark::now());
    let phase = CLOCK.with(|c| {
        c.borrow()
            .as_ref()
            .and_then(|clock| clock.open.last().map(|(phase, _)| phase.label()))
    });
    let memory = Rss::now().map_or(String::new(), |r| {
        format!(
            ", peak RSS {}, RSS {}",
            megabytes(Some(r.peak)),
            megabytes(Some(r.current))
        )
    });
    log::debug!(
        "{}: {step} {:.1} ms (cpu {:.1} ms{memory})",
        phase.unwrap_or("other"),
        wall * 1e3,
        cpu * 1e3
    );
    out
}

/// Waits for the GPU's stream so that its work is charged to the phase that
/// launched it; an error here is the work's own and surfaces again at the
/// work's next synchronising call, so it is only logged.
fn sync(gpu: Option<&Gpu>) {
    if let Some(gpu) = gpu {
        if let Err(e) = gpu.synchronize() {
            log::debug!("timing synchronisation: {e}");
        }
    }
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        let Some(id) = self.clock else {
            return;
        };
        sync(self.gpu);
        let now = Mark::now();
        CLOCK.with(|c| {
            let mut c = c.borrow_mut();
            let Some(clock) = c.as_mut().filter(|clock| clock.id == id) else {
                return;
            };
            clock.charge_innermost(now);
            if let Some((phase, _)) = clock.open.pop() {
                clock.rss_after[phase.index()] = Rss::now();
            }
            if let Some((_, since)) = clock.open.last_mut() {
                *since = now;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn busy(ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    #[test]
    fn phases_are_exclusive_and_add_up_to_the_total() {
        let clock = PhaseClock::start();
        let block = Instant::now();
        {
            let _assembly = enter(Phase::Assembly);
            busy(20);
            timed(Phase::Solve, || busy(30));
            busy(10);
        }
        let block = block.elapsed().as_secs_f64();
        busy(15);
        let t = clock.finish();
        assert!(t.seconds(Phase::Solve) >= 0.030, "{t:?}");
        // The solve is not charged to the assembly around it.
        let assembly = t.seconds(Phase::Assembly);
        assert!(assembly >= 0.030, "{t:?}");
        assert!(
            (assembly + t.seconds(Phase::Solve) - block).abs() < 1e-3,
            "{t:?}"
        );
        assert!(t.other() >= 0.015, "{t:?}");
        let sum: f64 = t.rows().map(|(_, _, s)| s).sum();
        assert!((sum - t.total()).abs() < 1e-9, "{sum} vs {}", t.total());
        assert_eq!(t.seconds(Phase::Mesh), 0.0);
    }

    #[test]
    fn touching_fresh_memory_counts_page_faults() {
        // Pages mapped here and now, not taken from the allocator, which may
        // hand back memory another test has already touched.
        const LEN: usize = 16 << 20;
        // SAFETY: a private anonymous mapping, written within its length and
        // unmapped before the test ends.
        let block = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(block, libc::MAP_FAILED);
        let before = process_minor_faults();
        // Every 4 KiB page written for the first time: at least one fault
        // even where the kernel backs the block with huge pages.
        for page in (0..LEN).step_by(4096) {
            // SAFETY: within the mapping.
            unsafe { std::ptr::write_volatile((block as *mut u8).add(page), 1) };
        }
        let after = process_minor_faults();
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(block, LEN) };
        assert!(after > before, "{before} -> {after}");
    }

    /// CPU seconds of the calling thread alone.
    fn thread_cpu_seconds() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec.
        match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } {
            0 => ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9,
            _ => panic!("no thread CPU clock"),
        }
    }

    #[test]
    fn cpu_time_is_charged_to_the_phase_that_used_it() {
        // The phases charge the process's CPU time, which tests running
        // beside this one add to, as many cores' worth as the machine has.
        // So the checks are bounds that hold whatever they burn: the phase
        // that burned 50 ms of this thread's time has at least that much, and
        // a sleeping phase has at most what every core could have burned in
        // its wall time, plus a scheduler tick per core (up to 10 ms): the
        // CPU clock folds a thread's time in that runs on another core at
        // its ticks, so a reading can lag by that much per running thread.
        let clock = PhaseClock::start();
        timed(Phase::Solve, || {
            let start = thread_cpu_seconds();
            let mut x = 1.0f64;
            while thread_cpu_seconds() - start < 0.05 {
                x = std::hint::black_box(x * 1.000001);
            }
        });
        timed(Phase::Output, || busy(5));
        let t = clock.finish();
        assert!(t.cpu_seconds(Phase::Solve) >= 0.05, "{t:?}");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        assert!(
            t.cpu_seconds(Phase::Output) <= cores * (t.seconds(Phase::Output) + 0.01) + 0.01,
            "{t:?}"
        );
        let sum: f64 = t.rows_with_cpu().map(|(.., cpu)| cpu).sum();
        assert!((sum - t.cpu_total()).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn without_a_clock_phases_cost_nothing_and_record_nothing() {
        assert!(!is_running());
        assert_eq!(timed(Phase::Mesh, || 7), 7);
        assert!(snapshot().is_none());
    }

    #[test]
    fn a_nested_clock_keeps_its_own_account_and_restores_the_outer() {
        let outer = PhaseClock::start();
        let guard = enter(Phase::Output);
        let inner = PhaseClock::start();
        timed(Phase::Mesh, || busy(5));
        // The outer guard ends while the inner clock runs: ignored by it.
        drop(guard);
        let t = inner.finish();
        assert!(t.seconds(Phase::Mesh) >= 0.005);
        assert_eq!(t.seconds(Phase::Output), 0.0);
        assert!(is_running());
        let t = outer.finish();
        assert_eq!(t.seconds(Phase::Mesh), 0.0);
        assert!(!is_running());
    }

    #[test]
    fn snapshots_difference_into_a_step_account() {
        let clock = PhaseClock::start();
        timed(Phase::Solve, || busy(5));
        let before = clock.now();
        timed(Phase::Solve, || busy(10));
        let step = clock.now().since(&before);
        assert!(step.seconds(Phase::Solve) >= 0.010);
        assert!(step.seconds(Phase::Solve) < clock.now().seconds(Phase::Solve));
        assert!(step.total() < clock.now().total());
    }

    #[test]
    fn table_and_json_list_every_phase_and_other() {
        let t = Timings {
            phases: [0.5, 0.25, 0.0, 0.0, 0.125, 1.0, 0.0625],
            total: 2.0,
            cpu: [0.5, 0.5, 0.0, 0.0, 0.25, 1.0, 0.0625],
            cpu_total: 2.5,
            ..Timings::default()
        };
        let table = t.table();
        for p in Phase::ALL {
            assert!(table.contains(p.label()), "{table}");
        }
        assert!(table.contains("solves"), "{table}");
        assert!(table.contains("50.0%"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_eq!(json["total_s"], 2.0);
        assert_eq!(json["phases_s"]["solve"], 1.0);
        assert_eq!(json["phases_s"]["other"], 0.0625);
        assert_eq!(json["wall_over_solve"], 2.0);
        assert_eq!(json["phases_cpu_s"]["geometry"], 0.5);
        assert_eq!(json["phases_cpu_s"]["other"], 0.1875);
        assert_eq!(json["total_cpu_s"], 2.5);
        assert!(Timings::default().to_json_value()["wall_over_solve"].is_null());
        let other = t.other();
        let clock = PhaseClock::start();
        busy(20);
        // A rank thread's solve, done while this thread waited.
        let rank = Timings {
            phases: [0.0, 0.0, 0.0, 0.0, 0.0, 0.015, 0.0],
            total: 0.015,
            ..Timings::default()
        };
        absorb(&rank);
        let t = clock.finish();
        assert!(t.seconds(Phase::Solve) >= 0.015);
        assert!(t.other() <= t.total() - 0.015, "{t:?}");
        assert_eq!(other, 2.0 - 1.9375);
    }

    /// Set in the child process that [`each_phase_end_records_the_peak_and_current_memory`]
    /// runs the test in.
    const MEMORY_CHILD: &str = "FVPOISSON_TIMINGS_MEMORY_CHILD";

    #[test]
    fn each_phase_end_records_the_peak_and_current_memory() {
        // The process's RSS is shared with the tests running beside this
        // one, which allocate and free hundreds of MB on a many-core
        // machine; so the test runs again alone, in a child process of this
        // test binary, where the 64 MB it holds are the only change.
        if std::env::var_os(MEMORY_CHILD).is_none() {
            let name = "timings::tests::each_phase_end_records_the_peak_and_current_memory";
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--test-threads=1", "--nocapture"])
                .env(MEMORY_CHILD, "1")
                .output()
                .expect("the test binary runs again");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        const BYTES: usize = 64 << 20;
        let clock = PhaseClock::start();
        timed(Phase::Mesh, || {});
        let before = clock.now().rss_after(Phase::Mesh).expect("Linux has /proc");
        assert!(
            before.current > 0 && before.peak >= before.current,
            "{before:?}"
        );
        let kept = timed(Phase::Assembly, || {
            // Written, so that every page is resident.
            let block = vec![1u8; BYTES];
            std::hint::black_box(&block);
            block
        });
        timed(Phase::Output, || drop(kept));
        let t = clock.finish();
        let assembly = t.rss_after(Phase::Assembly).unwrap();
        // The 64 MB were resident at the assembly's end and count in every
        // peak after it, whatever other threads of the process did.
        assert!(
            assembly.current >= before.current + BYTES as u64 / 2,
            "{assembly:?} {before:?}"
        );
        assert!(
            assembly.peak >= before.peak.max(assembly.current),
            "{assembly:?}"
        );
        let output = t.rss_after(Phase::Output).unwrap();
        assert!(output.peak >= assembly.peak, "{output:?} {assembly:?}");
        let end = t.rss_end().unwrap();
        assert!(
            end.peak >= output.peak && end.peak >= end.current,
            "{end:?}"
        );
        assert_eq!(t.rss_after(Phase::Solve), None);
        // Ten thousand readings in well under a second: a phase's end costs
        // microseconds.
        let start = Instant::now();
        for _ in 0..10_000 {
            std::hint::black_box(Rss::now());
        }
        assert!(start.elapsed().as_secs_f64() < 1.0, "{:?}", start.elapsed());

        let table = t.table();
        let header = table.lines().next().unwrap();
        assert!(
            header.contains("peak RSS after") && header.contains("RSS after"),
            "{table}"
        );
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.starts_with(label))
                .unwrap()
                .to_string()
        };
        let mb = |bytes: u64| format!("{:.0} MB", bytes as f64 / 1e6);
        assert!(row("assembly").contains(&mb(assembly.peak)), "{table}");
        assert!(row("total").contains(&mb(end.peak)), "{table}");
        assert!(row("solves").trim_end().ends_with("-"), "{table}");
        let json = t.to_json_value();
        assert_eq!(json["peak_rss_mb"], (end.peak as f64 / 1e6).round());
        assert_eq!(
            json["phases_peak_rss_after_mb"]["assembly"],
            (assembly.peak as f64 / 1e6).round()
        );
        assert_eq!(
            json["phases_rss_after_mb"]["assembly"],
            (assembly.current as f64 / 1e6).round()
        );
        assert!(json["phases_peak_rss_after_mb"]["solve"].is_null());
    }

    #[test]
    fn reassigned_time_moves_between_phases_up_to_what_there_is() {
        let clock = PhaseClock::start();
        timed(Phase::Assembly, || busy(10));
        let before = clock.now();
        reassign(Phase::Assembly, Phase::Solve, 0.004);
        reassign(Phase::Assembly, Phase::Output, 1.0);
        let t = clock.finish();
        assert_eq!(t.seconds(Phase::Solve), 0.004);
        assert_eq!(t.seconds(Phase::Assembly), 0.0);
        let moved = t.seconds(Phase::Solve) + t.seconds(Phase::Output);
        assert!((moved - before.seconds(Phase::Assembly)).abs() < 1e-12);
    }
}
