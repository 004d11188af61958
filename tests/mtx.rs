//! Matrix Market reader and writer: formats, malformed files, round trips, fuzz.

mod common;

use std::path::Path;

use fvpoisson::sparse::mtx::{parse_matrix, parse_vector, read_matrix, write_matrix, write_vector};
use fvpoisson::sparse::testing::bits;
use fvpoisson::sparse::Csr;

fn matrix(text: &str) -> Csr {
    parse_matrix(text.as_bytes(), Path::new("a.mtx")).unwrap()
}

fn matrix_error(text: &str) -> String {
    parse_matrix(text.as_bytes(), Path::new("a.mtx"))
        .unwrap_err()
        .to_string()
}

fn vector_error(text: &str) -> String {
    parse_vector(text.as_bytes(), Path::new("b.mtx"))
        .unwrap_err()
        .to_string()
}

/// Dense row-major copy for comparisons.
fn dense(a: &Csr) -> Vec<Vec<f64>> {
    let mut d = vec![vec![0.0; a.n_cols()]; a.n_rows()];
    for (r, row) in d.iter_mut().enumerate() {
        let (cols, vals) = a.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            row[c as usize] = v;
        }
    }
    d
}

#[test]
fn general_symmetric_pattern_and_integer_files() {
    let a = matrix(
        "%%MatrixMarket matrix coordinate real general\n% comment\n\n2 3 4\n1 3 2.5e-1\n2 1 -1\n1 3 0.75\r\n2 2 1E2\n",
    );
    assert_eq!(dense(&a), vec![vec![0.0, 0.0, 1.0], vec![-1.0, 100.0, 0.0]]);

    let s = matrix(
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 2\n3 1 -1\n2 2 3\n3 3 4\n",
    );
    assert_eq!(
        dense(&s),
        vec![
            vec![2.0, 0.0, -1.0],
            vec![0.0, 3.0, 0.0],
            vec![-1.0, 0.0, 4.0]
        ]
    );

    let p = matrix("%%MatrixMarket MATRIX Coordinate Pattern Symmetric\n2 2 2\n2 1\n2 2\n");
    assert_eq!(dense(&p), vec![vec![0.0, 1.0], vec![1.0, 1.0]]);

    let i = matrix("%%MatrixMarket matrix coordinate integer general\n1 2 2\n1 1 -3\n1 2 7\n");
    assert_eq!(dense(&i), vec![vec![-3.0, 7.0]]);

    let committed = read_matrix(Path::new("tests/data/poisson2d_4x4.mtx")).unwrap();
    assert_eq!((committed.n_rows(), committed.nnz()), (16, 64));
    assert_eq!(committed.row(5).1.iter().sum::<f64>(), 0.0); // interior row
}

#[test]
fn vectors_as_array_or_one_column_coordinate() {
    let path = Path::new("b.mtx");
    let v = parse_vector(
        b"%%MatrixMarket matrix array real general\n% c\n3 1\n1\n-2.5\n3e-3\n",
        path,
    );
    assert_eq!(v.unwrap(), vec![1.0, -2.5, 3e-3]);
    let v = parse_vector(
        b"%%MatrixMarket matrix array integer general\n1 2\n4\n5\n",
        path,
    );
    assert_eq!(v.unwrap(), vec![4.0, 5.0]);
    let v = parse_vector(
        b"%%MatrixMarket matrix coordinate real general\n3 1 1\n2 1 9\n",
        path,
    );
    assert_eq!(v.unwrap(), vec![0.0, 9.0, 0.0]);
}

