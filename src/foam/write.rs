//! Writing OpenFOAM files: headers, lists in ascii or binary, atomic replacement.

use super::{gz_path, Arch, FoamFormat};
use crate::mesh::{Label, MeshError, Vec3};
use rayon::prelude::*;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `FoamFile` header fields a writer sets.
pub struct HeaderSpec<'a> {
    pub format: FoamFormat,
    pub class: &'a str,
    pub note: Option<&'a str>,
    pub location: &'a str,
    pub object: &'a str,
}

/// Writes the banner and `FoamFile { ... }` header as OpenFOAM v1912 lays it out.
pub fn write_header(w: &mut dyn Write, h: &HeaderSpec) -> io::Result<()> {
    writeln!(
        w,
        "/*--------------------------------*- C++ -*----------------------------------*\\\n\
         |  Written by fvpoisson {:<53}|\n\
         \\*---------------------------------------------------------------------------*/\n\
         FoamFile\n{{\n    version     2.0;",
        env!("CARGO_PKG_VERSION")
    )?;
    let format = match h.format {
        FoamFormat::Ascii => "ascii",
        FoamFormat::Binary => "binary",
    };
    writeln!(w, "    format      {format};")?;
    writeln!(w, "    class       {};", h.class)?;
    if h.format == FoamFormat::Binary {
        writeln!(w, "    arch        \"{}\";", Arch::default().to_foam())?;
    }
    if let Some(note) = h.note {
        writeln!(w, "    note        \"{note}\";")?;
    }
    writeln!(w, "    location    \"{}\";", h.location)?;
    writeln!(w, "    object      {};\n}}", h.object)?;
    writeln!(
        w,
        "// * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * * //\n"
    )
}

/// The closing comment line OpenFOAM ends its files with.
pub fn write_footer(w: &mut dyn Write) -> io::Result<()> {
    writeln!(
        w,
        "\n\n// ************************************************************************* //"
    )
}

/// Shortest text that reads back to exactly `x` (Rust's round-trip formatting),
/// with exponents for very small or large magnitudes and no trailing `.0`.
pub fn format_scalar(x: f64, buf: &mut String) {
    use std::fmt::Write as _;
    buf.clear();
    let _ = write!(buf, "{x:?}");
    if buf.ends_with(".0") {
        buf.truncate(buf.len() - 2);
    }
}

/// A list item that can be written (from any thread: long ascii lists are
/// formatted on every core).
pub trait WriteItem: Sync {
    fn write_ascii(&self, w: &mut dyn Write, buf: &mut String) -> io::Result<()>;
    fn write_binary(&self, w: &mut dyn Write) -> io::Result<()>;
}

impl WriteItem for Label {
    fn write_ascii(&self, w: &mut dyn Write, _: &mut String) -> io::Result<()> {
        write!(w, "{self}")
    }
    fn write_binary(&self, w: &mut dyn Write) -> io::Result<()> {
        // Labels are 32-bit signed in OpenFOAM's default build; the writer checks the range.
        w.write_all(&(*self as i32).to_le_bytes())
    }
}

impl WriteItem for f64 {
    fn write_ascii(&self, w: &mut dyn Write, buf: &mut String) -> io::Result<()> {
        format_scalar(*self, buf);
        w.write_all(buf.as_bytes())
    }
    fn write_binary(&self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(&self.to_le_bytes())
    }
}

impl WriteItem for Vec3 {
    fn write_ascii(&self, w: &mut dyn Write, buf: &mut String) -> io::Result<()> {
        w.write_all(b"(")?;
        for (i, x) in self.iter().enumerate() {
            if i > 0 {
                w.write_all(b" ")?;
            }
            format_scalar(*x, buf);
            w.write_all(buf.as_bytes())?;
        }
        w.write_all(b")")
    }
    fn write_binary(&self, w: &mut dyn Write) -> io::Result<()> {
        for x in self.iter() {
            w.write_all(&x.to_le_bytes())?;
        }
        Ok(())
    }
}

