//! Fast readers for the big lists of mesh files: `N( ... )` in ascii, `N(` raw
//! little-endian bytes `)` in binary, `N{v}` uniform, and lists of label lists
//! (faces). Items are parsed straight from the bytes, with no per-item allocation.
//!
//! A long counted ascii list that ends its file (`points`, `faces`, `owner`,
//! `neighbour`) is parsed in parallel: its body is cut at line ends into
//! chunks, each parsed by a lexer of its own that knows its first line
//! ([`read_file_list`], [`read_label_lists`]). Any failure, or a body with
//! comments or directives, falls back to the sequential reader from the
//! list's start, so errors are reported exactly as the sequential reader
//! reports them.

use rayon::prelude::*;

use super::lexer::{Lexer, Token};
use super::{Arch, FoamFormat};
use crate::mesh::{Label, MeshError, Vec3};

/// An item type of a list in a mesh file.
pub trait ListItem: Sized + Clone + Send {
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
            if n >= PARALLEL_MIN_ITEMS {
                // Decoded in parallel; on a bad item, again in order, so the
                // error names the first one.
                let decoded: Result<Vec<T>, String> = bytes
                    .par_chunks_exact(size)
                    .map(|chunk| T::binary(chunk, arch))
                    .collect();
                if let Ok(items) = decoded {
                    out.extend(items);
                    return close_list(lx, n, start_line);
                }
            }
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
    close_list(lx, n, start_line)
}

