//! Fast readers for the big lists of mesh files: `N( ... )` in ascii, `N(` raw
//! little-endian bytes `)` in binary, `N{v}` uniform, and lists of label lists
//! (faces). Items are parsed straight from the bytes, with no per-item allocation.

use super::lexer::{Lexer, Token};
use super::{Arch, FoamFormat};
use crate::mesh::{Label, MeshError, Vec3};

/// An item type of a list in a mesh file.
pub trait ListItem: Sized + Clone {
    /// Name used in error messages.
    const NAME: &'static str;
    /// Reads one ascii item.
    fn ascii(lx: &mut Lexer) -> Result<Self, MeshError>;
    /// Bytes of one item in a binary file.
    fn binary_size(arch: Arch) -> usize;
    /// Decodes one binary item of `binary_size` bytes.
    fn binary(bytes: &[u8], arch: Arch) -> Result<Self, String>;
}

fn label_from_i64(v: i64) -> Result<Label, String> {
    Label::try_from(v).map_err(|_| {
        if v < 0 {
            format!("expected a non-negative label, found {v}")
        } else {
            format!(
                "label {v} does not fit in 32 bits (meshes are limited to 2^32 points/faces/cells)"
            )
        }
    })
}

impl ListItem for Label {
    const NAME: &'static str = "label";

    #[inline]
    fn ascii(lx: &mut Lexer) -> Result<Self, MeshError> {
        let v = lx.label("a label")?;
        Label::try_from(v).map_err(|_| lx.error(format!("label {v} does not fit in 32 bits")))
    }

    fn binary_size(arch: Arch) -> usize {
        arch.label_bytes
    }

    #[inline]
    fn binary(b: &[u8], _: Arch) -> Result<Self, String> {
        label_from_i64(binary_label(b)?)
    }
}

/// A signed binary label of 4 or 8 bytes.
#[inline]
pub fn binary_label(b: &[u8]) -> Result<i64, String> {
    Ok(match b.len() {
        4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_le_bytes(b.try_into().map_err(|_| "bad label size".to_string())?),
    })
}

fn binary_scalar(b: &[u8]) -> Result<f64, String> {
    let v = match b.len() {
        4 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => f64::from_le_bytes(b.try_into().map_err(|_| "bad scalar size".to_string())?),
    };
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("expected a finite number, found {v}"))
    }
}

impl ListItem for f64 {
    const NAME: &'static str = "scalar";

    #[inline]
    fn ascii(lx: &mut Lexer) -> Result<Self, MeshError> {
        lx.scalar("a number")
    }

    fn binary_size(arch: Arch) -> usize {
        arch.scalar_bytes
    }

    #[inline]
    fn binary(b: &[u8], _: Arch) -> Result<Self, String> {
        binary_scalar(b)
    }
}

impl ListItem for Vec3 {
    const NAME: &'static str = "vector";

    #[inline]
    fn ascii(lx: &mut Lexer) -> Result<Self, MeshError> {
        lx.punct(b'(', "to open a vector (x y z)")?;
        let x = lx.scalar("the x component of a vector")?;
        let y = lx.scalar("the y component of a vector")?;
        let z = lx.scalar("the z component of a vector")?;
        lx.punct(b')', "to close a vector (x y z)")?;
        Ok(Vec3::new(x, y, z))
    }

    fn binary_size(arch: Arch) -> usize {
        3 * arch.scalar_bytes
    }

    #[inline]
    fn binary(b: &[u8], arch: Arch) -> Result<Self, String> {
        let s = arch.scalar_bytes;
        Ok(Vec3::new(
            binary_scalar(&b[..s])?,
            binary_scalar(&b[s..2 * s])?,
            binary_scalar(&b[2 * s..])?,
        ))
    }
}

/// Reads one list of `T`.
pub fn read_list<T: ListItem>(
    lx: &mut Lexer,
    format: FoamFormat,
    arch: Arch,
) -> Result<Vec<T>, MeshError> {
    let mut out = Vec::new();
    read_list_into(lx, format, arch, &mut out)?;
    Ok(out)
}

/// Items between progress-bar updates.
const TICK: usize = 1 << 16;

