//! NVRTC compilation with an on-disk cache of the PTX, keyed by a hash of
//! the source, the target architecture and the NVRTC version. A cache entry
//! carries a hash of its own text; an entry that fails that check (or that
//! the driver refuses to load) is compiled again and rewritten.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use super::GpuError;

/// FNV-1a, 64 bits: a stable hash (std's hasher may change between releases).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3); // separator
    }
    h
}

fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(GpuError::Compile {
            arch: String::new(),
            log: format!("nvrtcVersion returned {status:?}"),
        });
    }
    Ok((major, minor))
}

/// `$XDG_CACHE_HOME/fvpoisson`, else `$HOME/.cache/fvpoisson`.
pub fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("fvpoisson"))
}

const HEADER: &str = "// fvpoisson cached PTX, text hash ";

/// The entry's PTX if its header hash matches its text.
fn read_entry(path: &PathBuf) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let (header, body) = text.split_once('\n')?;
    let stored = u64::from_str_radix(header.strip_prefix(HEADER)?, 16).ok()?;
    (stored == fnv1a(&[body.as_bytes()])).then(|| body.to_string())
}

/// Writes atomically (temporary file, then rename); a failure only costs a
/// compile next time, so it is logged, not returned.
fn write_entry(path: &PathBuf, ptx: &str) {
    let text = format!("{HEADER}{:016x}\n{ptx}", fnv1a(&[ptx.as_bytes()]));
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        log::warn!(
            "could not cache the compiled kernels at {}: {e}",
            path.display()
        );
        let _ = std::fs::remove_file(&tmp);
    }
}

fn compile(source: &str, arch: &str) -> Result<String, GpuError> {
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some("fvpoisson_kernels.cu".into()),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, opts).map_err(|e| GpuError::Compile {
        arch: arch.into(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })?;
    Ok(ptx.to_src())
}

/// Loads the kernels for `arch` (e.g. `compute_90`) into `ctx`, from the cache
/// when a valid entry exists; returns the module and whether it was cached.
pub fn load_module(
    ctx: &Arc<CudaContext>,
    source: &str,
    arch: &str,
) -> Result<(Arc<CudaModule>, bool), GpuError> {
    let (major, minor) = nvrtc_version()?;
    let key = fnv1a(&[
        source.as_bytes(),
        arch.as_bytes(),
        format!("nvrtc {major}.{minor}").as_bytes(),
    ]);
    let path = cache_dir().map(|d| d.join(format!("kernels-{arch}-{key:016x}.ptx")));
    if let Some(ptx) = path.as_ref().and_then(read_entry) {
        match ctx.load_module(Ptx::from_src(ptx)) {
            Ok(module) => return Ok((module, true)),
            Err(e) => log::warn!("cached kernels failed to load ({e}); compiling again"),
        }
    }
    let ptx = compile(source, arch)?;
    let module = ctx
        .load_module(Ptx::from_src(ptx.clone()))
        .map_err(|e| GpuError::Driver {
            call: "cuModuleLoadData",
            error: e.to_string(),
        })?;
    if let Some(path) = &path {
        write_entry(path, &ptx);
    }
    Ok((module, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_with_a_bad_hash_are_rejected() {
        let dir = std::env::temp_dir().join(format!("fvpoisson-cache-test-{}", std::process::id()));
        let path = dir.join("k.ptx");
        write_entry(&path, "ptx text\nline 2");
        assert_eq!(read_entry(&path).as_deref(), Some("ptx text\nline 2"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("line 2", "line 3")).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
