use nalgebra::{DMatrix, DVector};

use super::coarsest::CoarsestSolver;
use super::*;
use crate::fvm::testing::all_neumann_problem;
use crate::fvm::testing::poisson_system;
use crate::fvm::{LaplacianSystem, Reference, Schemes};
use crate::solve::LinearOperator;
use crate::sparse::testing::{dense, random_symmetric, SplitMix};

/// A symmetric tridiagonal matrix with off-diagonals −s_i (row sums 1).
fn chain(s: &[f64]) -> Csr {
    let n = s.len() + 1;
    let mut m = DMatrix::zeros(n, n);
    for (i, &s) in s.iter().enumerate() {
        m[(i, i + 1)] = -s;
        m[(i + 1, i)] = -s;
    }
    for i in 0..n {
        m[(i, i)] = 1.0 - m.row(i).sum();
    }
    from_dense(&m)
}

fn from_dense(m: &DMatrix<f64>) -> Csr {
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for r in 0..m.nrows() {
        for c in 0..m.ncols() {
            if m[(r, c)] != 0.0 || r == c {
                cols.push(c as u32);
                vals.push(m[(r, c)]);
            }
        }
        row_ptr.push(cols.len());
    }
    Csr::new(m.ncols(), row_ptr, cols, vals).unwrap()
}

/// The 0/1 prolongation of an aggregate map.
fn prolongation(aggregate: &[u32], n_coarse: usize) -> DMatrix<f64> {
    DMatrix::from_fn(aggregate.len(), n_coarse, |i, c| {
        f64::from(aggregate[i] as usize == c)
    })
}

/// The Poisson system with zeroGradient everywhere (singular, consistent rhs).
fn neumann_system(spec: &str) -> (Csr, Vec<f64>) {
    let mesh = crate::mesh::source::load(spec).unwrap();
    let g = mesh.geometry().unwrap();
    let problem = all_neumann_problem(&mesh, Reference::ZeroMean);
    let sys = LaplacianSystem::new(&mesh, &g, Schemes::default(), &problem).unwrap();
    (sys.matrix.clone(), sys.rhs.clone())
}

fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect()
}

#[test]
fn pair_hash_is_symmetric_and_matches_an_independent_implementation() {
    // Values from a Python transcription of the spec's formula (AMG_SPEC.md).
    assert_eq!(pair_hash(0, 1), 3_979_630_085);
    assert_eq!(pair_hash(7, 3), 1_091_448_310);
    assert_eq!(pair_hash(123_456, 7_654_321), 3_087_564_239);
    assert_eq!(pair_hash(3, 7), pair_hash(7, 3));
}

#[test]
fn matching_of_chains_by_hand() {
    // Strengths 1, 3, 1: only (1, 2) is strong for both rows (1 < 3/2), so
    // rows 1 and 2 pair in round 1; rows 0 and 3 have only matched
    // neighbours, round 2 matches nothing, and each joins the pair (1, 2).
    let m = pairwise_matching(&chain(&[1.0, 3.0, 1.0]), 8);
    assert_eq!(m.aggregate, vec![0, 0, 0, 0]);
    assert_eq!((m.n_coarse, m.rounds), (1, 2));
    // Strengths 3, 1, 3: two strong pairs at once; round 2 finds nobody left.
    let m = pairwise_matching(&chain(&[3.0, 1.0, 3.0]), 8);
    assert_eq!(m.aggregate, vec![0, 0, 1, 1]);
    assert_eq!((m.n_coarse, m.rounds), (2, 2));
    // Equal strengths: the hash decides. pair_hash(0, 1) = 3979630085 >
    // pair_hash(1, 2) = 954905276 > pair_hash(2, 3) = 39024402, so row 1
    // proposes to 0 and row 2 to 1: round 1 pairs (0, 1), round 2 (2, 3).
    let c = chain(&[1.0, 1.0, 1.0]);
    let m = pairwise_matching(&c, 8);
    assert_eq!(m.aggregate, vec![0, 0, 1, 1]);
    assert_eq!(m.rounds, 3);
    // One round: (0, 1) only; row 2 joins it (its matched neighbour), row 3
    // has no matched neighbour and stays single.
    let m = pairwise_matching(&c, 1);
    assert_eq!(m.aggregate, vec![0, 0, 0, 1]);
    assert_eq!((m.n_coarse, m.rounds), (2, 1));
    // Positive off-diagonals are never matched nor joined.
    let mut pos = dense(&chain(&[1.0, 1.0]));
    pos[(0, 1)] = 0.5;
    pos[(1, 0)] = 0.5;
    let m = pairwise_matching(&from_dense(&pos), 8);
    assert_eq!(m.aggregate, vec![0, 1, 1]);
}

