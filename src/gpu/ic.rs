//! Incomplete Cholesky on the GPU by level scheduling (`kernels/ic.cu`):
//! OpenFOAM's DIC and IC(0), factorised and applied on the device, equal bit
//! for bit to `solve::ic::{Dic, Ic0}` on the same matrix and row order.
//!
//! Wikberg (2024, §6) judged IC infeasible on mod-SELL because the triangular
//! solves are sequential. Level scheduling (`sparse::levels`) runs each
//! sweep as one launch per level, one thread per row. The factor, whose rows
//! depend only on earlier rows of their lower pattern, is computed in one
//! launch without synchronisation between levels (Liu et al. 2016: a thread
//! per row waits for those rows; compute capability 7.0 on, a bounded wait)
//! or else level by level, equal bit for bit either way. The cost of an
//! application is the launch count, twice the number of levels per
//! application; the row order sets it (a banded RCM order on a 3D mesh has a
//! few hundred levels, a multicolour order as many as colours), which is why
//! the bench reports the levels with the times.
//!
//! Set-up: [`DeviceIncompleteCholesky::new`] derives everything on the host
//! from the CSR and uploads it (the reference path);
//! [`DeviceIncompleteCholesky::on_device`] builds the CSR, the diagonal
//! slots (DILU: and the transposed slots) and the factor from the resident
//! mod-SELL matrix on the device (the row pointers by a scan of the row
//! lengths, then the CSR, its diagonal slots and the diagonal, colour and
//! pattern checks in one pass that reads each mod-SELL slot once and places
//! each entry at its rank in its row, DILU's transposed slots by a search of
//! the written rows: two read-backs, no factor or structure zero-filled;
//! IC(0) factorises in place and writes each L entry at its transposed slot
//! too, found as it goes), takes a colour-contiguous order's
//! colours as the levels (else it schedules the lower sweep's levels on the
//! device in one launch without synchronisation between levels
//! ([`LevelScheduler::SyncFree`], Liu et al. 2016; compute capability 7.0
//! on), else by wavefronts, one launch per level and work proportional to
//! the entries, the host's schedule only beyond [`MAX_DEVICE_LEVELS`]
//! levels or for a pattern that is not symmetric; the upper sweep runs the
//! lower levels reversed where every entry above the diagonal has its
//! partner, else a schedule of its own), and keeps what
//! [`DeviceIncompleteCholesky::refactorise`] needs for value-only
//! re-set-ups. Block-IC's structure (in-slice counts and in-block levels)
//! is computed on the device ([`BlockIcStructure`]).

use std::rc::Rc;

use crate::gpu::kernel_args::KernelElement;
use crate::gpu::KernelArgs;
use cudarc::driver::{CudaSlice, DeviceRepr};

use super::amg::{modsell_csr_row_ptr, unzeroed, DeviceCsr, Scan};
use super::matrix::{f32_copy, f32_copy_into, DeviceModSell};
use super::setup::{checked_diagonal, SetupSpans};
use super::smooth::{block_shared_bytes, DevicePreconditioner};
use super::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::block_jacobi::BlockIc;
use crate::solve::colouring::Colouring;
use crate::solve::ilu::{pivot_thresholds, transposed_slots};
use crate::solve::{InnerSolver, Precision, PreconditionerKind, SolveError};
use crate::sparse::blocks::{block_diagonal, in_slice_counts};
use crate::sparse::levels::LevelSchedule;
use crate::sparse::{Csr, Permutation};

/// Which incomplete Cholesky.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcKind {
    /// OpenFOAM's DIC: the off-diagonals of A with a modified diagonal.
    Dic,
    /// IC(0): L on the lower pattern of A.
    Ic0,
    /// OpenFOAM's DILU: DIC's sweeps with d*_j = a_jj − Σ a_ij a_ji / d*_i
    /// (`solve::ilu::dilu`; equal to DIC on a symmetric matrix).
    Dilu,
}

impl IcKind {
    /// The incomplete Cholesky a PCG preconditioner names, if any.
    pub fn of(kind: PreconditionerKind) -> Option<Self> {
        match kind {
            PreconditionerKind::Dic => Some(Self::Dic),
            PreconditionerKind::Ic0 => Some(Self::Ic0),
            PreconditionerKind::Dilu => Some(Self::Dilu),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Self::Dic => "DIC",
            Self::Ic0 => "IC(0)",
            Self::Dilu => "DILU",
        }
    }
}

/// A level schedule on the device: the rows level by level, and each
/// level's row count and first row on the host (one launch per level). The
/// row list is shared by a schedule and its reversal ([`Self::reversed`]).
pub(super) struct DeviceLevels {
    counts: Vec<i32>,
    firsts: Vec<i32>,
    rows: Rc<CudaSlice<i32>>,
}

/// The row list 0..n written on the device (`ic_identity_rows`): a
/// colour-contiguous order's rows, listed without an upload.
pub(super) fn identity_rows(gpu: &Gpu, n: usize) -> Result<CudaSlice<i32>, GpuError> {
    // Every row written by ic_identity_rows.
    let rows = unzeroed::<i32>(gpu, n)?;
    let n32 = n as i32;
    gpu.launch_vector("ic_identity_rows", n, |a| {
        a.arg(&n32).arg(&rows);
    })?;
    Ok(rows)
}

impl DeviceLevels {
    pub(super) fn upload(gpu: &Gpu, s: &LevelSchedule) -> Result<Self, GpuError> {
        let rows: Vec<i32> = s.rows().iter().map(|&r| r as i32).collect();
        let bounds = s.level_ptr().windows(2);
        Ok(Self {
            counts: bounds.clone().map(|w| (w[1] - w[0]) as i32).collect(),
            firsts: bounds.map(|w| w[0] as i32).collect(),
            rows: Rc::new(gpu.upload(&rows)?),
        })
    }

    /// The same levels in the opposite order, sharing the row list: the
    /// upper sweep's schedule from the lower sweep's where the pattern is
    /// symmetric (checked by [`upper_mirrored`]), or a colour order's
    /// backward levels from its forward ones. Nothing is launched.
    pub(super) fn reversed(&self) -> Self {
        let mut counts = self.counts.clone();
        let mut firsts = self.firsts.clone();
        counts.reverse();
        firsts.reverse();
        Self {
            counts,
            firsts,
            rows: Rc::clone(&self.rows),
        }
    }

    /// The levels of a colour-contiguous order (`colour_ptr`: each colour's
    /// first row, then n): the colours ascending (`reverse`: descending), the
    /// rows in order, listed on the device (the other direction is
    /// [`Self::reversed`], on the same list).
    pub(super) fn from_colours(
        gpu: &Gpu,
        colour_ptr: &[usize],
        reverse: bool,
    ) -> Result<Self, GpuError> {
        let n = colour_ptr.last().copied().unwrap_or(0);
        let rows = identity_rows(gpu, n)?;
        let mut bounds: Vec<(i32, i32)> = colour_ptr
            .windows(2)
            .map(|w| ((w[1] - w[0]) as i32, w[0] as i32))
            .collect();
        if reverse {
            bounds.reverse();
        }
        Ok(Self {
            counts: bounds.iter().map(|b| b.0).collect(),
            firsts: bounds.iter().map(|b| b.1).collect(),
            rows: Rc::new(rows),
        })
    }

