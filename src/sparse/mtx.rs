//! Matrix Market files (NIST format, <https://math.nist.gov/MatrixMarket/formats.html>):
//! `matrix coordinate real|integer|pattern general|symmetric` for matrices and
//! `matrix array real|integer general` (one column or one row) for vectors.
//! Indices are 1-based in the file; symmetric files store the lower triangle
//! and are expanded; duplicate entries are summed.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::Csr;
use crate::limits::quote;

#[derive(Debug, thiserror::Error)]
pub enum MtxError {
    /// The file is not valid Matrix Market at `line` (1-based).
    #[error("{}:{line}: {msg}", file.display())]
    Parse {
        file: PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    Coordinate,
    Array,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Symmetry {
    General,
    Symmetric,
}

/// Walks the lines of a file, skipping comments and blank lines after the
/// header, and builds errors that name the file and the current line.
struct Lines<'a> {
    file: &'a Path,
    /// The unread part of the file; `None` once the last line was read.
    rest: Option<&'a [u8]>,
    line: usize,
}

impl<'a> Lines<'a> {
    fn new(file: &'a Path, bytes: &'a [u8]) -> Self {
        // A final newline ends the last line; it does not start another one.
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        Self {
            file,
            rest: Some(bytes),
            line: 0,
        }
    }

    fn error(&self, msg: impl Into<String>) -> MtxError {
        MtxError::Parse {
            file: self.file.to_path_buf(),
            line: self.line,
            msg: msg.into(),
        }
    }

    /// The next line, comments included.
    fn next_raw(&mut self) -> Result<Option<&'a str>, MtxError> {
        let Some(rest) = self.rest else {
            return Ok(None);
        };
        let bytes = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => {
                self.rest = Some(&rest[end + 1..]);
                &rest[..end]
            }
            None => {
                self.rest = None;
                rest
            }
        };
        self.line += 1;
        let text =
            std::str::from_utf8(bytes).map_err(|_| self.error("line is not valid UTF-8 text"))?;
        Ok(Some(text.trim_end_matches('\r')))
    }

    /// The next line that is neither blank nor a `%` comment.
    fn next_data(&mut self) -> Result<Option<&'a str>, MtxError> {
        while let Some(text) = self.next_raw()? {
            let text = text.trim();
            if !text.is_empty() && !text.starts_with('%') {
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// The next data line split into exactly `count` tokens; `what` describes it.
    fn tokens(&mut self, count: usize, what: &str) -> Result<Vec<&'a str>, MtxError> {
        let text = self
            .next_data()?
            .ok_or_else(|| self.error(format!("file ends where {what} was expected")))?;
        let tokens: Vec<&str> = text.split_whitespace().collect();
        if tokens.len() != count {
            return Err(self.error(format!(
                "expected {what} ({count} numbers), found {} item(s): '{}'",
                tokens.len(),
                quote(text)
            )));
        }
        Ok(tokens)
    }

    fn size(&self, token: &str, what: &str) -> Result<usize, MtxError> {
        token.parse::<usize>().map_err(|_| {
            self.error(format!(
                "{what} '{}' is not a non-negative integer",
                quote(token)
            ))
        })
    }

    /// A 1-based index in 1..=max, returned 0-based.
    fn index(&self, token: &str, what: &str, max: usize) -> Result<u32, MtxError> {
        match token.parse::<usize>() {
            Ok(i) if (1..=max).contains(&i) => Ok((i - 1) as u32),
            Ok(i) => Err(self.error(format!(
                "{what} index {i} is out of range 1..={max} (indices are 1-based)"
            ))),
            Err(_) => Err(self.error(format!("{what} index '{}' is not an integer", quote(token)))),
        }
    }

    fn value(&self, token: &str, field: Field) -> Result<f64, MtxError> {
        let v = match field {
            Field::Integer => token.parse::<i64>().map(|v| v as f64).map_err(|_| {
                self.error(format!(
                    "value '{}' is not an integer (field is integer)",
                    quote(token)
                ))
            })?,
            _ => token
                .parse::<f64>()
                .map_err(|_| self.error(format!("value '{}' is not a number", quote(token))))?,
        };
        if v.is_finite() {
            Ok(v)
        } else {
            Err(self.error(format!("value '{}' is not a finite number", quote(token))))
        }
    }

    /// Fails if any data line is left after the `expected` entries.
    fn expect_end(&mut self, expected: usize) -> Result<(), MtxError> {
        match self.next_data()? {
            Some(text) => Err(self.error(format!(
                "extra data '{}' after the {expected} entries announced in the size line",
                quote(text)
            ))),
            None => Ok(()),
        }
    }
}

