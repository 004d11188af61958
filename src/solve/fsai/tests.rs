use super::*;
use crate::sparse::testing::{dense, random_symmetric};

fn laplacian_1d(n: usize) -> Csr {
    let mut t = Vec::new();
    for i in 0..n as u32 {
        t.push((i, i, 2.0));
        if i > 0 {
            t.push((i, i - 1, -1.0));
            t.push((i - 1, i, -1.0));
        }
    }
    Csr::from_triplets(n, n, t).unwrap()
}

/// One column per step, no stop rule (ε 0): the tests step a row by hand.
const ONE_COLUMN: AdaptivePattern = AdaptivePattern {
    steps: 1,
    step_size: 1,
    epsilon: 0.0,
    stop: FsaiStop::Stagnation,
};

/// The static pattern is the set a plain breadth-first search with a
/// hash set of the reached columns gives: the columns below i within
/// `power` kept steps of i.
#[test]
fn static_pattern_is_the_breadth_first_set_below_the_row() {
    for seed in 0..4 {
        let a = random_symmetric(300, 6, seed);
        let diag: Vec<f64> = (0..300).map(|i| 1.0 + (i % 5) as f64).collect();
        for (power, prefilter) in [(1, 0.0), (2, 0.0), (3, 0.0), (2, 0.2), (4, 0.1)] {
            for i in (0..300).step_by(7) {
                let mut seen = std::collections::HashSet::from([i as u32]);
                let mut frontier = vec![i as u32];
                for _ in 0..power {
                    let mut next = Vec::new();
                    for &r in &frontier {
                        let (cols, vals) = a.row(r as usize);
                        for (&c, &v) in cols.iter().zip(vals) {
                            let (r, cu) = (r as usize, c as usize);
                            let kept =
                                cu != r && v.abs() >= prefilter * (diag[r] * diag[cu]).sqrt();
                            if kept && seen.insert(c) {
                                next.push(c);
                            }
                        }
                    }
                    frontier = next;
                }
                let mut expected: Vec<u32> =
                    seen.into_iter().filter(|&c| (c as usize) < i).collect();
                expected.sort_unstable();
                assert_eq!(
                    static_pattern(&a, &diag, i, power, prefilter),
                    expected,
                    "seed {seed}, row {i}, power {power}, prefilter {prefilter}"
                );
            }
        }
    }
}

#[test]
fn full_pattern_gives_the_inverse_cholesky_factor() {
    let n = 9;
    let a = laplacian_1d(n);
    let l = dense(&a).cholesky().unwrap().l();
    let exact = l.try_inverse().unwrap();
    let full_static = FsaiSettings {
        pattern: FsaiPattern::Static {
            power: n - 1,
            prefilter: 0.0,
        },
        ..FsaiSettings::default()
    };
    for s in [
        FsaiSettings::adaptive(n - 1, 0.0, FsaiStop::Stagnation),
        full_static,
    ] {
        let f = fsai_setup(&a, &s).unwrap();
        let g = dense(&f.g);
        for r in 0..n {
            for c in 0..n {
                assert!(
                    (g[(r, c)] - exact[(r, c)]).abs() < 1e-13,
                    "{s}: G({r},{c}) = {} vs {}",
                    g[(r, c)],
                    exact[(r, c)]
                );
            }
            // Full lower rows, diagonal last.
            assert_eq!(f.g.row(r).0.len(), r + 1);
            assert_eq!(*f.g.row(r).0.last().unwrap() as usize, r);
        }
        assert_eq!(f.stats.fallback_rows, 0);
    }
}

/// diag(G A Gᵀ) for each row.
fn scaled_diagonal(a: &Csr, g: &Csr) -> Vec<f64> {
    (0..a.n_rows())
        .map(|i| {
            let (gc, gv) = g.row(i);
            let mut s = 0.0;
            for (&p, &gp) in gc.iter().zip(gv) {
                for (&q, &gq) in gc.iter().zip(gv) {
                    let apq = a
                        .slot(p as usize, q as usize)
                        .map_or(0.0, |k| a.values()[k]);
                    s += gp * apq * gq;
                }
            }
            s
        })
        .collect()
}