/// The `)` closing a list of `n` items opened on `start_line`; returns `n`.
fn close_list(lx: &mut Lexer, n: usize, start_line: usize) -> Result<usize, MeshError> {
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
    check: impl Fn(usize, &[Label]) -> Result<(), String> + Sync,
) -> Result<(Vec<u32>, Vec<Label>), MeshError> {
    if format == FoamFormat::Ascii {
        let (pos, line) = (lx.pos(), lx.line());
        if let Some(faces) = read_label_lists_parallel(lx, &check)? {
            return Ok(faces);
        }
        lx.rewind(pos, line);
    }
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

/// Counted ascii lists of at least this many items are read in parallel.
const PARALLEL_MIN_ITEMS: usize = 1 << 15;

/// Bytes of body per parallel chunk at least.
const PARALLEL_CHUNK_BYTES: usize = 256 << 10;

/// A counted ascii list parsed in parallel chunks.
struct ParallelList<R> {
    /// The declared size.
    n: usize,
    /// Each chunk's parse, in order.
    chunks: Vec<R>,
    /// The position and line of the list's closing `)`.
    end: (usize, usize),
}

/// Parses the counted ascii list at the lexer, `N ( ... )`, whose closing
/// `)` is the last in the file, in chunks of whole lines by `parse_chunk`
/// (which reads items until its lexer ends). `None`, the lexer anywhere: the
/// list is short, not counted, holds comments, directives or braces, or a
/// chunk failed (a chunk boundary inside an item, or bad input): the caller
/// rewinds and reads it sequentially, whose error names the line.
fn parse_parallel<R: Send>(
    lx: &mut Lexer,
    parse_chunk: impl Fn(&mut Lexer) -> Result<R, MeshError> + Sync,
) -> Result<Option<ParallelList<R>>, MeshError> {
    if !lx.peek_byte()?.is_some_and(|c| c.is_ascii_digit()) {
        return Ok(None);
    }
    let Ok(n) = lx.label("the list size") else {
        return Ok(None);
    };
    let n = n as usize;
    if n < PARALLEL_MIN_ITEMS || !lx.eat(b'(')? {
        return Ok(None);
    }
    let bytes = lx.bytes();
    let start = lx.pos();
    let Some(end) = bytes.iter().rposition(|&c| c == b')') else {
        return Ok(None);
    };
    if end < start {
        return Ok(None);
    }
    let body = &bytes[start..end];
    if body.iter().any(|&c| matches!(c, b'/' | b'#' | b'{' | b'}')) {
        return Ok(None);
    }
    // Chunk boundaries: just after a line end at or past each even cut.
    let chunks = (body.len() / PARALLEL_CHUNK_BYTES).clamp(1, 4 * rayon::current_num_threads());
    let mut cuts = vec![start];
    for j in 1..chunks {
        let target = start + j * body.len() / chunks;
        if let Some(nl) = bytes[target..end].iter().position(|&c| c == b'\n') {
            let cut = target + nl + 1;
            if cut > *cuts.last().unwrap_or(&start) && cut < end {
                cuts.push(cut);
            }
        }
    }
    cuts.push(end);
    let newlines: Vec<usize> = cuts
        .par_windows(2)
        .map(|w| bytes[w[0]..w[1]].iter().filter(|&&c| c == b'\n').count())
        .collect();
    let mut line = lx.line();
    let mut first_lines = Vec::with_capacity(newlines.len());
    for count in &newlines {
        first_lines.push(line);
        line += count;
    }
    let file = lx.file();
    let parsed: Result<Vec<R>, MeshError> = cuts
        .par_windows(2)
        .zip(first_lines.par_iter())
        .map(|(w, &first_line)| {
            let mut chunk = Lexer::new(file, &bytes[..w[1]], w[0], first_line);
            parse_chunk(&mut chunk)
        })
        .collect();
    Ok(parsed.ok().map(|chunks| ParallelList {
        n,
        chunks,
        end: (end, line),
    }))
}

/// Items of `T` until the lexer's end (a [`parse_parallel`] chunk).
fn chunk_items<T: ListItem>(lx: &mut Lexer) -> Result<Vec<T>, MeshError> {
    let mut items = Vec::new();
    while lx.peek_byte()?.is_some() {
        items.push(T::ascii(lx)?);
    }
    Ok(items)
}

/// Reads the list that makes up the rest of a file, in parallel where
/// [`parse_parallel`] can, else as [`read_list`] does.
pub fn read_file_list<T: ListItem>(
    lx: &mut Lexer,
    format: FoamFormat,
    arch: Arch,
) -> Result<Vec<T>, MeshError> {
    let (pos, line) = (lx.pos(), lx.line());
    if format == FoamFormat::Ascii {
        if let Some(list) = parse_parallel(lx, chunk_items::<T>)? {
            let total: usize = list.chunks.iter().map(Vec::len).sum();
            if total == list.n {
                let mut out = Vec::with_capacity(total);
                for chunk in list.chunks {
                    out.extend(chunk);
                }
                lx.rewind(list.end.0, list.end.1);
                lx.tick();
                lx.punct(b')', "to close the list")?;
                return Ok(out);
            }
        }
        lx.rewind(pos, line);
    }
    read_list(lx, format, arch)
}

/// A list of label lists: offsets (sizes in a chunk) and labels.
type LabelLists = (Vec<u32>, Vec<Label>);

/// Faces of a [`parse_parallel`] chunk: their sizes and labels.
fn chunk_label_lists(lx: &mut Lexer) -> Result<LabelLists, MeshError> {
    let (mut sizes, mut labels) = (Vec::new(), Vec::new());
    while lx.peek_byte()?.is_some() {
        let n = read_list_into(lx, FoamFormat::Ascii, Arch::default(), &mut labels)?;
        sizes.push(n as u32);
    }
    Ok((sizes, labels))
}

/// [`read_label_lists`] of an ascii file in parallel: `None` where
/// [`parse_parallel`] cannot, the sizes disagree or a face fails `check`.
fn read_label_lists_parallel(
    lx: &mut Lexer,
    check: &(impl Fn(usize, &[Label]) -> Result<(), String> + Sync),
) -> Result<Option<LabelLists>, MeshError> {
    let Some(list) = parse_parallel(lx, chunk_label_lists)? else {
        return Ok(None);
    };
    let faces: usize = list.chunks.iter().map(|(sizes, _)| sizes.len()).sum();
    let total: usize = list.chunks.iter().map(|(_, labels)| labels.len()).sum();
    if faces != list.n || u32::try_from(total).is_err() {
        return Ok(None);
    }
    let mut offsets = Vec::with_capacity(faces + 1);
    let mut labels = Vec::with_capacity(total);
    offsets.push(0u32);
    for (sizes, chunk_labels) in list.chunks {
        let mut at = labels.len() as u32;
        for size in sizes {
            at += size;
            offsets.push(at);
        }
        labels.extend(chunk_labels);
    }
    let failed = (0..faces).into_par_iter().any(|f| {
        let face = &labels[offsets[f] as usize..offsets[f + 1] as usize];
        check(f, face).is_err()
    });
    if failed {
        return Ok(None);
    }
    lx.rewind(list.end.0, list.end.1);
    lx.tick();
    lx.punct(b')', "to close the face list")?;
    Ok(Some((offsets, labels)))
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
    fn long_binary_lists_decode_in_parallel_and_name_the_first_bad_item() {
        let n = 2 * PARALLEL_MIN_ITEMS + 3;
        let list = |bad: &[(usize, i32)]| {
            let mut src = format!("{n}(").into_bytes();
            for i in 0..n {
                let v = bad.iter().find(|b| b.0 == i).map_or(i as i32, |b| b.1);
                src.extend(v.to_le_bytes());
            }
            src.push(b')');
            src
        };
        let src = list(&[]);
        let mut lx = Lexer::new(Path::new("f"), &src, 0, 1);
        let v = read_list::<Label>(&mut lx, FoamFormat::Binary, Arch::default()).unwrap();
        assert_eq!(v, (0..n as Label).collect::<Vec<_>>());
        let src = list(&[(n - 1, -2), (PARALLEL_MIN_ITEMS + 5, -7)]);
        let mut lx = Lexer::new(Path::new("f"), &src, 0, 1);
        let e = read_list::<Label>(&mut lx, FoamFormat::Binary, Arch::default()).unwrap_err();
        assert!(e.to_string().contains("found -7"), "{e}");
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

    /// A counted ascii list of `n` items of `item(i)`, one per line, with
    /// some lines holding two items (chunks then start mid-pattern).
    fn big_list(n: usize, item: impl Fn(usize) -> String) -> String {
        let mut src = format!("{n}\n(\n");
        for i in 0..n {
            src += &item(i);
            src.push(if i % 7 == 3 { ' ' } else { '\n' });
        }
        src + ")\n"
    }

    fn file_list<T: ListItem>(src: &str) -> Result<Vec<T>, MeshError> {
        let mut lx = Lexer::new(Path::new("f"), src.as_bytes(), 0, 1);
        let v = read_file_list(&mut lx, FoamFormat::Ascii, Arch::default())?;
        lx.expect_eof("the list")?;
        Ok(v)
    }

    #[test]
    fn long_lists_read_in_parallel_equal_the_sequential_reader() {
        let n = 3 * PARALLEL_MIN_ITEMS + 11;
        let labels = big_list(n, |i| format!("{}", (i * 7919) % 100_003));
        assert_eq!(
            file_list::<Label>(&labels).unwrap(),
            ascii::<Label>(&labels).unwrap()
        );
        let points = big_list(n, |i| format!("({} -{}e-3 {}.5)", i, i % 13, i % 5));
        let parallel = file_list::<Vec3>(&points).unwrap();
        assert_eq!(parallel.len(), n);
        assert_eq!(parallel, ascii::<Vec3>(&points).unwrap());
        let faces = big_list(n, |i| format!("4({} {} {} {})", i, i + 1, i + 2, i + 3));
        let read = |src: &str| {
            let mut lx = Lexer::new(Path::new("f"), src.as_bytes(), 0, 1);
            let v = read_label_lists(&mut lx, FoamFormat::Ascii, Arch::default(), |_, _| Ok(()));
            (v, lx.line(), lx.pos())
        };
        let (parallel, line, pos) = read(&faces);
        let (offsets, labels) = parallel.unwrap();
        assert_eq!(offsets.len(), n + 1);
        assert_eq!(
            &labels[4 * (n - 1)..],
            [n - 1, n, n + 1, n + 2].map(|l| l as Label)
        );
        assert_eq!((line, pos), (faces.lines().count(), faces.len() - 1));
    }

    #[test]
    fn errors_in_long_lists_name_the_line_the_sequential_reader_names() {
        let n = 2 * PARALLEL_MIN_ITEMS;
        let bad = |at: usize, what: &str| {
            big_list(n, |i| {
                if i == at {
                    what.to_string()
                } else {
                    i.to_string()
                }
            })
        };
        for (src, expected) in [
            (bad(n - 5, "x"), "expected a label"),
            (bad(PARALLEL_MIN_ITEMS + 1, "-4"), "expected a label"),
            (
                big_list(n, |i| i.to_string()).replacen(
                    &format!("{n}\n"),
                    &format!("{}\n", n + 1),
                    1,
                ),
                "declares",
            ),
            (
                big_list(n, |i| i.to_string()).replace("\n7\n", "\n7 /* seven */\n"),
                "",
            ),
        ] {
            let sequential = ascii::<Label>(&src).map_err(|e| e.to_string());
            let parallel = file_list::<Label>(&src).map_err(|e| e.to_string());
            assert_eq!(parallel, sequential);
            if let Err(e) = &parallel {
                assert!(e.contains(expected), "{e}");
            }
        }
        // A face that fails the check deep in the list: the sequential error.
        let faces = big_list(n, |i| {
            if i == n - 2 {
                "2(0 1)".into()
            } else {
                "3(0 1 2)".into()
            }
        });
        let mut lx = Lexer::new(Path::new("f"), faces.as_bytes(), 0, 1);
        let e = read_label_lists(&mut lx, FoamFormat::Ascii, Arch::default(), |i, l| {
            if l.len() < 3 {
                Err(format!("face {i} is short"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        let line = faces.lines().position(|l| l.contains("2(0 1)")).unwrap() + 1;
        assert_eq!(e.to_string(), format!("f:{line}: face {} is short", n - 2));
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
