//! OpenFOAM file format: reading (`FoamFile` header, dictionaries, ascii and
//! binary lists, transparent gzip) and writing (headers, atomic files).
//! [`foam_dict`] expands dictionaries as OpenFOAM does (`#include`, `$var`,
//! regular-expression keys) and gives typed access with file:line errors.
//!
//! Format reference: OpenFOAM v1912 `IOstreams` (ISstream token rules, `List`
//! ascii/binary I/O, `IOobject::writeHeader`).

pub mod dict;
pub mod foam_dict;
pub mod lexer;
pub mod list;
pub mod write;

pub use dict::{Dict, Entry, EntryValue, Value, ValueKind};
pub use foam_dict::{FoamDict, FoamEntry, FoamValue};
pub use lexer::{Lexer, Token};
pub use list::ListItem;

use crate::mesh::MeshError;
use std::path::{Path, PathBuf};

/// Encoding of a file's list contents (`format` in the header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoamFormat {
    Ascii,
    Binary,
}

/// Sizes of binary labels and scalars (`arch "LSB;label=32;scalar=64"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// 4 or 8.
    pub label_bytes: usize,
    /// 4 or 8.
    pub scalar_bytes: usize,
}

impl Default for Arch {
    /// OpenFOAM's default build, also assumed when `arch` is missing.
    fn default() -> Self {
        Self {
            label_bytes: 4,
            scalar_bytes: 8,
        }
    }
}

impl Arch {
    /// Parses `LSB;label=32;scalar=64`; fields may come in any order and be missing.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut arch = Self::default();
        for field in text.split(';').map(str::trim).filter(|f| !f.is_empty()) {
            let bits = |v: &str| match v {
                "32" => Ok(4),
                "64" => Ok(8),
                _ => Err(format!(
                    "arch \"{text}\": unsupported size '{v}' (expected 32 or 64)"
                )),
            };
            match field.split_once('=') {
                None if field == "LSB" => {}
                None if field == "MSB" => {
                    return Err(format!(
                        "arch \"{text}\": big-endian (MSB) binary files are not supported; \
                         convert with foamFormatConvert on a little-endian machine"
                    ))
                }
                Some(("label", v)) => arch.label_bytes = bits(v)?,
                Some(("scalar", v)) => arch.scalar_bytes = bits(v)?,
                _ => return Err(format!("arch \"{text}\": unknown field '{field}'")),
            }
        }
        Ok(arch)
    }

    pub fn to_foam(self) -> String {
        format!(
            "LSB;label={};scalar={}",
            self.label_bytes * 8,
            self.scalar_bytes * 8
        )
    }
}

/// The `FoamFile { ... }` header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub format: FoamFormat,
    /// `class` (e.g. `vectorField`, `faceList`, `faceCompactList`, `labelList`);
    /// empty when missing.
    pub class: String,
    pub arch: Arch,
    pub note: Option<String>,
    pub object: Option<String>,
}

impl Default for Header {
    fn default() -> Self {
        Self {
            format: FoamFormat::Ascii,
            class: String::new(),
            arch: Arch::default(),
            note: None,
            object: None,
        }
    }
}

/// A file's bytes (decompressed), its header, and where the body starts.
pub struct FoamFile {
    pub path: PathBuf,
    pub header: Header,
    bytes: Vec<u8>,
    body_pos: usize,
    body_line: usize,
}

impl FoamFile {
    /// Reads `path`, or `path.gz` when `path` is missing, and parses the header.
    /// A file without a `FoamFile` header is read as ascii.
    pub fn read(path: &Path) -> Result<Self, MeshError> {
        let (path, bytes) = read_maybe_gz(path)?;
        Self::from_bytes(path, bytes)
    }

    /// Parses the header of `bytes`, which were read from `path`.
    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<Self, MeshError> {
        let mut lx = Lexer::new(&path, &bytes, 0, 1);
        let mut header = Header::default();
        if lx.peek()? == Token::Word("FoamFile") {
            lx.next_token()?;
            lx.punct(b'{', "after 'FoamFile'")?;
            let dict = Dict::parse_body(&mut lx, FoamFormat::Ascii, Arch::default(), true)?;
            header = header_from_dict(&lx, &dict)?;
        }
        let (body_pos, body_line) = (lx.pos(), lx.line());
        drop(lx);
        Ok(Self {
            path,
            header,
            bytes,
            body_pos,
            body_line,
        })
    }