struct Header {
    format: Format,
    field: Field,
    symmetry: Symmetry,
}

fn parse_header(lines: &mut Lines<'_>) -> Result<Header, MtxError> {
    let text = lines.next_raw()?.unwrap_or("");
    let words: Vec<String> = text
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    if words.first().map(String::as_str) != Some("%%matrixmarket") {
        return Err(lines
            .error("not a Matrix Market file: the first line must start with '%%MatrixMarket'"));
    }
    if words.len() != 5 || words[1] != "matrix" {
        return Err(lines.error(format!(
            "header must read '%%MatrixMarket matrix <format> <field> <symmetry>', found '{text:.80}'"
        )));
    }
    let format = match words[2].as_str() {
        "coordinate" => Format::Coordinate,
        "array" => Format::Array,
        other => {
            return Err(lines.error(format!(
                "unknown format '{other:.80}' (coordinate or array)"
            )))
        }
    };
    let field = match words[3].as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" if format == Format::Coordinate => Field::Pattern,
        other => {
            return Err(lines.error(format!(
                "field '{other:.80}' is not supported (real, integer, or pattern for coordinate)"
            )))
        }
    };
    let symmetry = match words[4].as_str() {
        "general" => Symmetry::General,
        "symmetric" if format == Format::Coordinate => Symmetry::Symmetric,
        other => {
            return Err(lines.error(format!(
                "symmetry '{other}' is not supported (general, or symmetric for coordinate)"
            )))
        }
    };
    Ok(Header {
        format,
        field,
        symmetry,
    })
}

/// What the rows of a coordinate body must hold.
#[derive(Clone, Copy, PartialEq)]
enum Rows {
    /// A matrix: every row has an entry (a row without one makes it singular).
    Filled,
    /// A vector: entries not given are 0.
    Sparse,
}

/// Reads the coordinate body after the header into a CSR matrix. The size
/// line is checked against `rows` and the machine's memory before anything
/// is allocated (the entries are reserved for no more than the file holds).
fn parse_coordinate(lines: &mut Lines<'_>, header: &Header, rows: Rows) -> Result<Csr, MtxError> {
    let size = lines.tokens(3, "the size line 'rows columns entries'")?;
    let n_rows = lines.size(size[0], "row count")?;
    let n_cols = lines.size(size[1], "column count")?;
    let n_entries = lines.size(size[2], "entry count")?;
    let size_line = lines.line;
    if n_rows > u32::MAX as usize || n_cols > u32::MAX as usize {
        return Err(lines.error("matrix too large: at most 4294967295 rows and columns"));
    }
    let per_line = if header.field == Field::Pattern { 2 } else { 3 };
    let symmetric = header.symmetry == Symmetry::Symmetric;
    crate::limits::check_memory(8 * (n_rows as u128 + 1), || {
        format!("the row count {n_rows} of the size line")
    })
    .map_err(|e| lines.error(e))?;
    if symmetric && n_rows != n_cols {
        return Err(lines.error(format!(
            "a symmetric matrix must be square, the size line says {n_rows} x {n_cols}"
        )));
    }
    let what = if per_line == 2 {
        "an entry 'row column'"
    } else {
        "an entry 'row column value'"
    };
    // Never trust the size line for memory: reserve at most what the rest could hold.
    let mut triplets = Vec::with_capacity(n_entries.min(1 << 20) * (1 + symmetric as usize));
    for _ in 0..n_entries {
        let t = lines.tokens(per_line, what)?;
        let r = lines.index(t[0], "row", n_rows)?;
        let c = lines.index(t[1], "column", n_cols)?;
        let v = match header.field {
            Field::Pattern => 1.0,
            field => lines.value(t[2], field)?,
        };
        if symmetric && c > r {
            return Err(lines.error(format!(
                "entry ({}, {}) is above the diagonal; symmetric files store only the lower \
                 triangle (write the file as 'general' to give both triangles)",
                r + 1,
                c + 1
            )));
        }
        triplets.push((r, c, v));
        if symmetric && c != r {
            triplets.push((c, r, v));
        }
    }
    lines.expect_end(n_entries)?;
    // A symmetric file's entry (i, j) fills rows i and j.
    let filled = n_entries.saturating_mul(1 + symmetric as usize);
    if rows == Rows::Filled && n_rows.max(n_cols) > filled {
        return Err(MtxError::Parse {
            file: lines.file.to_path_buf(),
            line: size_line,
            msg: format!(
                "the size line gives {n_rows} x {n_cols} but only {n_entries} entries: at least \
                 {} rows or columns would have no entry (a singular matrix); check the size line",
                n_rows.max(n_cols) - filled
            ),
        });
    }
    if rows == Rows::Filled {
        let mut has_entry = vec![false; n_rows];
        for &(r, _, _) in &triplets {
            has_entry[r as usize] = true;
        }
        let empty = has_entry.iter().filter(|&&e| !e).count();
        if let Some(first) = has_entry.iter().position(|&e| !e) {
            return Err(MtxError::Parse {
                file: lines.file.to_path_buf(),
                line: size_line,
                msg: format!(
                    "row {} has no entry ({empty} of {n_rows} rows have none): the matrix is \
                     singular; check the entries or the size line",
                    first + 1
                ),
            });
        }
    }
    Csr::from_triplets(n_rows, n_cols, triplets).map_err(|msg| lines.error(msg))
}

