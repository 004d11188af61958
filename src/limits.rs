//! What input may ask for: files are read only when they are regular files
//! (a FIFO or `/dev/zero` would be read forever), and no more than their size;
//! sizes taken from a file are checked against the memory they imply before
//! anything is allocated; text quoted back in messages is cut short.

use std::io::{self, Read};
use std::path::Path;

/// Characters of an input token quoted in a message; longer ones are cut
/// (a 10 MB token must not be copied into every error and warning).
pub const QUOTE_CHARS: usize = 60;

/// `text` as quoted in a message: at most [`QUOTE_CHARS`] characters, with
/// the length of what was left out.
pub fn quote(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.into(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &text[..end], text.len()).into(),
    }
}

/// What kind of file `path` is when it is not a regular file ("a directory",
/// "a FIFO (named pipe)", ...), `None` for a regular file.
fn not_regular(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// `Ok` when `path` (symbolic links followed) is a regular file; otherwise
/// the error says what it is. A missing file is `NotFound`; a symbolic link
/// loop keeps the OS's message ("Too many levels of symbolic links").
pub fn check_regular_file(path: &Path) -> io::Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path)?;
    match not_regular(meta.file_type()) {
        None => Ok(meta),
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file: give a mesh or dictionary file"),
        )),
    }
}

/// Reads a regular file whole, no more than the size it had when opened (a
/// file that grows meanwhile is read as it was). FIFOs, devices and
/// directories are refused ([`check_regular_file`]) rather than read forever.
pub fn read_regular_file(path: &Path) -> io::Result<Vec<u8>> {
    // Checked before opening: opening a FIFO blocks until a writer comes.
    check_regular_file(path)?;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    check_memory(len as u128, || "the file".into()).map_err(io::Error::other)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_regular_file`] as text; invalid UTF-8 is an `InvalidData` error.
pub fn read_regular_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_regular_file(path)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the file is not valid UTF-8 text",
        )
    })
}

/// This machine's physical memory in bytes (Linux `/proc/meminfo`), `None`
/// where it cannot be read.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `Err` naming `what` when `bytes` exceed this machine's physical memory:
/// a size from input that could never be allocated is refused before the
/// allocation aborts the process.
pub fn check_memory(bytes: u128, what: impl FnOnce() -> String) -> Result<(), String> {
    let Some(memory) = physical_memory() else {
        return Ok(());
    };
    if bytes <= memory as u128 {
        return Ok(());
    }
    Err(format!(
        "{} needs {} of memory, more than this machine's {}",
        what(),
        format_bytes(bytes),
        format_bytes(memory as u128)
    ))
}

/// `bytes` in B, kB, MB, GB, TB (powers of 1000), three significant digits.
pub fn format_bytes(bytes: u128) -> String {
    let units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < units.len() {
        value /= 1000.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.3} {}", units[unit]),
    }
}

/// Inflates gzip data, refusing output beyond `limit` bytes (a small file
/// that inflates to more than the machine holds).
pub fn gunzip_bounded(compressed: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit as usize));
    flate2::read::MultiGzDecoder::new(compressed)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the gzip data inflates to more than {}",
                format_bytes(limit as u128)
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_cuts_long_tokens() {
        assert_eq!(quote("short"), "short");
        let long = "x".repeat(10_000_000);
        let q = quote(&long);
        assert!(q.len() < 100, "{}", q.len());
        assert!(q.ends_with("(10000000 bytes in all)"), "{q}");
    }

    #[test]
    fn special_files_are_refused() {
        let dir = crate::test_support::unique_temp_dir("fvp_limits");
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_regular_file(&dir).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let e = read_regular_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = read_regular_file(&fifo).unwrap_err();
            assert!(e.to_string().contains("FIFO"), "{e}");
        }
        let looped = dir.join("loop");
        let _ = std::fs::remove_file(&looped);
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        let e = read_regular_file(&looped).unwrap_err();
        assert!(e.to_string().contains("symbolic links"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn memory_beyond_the_machine_is_refused() {
        if physical_memory().is_none() {
            return;
        }
        let e = check_memory(1 << 80, || "the row count 1e24".into()).unwrap_err();
        assert!(e.starts_with("the row count 1e24 needs"), "{e}");
        assert!(check_memory(1000, || unreachable!()).is_ok());
    }
}