    /// The level schedule of `csr`'s lower (`upper`: upper) triangle in
    /// one launch without synchronisation between levels
    /// (`ic_levels_sync_free`: a thread per row waits for the rows it
    /// depends on; Liu et al. 2016), then the rows grouped by level (a
    /// count, a scan and a scatter; three small read-backs). Any pattern
    /// (nothing stalls: each row reads only its own entries). None on a
    /// device of compute capability below 7.0 (a thread waiting on another
    /// of its warp needs independent thread scheduling) or when a wait ran
    /// past its bound (the kernel then gives up instead of hanging): the
    /// caller takes the wavefronts.
    pub(super) fn sync_free(
        gpu: &Gpu,
        csr: &DeviceCsr,
        upper: bool,
    ) -> Result<Option<Self>, GpuError> {
        let n = csr.n;
        if n == 0 || gpu.compute_capability().0 < 7 {
            return Ok(None);
        }
        // level + 1 per row (0: pending); [block ticket, deepest level, gave up].
        let level = gpu.zeros::<i32>(n)?;
        let state = gpu.zeros::<i32>(3)?;
        let (n32, upper) = (n as i32, i32::from(upper));
        gpu.launch_vector("ic_levels_sync_free", n, |a| {
            a.arg(&n32).arg(&csr.row_ptr).arg(&csr.cols).arg(&upper);
            a.arg(&level).arg(&state);
        })?;
        let outcome = gpu.download(&state)?;
        if outcome[2] != 0 {
            return Ok(None);
        }
        let n_levels = outcome[1] as usize + 1;
        let counts = gpu.zeros::<u32>(n_levels)?;
        gpu.launch_vector("ic_levels_count", n, |a| {
            a.arg(&n32).arg(&level).arg(&counts);
        })?;
        let level_ptr = gpu.zeros::<u64>(n_levels + 1)?;
        let placed = Scan::new(gpu, n_levels)?.run(gpu, &counts, n_levels, &level_ptr)?;
        if placed as usize != n {
            return Err(GpuError::Invalid(format!(
                "the device level schedule placed {placed} of {n} rows"
            )));
        }
        let fill = gpu.zeros::<u32>(n_levels)?;
        let rows = unzeroed::<i32>(gpu, n)?;
        gpu.launch_vector("ic_levels_scatter", n, |a| {
            a.arg(&n32)
                .arg(&level)
                .arg(&level_ptr)
                .arg(&fill)
                .arg(&rows);
        })?;
        let bounds = gpu.download(&level_ptr)?;
        Ok(Some(Self {
            counts: bounds[..=n_levels]
                .windows(2)
                .map(|w| (w[1] - w[0]) as i32)
                .collect(),
            firsts: bounds[..n_levels].iter().map(|&b| b as i32).collect(),
            rows: Rc::new(rows),
        }))
    }

    /// The level schedule of `csr`'s lower (`upper`: upper) triangle
    /// computed on the device by wavefronts (`ic_wave_init`, then one
    /// `ic_wave_step` per level on a fixed grid, each appending the next
    /// level; kernels/ic.cu): the work is proportional to the entries, not
    /// to the levels times the rows, and the host reads one count every
    /// [`WAVE_BATCH`] levels and the level bounds once. None when the
    /// schedule has more than `max_levels` levels, or stalls (a pattern that
    /// is not symmetric): the caller takes the host schedule then.
    pub(super) fn on_device(
        gpu: &Gpu,
        csr: &DeviceCsr,
        upper: bool,
        max_levels: usize,
    ) -> Result<Option<Self>, GpuError> {
        let n = csr.n;
        if n == 0 {
            return Ok(Some(Self {
                counts: Vec::new(),
                firsts: Vec::new(),
                rows: Rc::new(gpu.zeros::<i32>(1)?),
            }));
        }
        let pending = gpu.zeros::<i32>(n)?;
        let rows = gpu.zeros::<i32>(n)?;
        // [rows placed, launch ticket].
        let state = gpu.zeros::<i32>(2)?;
        let level_ptr = gpu.zeros::<i32>(max_levels + 2)?;
        let (n32, upper) = (n as i32, i32::from(upper));
        gpu.launch_vector("ic_wave_init", n, |a| {
            a.arg(&n32).arg(&csr.row_ptr).arg(&csr.cols).arg(&upper);
            a.arg(&pending).arg(&rows).arg(&state).arg(&level_ptr);
        })?;
        let grid = vector_grid(n).min(WAVE_GRID);
        // Levels whose step has been launched (level L's step appends L + 1).
        let mut stepped = 0;
        let mut placed = gpu.download(&state)?[0] as usize;
        while placed < n {
            if stepped >= max_levels {
                return Ok(None);
            }
            for _ in 0..WAVE_BATCH.min(max_levels - stepped) {
                let level = stepped as i32;
                gpu.launch("ic_wave_step", grid, VECTOR_BLOCK, 0, |a| {
                    a.arg(&csr.row_ptr).arg(&csr.cols).arg(&upper).arg(&level);
                    a.arg(&rows).arg(&pending).arg(&state).arg(&level_ptr);
                })?;
                stepped += 1;
            }
            let now = gpu.download(&state)?[0] as usize;
            if now == placed {
                return Ok(None);
            }
            placed = now;
        }
        let bounds = gpu.download(&level_ptr)?;
        // level_ptr[L] = n from the last level's end on.
        let n_levels = (1..bounds.len())
            .find(|&l| bounds[l] as usize == n)
            .ok_or_else(|| GpuError::Invalid("the device level schedule lost rows".into()))?;
        Ok(Some(Self {
            counts: bounds[..=n_levels]
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect(),
            firsts: bounds[..n_levels].to_vec(),
            rows: Rc::new(rows),
        }))
    }

    /// Each row's level (read back; the tests compare it with the host's).
    pub(super) fn row_levels(&self, gpu: &Gpu, n: usize) -> Result<Vec<u32>, GpuError> {
        let rows = gpu.download(&*self.rows)?;
        let mut level = vec![0u32; n];
        for (k, (&count, &first)) in self.counts.iter().zip(&self.firsts).enumerate() {
            for &r in &rows[first as usize..(first + count) as usize] {
                level[r as usize] = k as u32;
            }
        }
        Ok(level)
    }

    pub(super) fn n_levels(&self) -> usize {
        self.counts.len()
    }

    /// Launches `kernel` for each level in turn, one thread per row, with
    /// the level's row count, its first row and the rows, then the
    /// arguments `push` adds.
    pub(super) fn launch_each<'a>(
        &'a self,
        gpu: &'a Gpu,
        kernel: &'static str,
        push: impl Fn(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        for (count, first) in self.counts.iter().zip(&self.firsts) {
            gpu.launch_vector(kernel, *count as usize, |a| {
                a.arg(count).arg(first).arg(&*self.rows);
                push(a);
            })?;
        }
        Ok(())
    }
}

/// Levels of the device schedule launched between two read-backs of the
/// rows placed (a launch past the last level appends nothing).
const WAVE_BATCH: usize = 32;

/// Blocks of `ic_wave_step` (a grid-stride loop over a level's rows; a
/// level of an RCM order on a 3-D mesh has up to a few ten thousand rows).
const WAVE_GRID: u32 = 128;