fn variants() -> Vec<FsaiSettings> {
    let mut v = vec![
        FsaiSettings::default(),
        FsaiSettings::adaptive(20, 1e-3, FsaiStop::Reduction),
        FsaiSettings {
            pattern: FsaiPattern::Adaptive(AdaptivePattern {
                steps: 5,
                step_size: 3,
                epsilon: 0.01,
                stop: FsaiStop::Stagnation,
            }),
            ..FsaiSettings::default()
        },
    ];
    for power in [1, 2] {
        v.push(FsaiSettings {
            pattern: FsaiPattern::Static {
                power,
                prefilter: 0.05,
            },
            ..FsaiSettings::default()
        });
    }
    let with_post: Vec<_> = v
        .iter()
        .map(|s| FsaiSettings {
            postfilter: 0.05,
            ..*s
        })
        .collect();
    v.extend(with_post);
    v
}

#[test]
fn rows_are_scaled_to_a_unit_diagonal() {
    let a = random_symmetric(600, 8, 7);
    for s in variants() {
        for precision in [Precision::Double, Precision::Mixed] {
            let s = FsaiSettings { precision, ..s };
            let f = fsai_setup(&a, &s).unwrap();
            let tol = if precision == Precision::Double {
                1e-13
            } else {
                1e-5
            };
            for (i, d) in scaled_diagonal(&a, &f.g).iter().enumerate() {
                assert!((d - 1.0).abs() < tol, "{s}: row {i}: {d}");
            }
            assert_eq!(f.stats.fallback_rows, 0, "{s}");
            assert_eq!(f.stats.rows_by_steps.iter().sum::<usize>(), 600);
            assert!(f.stats.density <= f.stats.density_before_postfilter);
            if s.postfilter > 0.0 {
                assert!(f.stats.density < f.stats.density_before_postfilter, "{s}");
            }
        }
    }
}

#[test]
fn kaporin_psi_decreases_every_step_and_matches_the_solution() {
    let a = random_symmetric(300, 8, 11);
    let mut steps = 0;
    for i in 0..a.n_rows() {
        let mut row = RowSystem::<f64>::new(&a, i);
        let psi0 = row.psi;
        let (mut scratch, mut picks) = (GradientScratch::default(), Vec::new());
        for _ in 0..15 {
            let before = row.psi;
            match row.adaptive_step(&a, &ONE_COLUMN, psi0, &mut scratch, &mut picks) {
                StepOutcome::Grown | StepOutcome::Stopped => steps += 1,
                other => {
                    assert_eq!(other, StepOutcome::Exhausted, "row {i}");
                    break;
                }
            }
            assert!(row.psi < before, "row {i}: psi {} -> {}", before, row.psi);
            // ψ = a_ii + g · A[cols, i] at the solution.
            let dot: f64 = row
                .cols
                .iter()
                .zip(&row.g)
                .map(|(&c, g)| g * entry::<f64>(&a, c as usize, i))
                .sum();
            let psi = entry::<f64>(&a, i, i) + dot;
            assert!((psi - row.psi).abs() < 1e-12 * psi0, "row {i}");
        }
    }
    assert!(steps > 1000, "{steps}");
}

/// The gradient as the spec writes it: a merge over the 32 slots, every
/// column through the full 32-slot butterfly.
fn gradient_reference<T: Real>(row: &RowSystem<T>, a: &Csr) -> Vec<(T, u32)> {
    let i = row.row;
    let slots: Vec<(usize, T)> = row.slots().collect();
    let mut pos: Vec<usize> = slots.iter().map(|s| a.row_ptr()[s.0]).collect();
    let end: Vec<usize> = slots
        .iter()
        .map(|s| a.row_ptr()[s.0] + a.row(s.0).0.partition_point(|&j| (j as usize) < i))
        .collect();
    let mut out = Vec::new();
    while let Some(j) = (0..slots.len())
        .filter(|&t| pos[t] < end[t])
        .map(|t| a.cols()[pos[t]])
        .min()
    {
        let mut p = [T::ZERO; 32];
        for t in 0..slots.len() {
            if pos[t] < end[t] && a.cols()[pos[t]] == j {
                p[t] = slots[t].1 * T::from_f64(a.values()[pos[t]]);
                pos[t] += 1;
            }
        }
        let v = tree_sum(&mut p, 32);
        if v != T::ZERO && !row.cols.contains(&j) {
            out.push((v.abs(), j));
        }
    }
    out
}