/// Reads one list of `T`, appending its items to `out`; returns the item count.
pub fn read_list_into<T: ListItem>(
    lx: &mut Lexer,
    format: FoamFormat,
    arch: Arch,
    out: &mut Vec<T>,
) -> Result<usize, MeshError> {
    let what = || format!("a list of {}s", T::NAME);
    let n = if lx.peek_byte()?.is_some_and(|c| c.is_ascii_digit()) {
        let n = lx.label("the list size")?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= u32::MAX as usize)
            .ok_or_else(|| lx.error(format!("list size {n} is too large")))?
    } else {
        return match lx.next_token()? {
            Token::Punct(b'(') if format == FoamFormat::Ascii => {
                let start_line = lx.line();
                read_uncounted(lx, start_line, out)
            }
            t => Err(lx.error(format!(
                "expected {} (N ( ... )), found {}",
                what(),
                t.describe()
            ))),
        };
    };
    if !lx.eat(b'(')? {
        if !lx.eat(b'{')? {
            let t = lx.next_token()?;
            return Err(lx.error(format!(
                "expected '(' or '{{' after the list size {n}, found {}",
                t.describe()
            )));
        }
        let item = match format {
            FoamFormat::Ascii => T::ascii(lx)?,
            FoamFormat::Binary => {
                let b = lx.raw(T::binary_size(arch), T::NAME)?;
                T::binary(b, arch).map_err(|m| lx.error(m))?
            }
        };
        lx.punct(b'}', "to close the uniform list")?;
        // A uniform list repeats one value; refuse sizes no mesh could have
        // rather than allocate them.
        if n > lx.remaining().saturating_mul(64).max(1 << 20) {
            return Err(lx.error(format!("uniform list size {n} is implausibly large")));
        }
        out.extend(std::iter::repeat_n(item, n));
        return Ok(n);
    }
    let start_line = lx.line();
    match format {
        FoamFormat::Binary => {
            let size = T::binary_size(arch);
            let total = n
                .checked_mul(size)
                .ok_or_else(|| lx.error(format!("list size {n} is too large")))?;
            let bytes = lx.raw(total, &what())?;
            out.reserve(n);
            for chunk in bytes.chunks_exact(size) {
                out.push(T::binary(chunk, arch).map_err(|m| lx.error(m))?);
            }
        }
        FoamFormat::Ascii => {
            // Each item takes at least two bytes: never reserve more than the file holds.
            out.reserve(n.min(lx.remaining() / 2));
            for i in 0..n {
                if i % TICK == 0 {
                    lx.tick();
                }
                if let Some(msg) = ended_early(lx, "list", start_line, n, "entries", i)? {
                    return Err(lx.error(msg));
                }
                out.push(T::ascii(lx)?);
            }
        }
    }
    if !lx.eat(b')')? {
        lx.punct(
            b')',
            &format!("to close the list of {n} entries opened on line {start_line}"),
        )?;
    }
    Ok(n)
}

/// Whether a list of `n` items ends (`)` or end of file) before item `i`, and how to say so.
#[inline]
fn ended_early(
    lx: &mut Lexer,
    what: &str,
    start_line: usize,
    n: usize,
    items: &str,
    i: usize,
) -> Result<Option<String>, MeshError> {
    Ok(match lx.peek_byte()? {
        Some(b')') => Some(format!(
            "{what} opened on line {start_line} declares {n} {items} but has {i}"
        )),
        None => Some(format!(
            "{what} opened on line {start_line} declares {n} {items} but the file ends after {i}"
        )),
        Some(_) => None,
    })
}

/// Ascii `( ... )` without a size.
fn read_uncounted<T: ListItem>(
    lx: &mut Lexer,
    start_line: usize,
    out: &mut Vec<T>,
) -> Result<usize, MeshError> {
    let mut n = 0;
    loop {
        match lx.peek()? {
            Token::Punct(b')') => {
                lx.next_token()?;
                return Ok(n);
            }
            Token::Eof => {
                return Err(lx.error(format!(
                    "expected ')' to close the list opened on line {start_line}, found end of file"
                )))
            }
            _ => {
                out.push(T::ascii(lx)?);
                n += 1;
            }
        }
    }
}

/// Reads a list of label lists (`N( k(p ...) ... )`, as in `faceList`) into
/// compact form: `offsets` (`N + 1` entries) and `labels`. `check(i, list)`
/// vets each inner list as it is read, so its error names the right line.
pub fn read_label_lists(
    lx: &mut Lexer,
    format: FoamFormat,
    arch: Arch,
    mut check: impl FnMut(usize, &[Label]) -> Result<(), String>,
) -> Result<(Vec<u32>, Vec<Label>), MeshError> {
    let n = lx.label("the number of faces")? as usize;
    lx.punct(b'(', &format!("after the number of faces {n}"))?;
    let start_line = lx.line();
    let mut offsets = Vec::with_capacity((n + 1).min(lx.remaining() / 4 + 1));
    offsets.push(0u32);
    let mut labels = Vec::with_capacity((4 * n).min(lx.remaining() / 2));
    for i in 0..n {
        if i % TICK == 0 {
            lx.tick();
        }
        if let Some(msg) = ended_early(lx, "face list", start_line, n, "faces", i)? {
            return Err(lx.error(msg));
        }
        let start = labels.len();
        read_list_into(lx, format, arch, &mut labels)?;
        check(i, &labels[start..]).map_err(|m| lx.error(m))?;
        let end = u32::try_from(labels.len())
            .map_err(|_| lx.error("more than 2^32 face-point labels (split the mesh)"))?;
        offsets.push(end);
    }
    lx.punct(
        b')',
        &format!("to close the face list of {n} faces opened on line {start_line}"),
    )?;
    Ok((offsets, labels))
}