/// The most levels a factorisation launches one by one rather than in one
/// launch without synchronisation between levels. A colouring's few levels
/// (2 on a hexahedral mesh, a handful on tetrahedra) cost a launch each,
/// while the one launch makes every row wait on flags (zeroed first) and
/// read the rows it depends on past the L1 cache (volatile), then reads a
/// status back.
const LEVELS_LAUNCHED_EACH: usize = 16;

/// The most levels of the device level schedule before the host's is taken
/// instead (a launch per level: a long chain of dependencies is cheaper on
/// the host).
pub const MAX_DEVICE_LEVELS: usize = 4096;

/// z = w widened to f64 over the n rows (`ic_widen`, gated): the end of the
/// mixed-precision sweeps, which run on an f32 iterate w.
pub(super) fn widen(
    gpu: &Gpu,
    n: usize,
    w: &CudaSlice<f32>,
    z: &CudaSlice<f64>,
    done: Option<&CudaSlice<f64>>,
) -> Result<(), GpuError> {
    let n32 = n as i32;
    gpu.launch_vector("ic_widen", n, |a| {
        a.arg(&n32).arg(w).arg(z);
        arg_or_null(a, done);
    })
}

/// Where A's values come from when IC(0), which factorises in place, needs
/// them again: the mod-SELL matrix the set-up read, or the host's CSR.
#[derive(Clone, Copy)]
enum ValuesSource<'a> {
    Device(&'a DeviceModSell),
    Host(&'a Csr),
}

/// DIC or IC(0) of a matrix on the device, factorised there.
pub struct DeviceIncompleteCholesky<'g> {
    gpu: &'g Gpu,
    kind: IcKind,
    n: usize,
    row_ptr: CudaSlice<u64>,
    cols: CudaSlice<u32>,
    /// A's values; IC(0): once factorised, L's strictly lower values in A's
    /// slots and each L(i, k) again at slot (k, i), A's diagonal left (in
    /// place: the sweeps read only L, and the factorisation reads each of a
    /// row's values before it writes that row).
    vals: CudaSlice<f64>,
    /// Built on the device ([`Self::on_device`]) from a mod-SELL matrix:
    /// value-only re-set-ups ([`Self::refactorise`]) take new values from a
    /// matrix of the same pattern.
    from_modsell: bool,
    diag_slot: CudaSlice<u64>,
    /// DIC and DILU: their pivots (1/d*); IC(0): none, L is in `vals`.
    pivots: Option<CudaSlice<f64>>,
    /// IC(0): L's diagonal.
    l_diag: Option<CudaSlice<f64>>,
    /// DILU: for each slot (k, i) the slot (i, k), for a_ij in the factor.
    /// (IC(0)'s factorisation writes L(i, k) at slot (k, i) as well, so its
    /// backward sweep reads L's columns by rows without them.)
    transposed: Option<CudaSlice<u32>>,
    /// DILU: the pivot thresholds (`solve::ilu::pivot_thresholds`).
    tiny: Option<CudaSlice<f64>>,
    forward: DeviceLevels,
    backward: DeviceLevels,
    /// Mixed precision: the f32 sweeps' data.
    mixed: Option<MixedIc>,
    /// The one-launch factorisation's scratch: a done flag per row and
    /// [block ticket, gave up] (allocated at the first factorisation).
    sync_free: Option<(CudaSlice<i32>, CudaSlice<i32>)>,
}

/// f32 copies of the values (read by DIC), the factor and L's diagonal, and
/// the f32 work vector of the sweeps (Zhang and Zhang 2013, Algorithm 6: PCG stays f64).
struct MixedIc {
    /// DIC and DILU only: IC(0)'s sweeps read only its factor.
    vals: Option<CudaSlice<f32>>,
    factor: CudaSlice<f32>,
    l_diag: Option<CudaSlice<f32>>,
    w: CudaSlice<f32>,
}

impl<'g> DeviceIncompleteCholesky<'g> {
    /// [`Self::new`] with the sweeps in `precision`: mixed runs them in f32
    /// on f32 copies of the values and the (f64-computed) factor, reading r
    /// and writing z in f64.
    pub fn with_precision(
        gpu: &'g Gpu,
        a: &Csr,
        kind: IcKind,
        precision: Precision,
    ) -> Result<Self, SolveError> {
        let mut ic = Self::new(gpu, a, kind)?;
        if precision == Precision::Mixed {
            let copies = ic.f32_copies();
            ic.mixed = Some(copies?);
        }
        Ok(ic)
    }

    /// The precision of the sweeps.
    pub fn precision(&self) -> Precision {
        match self.mixed {
            Some(_) => Precision::Mixed,
            None => Precision::Double,
        }
    }

    /// Uploads `a` (square, symmetric pattern, rows in the solve's order),
    /// schedules its sweeps and factorises it on the device. A missing or
    /// non-positive diagonal, or a pivot that is not positive, is the CPU's
    /// error for the same row.
    pub fn new(gpu: &'g Gpu, a: &Csr, kind: IcKind) -> Result<Self, SolveError> {
        let n = a.n_rows();
        let mut spans = SetupSpans::new(kind.name(), Some(gpu));
        let mut diag_slot = Vec::with_capacity(n);
        for r in 0..n {
            match a.slot(r, r) {
                Some(s) if a.values()[s] > 0.0 => diag_slot.push(s as u64),
                found => {
                    return Err(SolveError::NonPositiveDiagonal {
                        precond: kind.name(),
                        row: r,
                        value: found.map_or(0.0, |s| a.values()[s]),
                    })
                }
            }
        }
        if a.nnz() >= u32::MAX as usize {
            return Err(SolveError::Device(format!(
                "{} on the GPU takes matrices of fewer than 2^32 entries, this one has {}",
                kind.name(),
                a.nnz()
            )));
        }
        let transposed = match kind {
            IcKind::Dic => None,
            IcKind::Ic0 => {
                // The symmetric pattern the factorisation needs, checked.
                transposed_slots(a, kind.name())?;
                None
            }
            IcKind::Dilu => Some(
                transposed_slots(a, kind.name())?
                    .into_iter()
                    .map(|s| s as u32)
                    .collect::<Vec<_>>(),
            ),
        };
        let tiny = (kind == IcKind::Dilu).then(|| pivot_thresholds(a));
        let row_ptr: Vec<u64> = a.row_ptr().iter().map(|&p| p as u64).collect();
        spans.host("diagonal slots, transposed slots, pivot thresholds, row pointers");
        let (forward, backward) = (LevelSchedule::lower(a), LevelSchedule::upper(a));
        spans.host("level schedules");
        let upload = || -> Result<Self, GpuError> {
            Ok(Self {
                gpu,
                kind,
                n,
                row_ptr: gpu.upload(&row_ptr)?,
                cols: gpu.upload(a.cols())?,
                vals: gpu.upload(a.values())?,
                from_modsell: false,
                diag_slot: gpu.upload(&diag_slot)?,
                pivots: match kind {
                    IcKind::Dic | IcKind::Dilu => Some(gpu.zeros(n)?),
                    IcKind::Ic0 => None,
                },
                l_diag: match kind {
                    IcKind::Dic | IcKind::Dilu => None,
                    IcKind::Ic0 => Some(gpu.zeros(n)?),
                },
                transposed: transposed.as_deref().map(|t| gpu.upload(t)).transpose()?,
                tiny: tiny.as_deref().map(|t| gpu.upload(t)).transpose()?,
                forward: DeviceLevels::upload(gpu, &forward)?,
                backward: DeviceLevels::upload(gpu, &backward)?,
                mixed: None,
                sync_free: None,
            })
        };
        let mut ic = upload()?;
        spans.host("uploads (CSR, slots, levels)");
        ic.factorise(ValuesSource::Host(a))?;
        spans.device("factorisation");
        spans.finish();
        Ok(ic)
    }