#[test]
fn matching_does_not_stall_on_monotone_strengths() {
    // Strengths 1, 2, 3, …: every row's strongest coupling points up the
    // chain, so strongest-first handshakes match one pair per round. Here
    // neighbouring strengths are all strong and the hash pairs most rows.
    let strengths: Vec<f64> = (1..1000).map(f64::from).collect();
    let m = pairwise_matching(&chain(&strengths), 6);
    assert!(m.n_coarse < 650, "{} of 1000", m.n_coarse);
}

/// The spec's rounds, written densely and sequentially: partner per row.
fn reference_partners(a: &DMatrix<f64>, rounds: usize) -> Vec<Option<usize>> {
    let n = a.nrows();
    let strongest: Vec<f64> = (0..n)
        .map(|i| {
            (0..n)
                .filter(|&j| j != i)
                .map(|j| -a[(i, j)])
                .fold(0.0, f64::max)
        })
        .collect();
    let mut partner = vec![None; n];
    for _ in 0..rounds {
        let cand: Vec<Option<usize>> = (0..n)
            .map(|i| {
                if partner[i].is_some() {
                    return None;
                }
                let mut best: Option<(bool, u32, usize)> = None;
                for j in (0..n).filter(|&j| j != i && partner[j].is_none() && -a[(i, j)] > 0.0) {
                    let s = -a[(i, j)];
                    let strong = s >= 0.5 * strongest[i] && s >= 0.5 * strongest[j];
                    let key = (strong, pair_hash(i as u32, j as u32), j);
                    let better = match best {
                        None => true,
                        Some(b) => (key.0, key.1) > (b.0, b.1),
                    };
                    if better {
                        best = Some(key);
                    }
                }
                best.map(|b| b.2)
            })
            .collect();
        let mut any = false;
        for i in 0..n {
            if let Some(j) = cand[i] {
                if cand[j] == Some(i) {
                    partner[i] = Some(j);
                    any = true;
                }
            }
        }
        if !any {
            break;
        }
    }
    partner
}

/// The pair leader each row belongs to after the spec's join step: single
/// rows join their strongest matched neighbour's pair (key (s, hash)).
fn reference_leaders(a: &DMatrix<f64>, partner: &[Option<usize>]) -> Vec<usize> {
    let n = a.nrows();
    (0..n)
        .map(|i| match partner[i] {
            Some(j) => i.min(j),
            None => {
                let mut best: Option<(f64, u32, usize)> = None;
                for j in (0..n).filter(|&j| j != i && partner[j].is_some() && -a[(i, j)] > 0.0) {
                    let key = (-a[(i, j)], pair_hash(i as u32, j as u32), j);
                    if best.is_none_or(|b| key.0 > b.0 || (key.0 == b.0 && key.1 > b.1)) {
                        best = Some(key);
                    }
                }
                best.map_or(i, |b| b.2.min(partner[b.2].unwrap()))
            }
        })
        .collect()
}

#[test]
fn matching_follows_the_spec_on_random_matrices_and_is_maximal() {
    for (n, seed) in [(60, 1), (300, 2), (500, 3)] {
        let a = random_symmetric(n, 6, seed);
        let d = dense(&a);
        for rounds in [1, 2, 4, 50] {
            let m = pairwise_matching(&a, rounds);
            let partner = reference_partners(&d, rounds);
            let leader_of = reference_leaders(&d, &partner);
            // Leaders (a pair's smaller row, or a single row) ascending give the numbers.
            let mut leaders = leader_of.clone();
            leaders.sort_unstable();
            leaders.dedup();
            let expected: Vec<u32> = leader_of
                .iter()
                .map(|l| leaders.binary_search(l).unwrap() as u32)
                .collect();
            assert_eq!(m.aggregate, expected, "n {n} rounds {rounds}");
            assert_eq!(m.n_coarse, leaders.len());
            if rounds == 50 {
                // Maximal: a row left single has no negative coupling at all.
                for i in (0..n).filter(|&i| partner[i].is_none() && leader_of[i] == i) {
                    for j in (0..n).filter(|&j| j != i) {
                        assert!(d[(i, j)] >= 0.0, "{i} single but coupled to {j}");
                    }
                }
                assert!(m.n_coarse < n * 3 / 4, "{} of {n}", m.n_coarse);
            }
        }
    }
}