fn check_gradient<T: Real>(a: &Csr) -> usize {
    let mut checked = 0;
    for i in 0..a.n_rows() {
        let mut row = RowSystem::<T>::new(a, i);
        let psi0 = row.psi;
        let (mut scratch, mut picks) = (GradientScratch::default(), Vec::new());
        for _ in 0..31 {
            let bits = |v: Vec<(T, u32)>| -> Vec<(u64, u32)> {
                v.into_iter()
                    .map(|(x, j)| (x.to_f64().to_bits(), j))
                    .collect()
            };
            assert_eq!(
                bits(row.gradient(a)),
                bits(gradient_reference(&row, a)),
                "row {i}, {} columns",
                row.cols.len()
            );
            checked += 1;
            let step = row.adaptive_step(a, &ONE_COLUMN, psi0, &mut scratch, &mut picks);
            if step != StepOutcome::Grown {
                break;
            }
        }
    }
    checked
}

#[test]
fn gradient_equals_the_32_slot_butterfly() {
    let a = random_symmetric(400, 10, 13);
    assert!(check_gradient::<f64>(&a) > 2000);
    assert!(check_gradient::<f32>(&a) > 2000);
}

#[test]
fn mixed_setup_is_close_to_double() {
    let a = random_symmetric(500, 8, 5);
    let d = fsai_setup(&a, &FsaiSettings::default()).unwrap();
    let m = fsai_setup(
        &a,
        &FsaiSettings {
            precision: Precision::Mixed,
            ..FsaiSettings::default()
        },
    )
    .unwrap();
    // Same pattern unless a near-tie in the gradient; values to f32 accuracy.
    let same = (0..500).filter(|&r| d.g.row(r).0 == m.g.row(r).0).count();
    assert!(same >= 490, "{same}");
    for r in (0..500).filter(|&r| d.g.row(r).0 == m.g.row(r).0) {
        for (x, y) in d.g.row(r).1.iter().zip(m.g.row(r).1) {
            assert!(
                (x - y).abs() < 1e-5 * (1.0 + x.abs()),
                "row {r}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn bad_settings_and_matrices_are_errors() {
    let a = laplacian_1d(5);
    let err = fsai_setup(&a, &FsaiSettings::adaptive(32, 0.01, FsaiStop::Stagnation)).unwrap_err();
    assert!(err.to_string().contains("at most 31"), "{err}");
    let s: Result<FsaiSettings, _> = "fsai:steps=16,stepSize=2".parse();
    assert!(s.unwrap_err().contains("16 * 2 = 32"));
    assert!("fsai:steps=10:stepSize=3".parse::<FsaiSettings>().is_ok());
    let bad = crate::solve::error::non_positive::matrix();
    let err = fsai_setup(&bad, &FsaiSettings::default()).unwrap_err();
    assert_eq!(
        err,
        SolveError::NonPositiveDiagonal {
            precond: "FSAI",
            row: 1,
            value: -3.0
        }
    );
    let missing = Csr::new(2, vec![0, 1, 2], vec![0, 0], vec![1., 0.5]).unwrap();
    assert!(matches!(
        fsai_setup(&missing, &FsaiSettings::default()),
        Err(SolveError::NonPositiveDiagonal { row: 1, .. })
    ));
    crate::test_support::assert_parse_refused::<FsaiSettings>(&[
        ("fsai:power=2", "applies to pattern static"),
        ("fsai:pattern=static:steps=3", "applies to pattern adaptive"),
        ("fsai:pattern=dynamic", "adaptive, static"),
        ("fsai:steps=x", "whole number"),
        ("fsai:epsilon=-1", "epsilon"),
        ("fsai:stop=never", "stagnation, reduction"),
        ("fsai:pattern=static:power=0", "power"),
        ("fsai:precision=half", "double, mixed"),
        ("fsai:colour=red", "unknown FSAI parameter"),
        ("fsai:steps", "key=value"),
    ]);
    assert_eq!(
        "FSAI:pattern=static,power=2,prefilter=0.05".parse::<FsaiSettings>(),
        Ok(FsaiSettings {
            pattern: FsaiPattern::Static {
                power: 2,
                prefilter: 0.05
            },
            ..FsaiSettings::default()
        })
    );
}

#[test]
fn preconditioner_applies_gt_g() {
    let a = random_symmetric(200, 6, 3);
    let p = FsaiPreconditioner::new(&a, &FsaiSettings::default()).unwrap();
    let g = dense(&p.factor.g);
    let r: Vec<f64> = (0..200).map(|i| (i as f64 * 0.37).sin()).collect();
    let mut z = vec![0.0; 200];
    p.apply(&r, &mut z);
    let expect = g.transpose() * (&g * nalgebra::DVector::from_column_slice(&r));
    for i in 0..200 {
        assert!((z[i] - expect[i]).abs() < 1e-13 * (1.0 + expect[i].abs()));
    }
}
