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
//! ([`super::levels::LevelScheduler::SyncFree`], Liu et al. 2016; compute capability 7.0
//! on), else by wavefronts, one launch per level and work proportional to
//! the entries, the host's schedule only beyond [`MAX_DEVICE_LEVELS`]
//! levels or for a pattern that is not symmetric; the upper sweep runs the
//! lower levels reversed where every entry above the diagonal has its
//! partner, else a schedule of its own), and keeps what
//! [`DeviceIncompleteCholesky::refactorise`] needs for value-only
//! re-set-ups. Block-IC's structure (in-slice counts and in-block levels)
//! is computed on the device ([`super::block_jacobi::BlockIcStructure`]).

use crate::gpu::kernel_args::KernelElement;
use cudarc::driver::{CudaSlice, DeviceRepr};

use super::amg::{modsell_csr_row_ptr, unzeroed, Scan};
use super::levels::{
    colour_bounds, coupled_in_colour, csr_pass, upper_mirrored, widen, CsrSlots, DeviceLevels,
    LEVELS_LAUNCHED_EACH, MAX_DEVICE_LEVELS,
};
use super::matrix::{f32_copy, f32_copy_into, DeviceModSell};
use super::setup::{checked_diagonal, SetupSpans};
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::colouring::Colouring;
use crate::solve::ilu::{pivot_thresholds, transposed_slots};
use crate::solve::{Precision, PreconditionerKind, SolveError};
use crate::sparse::levels::LevelSchedule;
use crate::sparse::Csr;

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