#[test]
fn malformed_files_name_file_line_and_problem() {
    for (text, expected) in [
        ("", "a.mtx:1: not a Matrix Market file"),
        (
            "%%MatrixMarket matrix coordinate real\n1 1 1\n1 1 1\n",
            "a.mtx:1: header must read",
        ),
        (
            "%%MatrixMarket matrix coordinate complex general\n",
            "a.mtx:1: field 'complex' is not supported",
        ),
        (
            "%%MatrixMarket matrix coordinate real hermitian\n",
            "a.mtx:1: symmetry 'hermitian' is not supported",
        ),
        (
            "%%MatrixMarket matrix array real general\n1 1\n1\n",
            "a.mtx:1: dense 'array' format is read for vectors only",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n% only comments\n",
            "a.mtx:2: file ends where the size line",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2\n",
            "a.mtx:2: expected the size line 'rows columns entries' (3 numbers), found 2",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 -2 1\n",
            "a.mtx:2: column count '-2' is not a non-negative integer",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 1\n",
            "a.mtx:4: file ends where an entry 'row column value' was expected",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 1\n",
            "a.mtx:4: extra data '2 2 1' after the 1 entries",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1\n",
            "a.mtx:3: row index 0 is out of range 1..=2 (indices are 1-based)",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 3 1\n",
            "a.mtx:3: column index 3 is out of range 1..=2",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 x 1\n",
            "a.mtx:3: column index 'x' is not an integer",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.5.2\n",
            "a.mtx:3: value '1.5.2' is not a number",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 nan\n",
            "a.mtx:3: value 'nan' is not a finite number",
        ),
        (
            "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n",
            "a.mtx:3: value '1.5' is not an integer",
        ),
        (
            "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 1 1\n",
            "a.mtx:3: expected an entry 'row column' (2 numbers), found 3",
        ),
        (
            "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n",
            "a.mtx:2: a symmetric matrix must be square",
        ),
        (
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 1\n1 2 1\n",
            "a.mtx:3: entry (1, 2) is above the diagonal",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 \u{00e9}\n",
            "a.mtx:3: value",
        ),
    ] {
        let err = matrix_error(text);
        assert!(
            err.starts_with(expected),
            "{text:?}\n  got: {err}\n  want: {expected}"
        );
    }
    let err = parse_matrix(
        b"%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 \xff\n",
        Path::new("a.mtx"),
    );
    assert_eq!(
        err.unwrap_err().to_string(),
        "a.mtx:3: line is not valid UTF-8 text"
    );

    for (text, expected) in [
        (
            "%%MatrixMarket matrix array real general\n2 2\n",
            "b.mtx:2: a vector needs one column (or one row), the size line says 2 x 2",
        ),
        (
            "%%MatrixMarket matrix array real general\n2 1\n1\n",
            "b.mtx:3: file ends where a value was expected",
        ),
        (
            "%%MatrixMarket matrix array real general\n1 1\n1 2\n",
            "b.mtx:3: expected a value (1 numbers), found 2",
        ),
        (
            "%%MatrixMarket matrix array pattern general\n1 1\n",
            "b.mtx:1: field 'pattern' is not supported",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 0\n",
            "b.mtx:2: a vector needs one column, this matrix has 2",
        ),
    ] {
        let err = vector_error(text);
        assert!(
            err.starts_with(expected),
            "{text:?}\n  got: {err}\n  want: {expected}"
        );
    }
    let err = read_matrix(Path::new("tests/data/no_such_file.mtx")).unwrap_err();
    assert!(
        err.to_string().starts_with("tests/data/no_such_file.mtx: "),
        "{err}"
    );
}

#[test]
fn writer_round_trips_bit_exactly() {
    let a = Csr::from_triplets(
        3,
        2,
        vec![
            (0, 1, 0.1),
            (2, 0, -1e-300),
            (2, 1, 1.0 / 3.0),
            (1, 1, 6.02e23),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    write_matrix(&mut bytes, &a).unwrap();
    assert_eq!(parse_matrix(&bytes, Path::new("w.mtx")).unwrap(), a);

    let v = vec![0.1, -2.0 / 3.0, 5e-324, f64::MAX, 0.0];
    let mut bytes = Vec::new();
    write_vector(&mut bytes, &v).unwrap();
    let back = parse_vector(&bytes, Path::new("w.mtx")).unwrap();
    assert_eq!(bits(&back), bits(&v));
}

#[test]
fn corrupted_files_give_errors_not_panics() {
    for file in [
        "tests/data/poisson2d_4x4.mtx",
        "tests/data/poisson2d_4x4_rhs.mtx",
    ] {
        let bytes = std::fs::read(file).unwrap();
        for corrupt in common::corruptions(&bytes, 300) {
            // Either outcome is fine; reaching here without a panic is the test.
            let _ = parse_matrix(&corrupt, Path::new(file));
            let _ = parse_vector(&corrupt, Path::new(file));
        }
    }
}