    /// A lexer at the start of the body (after the header).
    pub fn body(&self) -> Lexer<'_> {
        Lexer::new(&self.path, &self.bytes, self.body_pos, self.body_line).with_progress()
    }

    /// Parses the body as a dictionary (`key value;` and `name { ... }` entries).
    pub fn dict(&self) -> Result<Dict, MeshError> {
        let mut lx = self.body();
        Dict::parse_body(&mut lx, self.header.format, self.header.arch, false)
    }

    /// Parses the body as one value followed by the end of the file (e.g. `boundary`).
    pub fn value(&self) -> Result<Value, MeshError> {
        let mut lx = self.body();
        let v = Value::parse(&mut lx, self.header.format, self.header.arch, None)?;
        lx.expect_eof("the list")?;
        Ok(v)
    }

    /// Reads the body as one list of `T` (e.g. `points`, `owner`).
    pub fn list<T: ListItem>(&self) -> Result<Vec<T>, MeshError> {
        let mut lx = self.body();
        let v = list::read_file_list(&mut lx, self.header.format, self.header.arch)?;
        lx.expect_eof("the list")?;
        Ok(v)
    }
}

fn header_from_dict(lx: &Lexer, dict: &Dict) -> Result<Header, MeshError> {
    let text = |key: &str| -> Result<Option<String>, MeshError> {
        dict.get(key).map(|e| e.single_text(lx.file())).transpose()
    };
    let format = match text("format")?.as_deref() {
        None | Some("ascii") => FoamFormat::Ascii,
        Some("binary") => FoamFormat::Binary,
        Some(other) => {
            let line = dict.get("format").map_or(0, |e| e.line);
            return Err(lx.error_at(
                line,
                format!("FoamFile header: expected format ascii or binary, found '{other:.80}'"),
            ));
        }
    };
    let arch = match text("arch")? {
        None => Arch::default(),
        Some(a) => {
            let line = dict.get("arch").map_or(0, |e| e.line);
            Arch::parse(&a).map_err(|msg| lx.error_at(line, format!("FoamFile header: {msg}")))?
        }
    };
    Ok(Header {
        format,
        class: text("class")?.unwrap_or_default(),
        arch,
        note: text("note")?,
        object: text("object")?,
    })
}

/// Reads `path`, falling back to `path.gz`; gzip content is inflated. Returns
/// the path actually read. Only regular files are read
/// ([`crate::limits::read_regular_file`]): a directory, FIFO or device in the
/// way is named as what it is, a symbolic link loop as one.
pub fn read_maybe_gz(path: &Path) -> Result<(PathBuf, Vec<u8>), MeshError> {
    let gz = gz_path(path);
    let missing = |p: &Path| {
        std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    };
    let (actual, compressed) = if !missing(path) {
        (
            path.to_path_buf(),
            path.extension().is_some_and(|e| e == "gz"),
        )
    } else if !missing(&gz) {
        (gz, true)
    } else {
        return Err(MeshError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no such file (nor {})", gz.display()),
            ),
        ));
    };
    let raw = crate::limits::read_regular_file(&actual).map_err(|e| MeshError::io(&actual, e))?;
    if !compressed {
        return Ok((actual, raw));
    }
    let limit = crate::limits::physical_memory().unwrap_or(u64::MAX);
    let out = crate::limits::gunzip_bounded(&raw, limit)
        .map_err(|e| MeshError::parse(&actual, 0, format!("cannot decompress gzip data: {e}")))?;
    Ok((actual, out))
}

/// Whether `path` is a file OpenFOAM would read there: the file itself or
/// its gzip-compressed `path.gz`.
pub fn file_or_gz_exists(path: &Path) -> bool {
    path.is_file() || gz_path(path).is_file()
}

/// `path` with `.gz` appended.
pub fn gz_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".gz");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields() {
        let src = b"/* banner */\nFoamFile\n{\n version 2.0; format binary; class labelList;\n \
                    arch \"LSB;label=32;scalar=64\"; note \"nCells:3\"; object owner;\n}\n3(0 1 2)";
        let f = FoamFile::from_bytes("owner".into(), src.to_vec()).unwrap();
        assert_eq!(f.header.format, FoamFormat::Binary);
        assert_eq!(f.header.class, "labelList");
        assert_eq!(f.header.note.as_deref(), Some("nCells:3"));
        assert_eq!(f.header.arch, Arch::default());
    }

    #[test]
    fn arch_sizes() {
        assert_eq!(
            Arch::parse("LSB;label=64;scalar=32").unwrap().label_bytes,
            8
        );
        assert!(Arch::parse("MSB;label=32;scalar=64")
            .unwrap_err()
            .contains("big-endian"));
        assert!(Arch::parse("LSB;label=16").unwrap_err().contains("'16'"));
    }

    #[test]
    fn bad_format_names_line() {
        let src = b"FoamFile\n{\n format text;\n}\n";
        let e = FoamFile::from_bytes("p".into(), src.to_vec())
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "p:3: FoamFile header: expected format ascii or binary, found 'text'"
        );
    }
}