/// Parses a matrix from the bytes of a Matrix Market file (`file` names it in errors).
pub fn parse_matrix(bytes: &[u8], file: &Path) -> Result<Csr, MtxError> {
    let mut lines = Lines::new(file, bytes);
    let header = parse_header(&mut lines)?;
    if header.format == Format::Array {
        return Err(lines.error(
            "dense 'array' format is read for vectors only; store the matrix as 'coordinate'",
        ));
    }
    parse_coordinate(&mut lines, &header, Rows::Filled)
}

/// Parses a vector: an `array` with one column (or one row), or a `coordinate`
/// matrix with one column (entries not given are 0).
pub fn parse_vector(bytes: &[u8], file: &Path) -> Result<Vec<f64>, MtxError> {
    let mut lines = Lines::new(file, bytes);
    let header = parse_header(&mut lines)?;
    if header.format == Format::Coordinate {
        let m = parse_coordinate(&mut lines, &header, Rows::Sparse)?;
        if m.n_cols() != 1 {
            return Err(lines.error(format!(
                "a vector needs one column, this matrix has {}",
                m.n_cols()
            )));
        }
        let mut v = vec![0.0; m.n_rows()];
        for (r, v) in v.iter_mut().enumerate() {
            *v = m.row(r).1.iter().sum();
        }
        return Ok(v);
    }
    let size = lines.tokens(2, "the size line 'rows columns'")?;
    let n_rows = lines.size(size[0], "row count")?;
    let n_cols = lines.size(size[1], "column count")?;
    if n_rows != 1 && n_cols != 1 {
        return Err(lines.error(format!(
            "a vector needs one column (or one row), the size line says {n_rows} x {n_cols}"
        )));
    }
    let n = n_rows.saturating_mul(n_cols);
    let mut values = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let t = lines.tokens(1, "a value")?;
        values.push(lines.value(t[0], header.field)?);
    }
    lines.expect_end(n)?;
    Ok(values)
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, MtxError> {
    crate::limits::read_regular_file(path).map_err(|source| MtxError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a matrix from a Matrix Market file.
pub fn read_matrix(path: &Path) -> Result<Csr, MtxError> {
    parse_matrix(&read_bytes(path)?, path)
}

/// Reads a vector from a Matrix Market file.
pub fn read_vector(path: &Path) -> Result<Vec<f64>, MtxError> {
    parse_vector(&read_bytes(path)?, path)
}

/// Writes `a` as `coordinate real general`; values round-trip exactly.
pub fn write_matrix(mut w: impl Write, a: &Csr) -> io::Result<()> {
    writeln!(w, "%%MatrixMarket matrix coordinate real general")?;
    writeln!(w, "{} {} {}", a.n_rows(), a.n_cols(), a.nnz())?;
    for r in 0..a.n_rows() {
        let (cols, vals) = a.row(r);
        for (c, v) in cols.iter().zip(vals) {
            writeln!(w, "{} {} {v:e}", r + 1, c + 1)?;
        }
    }
    Ok(())
}

/// Writes `v` as a one-column `array real general`; values round-trip exactly.
pub fn write_vector(mut w: impl Write, v: &[f64]) -> io::Result<()> {
    writeln!(w, "%%MatrixMarket matrix array real general")?;
    writeln!(w, "{} 1", v.len())?;
    for x in v {
        writeln!(w, "{x:e}")?;
    }
    Ok(())
}

/// Writes a file through `write` (buffered), naming the path in errors.
pub fn write_file(
    path: &Path,
    write: impl FnOnce(&mut io::BufWriter<std::fs::File>) -> io::Result<()>,
) -> Result<(), MtxError> {
    let io_error = |source| MtxError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut w = io::BufWriter::new(std::fs::File::create(path).map_err(io_error)?);
    write(&mut w).and_then(|_| w.flush()).map_err(io_error)
}