    /// [`Self::with_precision`] built on the device from `m`, the resident
    /// mod-SELL copy of `a` (same rows): the CSR, the diagonal and
    /// transposed slots and the factor come from `m` on the device; the host
    /// reads only sizes and flags (the entry count, then the flags of one
    /// pass that builds the CSR with its slots and checks the diagonal and
    /// the colouring: `csr_pass`). The sweeps' levels are `colouring`'s
    /// colours when given (rows colour-contiguous, checked on the device:
    /// nothing on the host), else scheduled on the device
    /// ([`DeviceLevels::on_device`]; on the host beyond
    /// [`MAX_DEVICE_LEVELS`] levels). DILU's pivot thresholds are computed
    /// on the host. Equal bit for
    /// bit to [`Self::new`] (the same CSR, the same kernels); keeps what
    /// [`Self::refactorise`] needs for new values on the same pattern.
    pub fn on_device(
        gpu: &'g Gpu,
        a: &Csr,
        m: &DeviceModSell,
        kind: IcKind,
        precision: Precision,
        colouring: Option<&Colouring>,
    ) -> Result<Self, SolveError> {
        m.check_rows(kind.name(), a)?;
        let n = m.n;
        let mut spans = SetupSpans::new(kind.name(), Some(gpu));
        let colours = colouring.map(|c| colour_bounds(gpu, n, c)).transpose()?;
        let (row_ptr, nnz) = modsell_csr_row_ptr(gpu, m, &Scan::new(gpu, n)?, kind.name())?;
        spans.device("CSR row pointers (row lengths, scan; 1 read-back: nnz)");
        let with_transposed = kind == IcKind::Dilu;
        let (pass, flags) = csr_pass(gpu, m, row_ptr, nnz, with_transposed, colours.as_ref())?;
        if flags.diagonal.is_some() {
            // The shared check names the first such row with its value.
            checked_diagonal(gpu, m, kind.name())?;
            return Err(SolveError::Device(format!(
                "{}: a diagonal entry is not positive",
                kind.name()
            )));
        }
        if flags.missing_partner.is_some() || (kind == IcKind::Ic0 && flags.unbalanced) {
            // The CPU's message names the entry without a partner.
            transposed_slots(a, kind.name())?;
            return Err(SolveError::InvalidControls(format!(
                "{} needs a symmetric pattern",
                kind.name()
            )));
        }
        if let Some(row) = flags.coupled {
            return Err(coupled_in_colour(row).into());
        }
        spans.device(if with_transposed {
            "CSR, diagonal slots, diagonal and colour checks (one pass), transposed slots (a \
             search each; 1 read-back: flags)"
        } else {
            "CSR, diagonal slots, diagonal and colour checks (one pass; 1 read-back: flags)"
        });
        let CsrSlots {
            csr,
            diag_slot,
            transposed,
        } = pass;
        let tiny = match kind {
            IcKind::Dilu => {
                let t = gpu.upload(&pivot_thresholds(a))?;
                spans.host("pivot thresholds");
                Some(t)
            }
            _ => None,
        };
        let (forward, backward) = match colouring {
            Some(c) => {
                // Checked in the pass above. One row list (0..n) for both
                // sweeps.
                let forward = DeviceLevels::from_colours(gpu, c.colour_ptr(), false)?;
                let backward = forward.reversed();
                spans.device("colours as levels");
                (forward, backward)
            }
            None => {
                let schedule = |upper: bool| -> Result<DeviceLevels, GpuError> {
                    if let Some(levels) = DeviceLevels::sync_free(gpu, &csr, upper)? {
                        return Ok(levels);
                    }
                    match DeviceLevels::on_device(gpu, &csr, upper, MAX_DEVICE_LEVELS)? {
                        Some(levels) => Ok(levels),
                        None => {
                            let s = match upper {
                                false => LevelSchedule::lower(a),
                                true => LevelSchedule::upper(a),
                            };
                            log::debug!(
                                "{}: {} levels (more than {MAX_DEVICE_LEVELS}) or a pattern that \
                                 is not symmetric: scheduled on the host",
                                kind.name(),
                                s.n_levels()
                            );
                            DeviceLevels::upload(gpu, &s)
                        }
                    }
                };
                let forward = schedule(false)?;
                spans.device(
                    "lower level schedule (one launch and 3 read-backs; else wavefronts, host \
                     beyond MAX_DEVICE_LEVELS)",
                );
                // Where every entry above the diagonal has its partner, the
                // upper sweep runs the lower levels reversed: one check
                // instead of a second schedule.
                // DILU found every entry's partner already (its transposed
                // slots), IC(0) needs a symmetric pattern (checked by the
                // pass's counts and the factorisation); DIC checks.
                let reverse_lower = kind != IcKind::Dic || upper_mirrored(gpu, &csr)?;
                let backward = match reverse_lower {
                    true => forward.reversed(),
                    false => schedule(true)?,
                };
                spans.device("upper level schedule (the lower reversed where symmetric)");
                (forward, backward)
            }
        };
        // Not zero-filled: the factorisation writes every pivot (DIC, DILU)
        // or L's diagonal (IC(0), whose L overwrites A's values in place,
        // each entry at its own slot and at its transposed one), whichever
        // way it runs.
        let mut ic = Self {
            gpu,
            kind,
            n,
            pivots: match kind {
                IcKind::Dic | IcKind::Dilu => Some(unzeroed(gpu, n)?),
                IcKind::Ic0 => None,
            },
            l_diag: match kind {
                IcKind::Dic | IcKind::Dilu => None,
                IcKind::Ic0 => Some(unzeroed(gpu, n)?),
            },
            row_ptr: csr.row_ptr,
            cols: csr.cols,
            vals: csr.vals,
            from_modsell: true,
            diag_slot,
            transposed,
            tiny,
            forward,
            backward,
            mixed: None,
            sync_free: None,
        };
        if let Err(e) = ic.factorise(ValuesSource::Device(m)) {
            // IC(0)'s factorisation found an entry without its partner: the
            // CPU's message names it.
            if kind == IcKind::Ic0 && matches!(e, SolveError::InvalidControls(_)) {
                transposed_slots(a, kind.name())?;
            }
            return Err(e);
        }
        spans.device(
            "factorisation (a launch per level of a colouring, else one launch where the \
             device allows; 1-2 read-backs)",
        );
        if precision == Precision::Mixed {
            ic.mixed = Some(ic.f32_copies()?);
            spans.device("f32 copies");
        }
        spans.finish();
        Ok(ic)
    }

    /// Value-only re-set-up on the pattern kept: the CSR values from `m`'s
    /// current values (same pattern and rows as at [`Self::on_device`]),
    /// refactorised, and the f32 copies refreshed; no host work, nothing
    /// allocated. A breakdown is the CPU's error, as at the set-up.
    pub fn refactorise(&mut self, m: &DeviceModSell) -> Result<(), SolveError> {
        self.refactorise_with(m, self.forward.n_levels() > LEVELS_LAUNCHED_EACH)
    }