#[test]
fn galerkin_equals_the_dense_product() {
    // By hand: [4 -1 0 -2; -1 5 -1 0; 0 -1 6 -1; -2 0 -1 7] with aggregates
    // {0, 1}, {2, 3}: [4-1-1+5, 0-2-1+0; …] = [7 -3; -3 11].
    let a = crate::sparse::testing::four_by_four(-1.0);
    let c = galerkin(&a, &[0, 0, 1, 1], 2);
    assert_eq!(c.row_ptr(), &[0, 2, 4]);
    assert_eq!(c.cols(), &[0, 1, 0, 1]);
    assert_eq!(c.values(), &[7., -3., -3., 11.]);
    // Random matrices and aggregates (the numbering not by leader).
    for (n, nc, seed) in [(50, 7, 4), (400, 90, 5)] {
        let a = random_symmetric(n, 6, seed);
        let mut rng = SplitMix(seed);
        let aggregate = shuffled_aggregate(n, nc, &mut rng);
        let c = galerkin(&a, &aggregate, nc);
        let p = prolongation(&aggregate, nc);
        let expected = p.transpose() * dense(&a) * &p;
        let got = dense(&c);
        assert!((&got - &expected).amax() < 1e-12 * expected.amax());
        // Symmetric to rounding, every stored entry mirrored.
        assert!((&got - got.transpose()).amax() < 1e-13 * expected.amax());
        for r in 0..nc {
            for &col in c.row(r).0 {
                assert!(c.slot(col as usize, r).is_some());
            }
        }
    }
}

#[test]
fn galerkin_sums_in_the_spec_order() {
    // One aggregate {0, 1}: rows [1e16, 1] and [1, −1e16] in encounter order
    // sum to ((1e16 + 1) + 1) − 1e16 = 0 (each 1 is lost to rounding), where
    // other orders give 2; entries summing to exactly 0 are kept.
    let a = Csr::new(
        2,
        vec![0, 2, 4],
        vec![0, 1, 0, 1],
        vec![1e16, 1., 1., -1e16],
    )
    .unwrap();
    let c = galerkin(&a, &[0, 0], 1);
    assert_eq!(c.nnz(), 1);
    assert_eq!(c.values()[0], ((1e16 + 1.0) + 1.0) - 1e16);
    assert_eq!(c.values()[0], 0.0);
}

/// Rows 0..n spread over `nc` aggregates (each used), in a random order.
fn shuffled_aggregate(n: usize, nc: usize, rng: &mut SplitMix) -> Vec<u32> {
    let mut aggregate: Vec<u32> = (0..n).map(|i| (i % nc) as u32).collect();
    for i in (1..n).rev() {
        aggregate.swap(i, rng.below(i + 1));
    }
    aggregate
}

#[test]
fn hierarchy_of_a_box_coarsens_by_four_per_level() {
    let (a, _) = poisson_system("box:24x24x24").unwrap();
    let settings = AmgSettings {
        coarsest_rows: 200,
        passes: 2,
        ..AmgSettings::default()
    };
    let h = Hierarchy::setup(&a, &settings).unwrap();
    println!("{}", h.describe());
    assert_eq!(h.stop, CoarseningStop::Small);
    assert!(h.coarsest.n() <= 200);
    assert!(!h.coarsest.singular());
    let mut fine = &a;
    for (l, level) in h.levels.iter().enumerate() {
        let (n, nc) = (fine.n_rows(), level.n_coarse());
        // Two passes of pairs (single rows joining a pair): more than 3.5
        // rows per aggregate on average, every aggregate non-empty.
        assert!(level.members.ptr.windows(2).all(|w| w[1] > w[0]));
        assert!(n as f64 > 3.5 * nc as f64, "level {l}: {n} → {nc}");
        assert_eq!(level.aggregate.len(), n);
        // A_{l+1} = Pᵀ A_l P for the composed aggregates.
        let direct = galerkin(fine, &level.aggregate, nc);
        assert_eq!(direct.cols(), level.coarse.cols());
        for (x, y) in direct.values().iter().zip(level.coarse.values()) {
            assert!((x - y).abs() <= 1e-13 * x.abs().max(1.0), "{x} vs {y}");
        }
        fine = &level.coarse;
    }
    assert!(h.operator_complexity() < 1.8, "{}", h.operator_complexity());
}

