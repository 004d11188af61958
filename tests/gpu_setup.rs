//! Preconditioner set-ups on the device (`gpu::setup`, `gpu::ic`) against
//! their host references, on random SPD matrices and a tet-mesh Poisson
//! matrix in RCM order:
//!
//! - the Jacobi, L1-Jacobi and reciprocal-diagonal (Neumann) row scales and
//!   their f32 roundings: bit for bit (the same IEEE operations in the same
//!   order, no FMA contraction);
//! - the diagonal check: the CPU's error (same preconditioner, row, value);
//! - block-IC's structure (in-slice counts, in-block levels, level counts):
//!   equal integers;
//! - DIC, IC(0) and DILU built on the device from the resident matrix
//!   (`DeviceIncompleteCholesky::on_device`, levels scheduled on the device,
//!   each row at the host schedule's level, or a colouring's colours):
//!   factors and applications equal the CPU's bit for bit
//!   (the same CSR and the same kernels as the host-built set-up, which the
//!   CPU reference matches bit for bit), the mixed-precision application
//!   equals the host-built one bit for bit, the factorisation in one launch
//!   (without synchronisation between levels) equals the one level by level
//!   bit for bit, and the value-only re-set-up equals a fresh CPU
//!   factorisation of the new values;
//! - the device level schedules (in one launch without synchronisation
//!   between levels, else by wavefronts) on a deep RCM order and on
//!   patterns that are not symmetric: the lower sweep's rows each at the
//!   host's level; the upper sweep's the lower levels reversed where every
//!   entry above the diagonal has its partner (one check instead of a second
//!   schedule), else at the host's level, and in every case a valid order of
//!   the upper sweep; each scheduler alone equal to the host's or (the
//!   wavefronts, on a pattern that is not symmetric) giving up;
//! - the CSR copy of the device matrix with its diagonal and transposed
//!   slots, built in one pass: equal to the earlier steps' (insertion into
//!   the CSR, then searches of the written rows) and to the host's CSR and
//!   slots, on random and mesh matrices, rows wider than the pass holds in
//!   registers, slice heights that do not divide n, and a pattern that is
//!   not symmetric (the same first row without a partner); the checks
//!   folded into that pass (and block-IC's diagonal check, made when its
//!   factorisation fails) give the separate checks' errors;
//! - Eisenstat SGS's scaled split set up on the device: the same SELL
//!   triangles, scales and row order as the host set-up, bit for bit, and
//!   the host's error for coupled rows of one colour.
//!
//! Prints `skipped: no CUDA device` without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

mod common;

use common::random_and_rcm_systems;
use fvpoisson::gpu::block_jacobi::{BlockIcStructure, DeviceBlockIc};
use fvpoisson::gpu::eisenstat::DeviceEisenstat;
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::levels::{device_csr_slots, device_row_levels, LevelScheduler};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions};
use fvpoisson::gpu::setup::{checked_diagonal, jacobi_scales, RowScale};
use fvpoisson::gpu::smooth::{colour_layout, DevicePreconditioner};
use fvpoisson::gpu::test_device;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::ilu::{dilu, transposed_slots};
use fvpoisson::solve::neumann::{NeumannSettings, TruncatedNeumann};
use fvpoisson::solve::precond::{Dic, Ic0};
use fvpoisson::solve::smoother::{check_diagonal, l1_jacobi_scale, PointJacobi};
use fvpoisson::solve::{InnerSolver, LinearOperator, Precision, SolveError};
use fvpoisson::sparse::levels::LevelSchedule;
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::{random_symmetric, random_vector};
use fvpoisson::sparse::{Csr, ModSell};

const MESH: &str = "box:12x12x12:tet:perturb=0.2:renumber";