    /// [`Self::refactorise`] level by level (a launch per level of the
    /// lower sweep), as the set-up does where the one-launch factorisation
    /// is not available; for tests that compare the two (equal bit for
    /// bit). It takes the matrix again: IC(0) factorises in place.
    pub fn refactorise_by_levels(&mut self, m: &DeviceModSell) -> Result<(), SolveError> {
        self.refactorise_with(m, false)
    }

    fn refactorise_with(&mut self, m: &DeviceModSell, one_launch: bool) -> Result<(), SolveError> {
        if !self.from_modsell {
            return Err(SolveError::Device(format!(
                "{}: the value-only re-set-up needs a preconditioner built on the device \
                 (DeviceIncompleteCholesky::on_device)",
                self.kind.name()
            )));
        }
        if m.n != self.n {
            return Err(SolveError::Device(format!(
                "{}: the matrix has {} rows, the preconditioner was built for {}",
                self.kind.name(),
                m.n,
                self.n
            )));
        }
        self.write_values(ValuesSource::Device(m))?;
        self.factorise_with(one_launch, ValuesSource::Device(m))?;
        let gpu = self.gpu;
        if let Some(mx) = &self.mixed {
            if let Some(vals) = &mx.vals {
                f32_copy_into(gpu, &self.vals, vals)?;
            }
            f32_copy_into(gpu, self.factor(), &mx.factor)?;
            if let (Some(from), Some(to)) = (&self.l_diag, &mx.l_diag) {
                f32_copy_into(gpu, from, to)?;
            }
        }
        Ok(())
    }

    /// The f32 copies of the mixed-precision sweeps.
    fn f32_copies(&self) -> Result<MixedIc, GpuError> {
        Ok(MixedIc {
            vals: match self.l_diag {
                None => Some(f32_copy(self.gpu, &self.vals)?),
                Some(_) => None,
            },
            factor: f32_copy(self.gpu, self.factor())?,
            l_diag: self
                .l_diag
                .as_ref()
                .map(|d| f32_copy(self.gpu, d))
                .transpose()?,
            w: self.gpu.zeros(self.n)?,
        })
    }

    /// Each row's level in the forward and in the backward sweep (read back).
    pub fn row_levels(&self) -> Result<(Vec<u32>, Vec<u32>), GpuError> {
        Ok((
            self.forward.row_levels(self.gpu, self.n)?,
            self.backward.row_levels(self.gpu, self.n)?,
        ))
    }

    /// DIC's and DILU's pivots, or IC(0)'s L (in `vals`, in place).
    fn factor(&self) -> &CudaSlice<f64> {
        self.pivots.as_ref().unwrap_or(&self.vals)
    }

    /// Levels of the forward and the backward sweep.
    pub fn levels(&self) -> (usize, usize) {
        (self.forward.n_levels(), self.backward.n_levels())
    }

    /// The factor as the CPU stores it: DIC 1/d* per row; IC(0) L's strictly
    /// lower values in A's slots (zeros elsewhere), then its diagonal.
    pub fn download_factor(&self) -> Result<Vec<f64>, GpuError> {
        let mut f = self.gpu.download(self.factor())?;
        if self.pivots.is_none() {
            // IC(0) in place: A's diagonal and L's transposed entries stand
            // at the diagonal and upper slots, where the CPU stores zeros.
            let (row_ptr, diag_slot) = (
                self.gpu.download(&self.row_ptr)?,
                self.gpu.download(&self.diag_slot)?,
            );
            for (row, &d) in diag_slot.iter().enumerate().take(self.n) {
                f[d as usize..row_ptr[row + 1] as usize].fill(0.0);
            }
        }
        if let Some(d) = &self.l_diag {
            f.extend(self.gpu.download(d)?);
        }
        Ok(f)
    }

    /// The factorisation a launch per level where the schedule has few
    /// levels (a colouring's: [`LEVELS_LAUNCHED_EACH`]), else in one launch
    /// where the device allows ([`Self::factor_sync_free`]), else level by
    /// level.
    fn factorise(&mut self, values: ValuesSource<'_>) -> Result<(), SolveError> {
        self.factorise_with(self.forward.n_levels() > LEVELS_LAUNCHED_EACH, values)
    }

    /// A's values into the CSR copy's slots again: from the mod-SELL
    /// matrix of the same pattern (`ic_modsell_values`, each stored entry to
    /// its column's slot, the diagonal to its slot) or from the host's CSR.
    fn write_values(&mut self, values: ValuesSource<'_>) -> Result<(), GpuError> {
        match values {
            ValuesSource::Device(m) => {
                let dims = m.dims();
                m.launch_pattern(self.gpu, "ic_modsell_values", &dims, |a| {
                    a.arg(&m.values).arg(&m.diag);
                    a.arg(&self.row_ptr).arg(&self.cols).arg(&self.diag_slot);
                    a.arg(&self.vals);
                })
            }
            ValuesSource::Host(a) => self.gpu.write(a.values(), &mut self.vals),
        }
    }

    /// The factorisation in one launch without synchronisation between
    /// levels (`ic_factor_sync_free`, Liu et al. 2016: a thread per row
    /// waits for the rows of its lower pattern, then computes its row as the
    /// level kernels do), breakdowns into `failed`. False below compute
    /// capability 7.0 or where a bounded wait gave up: the caller
    /// factorises level by level (IC(0) after writing A's values again,
    /// which rows done overwrote). Its
    /// scratch (a flag per row) is allocated at the first factorisation,
    /// the set-up's, and reused by [`Self::refactorise`].
    fn factor_sync_free(&mut self, failed: &CudaSlice<i32>) -> Result<bool, GpuError> {
        let (gpu, n) = (self.gpu, self.n);
        if n == 0 || gpu.compute_capability().0 < 7 {
            return Ok(false);
        }
        if self.sync_free.is_none() {
            // Zeroed below, before each factorisation.
            self.sync_free = Some((unzeroed::<i32>(gpu, n)?, unzeroed::<i32>(gpu, 2)?));
        }
        if let Some((done, state)) = self.sync_free.as_mut() {
            gpu.zero(done)?;
            gpu.zero(state)?;
        }
        let Some((done, state)) = self.sync_free.as_ref() else {
            return Ok(false);
        };
        let kind: i32 = match self.kind {
            IcKind::Dic => 0,
            IcKind::Dilu => 1,
            IcKind::Ic0 => 2,
        };
        let n32 = n as i32;
        gpu.launch_vector("ic_factor_sync_free", n, |a| {
            a.arg(&n32).arg(&kind);
            a.arg(&self.row_ptr).arg(&self.cols).arg(&self.vals);
            a.arg(&self.diag_slot);
            arg_or_null(a, self.transposed.as_ref());
            arg_or_null(a, self.tiny.as_ref());
            a.arg(self.factor());
            arg_or_null(a, self.l_diag.as_ref());
            a.arg(done).arg(state).arg(failed);
        })?;
        Ok(gpu.download(state)?[1] == 0)
    }

