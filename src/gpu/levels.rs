//! Level-scheduled triangular sweeps on the device, shared by the incomplete
//! factorisations (IC, ILU, block IC, FSAI's set-up): the level schedule of
//! a resident matrix's rows (in one launch without synchronisation between
//! levels, Liu et al. 2016, or by wavefronts), its CSR copy with the
//! diagonal (and DILU's transposed) slots, and the widening of the
//! mixed-precision sweeps' f32 iterate. `gpu::ic` explains the choices.

use std::rc::Rc;

use crate::gpu::KernelArgs;
use cudarc::driver::CudaSlice;

use super::amg::{modsell_csr_row_ptr, unzeroed, DeviceCsr, Scan};
use super::matrix::DeviceModSell;
use super::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::colouring::Colouring;
use crate::solve::SolveError;
use crate::sparse::levels::LevelSchedule;
use crate::sparse::Permutation;

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
pub(super) const LEVELS_LAUNCHED_EACH: usize = 16;

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

/// The CSR copy of `m` (the diagonal and the stored off-diagonals, columns
/// ascending) with its values, on the device: the row pointers
/// (`amg::modsell_csr_row_ptr`, the entry count read back), then
/// `ic_modsell_to_csr` writes columns and values in one pass. The same CSR
/// as AMG's `fine_csr` without its slot map (8 bytes an entry allocated and
/// written): [`super::ic::DeviceIncompleteCholesky::refactorise`] finds the slots by
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
pub(super) fn upper_mirrored(gpu: &Gpu, csr: &DeviceCsr) -> Result<bool, GpuError> {
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
pub(super) fn colour_bounds(
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
pub(super) fn coupled_in_colour(row: usize) -> GpuError {
    GpuError::Invalid(format!(
        "row {row} is coupled to a row of its own colour: the colouring cannot order the sweeps"
    ))
}

/// The CSR copy of a mod-SELL matrix with its diagonal slots and, where
/// asked, its transposed slots ([`csr_pass`]).
pub(super) struct CsrSlots {
    pub(super) csr: DeviceCsr,
    pub(super) diag_slot: CudaSlice<u64>,
    pub(super) transposed: Option<CudaSlice<u32>>,
}

/// What [`csr_pass`] found, each the first such row.
#[derive(Debug, Default)]
pub(super) struct CsrFlags {
    /// An entry without its partner (only with the transposed slots).
    pub(super) missing_partner: Option<usize>,
    /// A row coupled to a row of its own colour (only with a colouring).
    pub(super) coupled: Option<usize>,
    /// A diagonal entry that is not positive (or not a number).
    pub(super) diagonal: Option<usize>,
    /// The entries below the diagonal and above it are not as many: the
    /// pattern is not symmetric.
    pub(super) unbalanced: bool,
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
pub(super) fn csr_pass(
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