#[test]
fn all_neumann_coarse_rows_sum_to_zero_and_the_coarsest_is_pseudo_inverted() {
    let (a, _) = neumann_system("box:10x10x10");
    let h = Hierarchy::setup(
        &a,
        &AmgSettings {
            coarsest_rows: 40,
            ..AmgSettings::default()
        },
    )
    .unwrap();
    assert!(h.coarsest.singular(), "{}", h.describe());
    for level in &h.levels {
        let c = &level.coarse;
        for r in 0..c.n_rows() {
            let (_, vals) = c.row(r);
            let sum: f64 = vals.iter().sum();
            let size: f64 = vals.iter().map(|v| v.abs()).sum();
            assert!(sum.abs() < 1e-13 * size, "row {r}: sum {sum}");
        }
    }
    // The coarsest solve is A⁺: A x = b − mean(b), mean(x) = 0, and the
    // stored inverse is symmetric and does the same.
    let last = h.matrix(&a, h.levels.len());
    let n = last.n_rows();
    let b = random_vector(n, 9);
    let mut x = vec![0.0; n];
    h.coarsest.solve(&b, &mut x);
    let mean_b = b.iter().sum::<f64>() / n as f64;
    let mut ax = vec![0.0; n];
    last.spmv(&x, &mut ax);
    for i in 0..n {
        assert!((ax[i] - (b[i] - mean_b)).abs() < 1e-10, "row {i}");
    }
    assert!(x.iter().sum::<f64>().abs() < 1e-10);
    let inv = DMatrix::from_row_slice(n, n, &h.coarsest.inverse());
    assert!((&inv - inv.transpose()).amax() < 1e-10 * inv.amax());
    let xi = &inv * DVector::from_column_slice(&b);
    assert!((xi - DVector::from_column_slice(&x)).amax() < 1e-10 * inv.amax());
}

#[test]
fn coarsest_solver_inverts_a_regular_matrix_and_rejects_an_indefinite_one() {
    let a = random_symmetric(30, 4, 8);
    let s = CoarsestSolver::new(&a).unwrap();
    assert!(!s.singular());
    let inv = DMatrix::from_row_slice(30, 30, &s.inverse());
    assert!((&inv * dense(&a) - DMatrix::identity(30, 30)).amax() < 1e-12);
    let mut bad = dense(&a);
    bad[(3, 3)] = -1.0;
    let err = CoarsestSolver::new(&from_dense(&bad)).err().unwrap();
    assert!(err.to_string().contains("not positive definite"), "{err}");
}

/// x·M y and y·M x for the cycle of `settings` on `a`.
fn bilinear_pair(a: &Csr, settings: &AmgSettings) -> (f64, f64) {
    let amg = Amg::new(a, settings).unwrap();
    let n = a.n_rows();
    let (x, y) = (random_vector(n, 1), random_vector(n, 2));
    let (mut mx, mut my) = (vec![0.0; n], vec![0.0; n]);
    amg.apply(&x, &mut mx);
    amg.apply(&y, &mut my);
    let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    (dot(&x, &my), dot(&y, &mx))
}

#[test]
fn v_and_w_cycles_are_symmetric_with_every_smoother() {
    let (a, _) = poisson_system("box:12x12x12:tet:perturb=0.2:renumber").unwrap();
    for smoother in AmgSmootherKind::ALL {
        for cycle in [CycleKind::V, CycleKind::W] {
            for sweeps in [1, 2] {
                let s = AmgSettings {
                    smoother,
                    cycle,
                    sweeps,
                    coarsest_rows: 30,
                    over_correction: 1.5,
                    ..AmgSettings::default()
                };
                let (xmy, ymx) = bilinear_pair(&a, &s);
                assert!((xmy - ymx).abs() < 1e-11 * xmy.abs(), "{s}: {xmy} vs {ymx}");
            }
        }
    }
    // The K-cycle's coefficients depend on the vector: not symmetric.
    let k = AmgSettings {
        cycle: CycleKind::K,
        coarsest_rows: 30,
        ..AmgSettings::default()
    };
    let (xmy, ymx) = bilinear_pair(&a, &k);
    assert!((xmy - ymx).abs() > 1e-8 * xmy.abs(), "{xmy} vs {ymx}");
}

#[test]
fn one_level_is_the_exact_inverse() {
    // Fewer rows than coarsest_rows: no coarse level, M = A⁻¹.
    let a = random_symmetric(80, 5, 12);
    let amg = Amg::new(&a, &AmgSettings::default()).unwrap();
    assert_eq!(amg.hierarchy().n_levels(), 1);
    let b = random_vector(80, 3);
    let mut x = vec![0.0; 80];
    amg.apply(&b, &mut x);
    let mut ax = vec![0.0; 80];
    a.spmv(&x, &mut ax);
    assert!(ax.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12));
}