    /// The factorisation, in one launch where `one_launch` and the device
    /// allow, else level by level; `values`: where A's values come from
    /// again for the start over level by level after a one-launch
    /// factorisation gave up (IC(0) factorises in place: rows done had
    /// overwritten theirs).
    fn factorise_with(
        &mut self,
        one_launch: bool,
        values: ValuesSource<'_>,
    ) -> Result<(), SolveError> {
        let gpu = self.gpu;
        // [first row that broke down, first row of IC(0) with an entry
        // whose partner is missing], each + 1, from n + 1.
        let none = self.n as i32 + 1;
        let mut failed = gpu.upload(&[none, none])?;
        if one_launch {
            if self.factor_sync_free(&failed)? {
                return self.check_factor(&failed);
            }
            if self.pivots.is_none() {
                self.write_values(values)?;
            }
        }
        // Rows that gave up left `failed` as it was for the others; start
        // over.
        gpu.write(&[none, none], &mut failed)?;
        let kernel = match self.kind {
            IcKind::Dic => "ic_dic_factor",
            IcKind::Dilu => "ic_dilu_factor",
            IcKind::Ic0 => "ic_ic0_factor",
        };
        self.forward.launch_each(gpu, kernel, |a| {
            a.arg(&self.row_ptr)
                .arg(&self.cols)
                .arg(&self.vals)
                .arg(&self.diag_slot);
            match self.kind {
                IcKind::Dic => a.arg(self.factor()),
                IcKind::Dilu => a
                    .arg(self.transposed.as_ref().expect("DILU"))
                    .arg(self.tiny.as_ref().expect("DILU"))
                    .arg(self.factor()),
                IcKind::Ic0 => a
                    .arg(self.factor())
                    .arg(self.l_diag.as_ref().expect("IC(0)")),
            };
            a.arg(&failed);
        })?;
        self.check_factor(&failed)
    }

    /// After a factorisation (`failed`: [first row that broke down, first
    /// IC(0) row with an entry whose partner is missing], each + 1, else
    /// n + 1; one read-back): a pattern that is not symmetric (IC(0)), else
    /// the CPU's error for the first row that broke down, else DIC's and
    /// DILU's pivots replaced by their reciprocals.
    fn check_factor(&self, failed: &CudaSlice<i32>) -> Result<(), SolveError> {
        let gpu = self.gpu;
        let found = gpu.download(failed)?;
        let (failed_row, unpartnered) = (found[0] as usize, found[1] as usize);
        if unpartnered <= self.n {
            return Err(SolveError::InvalidControls(format!(
                "{} needs a symmetric pattern: row {} has an entry below the diagonal whose \
                 transposed entry is missing",
                self.kind.name(),
                unpartnered - 1
            )));
        }
        if failed_row <= self.n {
            // Breakdown at row failed_row − 1: read its pivot for the message.
            let row = failed_row - 1;
            let value = match self.kind {
                IcKind::Dic | IcKind::Dilu => gpu.download(self.factor())?[row],
                IcKind::Ic0 => {
                    let d = gpu.download(self.l_diag.as_ref().expect("IC(0)"));
                    let l = d?[row];
                    if l.is_nan() {
                        f64::NAN
                    } else {
                        l * l
                    }
                }
            };
            if self.kind == IcKind::Dilu {
                return Err(SolveError::ZeroPivot {
                    precond: "DILU",
                    row,
                    value,
                });
            }
            return Err(SolveError::FactorizationBreakdown {
                precond: self.kind.name(),
                row,
                value,
            });
        }
        if matches!(self.kind, IcKind::Dic | IcKind::Dilu) {
            let n = self.n as i32;
            gpu.launch_vector("ic_reciprocal", self.n, |a| {
                a.arg(&n).arg(self.factor());
            })?;
        }
        Ok(())
    }

    /// The forward then backward sweep, one launch per level, with the
    /// kernels `names` (DIC forward, backward, IC(0) forward, backward) of
    /// one precision: DIC and DILU (no `l_diag`) read the values and the
    /// reciprocal pivots, IC(0) its factor and L's diagonal.
    #[allow(clippy::too_many_arguments)]
    fn level_sweeps<T: DeviceRepr + KernelElement>(
        &self,
        names: [&'static str; 4],
        vals: Option<&CudaSlice<T>>,
        factor: &CudaSlice<T>,
        l_diag: Option<&CudaSlice<T>>,
        r: &CudaSlice<f64>,
        out: &CudaSlice<T>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let (fw, bw) = (&self.forward, &self.backward);
        match l_diag {
            None => {
                let vals = vals.ok_or_else(|| {
                    GpuError::Invalid("DIC's and DILU's sweeps read the values".into())
                })?;
                fw.launch_each(gpu, names[0], |a| {
                    a.arg(&self.row_ptr).arg(&self.cols);
                    a.arg(vals).arg(&self.diag_slot).arg(factor);
                    a.arg(r).arg(out);
                    arg_or_null(a, done);
                })?;
                bw.launch_each(gpu, names[1], |a| {
                    a.arg(&self.row_ptr).arg(&self.cols);
                    a.arg(vals).arg(&self.diag_slot).arg(factor);
                    a.arg(out);
                    arg_or_null(a, done);
                })
            }
            Some(l_diag) => {
                fw.launch_each(gpu, names[2], |a| {
                    a.arg(&self.row_ptr).arg(&self.cols);
                    a.arg(&self.diag_slot).arg(factor).arg(l_diag);
                    a.arg(r).arg(out);
                    arg_or_null(a, done);
                })?;
                bw.launch_each(gpu, names[3], |a| {
                    a.arg(&self.row_ptr).arg(&self.cols);
                    a.arg(&self.diag_slot).arg(factor).arg(l_diag);
                    a.arg(out);
                    arg_or_null(a, done);
                })
            }
        }
    }
}

/// The CSR copy of `m` (the diagonal and the stored off-diagonals, columns
/// ascending) with its values, on the device: the row pointers
/// (`amg::modsell_csr_row_ptr`, the entry count read back), then
/// `ic_modsell_to_csr` writes columns and values in one pass. The same CSR
/// as AMG's `fine_csr` without its slot map (8 bytes an entry allocated and
/// written): [`DeviceIncompleteCholesky::refactorise`] finds the slots by
/// column instead (`ic_modsell_values`).
pub(super) fn csr_of_modsell(
    gpu: &Gpu,
    m: &DeviceModSell,
    what: &str,
) -> Result<DeviceCsr, GpuError> {
    let (n, dims) = (m.n, m.dims());
    let scan = Scan::new(gpu, n)?;
    let (row_ptr, nnz) = modsell_csr_row_ptr(gpu, m, &scan, what)?;
    let cols = unzeroed::<u32>(gpu, nnz)?;
    let vals = unzeroed::<f64>(gpu, nnz)?;
    m.launch_pattern(gpu, "ic_modsell_to_csr", &dims, |a| {
        a.arg(&m.values).arg(&m.diag);
        a.arg(&row_ptr).arg(&cols).arg(&vals);
    })?;
    Ok(DeviceCsr {
        n,
        nnz,
        row_ptr,
        cols,
        vals,
    })
}

/// How [`device_row_levels`] schedules: in one launch
/// ([`DeviceLevels::sync_free`], the set-up's first choice) or by
/// wavefronts (one launch per level, its fallback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelScheduler {
    SyncFree,
    Wavefronts,
}

