use super::*;
use crate::solve::ic::Dic;
use crate::solve::split::SplitMatrix;
use crate::solve::LinearOperator;
use crate::sparse::testing::{dense, random_symmetric};

#[test]
fn dilu_on_a_symmetric_matrix_is_dic() {
    let a = random_symmetric(300, 6, 11);
    let dic = Dic::new(&a).unwrap();
    let dilu = dilu(&a).unwrap();
    assert_eq!(dic.reciprocal_diagonal(), dilu.reciprocal_diagonal());
}

/// DILU's d* is the recurrence's, entry by entry from the CSR (each
/// a_ij found by a search), and the split rows' sweeps have the stored
/// DILU's bits, on nonsymmetric values over a symmetric pattern.
#[test]
fn dilu_of_split_rows_has_the_bits_of_the_stored_dilu() {
    use crate::sparse::testing::{bits, random_nonsymmetric, random_vector};
    for (n, per_row, seed) in [(1, 1, 3), (200, 5, 7), (2500, 9, 8)] {
        let a = random_nonsymmetric(n, per_row, seed);
        let stored = dilu(&a).unwrap();
        let transposed = transposed_slots(&a, "DILU").unwrap();
        let mut d: Vec<f64> = (0..n).map(|j| a.values()[a.slot(j, j).unwrap()]).collect();
        for j in 0..n {
            let lower = a.row_ptr()[j]..a.slot(j, j).unwrap();
            for (s, &mirror) in lower.clone().zip(&transposed[lower]) {
                let i = a.cols()[s] as usize;
                d[j] -= a.values()[mirror] * a.values()[s] / d[i];
            }
        }
        let reciprocal: Vec<f64> = d.iter().map(|d| 1.0 / d).collect();
        assert_eq!(
            bits(stored.reciprocal_diagonal()),
            bits(&reciprocal),
            "n = {n}"
        );
        let split = SplitMatrix::new(&a);
        let factor = dilu_factor(&split).unwrap();
        let r = random_vector(n, seed + 1);
        let (mut w_stored, mut w_factor) = (vec![0.0; n], vec![0.0; n]);
        stored.apply(&r, &mut w_stored);
        factor.sweeps(&split, &r, &mut w_factor);
        assert_eq!(bits(&w_factor), bits(&w_stored), "n = {n}");
    }
}

/// The stored DILU's refusals, each naming its row or entry.
#[test]
fn dilu_of_split_rows_refuses_what_the_stored_dilu_refuses() {
    let dilu_error = |a: &Csr| dilu_factor(&SplitMatrix::new(a)).err().unwrap().to_string();
    // (0, 1) without (1, 0), and (2, 0) without (0, 2).
    let one_sided = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![2.0, 1.0, 2.0]).unwrap();
    assert!(dilu(&one_sided).is_err());
    let message = dilu_error(&one_sided);
    assert!(message.contains("entry (0, 1) has no (1, 0)"), "{message}");
    let below = Csr::new(
        3,
        vec![0, 1, 2, 4],
        vec![0, 1, 0, 2],
        vec![2.0, 2.0, 1.0, 2.0],
    )
    .unwrap();
    assert!(dilu(&below).is_err());
    let message = dilu_error(&below);
    assert!(message.contains("entry (2, 0) has no (0, 2)"), "{message}");
    // A zero pivot in row 1: 1 − 1·1/1.
    let singular = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0, 1.0, 1.0, 1.0]).unwrap();
    assert_eq!(
        dilu(&singular).err(),
        dilu_factor(&SplitMatrix::new(&singular)).err()
    );
    let message = dilu_error(&singular);
    assert!(message.contains("row 1"), "{message}");
    let negative = Csr::new(1, vec![0, 1], vec![0], vec![-1.0]).unwrap();
    assert_eq!(
        dilu(&negative).err(),
        dilu_factor(&SplitMatrix::new(&negative)).err()
    );
}

#[test]
fn ilu0_of_a_pattern_closed_matrix_is_exact() {
    // Arrow pointing down-right (last row and column full): no fill, so
    // ILU(0) is the exact LU and M = A.
    let n = 6;
    let mut rows: Vec<Vec<(u32, f64)>> = (0..n).map(|i| vec![(i as u32, 4.0 + i as f64)]).collect();
    for i in 0..n - 1 {
        rows[i].push((n as u32 - 1, 1.0 + i as f64 * 0.1));
        rows[n - 1].insert(i, (i as u32, -0.5 - i as f64 * 0.2));
    }
    let a = Csr::from_rows(n, rows).unwrap();
    let ilu = Ilu::new(&a, 0).unwrap();
    let b: Vec<f64> = (0..n).map(|i| i as f64 - 2.5).collect();
    let mut x = vec![0.0; n];
    ilu.apply(&b, &mut x);
    let ax = dense(&a) * nalgebra::DVector::from_column_slice(&x);
    for i in 0..n {
        assert!((ax[i] - b[i]).abs() < 1e-13, "row {i}");
    }
}