/// Items of an ascii list that one core formats into one piece of text.
const ASCII_PIECE: usize = 1 << 14;

/// Pieces formatted at once before they are written in order: the text
/// held in memory stays near 64 × 16 Ki items (tens of MB) whatever the
/// list's length.
const ASCII_PIECES_AT_ONCE: usize = 64;

/// Writes `N\n(\n item\n ... )\n` (ascii) or `N\n(` raw bytes `)\n` (binary).
/// Ascii items are formatted in pieces on every core and written in order:
/// each item's text is what it formats to on its own, so the file does not
/// depend on the threads.
pub fn write_list<T: WriteItem>(
    w: &mut dyn Write,
    items: &[T],
    format: FoamFormat,
) -> io::Result<()> {
    write!(w, "\n{}\n(", items.len())?;
    match format {
        FoamFormat::Ascii => {
            w.write_all(b"\n")?;
            let format_piece = |piece: &[T]| -> io::Result<Vec<u8>> {
                let mut text = Vec::with_capacity(16 * piece.len());
                let mut buf = String::new();
                for item in piece {
                    item.write_ascii(&mut text, &mut buf)?;
                    text.push(b'\n');
                }
                Ok(text)
            };
            for group in items.chunks(ASCII_PIECE * ASCII_PIECES_AT_ONCE) {
                let pieces: Vec<io::Result<Vec<u8>>> =
                    group.par_chunks(ASCII_PIECE).map(format_piece).collect();
                for piece in pieces {
                    w.write_all(&piece?)?;
                }
            }
        }
        FoamFormat::Binary => {
            for item in items {
                item.write_binary(w)?;
            }
        }
    }
    w.write_all(b")\n")
}

/// Writes `path` (or `path.gz`, gzip-compressed, when `compress`) atomically
/// (see [`crate::io::write_atomic`]). The other variant (`path.gz` or `path`) is
/// removed so it cannot shadow the new file.
pub fn write_atomic(
    path: &Path,
    compress: bool,
    content: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<PathBuf, MeshError> {
    let (target, other) = if compress {
        (gz_path(path), path.to_path_buf())
    } else {
        (path.to_path_buf(), gz_path(path))
    };
    crate::io::write_atomic(&target, |file| {
        if compress {
            // Buffer in front of the encoder: items are written a few bytes at a time.
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            let mut buffered = BufWriter::with_capacity(1 << 20, gz);
            content(&mut buffered)?;
            buffered
                .into_inner()
                .map_err(|e| e.into_error())?
                .finish()?;
            Ok(())
        } else {
            content(file)
        }
    })
    .map_err(|e| match e {
        crate::io::OutputError::Io { path, source } => MeshError::Io { path, source },
        crate::io::OutputError::Invalid(msg) => MeshError::InFile {
            file: target.clone(),
            msg,
        },
    })?;
    match std::fs::remove_file(&other) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(MeshError::io(&other, e)),
        _ => Ok(target),
    }
}

/// Formats like a C++ ostream with default precision 6 (`%g`), as OpenFOAM logs
/// numbers by default: 6 significant digits, trailing zeros dropped, scientific
/// notation with a two-digit signed exponent when the exponent is < −4 or ≥ 6.
pub fn format_g(v: f64) -> String {
    format_general(v, 6)
}

/// Significant digits of the numbers in the solver's log lines. OpenFOAM's
/// `Time::readDict` sets its output streams' precision (`Info` included) to
/// the case's `writePrecision`, for the whole process: a case read with
/// `writePrecision 10` logs residuals, Courant numbers and continuity errors
/// with 10 digits. Process-wide here too, as the log is.
static LOG_PRECISION: AtomicUsize = AtomicUsize::new(6);

/// Sets the digits of [`format_log`] (a case's `writePrecision`; 1 to 40).
pub fn set_log_precision(digits: usize) {
    LOG_PRECISION.store(digits.clamp(1, 40), Ordering::Relaxed);
}