#[test]
fn update_values_equals_a_fresh_setup() {
    for (a, neumann) in [
        (poisson_system("box:16x16x16").unwrap().0, false),
        (neumann_system("box:12x12x6").0, true),
    ] {
        let settings = AmgSettings {
            coarsest_rows: 50,
            passes: 3,
            ..AmgSettings::default()
        };
        let mut h = Hierarchy::setup(&a, &settings).unwrap();
        assert_eq!(h.coarsest.singular(), neumann);
        // Doubling every value keeps every comparison, hence the aggregates.
        let mut a2 = a.clone();
        a2.values_mut().iter_mut().for_each(|v| *v *= 2.0);
        let fresh = Hierarchy::setup(&a2, &settings).unwrap();
        h.update_values(&a2).unwrap();
        assert_eq!(h.levels.len(), fresh.levels.len());
        for (u, f) in h.levels.iter().zip(&fresh.levels) {
            assert_eq!(u.aggregate, f.aggregate);
            assert_eq!(u.coarse, f.coarse);
        }
        assert_eq!(h.coarsest.inverse(), fresh.coarsest.inverse());
        // New values that would change the aggregates: still Pᵀ A P of the kept ones.
        let mut a3 = a.clone();
        let mut rng = SplitMix(5);
        let n = a3.n_rows();
        let factors: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
        // Symmetric scaling D A D keeps symmetry (and Neumann row sums do not matter here).
        let row_ptr = a3.row_ptr().to_vec();
        let cols = a3.cols().to_vec();
        for r in 0..n {
            for s in row_ptr[r]..row_ptr[r + 1] {
                a3.values_mut()[s] *= factors[r] * factors[cols[s] as usize];
            }
        }
        h.update_values(&a3).unwrap();
        let mut fine = a3.clone();
        for level in &h.levels {
            let direct = galerkin(&fine, &level.aggregate, level.n_coarse());
            for (x, y) in direct.values().iter().zip(level.coarse.values()) {
                assert!((x - y).abs() <= 1e-13 * x.abs().max(1.0));
            }
            fine = level.coarse.clone();
        }
    }
    // Another pattern is refused with a message, not a panic.
    let (a, _) = poisson_system("box:8x8x8").unwrap();
    let mut h = Hierarchy::setup(
        &a,
        &AmgSettings {
            coarsest_rows: 20,
            ..AmgSettings::default()
        },
    )
    .unwrap();
    let (other, _) = poisson_system("box:8x8x9").unwrap();
    assert!(h
        .update_values(&other)
        .unwrap_err()
        .to_string()
        .contains("set it up again"));
}

#[test]
fn settings_are_checked_and_named() {
    let s = AmgSettings::default();
    assert!(s.validate().is_ok());
    assert!(AmgSettings { passes: 0, ..s }
        .validate()
        .unwrap_err()
        .contains("passes"));
    assert!(AmgSettings { max_levels: 1, ..s }
        .validate()
        .unwrap_err()
        .contains("maxLevels"));
    assert!(AmgSettings {
        coarsest_rows: 100_000,
        ..s
    }
    .validate()
    .unwrap_err()
    .contains("coarsestRows"));
    assert!(AmgSettings {
        over_correction: 2.5,
        ..s
    }
    .validate()
    .unwrap_err()
    .contains("overCorrection"));
    assert_eq!("k".parse(), Ok(CycleKind::K));
    assert_eq!(
        "DICGaussSeidel".parse(),
        Ok(AmgSmootherKind::MulticolourGaussSeidel)
    );
    assert_eq!("l1jacobi".parse(), Ok(AmgSmootherKind::L1Jacobi));
    assert!("ILU"
        .parse::<AmgSmootherKind>()
        .unwrap_err()
        .contains("Chebyshev"));
    assert!(!AmgSettings {
        cycle: CycleKind::K,
        ..s
    }
    .is_linear());
    // The command line's form.
    let parsed: AmgSettings = "amg:cycle=V:passes=2:smoother=Chebyshev:sweeps=3:overCorrection=1.2"
        .parse()
        .unwrap();
    assert_eq!(
        (
            parsed.cycle,
            parsed.passes,
            parsed.smoother,
            parsed.sweeps,
            parsed.over_correction
        ),
        (CycleKind::V, 2, AmgSmootherKind::Chebyshev, 3, 1.2)
    );
    assert_eq!("AMG".parse(), Ok(s));
    crate::test_support::assert_parse_refused::<AmgSettings>(&[
        ("amg:levels=3", "unknown AMG parameter"),
        ("amg:sweeps=0", "sweeps"),
    ]);
    assert_eq!(
        "amg:cycle=W".parse::<crate::solve::Preconditioner>(),
        Ok(crate::solve::Preconditioner::Amg(AmgSettings {
            cycle: CycleKind::W,
            ..s
        }))
    );
    // A matrix with a non-positive diagonal is refused with its row.
    let a = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, -2.0]).unwrap();
    let err = Hierarchy::setup(&a, &s).err().unwrap();
    assert!(err.to_string().contains("row 1"), "{err}");
}