fn upload(gpu: &Gpu, a: &Csr, h: usize) -> DeviceModSell {
    DeviceModSell::upload(gpu, &ModSell::from_csr(a, h).unwrap()).unwrap()
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn row_scales_equal_the_host_set_up_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    for (name, a, _) in random_and_rcm_systems(&[MESH]) {
        let n = a.n_rows();
        for h in [32, 64] {
            let m = upload(&gpu, &a, h);
            let host = [
                (
                    RowScale::Weighted(0.8),
                    PointJacobi::weighted(&a, 0.8).unwrap().scale().to_vec(),
                ),
                (RowScale::L1, l1_jacobi_scale(&a).unwrap()),
                (
                    RowScale::Reciprocal,
                    TruncatedNeumann::new(&a, &NeumannSettings::NEU1)
                        .unwrap()
                        .reciprocal_diagonal()
                        .to_vec(),
                ),
            ];
            for (kind, expected) in host {
                let (scale, rounded) = jacobi_scales(&gpu, &m, kind, true, "test").unwrap();
                let scale = gpu.download(&scale).unwrap();
                assert_eq!(
                    bits(&scale[..n]),
                    bits(&expected),
                    "{name}, H = {h}: {kind:?} scales differ from the host's"
                );
                let rounded = gpu.download(&rounded.expect("asked for")).unwrap();
                let expected_f32: Vec<u32> =
                    expected.iter().map(|&s| (s as f32).to_bits()).collect();
                let rounded: Vec<u32> = rounded[..n].iter().map(|s| s.to_bits()).collect();
                assert_eq!(
                    rounded, expected_f32,
                    "{name}, H = {h}: {kind:?} f32 scales"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn diagonal_check_gives_the_cpu_error() {
    let Some(gpu) = test_device() else { return };
    let (_, mut a, _) = random_and_rcm_systems(&[])
        .into_iter()
        .find(|(_, a, _)| a.n_rows() == 1000)
        .expect("the 1000-row random matrix");
    // Rows 700 and 300 non-positive: the first (300) is named, with its value.
    for (row, value) in [(700, 0.0), (300, -2.5)] {
        let slot = a.slot(row, row).unwrap();
        a.values_mut()[slot] = value;
    }
    let m = upload(&gpu, &a, 32);
    let cpu = check_diagonal(&a, "Jacobi smoother").unwrap_err();
    let dev = checked_diagonal(&gpu, &m, "Jacobi smoother").unwrap_err();
    assert!(
        matches!(
            dev,
            SolveError::NonPositiveDiagonal {
                row: 300,
                value: -2.5,
                ..
            }
        ),
        "{dev}"
    );
    assert_eq!(dev.to_string(), cpu.to_string());
    let scales = jacobi_scales(&gpu, &m, RowScale::L1, false, "Jacobi smoother");
    assert_eq!(scales.unwrap_err().to_string(), cpu.to_string());
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn block_ic_structure_equals_the_host_set_up() {
    let Some(gpu) = test_device() else { return };
    for (name, a, _) in random_and_rcm_systems(&[MESH]) {
        for h in [32, 64, 256] {
            let m = upload(&gpu, &a, h);
            let dev = BlockIcStructure::on_device(&gpu, &m).unwrap();
            let host = BlockIcStructure::host_reference(&a, h);
            assert_eq!(dev.download(&gpu, &m).unwrap(), host, "{name}, H = {h}");
            let (counts, slice_levels) = (&host.slice_mnz, &host.slice_levels);
            let most = |v: &[i32], stride: usize, at: usize| {
                v.iter()
                    .skip(at)
                    .step_by(stride)
                    .copied()
                    .max()
                    .unwrap_or(0)
            };
            assert_eq!(
                dev.maxima,
                [
                    most(counts, 1, 0),
                    most(slice_levels, 2, 0),
                    most(slice_levels, 2, 1)
                ],
                "{name}, H = {h}: maxima"
            );
        }
    }
}

/// The CPU's factor (as `download_factor` stores it) and application of `kind`.
fn cpu_ic(a: &Csr, kind: IcKind, r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut z = vec![0.0; a.n_rows()];
    match kind {
        IcKind::Dic => {
            let m = Dic::new(a).unwrap();
            m.apply(r, &mut z);
            (m.reciprocal_diagonal().to_vec(), z)
        }
        IcKind::Dilu => {
            let m = dilu(a).unwrap();
            m.apply(r, &mut z);
            (m.reciprocal_diagonal().to_vec(), z)
        }
        IcKind::Ic0 => {
            let m = Ic0::new(a).unwrap();
            m.apply(r, &mut z);
            (m.factor(), z)
        }
    }
}

fn apply(gpu: &Gpu, m: &DeviceIncompleteCholesky<'_>, r: &[f64]) -> Vec<f64> {
    let r_dev = gpu.upload(r).unwrap();
    let z_dev = gpu.zeros::<f64>(r.len()).unwrap();
    m.apply(&r_dev, &z_dev).unwrap();
    let mut z = gpu.download(&z_dev).unwrap();
    z.truncate(r.len());
    z
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_built_incomplete_cholesky_equals_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    let h = 32;
    let mut cases = Vec::new();
    for (name, a, _) in random_and_rcm_systems(&[MESH]) {
        // The same matrix renumbered colour by colour, with its colouring.
        let (_, by_colour, colouring) = colour_layout(&gpu, &a, h).unwrap();
        cases.push((format!("{name} by colour"), by_colour, Some(colouring)));
        cases.push((name, a, None));
    }
    for (name, a, colouring) in &cases {
        let n = a.n_rows();
        let r = random_vector(n, 11);
        let m = upload(&gpu, a, h);
        for kind in [IcKind::Dic, IcKind::Ic0, IcKind::Dilu] {
            let (cpu_factor, cpu_z) = cpu_ic(a, kind, &r);
            let dev = DeviceIncompleteCholesky::on_device(
                &gpu,
                a,
                &m,
                kind,
                Precision::Double,
                colouring.as_ref(),
            )
            .unwrap();
            let factor = dev.download_factor().unwrap();
            assert_eq!(factor.len(), cpu_factor.len(), "{name} {kind:?}");
            assert_eq!(bits(&factor), bits(&cpu_factor), "{name} {kind:?}: factor");
            assert_eq!(
                bits(&apply(&gpu, &dev, &r)),
                bits(&cpu_z),
                "{name} {kind:?}: application"
            );
            // The set-up factorises in one launch where the device allows
            // (compute capability 7.0 on); level by level it is the same.
            let mut dev = dev;
            dev.refactorise_by_levels(&m).unwrap();
            assert_eq!(
                bits(&dev.download_factor().unwrap()),
                bits(&cpu_factor),
                "{name} {kind:?}: factor by levels"
            );
            match colouring {
                Some(c) => assert_eq!(dev.levels().0, c.n_colours(), "{name} {kind:?}: levels"),
                None => {
                    // The device level schedule: each row at the host's
                    // lower level; the upper sweep's as expected_backward.
                    let (forward, backward) = dev.row_levels().unwrap();
                    assert_eq!(
                        forward,
                        LevelSchedule::lower(a).row_levels(),
                        "{name}: forward"
                    );
                    assert_eq!(backward, expected_backward(a), "{name}: backward");
                    assert!(orders_the_upper_sweep(a, &backward), "{name}: backward");
                }
            }
            if kind == IcKind::Dilu {
                continue;
            }
            // Mixed precision: the host-built set-up's f32 sweeps, bit for bit.
            let mixed = |on_device: bool| {
                let m = match on_device {
                    true => DeviceIncompleteCholesky::on_device(
                        &gpu,
                        a,
                        &m,
                        kind,
                        Precision::Mixed,
                        colouring.as_ref(),
                    ),
                    false => {
                        DeviceIncompleteCholesky::with_precision(&gpu, a, kind, Precision::Mixed)
                    }
                };
                apply(&gpu, &m.unwrap(), &r)
            };
            assert_eq!(
                bits(&mixed(true)),
                bits(&mixed(false)),
                "{name} {kind:?}: mixed"
            );
        }
    }
}

/// `a` with new values on its pattern: off-diagonals halved, diagonals + 1
/// (still SPD: diagonally dominant where `a` was, and closer).
fn new_values(a: &Csr) -> Csr {
    let mut b = a.clone();
    let diag: Vec<usize> = (0..a.n_rows()).map(|r| a.slot(r, r).unwrap()).collect();
    for v in b.values_mut() {
        *v *= 0.5;
    }
    for (r, &s) in diag.iter().enumerate() {
        b.values_mut()[s] = a.values()[s] + 1.0 + r as f64 * 1e-6;
    }
    b
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn value_only_re_set_up_equals_a_fresh_cpu_factorisation() {
    let Some(gpu) = test_device() else { return };
    for (name, a, _) in random_and_rcm_systems(&[MESH]) {
        let (n, h) = (a.n_rows(), 64);
        let r = random_vector(n, 12);
        let b = new_values(&a);
        // The new values in another slice height: the re-set-up finds each
        // entry's CSR slot by its column, not by its mod-SELL slot.
        let m_b = upload(&gpu, &b, 32);
        for kind in [IcKind::Dic, IcKind::Ic0] {
            for precision in [Precision::Double, Precision::Mixed] {
                let mut dev = DeviceIncompleteCholesky::on_device(
                    &gpu,
                    &a,
                    &upload(&gpu, &a, h),
                    kind,
                    precision,
                    None,
                )
                .unwrap();
                dev.refactorise(&m_b).unwrap();
                let z = apply(&gpu, &dev, &r);
                match precision {
                    Precision::Double => {
                        let (cpu_factor, cpu_z) = cpu_ic(&b, kind, &r);
                        let factor = dev.download_factor().unwrap();
                        assert_eq!(bits(&factor), bits(&cpu_factor), "{name} {kind:?}: factor");
                        assert_eq!(bits(&z), bits(&cpu_z), "{name} {kind:?}: application");
                    }
                    Precision::Mixed => {
                        let fresh =
                            DeviceIncompleteCholesky::with_precision(&gpu, &b, kind, precision);
                        let expected = apply(&gpu, &fresh.unwrap(), &r);
                        assert_eq!(
                            bits(&z),
                            bits(&expected),
                            "{name} {kind:?}: mixed application"
                        );
                    }
                }
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_colouring_with_coupled_rows_is_refused() {
    let Some(gpu) = test_device() else { return };
    let (_, a, _) = random_and_rcm_systems(&[])
        .into_iter()
        .find(|(_, a, _)| a.n_rows() == 1000)
        .expect("the 1000-row random matrix");
    let one_colour = fvpoisson::solve::colouring::Colouring::from_colours(vec![0; 1000]).unwrap();
    let m = upload(&gpu, &a, 32);
    let e = DeviceIncompleteCholesky::on_device(
        &gpu,
        &a,
        &m,
        IcKind::Dic,
        Precision::Double,
        Some(&one_colour),
    )
    .err()
    .expect("one colour for coupled rows is refused");
    assert!(e.to_string().contains("own colour"), "{e}");
}

/// `a` with row `hub` coupled to every `stride`-th row (both entries, value
/// -0.01 where new, the diagonals raised to stay dominant): rows of
/// different widths, the hub's wider than the one pass holds in registers.
fn with_hub(a: &Csr, hub: usize, stride: usize) -> Csr {
    let n = a.n_rows();
    let mut rows: Vec<Vec<(u32, f64)>> = (0..n)
        .map(|i| {
            let (c, v) = a.row(i);
            c.iter().copied().zip(v.iter().copied()).collect()
        })
        .collect();
    for j in (0..n).step_by(stride).filter(|&j| j != hub) {
        for (r, c) in [(hub, j), (j, hub)] {
            if !rows[r].iter().any(|e| e.0 as usize == c) {
                rows[r].push((c as u32, -0.01));
                if let Some(d) = rows[r].iter_mut().find(|e| e.0 as usize == r) {
                    d.1 += 0.01;
                }
            }
        }
    }
    let (mut row_ptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for mut row in rows {
        row.sort_unstable_by_key(|e| e.0);
        cols.extend(row.iter().map(|e| e.0));
        vals.extend(row.iter().map(|e| e.1));
        row_ptr.push(cols.len());
    }
    Csr::new(n, row_ptr, cols, vals).unwrap()
}

/// The set-up's one pass over the device matrix (the CSR placed by rank,
/// the diagonal and transposed slots) equals the earlier steps (the CSR by
/// insertion, then `ic_diag_slots` and `ic_transposed_slots` searching the
/// written rows) and the host's CSR and slots: on the random and mesh
/// matrices, a matrix with a hub row wider than the pass holds in
/// registers (and rows of every width), slice heights that do not divide
/// n (1000 and 30 011 rows), and a pattern that is not symmetric (the same
/// first row without a partner, the same slots elsewhere).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn csr_and_slots_in_one_pass_equal_the_steps_and_the_host() {
    let Some(gpu) = test_device() else { return };
    let mut cases: Vec<(String, Csr)> = random_and_rcm_systems(&[MESH])
        .into_iter()
        .map(|(name, a, _)| (name, a))
        .collect();
    let hub = with_hub(&random_symmetric(2000, 8, 7), 1500, 37);
    assert!(
        (0..hub.n_rows()).any(|r| hub.row(r).0.len() > 40),
        "the premise: a row wider than the registers of the pass"
    );
    let not_symmetric = without_upper_entries(&cases[1].1, 10);
    cases.push(("hub row".into(), hub));
    cases.push((
        "random n = 1000 without row 10's upper entries".into(),
        not_symmetric,
    ));
    for (name, a) in &cases {
        let n = a.n_rows();
        let host_transposed = transposed_slots(a, "test");
        for h in [32, 64] {
            let m = upload(&gpu, a, h);
            let one = device_csr_slots(&gpu, &m, true).unwrap();
            let steps = device_csr_slots(&gpu, &m, false).unwrap();
            let what = format!("{name}, H = {h}");
            assert_eq!(one.row_ptr, steps.row_ptr, "{what}: row pointers");
            assert_eq!(one.cols, steps.cols, "{what}: columns");
            assert_eq!(bits(&one.vals), bits(&steps.vals), "{what}: values");
            assert_eq!(one.diag_slot, steps.diag_slot, "{what}: diagonal slots");
            assert_eq!(one.transposed, steps.transposed, "{what}: transposed slots");
            assert_eq!(
                one.missing_partner, steps.missing_partner,
                "{what}: partner"
            );
            // And the host's.
            let row_ptr: Vec<u64> = a.row_ptr().iter().map(|&p| p as u64).collect();
            assert_eq!(one.row_ptr, row_ptr, "{what}: host row pointers");
            assert_eq!(one.cols, a.cols(), "{what}: host columns");
            assert_eq!(bits(&one.vals), bits(a.values()), "{what}: host values");
            let diag: Vec<u64> = (0..n).map(|r| a.slot(r, r).unwrap() as u64).collect();
            assert_eq!(one.diag_slot, diag, "{what}: host diagonal slots");
            match &host_transposed {
                Ok(t) => {
                    let t: Vec<u32> = t.iter().map(|&s| s as u32).collect();
                    assert_eq!(one.transposed, t, "{what}: host transposed slots");
                    assert_eq!(one.missing_partner, None, "{what}");
                }
                Err(_) => assert!(one.missing_partner.is_some(), "{what}: partner"),
            }
        }
    }
}

/// The checks folded into other passes give the errors the separate checks
/// gave: a diagonal entry that is not positive is the CPU's error naming
/// the first such row and its value (DIC, IC(0) and DILU from the CSR pass;
/// block-IC once its factorisation fails), and a pattern that is not
/// symmetric the host's transposed-slot error (IC(0), DILU).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn checks_folded_into_the_passes_give_the_separate_checks_errors() {
    let Some(gpu) = test_device() else { return };
    let (_, a, _) = random_and_rcm_systems(&[])
        .into_iter()
        .find(|(_, a, _)| a.n_rows() == 1000)
        .expect("the 1000-row random matrix");
    let mut bad = a.clone();
    for (row, value) in [(700, 0.0), (300, -2.5)] {
        let slot = bad.slot(row, row).unwrap();
        bad.values_mut()[slot] = value;
    }
    let m = upload(&gpu, &bad, 32);
    let named = |e: &SolveError| {
        matches!(
            e,
            SolveError::NonPositiveDiagonal {
                row: 300,
                value: -2.5,
                ..
            }
        )
    };
    for kind in [IcKind::Dic, IcKind::Ic0, IcKind::Dilu] {
        let e = DeviceIncompleteCholesky::on_device(&gpu, &bad, &m, kind, Precision::Double, None)
            .err()
            .expect("a diagonal entry that is not positive is refused");
        assert!(named(&e), "{kind:?}: {e}");
    }
    for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
        let e = DeviceBlockIc::new(&gpu, &bad, &m, inner, Precision::Double)
            .err()
            .expect("a diagonal entry that is not positive is refused");
        assert!(named(&e), "{inner:?}: {e}");
    }
    let asymmetric = without_upper_entries(&a, 10);
    let m = upload(&gpu, &asymmetric, 32);
    for (kind, name) in [(IcKind::Ic0, "IC(0)"), (IcKind::Dilu, "DILU")] {
        let e = DeviceIncompleteCholesky::on_device(
            &gpu,
            &asymmetric,
            &m,
            kind,
            Precision::Double,
            None,
        )
        .err()
        .expect("a pattern that is not symmetric is refused");
        let host = transposed_slots(&asymmetric, name).unwrap_err();
        assert_eq!(e.to_string(), host.to_string(), "{kind:?}");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn eisenstat_split_on_the_device_equals_the_host_set_up() {
    let Some(gpu) = test_device() else { return };
    let options = GpuSolveOptions {
        slice_height: 64,
        ..GpuSolveOptions::default()
    };
    for (name, a, _) in random_and_rcm_systems(&[MESH]) {
        let (_, a, colouring) = colour_layout(&gpu, &a, 64).unwrap();
        let cg = GpuCgBackend::new(&gpu, &a, false, None, &options).unwrap();
        for window in [0, 7, 256] {
            let dev = DeviceEisenstat::with_sorted_rows(&gpu, &cg, &a, &colouring, window)
                .unwrap()
                .download_setup()
                .unwrap();
            let host = DeviceEisenstat::with_sorted_rows_on_host(&gpu, &cg, &a, &colouring, window)
                .unwrap()
                .download_setup()
                .unwrap();
            for (part, d, h) in [
                ("lower", &dev.lower, &host.lower),
                ("upper", &dev.upper, &host.upper),
            ] {
                assert_eq!(
                    d.slice_ptr, h.slice_ptr,
                    "{name}, window {window}: {part} slice pointers"
                );
                assert_eq!(d.cols, h.cols, "{name}, window {window}: {part} columns");
                assert_eq!(
                    bits(&d.values),
                    bits(&h.values),
                    "{name}, window {window}: {part} values"
                );
            }
            assert_eq!(dev, host, "{name}, window {window}");
        }
    }
    // Coupled rows in one colour: the host set-up's message.
    let (_, a, _) = random_and_rcm_systems(&[])
        .into_iter()
        .find(|(_, a, _)| a.n_rows() == 1000)
        .expect("the 1000-row random matrix");
    let one_colour = fvpoisson::solve::colouring::Colouring::from_colours(vec![0; 1000]).unwrap();
    let cg = GpuCgBackend::new(&gpu, &a, false, None, &options).unwrap();
    let dev = DeviceEisenstat::with_sorted_rows(&gpu, &cg, &a, &one_colour, 256).err();
    let host = DeviceEisenstat::with_sorted_rows_on_host(&gpu, &cg, &a, &one_colour, 256).err();
    assert_eq!(
        dev.expect("refused").to_string(),
        host.expect("refused").to_string()
    );
}

/// `a` without the entries above the diagonal in row `r` (a pattern that is
/// not symmetric).
fn without_upper_entries(a: &Csr, r: usize) -> Csr {
    let (mut row_ptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for i in 0..a.n_rows() {
        let (c, v) = a.row(i);
        for (&j, &x) in c.iter().zip(v) {
            if i != r || j as usize <= i {
                cols.push(j);
                vals.push(x);
            }
        }
        row_ptr.push(cols.len());
    }
    Csr::new(a.n_rows(), row_ptr, cols, vals).unwrap()
}

/// The level schedules DIC builds on the device put every row of the lower
/// sweep at the host schedule's level, and order the upper sweep (the lower
/// levels reversed where every entry above the diagonal has its partner,
/// else the host's upper levels): on a hex box in RCM order deep enough for
/// several wavefront read-back batches, on a pattern with a row's entries
/// above the diagonal removed (the lower wavefront stalls there; the
/// sync-free schedule does not), and on one with a row's entries below the
/// diagonal removed (the lower levels reversed would not order the upper
/// sweep). Each scheduler alone ([`device_row_levels`]): the sync-free one
/// gives the host's levels in both sweeps on every pattern; the wavefronts
/// give them or give up (None). The premises (depth, a different schedule)
/// are checked on the host first.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_level_schedules_equal_the_hosts_on_deep_and_asymmetric_patterns() {
    let a = fvpoisson::fvm::testing::poisson_system("box:24x24x24")
        .unwrap()
        .0;
    let a = reverse_cuthill_mckee(&a).apply_symmetric(&a);
    let deep = LevelSchedule::lower(&a).n_levels();
    assert!(deep > 64, "{deep} levels: not deep enough");
    let r = a.n_rows() / 2;
    let asymmetric = without_upper_entries(&a, r);
    // The upper sweep's levels change (row r no longer waits for the
    // removed columns); the lower sweep's do not (their partners stay), but
    // its wavefront cannot place those partners: it stalls.
    assert!(
        LevelSchedule::upper(&asymmetric).row_levels() != LevelSchedule::upper(&a).row_levels(),
        "removing the entry changes no level"
    );
    let Some(gpu) = test_device() else { return };
    // A row's entries below the diagonal removed: the lower wavefront runs
    // (every remaining lower entry has its partner), but the pattern is not
    // symmetric, so the upper sweep may not reuse the lower levels reversed.
    let lower_removed = without_lower_entries(&a, r);
    assert!(!upper_entries_mirrored(&lower_removed) && upper_entries_mirrored(&asymmetric));
    assert!(!symmetric_pattern(&asymmetric) && symmetric_pattern(&a));
    assert!(
        !orders_the_upper_sweep(&lower_removed, &reversed_lower_levels(&lower_removed)),
        "the reversed lower levels would serve: the case tests nothing"
    );
    for (name, m) in [
        ("box 24^3 RCM", &a),
        ("asymmetric pattern", &asymmetric),
        ("lower entries of a row removed", &lower_removed),
    ] {
        let dm = upload(&gpu, m, 32);
        let t = std::time::Instant::now();
        let dev =
            DeviceIncompleteCholesky::on_device(&gpu, m, &dm, IcKind::Dic, Precision::Double, None)
                .unwrap();
        gpu.synchronize().unwrap();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (forward, backward) = dev.row_levels().unwrap();
        println!("{name}: {:?} levels, set-up {ms:.1} ms", dev.levels());
        assert_eq!(
            forward,
            LevelSchedule::lower(m).row_levels(),
            "{name}: forward"
        );
        assert_eq!(backward, expected_backward(m), "{name}: backward");
        assert!(orders_the_upper_sweep(m, &backward), "{name}: backward");
        for upper in [false, true] {
            let host = match upper {
                false => LevelSchedule::lower(m).row_levels(),
                true => LevelSchedule::upper(m).row_levels(),
            };
            let sync_free = device_row_levels(&gpu, &dm, upper, LevelScheduler::SyncFree);
            let waves = device_row_levels(&gpu, &dm, upper, LevelScheduler::Wavefronts);
            let (sync_free, waves) = (sync_free.unwrap(), waves.unwrap());
            // Compute capability 7.0 on (independent thread scheduling).
            if gpu.compute_capability().0 >= 7 {
                assert_eq!(
                    sync_free.as_ref(),
                    Some(&host),
                    "{name} upper {upper}: sync-free"
                );
            }
            if let Some(levels) = waves {
                assert_eq!(levels, host, "{name} upper {upper}: wavefronts");
            } else {
                // Only a pattern that is not symmetric stalls them.
                assert!(
                    !symmetric_pattern(m),
                    "{name} upper {upper}: the wavefronts gave up"
                );
            }
        }
    }
}

/// Whether every entry (i, j) of `a` has its partner (j, i).
fn symmetric_pattern(a: &Csr) -> bool {
    (0..a.n_rows()).all(|i| a.row(i).0.iter().all(|&j| a.slot(j as usize, i).is_some()))
}

/// The lower sweep's host levels reversed (each row's level counted from
/// the last).
fn reversed_lower_levels(a: &Csr) -> Vec<u32> {
    let lower = LevelSchedule::lower(a);
    let last = lower.n_levels() as u32 - 1;
    lower.row_levels().iter().map(|&l| last - l).collect()
}

/// Whether every entry (i, j) of `a` above the diagonal has its partner
/// (j, i): then the lower levels reversed order the upper sweep.
fn upper_entries_mirrored(a: &Csr) -> bool {
    (0..a.n_rows()).all(|i| {
        a.row(i)
            .0
            .iter()
            .all(|&j| j as usize <= i || a.slot(j as usize, i).is_some())
    })
}

/// The upper sweep's device levels: where every entry above the diagonal
/// has its partner the lower levels reversed (`DeviceLevels::reversed`),
/// else the host's upper schedule.
fn expected_backward(a: &Csr) -> Vec<u32> {
    match upper_entries_mirrored(a) {
        true => reversed_lower_levels(a),
        false => LevelSchedule::upper(a).row_levels(),
    }
}

/// Whether `levels` order the upper sweep of `a`: every row after the rows
/// above the diagonal it reads.
fn orders_the_upper_sweep(a: &Csr, levels: &[u32]) -> bool {
    (0..a.n_rows()).all(|i| {
        a.row(i)
            .0
            .iter()
            .all(|&j| j as usize <= i || levels[j as usize] < levels[i])
    })
}

/// `a` without the entries below the diagonal in row `r`.
fn without_lower_entries(a: &Csr, r: usize) -> Csr {
    let (mut row_ptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for i in 0..a.n_rows() {
        let (c, v) = a.row(i);
        for (&j, &x) in c.iter().zip(v) {
            if i != r || j as usize >= i {
                cols.push(j);
                vals.push(x);
            }
        }
        row_ptr.push(cols.len());
    }
    Csr::new(a.n_rows(), row_ptr, cols, vals).unwrap()
}