/// Each row's level in the lower (`upper`: upper) sweep of `m` (its CSR
/// copy built on the device) as `scheduler` computes it, read back; None
/// where that scheduler gives up (wavefronts: a pattern that is not
/// symmetric or more than [`MAX_DEVICE_LEVELS`] levels; sync-free: a
/// device below compute capability 7.0 or a wait past its bound). For the
/// tests that hold both schedulers to the host's `LevelSchedule`.
pub fn device_row_levels(
    gpu: &Gpu,
    m: &DeviceModSell,
    upper: bool,
    scheduler: LevelScheduler,
) -> Result<Option<Vec<u32>>, GpuError> {
    let csr = csr_of_modsell(gpu, m, "incomplete Cholesky")?;
    let levels = match scheduler {
        LevelScheduler::SyncFree => DeviceLevels::sync_free(gpu, &csr, upper)?,
        LevelScheduler::Wavefronts => DeviceLevels::on_device(gpu, &csr, upper, MAX_DEVICE_LEVELS)?,
    };
    levels.map(|l| l.row_levels(gpu, m.n)).transpose()
}

/// Whether every entry (i, j) of `csr` above the diagonal has its partner
/// (j, i) (`ic_upper_mirrored`: one launch, one integer read back): then the
/// lower sweep's levels reversed are a valid schedule of the upper sweep
/// ([`DeviceLevels::reversed`]), with the same levels count, and the sweeps'
/// results do not depend on the schedule (each row reads only finished
/// rows).
fn upper_mirrored(gpu: &Gpu, csr: &DeviceCsr) -> Result<bool, GpuError> {
    let n = csr.n;
    let failed = gpu.upload(&[n as i32 + 1])?;
    let n32 = n as i32;
    gpu.launch_vector("ic_upper_mirrored", n, |a| {
        a.arg(&n32).arg(&csr.row_ptr).arg(&csr.cols).arg(&failed);
    })?;
    Ok(gpu.download(&failed)?[0] as usize > n)
}

/// `colouring`'s colour bounds on the device for the colour check of
/// [`csr_pass`] (each colour's first row, then n) and the colours' count,
/// after the host's checks: a colour for each of the `n` rows, every colour
/// a run of rows (the rows in colour order are 0..n).
fn colour_bounds(
    gpu: &Gpu,
    n: usize,
    colouring: &Colouring,
) -> Result<(CudaSlice<i32>, i32), GpuError> {
    let ptr = colouring.colour_ptr();
    if colouring.colours().len() != n || ptr.last().copied() != Some(n) {
        return Err(GpuError::Invalid(format!(
            "the colouring has {} rows, the matrix {n}",
            colouring.colours().len()
        )));
    }
    if (n > 0 && ptr.len() < 2) || !colouring.is_contiguous() {
        return Err(GpuError::Invalid(
            "the rows are not colour-contiguous (renumber them with smooth::colour_layout)".into(),
        ));
    }
    let colour_ptr: Vec<i32> = ptr.iter().map(|&p| p as i32).collect();
    Ok((gpu.upload(&colour_ptr)?, (ptr.len() - 1) as i32))
}

/// The error for a row coupled to a row of its own colour.
fn coupled_in_colour(row: usize) -> GpuError {
    GpuError::Invalid(format!(
        "row {row} is coupled to a row of its own colour: the colouring cannot order the sweeps"
    ))
}

/// The CSR copy of a mod-SELL matrix with its diagonal slots and, where
/// asked, its transposed slots ([`csr_pass`]).
struct CsrSlots {
    csr: DeviceCsr,
    diag_slot: CudaSlice<u64>,
    transposed: Option<CudaSlice<u32>>,
}

/// What [`csr_pass`] found, each the first such row.
#[derive(Debug, Default)]
struct CsrFlags {
    /// An entry without its partner (only with the transposed slots).
    missing_partner: Option<usize>,
    /// A row coupled to a row of its own colour (only with a colouring).
    coupled: Option<usize>,
    /// A diagonal entry that is not positive (or not a number).
    diagonal: Option<usize>,
    /// The entries below the diagonal and above it are not as many: the
    /// pattern is not symmetric.
    unbalanced: bool,
}

/// The CSR of `m` (the diagonal and the stored off-diagonals, columns
/// ascending; row pointers `row_ptr` of `nnz` entries from
/// `amg::modsell_csr_row_ptr`), its diagonal slots and the diagonal and
/// colour checks (`colours` from [`colour_bounds`]) in one launch
/// (`ic_modsell_csr`, a thread per row: each entry placed at its rank in
/// the row, nothing moved in device memory); then, where asked
/// (`transposed`: IC(0) and DILU), the transposed slots found in the written
/// rows (`ic_transposed_slots`, a thread per row, each entry's partner by a
/// search of its row); then the flags read back (one read-back). Nothing is
/// zero-filled: every slot of every array is written. The same arrays as
/// [`csr_of_modsell`] followed by `ic_diag_slots` and
/// `ic_transposed_slots` ([`device_csr_slots`] holds them equal).
fn csr_pass(
    gpu: &Gpu,
    m: &DeviceModSell,
    row_ptr: CudaSlice<u64>,
    nnz: usize,
    transposed: bool,
    colours: Option<&(CudaSlice<i32>, i32)>,
) -> Result<(CsrSlots, CsrFlags), GpuError> {
    let (n, dims) = (m.n, m.dims());
    let cols = unzeroed::<u32>(gpu, nnz)?;
    let vals = unzeroed::<f64>(gpu, nnz)?;
    let diag_slot = unzeroed::<u64>(gpu, n)?;
    let none = n as i32 + 1;
    // [missing partner, coupled, diagonal, the pattern's balance (zero)].
    let flags = gpu.upload(&[none, none, none, 0])?;
    let n_colours = colours.map_or(0, |c| c.1);
    m.launch_pattern(gpu, "ic_modsell_csr", &dims, |a| {
        a.arg(&m.values).arg(&m.diag);
        a.arg(&row_ptr).arg(&cols).arg(&vals).arg(&diag_slot);
        arg_or_null(a, colours.map(|c| &c.0));
        a.arg(&n_colours).arg(&flags);
    })?;
    // A missing partner lowers flags[0], the first of the three.
    let transposed = transposed
        .then(|| device_transposed_slots(gpu, n, nnz, &row_ptr, &cols, &flags))
        .transpose()?;
    let found = gpu.download(&flags)?;
    let first = |f: i32| (f < none).then(|| f as usize - 1);
    Ok((
        CsrSlots {
            csr: DeviceCsr {
                n,
                nnz,
                row_ptr,
                cols,
                vals,
            },
            diag_slot,
            transposed,
        },
        CsrFlags {
            missing_partner: first(found[0]),
            coupled: first(found[1]),
            diagonal: first(found[2]),
            unbalanced: found[3] != 0,
        },
    ))
}

/// Each entry's transposed slot in the CSR `row_ptr`, `cols` (n rows, nnz
/// entries, columns ascending), found by a search of the partner's row
/// (`ic_transposed_slots`); a missing partner lowers `failed[0]` to its row
/// + 1.
fn device_transposed_slots(
    gpu: &Gpu,
    n: usize,
    nnz: usize,
    row_ptr: &CudaSlice<u64>,
    cols: &CudaSlice<u32>,
    failed: &CudaSlice<i32>,
) -> Result<CudaSlice<u32>, GpuError> {
    let t = unzeroed::<u32>(gpu, nnz)?;
    let n32 = n as i32;
    gpu.launch_vector("ic_transposed_slots", n, |a| {
        a.arg(&n32).arg(row_ptr).arg(cols).arg(&t).arg(failed);
    })?;
    Ok(t)
}