/// `v` as OpenFOAM's log prints it: [`format_general`] with the digits of
/// the case read last ([`set_log_precision`]; 6 before any).
pub fn format_log(v: f64) -> String {
    format_general(v, LOG_PRECISION.load(Ordering::Relaxed))
}

/// Formats like a C++ ostream in scientific format with `precision` digits
/// after the point (`%.<precision>e`, two-digit signed exponent), as
/// OpenFOAM's postProcessing `.dat` files write numbers (`8.905110e-06`).
pub fn format_scientific(v: f64, precision: usize) -> String {
    let text = format!("{v:.precision$e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) => {
            let e: i32 = exponent.parse().unwrap_or(0);
            let sign = if e < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", e.abs())
        }
        None => text,
    }
}

/// Formats like a C++ ostream in its default (general) float format with
/// `precision` significant digits (`%.<precision>g`): OpenFOAM's
/// `timeFormat general` time names and `writePrecision` values.
pub fn format_general(v: f64, precision: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            if v > 0.0 {
                "inf".into()
            } else {
                "-inf".into()
            }
        } else {
            "0".into()
        };
    }
    let precision = precision.clamp(1, 40) as i32;
    // Round to the significant digits first: the rounding decides the exponent.
    let sci = format!("{:.*e}", (precision - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..precision).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        let decimals = (precision - 1 - exp).max(0) as usize;
        trim(&format!("{v:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn format_scientific_matches_printf_e() {
        for (v, precision, expected) in [
            (8.90511e-06, 6, "8.905110e-06"),
            (-5.149568516, 8, "-5.14956852e+00"),
            (0.0, 6, "0.000000e+00"),
            (1.5e123, 2, "1.50e+123"),
        ] {
            assert_eq!(super::format_scientific(v, precision), expected);
        }
    }

    use super::*;

    #[test]
    fn format_g_matches_cpp_ostream() {
        for (v, s) in [
            (1.0, "1"),
            (9.5e-07, "9.5e-07"),
            (0.000123456789, "0.000123457"),
            (1.23456789e-5, "1.23457e-05"),
            (123456.7, "123457"),
            (999999.7, "1e+06"),
            (1234567.0, "1.23457e+06"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (9.999996e-5, "0.0001"),
            (1e-300, "1e-300"),
            (2.5e-5, "2.5e-05"),
            (0.0001, "0.0001"),
            (1.66533e-14, "1.66533e-14"),
            (0.00784498, "0.00784498"),
            (1.164334, "1.16433"),
            (21.51, "21.51"),
            (123456.4, "123456"),
            (-8.47033e-18, "-8.47033e-18"),
            (2.751870001, "2.75187"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(format_g(v), s, "{v}");
        }
        // timeFormat general, timePrecision 6; writePrecision 17.
        for (v, p, s) in [
            (0.05000000000000003, 6, "0.05"),
            (2.0, 6, "2"),
            (14.0, 6, "14"),
            (0.005, 6, "0.005"),
            (1e-5, 6, "1e-05"),
            (
                "551.73178066895855".parse().unwrap(),
                17,
                "551.73178066895855",
            ),
            (0.1, 17, "0.10000000000000001"),
            (1234567.0, 8, "1234567"),
        ] {
            assert_eq!(format_general(v, p), s, "{v} {p}");
        }
    }

    #[test]
    fn scalars_round_trip() {
        let mut buf = String::new();
        for x in [0.1, 1.0, -2.5e-300, 1e300, 0.30000000000000004, 123456.789] {
            format_scalar(x, &mut buf);
            assert_eq!(buf.parse::<f64>().unwrap(), x, "{buf}");
        }
        format_scalar(1.0, &mut buf);
        assert_eq!(buf, "1");
        format_scalar(1e-20, &mut buf);
        assert_eq!(buf, "1e-20");
    }
}