/// ‖u − v‖∞ / ‖v‖∞.
fn relative_difference(u: &[f64], v: &[f64]) -> f64 {
    let max = |w: &mut dyn Iterator<Item = f64>| w.fold(0.0, f64::max);
    max(&mut u.iter().zip(v).map(|(a, b)| (a - b).abs())) / max(&mut v.iter().map(|b| b.abs()))
}

#[test]
fn the_mixed_precision_cycle_is_the_double_cycle_to_f32_round_off() {
    let (a, _) = poisson_system("box:12x12x12:tet:perturb=0.2:renumber").unwrap();
    let n = a.n_rows();
    let r = random_vector(n, 4);
    for smoother in AmgSmootherKind::ALL {
        for cycle in CycleKind::ALL {
            let double = AmgSettings {
                smoother,
                cycle,
                sweeps: 2,
                coarsest_rows: 30,
                ..AmgSettings::default()
            };
            let mixed = AmgSettings {
                precision: Precision::Mixed,
                ..double
            };
            let (mut z64, mut z32) = (vec![0.0; n], vec![0.0; n]);
            Amg::new(&a, &double).unwrap().apply(&r, &mut z64);
            Amg::new(&a, &mixed).unwrap().apply(&r, &mut z32);
            let d = relative_difference(&z32, &z64);
            // f32 arithmetic (unit round-off 6e-8), not f64's.
            assert!(d < 2e-5 && d > 1e-12, "{mixed}: mixed differs by {d:.1e}");
            assert!(
                z32.iter().all(|&z| z == z as f32 as f64),
                "{mixed}: z is not f32"
            );
        }
    }
}

#[test]
fn pcg_with_the_mixed_cycle_takes_the_double_iterations() {
    use crate::solve::{solve_pcg, Preconditioner, SolverControls};
    let (a, _) = poisson_system("box:24x24x24").unwrap();
    let b = random_vector(a.n_rows(), 9);
    let controls = SolverControls {
        tolerance: 0.0,
        rel_tol: 1e-8,
        max_iter: 200,
        min_iter: 0,
    };
    let mut iterations = Vec::new();
    for precision in [Precision::Double, Precision::Mixed] {
        let s = AmgSettings {
            cycle: CycleKind::V,
            precision,
            ..AmgSettings::default()
        };
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_pcg(&a, Preconditioner::Amg(s), &b, &mut x, &controls, "p").unwrap();
        assert!(perf.converged, "{s}: {perf:?}");
        iterations.push(perf.iterations);
    }
    assert!(
        iterations[1] <= iterations[0] + 1,
        "double, mixed iterations: {iterations:?}"
    );
}

#[test]
fn precision_is_a_setting() {
    let s: AmgSettings = "amg:precision=mixed:cycle=V".parse().unwrap();
    assert_eq!(s.precision, Precision::Mixed);
    assert!(s.describe().contains("mixed precision"), "{}", s.describe());
    assert_eq!(AmgSettings::default().precision, Precision::Double);
    let f: AmgSettings = "amg:fused=true".parse().unwrap();
    assert!(f.fused && f.describe().contains("fused"));
    assert!(AmgSettings::default().refine_coarsest);
    let r: AmgSettings = "amg:refineCoarsest=false".parse().unwrap();
    assert!(!r.refine_coarsest && r.describe().contains("coarsest factored"));
    crate::test_support::assert_parse_refused::<AmgSettings>(&[
        ("amg:fused=maybe", "true or false"),
        (
            "amg:refineCoarsest=1e3",
            "refineCoarsest must be true or false",
        ),
        ("amg:precision=half", "double, mixed"),
    ]);
}