/// A device CSR copy with its slots, read back ([`device_csr_slots`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CsrSlotsOnHost {
    pub row_ptr: Vec<u64>,
    pub cols: Vec<u32>,
    pub vals: Vec<f64>,
    pub diag_slot: Vec<u64>,
    /// For each slot (i, j) the slot (j, i); 0 where it is missing.
    pub transposed: Vec<u32>,
    /// The first row with an entry whose partner is missing.
    pub missing_partner: Option<usize>,
}

/// The CSR copy of `m` with its diagonal and transposed slots, built in
/// the set-up's one pass (`one_pass`: `csr_pass`) or in the earlier steps
/// (the CSR by insertion, `csr_of_modsell`, then `ic_diag_slots` and
/// `ic_transposed_slots` searching the written rows), read back: for the
/// tests that hold the two equal, and equal to the host's.
pub fn device_csr_slots(
    gpu: &Gpu,
    m: &DeviceModSell,
    one_pass: bool,
) -> Result<CsrSlotsOnHost, GpuError> {
    let n = m.n;
    let n32 = n as i32;
    let (slots, missing_partner) = if one_pass {
        let (row_ptr, nnz) = modsell_csr_row_ptr(gpu, m, &Scan::new(gpu, n)?, "test")?;
        let (slots, flags) = csr_pass(gpu, m, row_ptr, nnz, true, None)?;
        (slots, flags.missing_partner)
    } else {
        let csr = csr_of_modsell(gpu, m, "incomplete Cholesky")?;
        let diag_slot = gpu.zeros::<u64>(n)?;
        gpu.launch_vector("ic_diag_slots", n, |a| {
            a.arg(&n32).arg(&csr.row_ptr).arg(&csr.cols).arg(&diag_slot);
        })?;
        let failed = gpu.upload(&[n32 + 1])?;
        let t = device_transposed_slots(gpu, n, csr.nnz, &csr.row_ptr, &csr.cols, &failed)?;
        let failed = gpu.download(&failed)?[0];
        let slots = CsrSlots {
            csr,
            diag_slot,
            transposed: Some(t),
        };
        (slots, (failed <= n32).then(|| failed as usize - 1))
    };
    let nnz = slots.csr.nnz;
    let read = |v: Vec<u32>| v[..nnz].to_vec();
    let transposed = slots
        .transposed
        .as_ref()
        .ok_or_else(|| GpuError::Invalid("the transposed slots were asked for".into()))?;
    Ok(CsrSlotsOnHost {
        row_ptr: gpu.download(&slots.csr.row_ptr)?[..=n].to_vec(),
        cols: read(gpu.download(&slots.csr.cols)?),
        vals: gpu.download(&slots.csr.vals)?[..nnz].to_vec(),
        diag_slot: gpu.download(&slots.diag_slot)?[..n].to_vec(),
        transposed: read(gpu.download(transposed)?),
        missing_partner,
    })
}

impl DevicePreconditioner for DeviceIncompleteCholesky<'_> {
    fn n(&self) -> usize {
        self.n
    }
    /// z = M⁻¹ r: the level-scheduled sweeps in f64, or (mixed) in f32 on
    /// the f32 copies into `mx.w`, widened into z.
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let Some(mx) = &self.mixed else {
            const F64: [&str; 4] = [
                "ic_dic_forward",
                "ic_dic_backward",
                "ic_ic0_forward",
                "ic_ic0_backward",
            ];
            return self.level_sweeps(
                F64,
                Some(&self.vals),
                self.factor(),
                self.l_diag.as_ref(),
                r,
                z,
                done,
            );
        };
        const F32: [&str; 4] = [
            "ic_dic_forward_f32",
            "ic_dic_backward_f32",
            "ic_ic0_forward_f32",
            "ic_ic0_backward_f32",
        ];
        self.level_sweeps(
            F32,
            mx.vals.as_ref(),
            &mx.factor,
            mx.l_diag.as_ref(),
            r,
            &mx.w,
            done,
        )?;
        widen(self.gpu, self.n, &mx.w, z, done)
    }
    fn is_linear(&self) -> bool {
        true
    }
    /// OpenFOAM's names for its own factorisations in f64.
    fn preconditioner_name(&self) -> Option<&'static str> {
        match (self.kind, &self.mixed) {
            (IcKind::Dic, None) => Some("DIC"),
            (IcKind::Dilu, None) => Some("DILU"),
            _ => None,
        }
    }
}

/// `e` with the row a factorisation error names (a row of the matrix as
/// reordered by `perm`) turned back into the caller's row number.
pub fn in_original_rows(mut e: SolveError, perm: Option<&Permutation>) -> SolveError {
    if let (
        SolveError::FactorizationBreakdown { row, .. }
        | SolveError::NonPositiveDiagonal { row, .. }
        | SolveError::ZeroPivot { row, .. },
        Some(p),
    ) = (&mut e, perm)
    {
        *row = p.new_to_old()[*row] as usize;
    }
    e
}

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
    shared_bytes: u32,
    /// Forward and backward level of each row inside its block.
    levels: CudaSlice<i32>,
    /// Forward and backward level counts of each slice.
    slice_levels: CudaSlice<i32>,
    /// DIC: 1/d*; IC(0): L's diagonal.
    diag: CudaSlice<f64>,
    /// IC(0): the factor at the in-slice mod-SELL slots (lower: L; upper:
    /// the transposed entry). DIC reads A's values.
    off: Option<CudaSlice<f64>>,
    /// Mixed precision: f32 copies of `diag` and of `off` (DIC: of A's values).
    f32_factors: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    max_levels: (usize, usize),
}

/// The kernels block-IC launches (their limits decide the slice height).
pub const BLOCK_IC_KERNELS: [&str; 3] = [
    "block_ic_factor",
    "block_ic_sweep_f64",
    "block_ic_sweep_f32",
];

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
                levels: structure.levels,
                slice_levels: structure.slice_levels,
                // Not zero-filled: block_ic_factor writes every row's
                // diagonal and every in-slice slot of `off`, the only slots
                // the sweeps (and the f32 copy's readers) read.
                diag: unzeroed(gpu, n)?,
                off: match ic0 {
                    true => Some(unzeroed(gpu, m.values.len())?),
                    false => None,
                },
                f32_factors: None,
                max_levels: (structure.maxima[1] as usize, structure.maxima[2] as usize),
            })
        };
        let mut ic = upload()?;
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
        spans.device("factorisation (1 read-back)");
        if precision == Precision::Mixed {
            let off = ic.off.as_ref().unwrap_or(&m.values);
            ic.f32_factors = Some((f32_copy(gpu, &ic.diag)?, f32_copy(gpu, off)?));
            spans.device("f32 factors");
        }
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
    pub fn download_factor(
        &self,
        gpu: &Gpu,
        a: &Csr,
        m: &DeviceModSell,
    ) -> Result<Vec<f64>, GpuError> {
        let diag = gpu.download(&self.diag)?;
        let Some(off) = &self.off else {
            return Ok(diag);
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
        let (slices, h) = (m.n_slices() as u32, m.slice_height as u32);
        gpu.launch(kernel, slices, h, self.shared_bytes, |a| {
            a.arg(&n);
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