/// `count` binary scalars at the lexer (contents of a binary `List<T>` block).
pub fn read_binary_scalars(
    lx: &mut Lexer,
    count: usize,
    arch: Arch,
) -> Result<Vec<f64>, MeshError> {
    let total = count
        .checked_mul(arch.scalar_bytes)
        .ok_or_else(|| lx.error(format!("list size {count} is too large")))?;
    let bytes = lx.raw(total, "list of scalars")?;
    bytes
        .chunks_exact(arch.scalar_bytes)
        .map(|b| binary_scalar(b).map_err(|m| lx.error(m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ascii<T: ListItem>(src: &str) -> Result<Vec<T>, MeshError> {
        let mut lx = Lexer::new(Path::new("f"), src.as_bytes(), 0, 1);
        read_list(&mut lx, FoamFormat::Ascii, Arch::default())
    }

    #[test]
    fn ascii_lists() {
        assert_eq!(ascii::<Label>("3(0 1 2)").unwrap(), vec![0, 1, 2]);
        assert_eq!(ascii::<Label>("4{7}").unwrap(), vec![7; 4]);
        assert_eq!(ascii::<Label>("(5 6)").unwrap(), vec![5, 6]);
        let p = ascii::<Vec3>("2\n(\n(0 1 2)\n(3.5 -4e-1 5)\n)").unwrap();
        assert_eq!(p[1], Vec3::new(3.5, -0.4, 5.0));
    }

    #[test]
    fn ascii_errors() {
        let e = ascii::<Label>("3\n(\n0\n1\n)").unwrap_err().to_string();
        assert_eq!(e, "f:5: list opened on line 2 declares 3 entries but has 2");
        let e = ascii::<Label>("2(0 1 2)").unwrap_err().to_string();
        assert_eq!(
            e,
            "f:1: expected ')' to close the list of 2 entries opened on line 1, found number 2"
        );
        let e = ascii::<Label>("2(0\n-1)").unwrap_err().to_string();
        assert_eq!(
            e,
            "f:2: expected a label (a non-negative integer), found -1"
        );
        let e = ascii::<Vec3>("1((0 1 x))").unwrap_err().to_string();
        assert_eq!(
            e,
            "f:1: expected the z component of a vector, found word 'x'"
        );
        let e = ascii::<Label>("2(0 1").unwrap_err().to_string();
        assert!(e.contains("found end of file"), "{e}");
    }

    #[test]
    fn binary_lists() {
        let mut src = b"2(".to_vec();
        src.extend(7i32.to_le_bytes());
        src.extend((-1i32).to_le_bytes());
        src.push(b')');
        let mut lx = Lexer::new(Path::new("f"), &src, 0, 1);
        let e = read_list::<Label>(&mut lx, FoamFormat::Binary, Arch::default()).unwrap_err();
        assert!(
            e.to_string().contains("non-negative label, found -1"),
            "{e}"
        );
        let mut src = b"1(".to_vec();
        src.extend(9i64.to_le_bytes());
        src.push(b')');
        let arch = Arch::parse("LSB;label=64;scalar=64").unwrap();
        let mut lx = Lexer::new(Path::new("f"), &src, 0, 1);
        assert_eq!(
            read_list::<Label>(&mut lx, FoamFormat::Binary, arch).unwrap(),
            [9]
        );
        let mut lx = Lexer::new(Path::new("f"), b"3(\x01\x00", 0, 1);
        let e = read_list::<Label>(&mut lx, FoamFormat::Binary, Arch::default()).unwrap_err();
        assert!(e.to_string().contains("needs 12 bytes"), "{e}");
    }

    #[test]
    fn faces() {
        let mut lx = Lexer::new(Path::new("f"), b"2(3(0 1 2) 4(1 2 3 4))", 0, 1);
        let (o, l) =
            read_label_lists(&mut lx, FoamFormat::Ascii, Arch::default(), |_, _| Ok(())).unwrap();
        assert_eq!(o, [0, 3, 7]);
        assert_eq!(l, [0, 1, 2, 1, 2, 3, 4]);
        let mut lx = Lexer::new(Path::new("f"), b"2(\n3(0 1 2)\n2(1 2))", 0, 1);
        let e = read_label_lists(&mut lx, FoamFormat::Ascii, Arch::default(), |i, l| {
            if l.len() < 3 {
                Err(format!("face {i} is short"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "f:3: face 1 is short");
    }
}
