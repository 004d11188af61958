//! NVRTC compilation with an on-disk cache of the PTX, keyed by a hash of
//! the source, the target architecture and the NVRTC version. A cache entry
//! carries a hash of its own text; an entry that fails that check (or that
//! the driver refuses to load) is compiled again and rewritten.

use std::path::{Path, PathBuf};
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

/// Writes atomically ([`crate::io::write_atomic`]: a temporary file of its
/// own per call, so ranks on threads of one process that compile the same
/// kernels at once do not write into one file); a failure only costs a
/// compile next time, so it is logged, not returned.
fn write_entry(path: &Path, ptx: &str) {
    let text = format!("{HEADER}{:016x}\n{ptx}", fnv1a(&[ptx.as_bytes()]));
    let result = path
        .parent()
        .map_or(Ok(()), crate::io::create_dir_all)
        .and_then(|()| crate::io::write_atomic(path, |w| w.write_all(text.as_bytes())));
    if let Err(e) = result {
        log::warn!("could not cache the compiled kernels: {e}");
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

/// The on-disk PTX cache of one NVRTC version: where an entry of a source
/// and an architecture lives, and the cached-or-compiled PTX of it. Apart
/// from the driver so that its logic is tested without a device.
#[derive(Clone, Debug)]
pub struct PtxCache {
    /// None: no cache directory (every load compiles).
    dir: Option<PathBuf>,
    /// "nvrtc MAJOR.MINOR", part of every key.
    compiler: String,
}

impl PtxCache {
    /// The cache of [`cache_dir`] for the NVRTC library loaded.
    pub fn for_nvrtc() -> Result<Self, GpuError> {
        let (major, minor) = nvrtc_version()?;
        Ok(Self::new(cache_dir(), &format!("nvrtc {major}.{minor}")))
    }

    /// A cache in `dir` for the compiler named `compiler` (its version).
    pub fn new(dir: Option<PathBuf>, compiler: &str) -> Self {
        Self {
            dir,
            compiler: compiler.to_string(),
        }
    }

    /// The entry of `source` compiled for `arch`.
    pub fn path(&self, source: &str, arch: &str) -> Option<PathBuf> {
        let key = fnv1a(&[source.as_bytes(), arch.as_bytes(), self.compiler.as_bytes()]);
        self.dir
            .as_ref()
            .map(|d| d.join(format!("kernels-{arch}-{key:016x}.ptx")))
    }

    /// The PTX of `source` for `arch` and whether it came from the cache:
    /// a valid entry, else `compile(source, arch)`, stored for next time.
    pub fn ptx(
        &self,
        source: &str,
        arch: &str,
        compile: impl FnOnce(&str, &str) -> Result<String, GpuError>,
    ) -> Result<(String, bool), GpuError> {
        let path = self.path(source, arch);
        if let Some(ptx) = path.as_ref().and_then(read_entry) {
            return Ok((ptx, true));
        }
        Ok((self.compile_and_store(source, arch, compile)?, false))
    }

    /// Compiles and (over)writes the entry: for a miss, or an entry the
    /// driver refused to load.
    pub fn compile_and_store(
        &self,
        source: &str,
        arch: &str,
        compile: impl FnOnce(&str, &str) -> Result<String, GpuError>,
    ) -> Result<String, GpuError> {
        let ptx = compile(source, arch)?;
        if let Some(path) = self.path(source, arch) {
            write_entry(&path, &ptx);
        }
        Ok(ptx)
    }
}

/// Compiles `source` for `arch` with NVRTC.
pub fn nvrtc_compile(source: &str, arch: &str) -> Result<String, GpuError> {
    compile(source, arch)
}

/// Loads the kernels for `arch` (e.g. `compute_90`) into `ctx`, from the cache
/// when a valid entry exists; returns the module and whether it was cached.
pub fn load_module(
    ctx: &Arc<CudaContext>,
    source: &str,
    arch: &str,
) -> Result<(Arc<CudaModule>, bool), GpuError> {
    let cache = PtxCache::for_nvrtc()?;
    let (ptx, cached) = cache.ptx(source, arch, compile)?;
    load_ptx(ctx, &cache, source, arch, ptx, cached)
}

/// Loads `ptx` (of `source`, from `cache` where `cached`) into `ctx`; a
/// cached entry the driver refuses is compiled again and rewritten.
pub fn load_ptx(
    ctx: &Arc<CudaContext>,
    cache: &PtxCache,
    source: &str,
    arch: &str,
    ptx: String,
    cached: bool,
) -> Result<(Arc<CudaModule>, bool), GpuError> {
    let load = |ptx: String| {
        ctx.load_module(Ptx::from_src(ptx))
            .map_err(|e| GpuError::Driver {
                call: "cuModuleLoadData",
                error: e.to_string(),
            })
    };
    if !cached {
        return Ok((load(ptx)?, false));
    }
    match load(ptx) {
        Ok(module) => Ok((module, true)),
        Err(e) => {
            log::warn!("cached kernels failed to load ({e}); compiling again");
            let ptx = cache.compile_and_store(source, arch, compile)?;
            Ok((load(ptx)?, false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_writing_one_entry_leave_a_whole_one() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-race");
        let path = dir.join("k.ptx");
        let texts: Vec<String> = (0..8u8)
            .map(|k| char::from(b'a' + k).to_string().repeat(400_000))
            .collect();
        std::thread::scope(|s| {
            for text in &texts {
                s.spawn(|| write_entry(&path, text));
            }
        });
        let entry = read_entry(&path).expect("a whole entry");
        assert!(texts.contains(&entry));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_with_a_bad_hash_are_rejected() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-test");
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

    #[test]
    fn the_cache_compiles_once_per_source_arch_and_compiler() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-ptxcache");
        let cache = PtxCache::new(Some(dir.clone()), "nvrtc 12.8");
        let compiles = std::cell::Cell::new(0);
        let compile = |source: &str, arch: &str| {
            compiles.set(compiles.get() + 1);
            Ok(format!("ptx of {source} for {arch}"))
        };
        let first = cache.ptx("kernel a", "compute_90", compile).unwrap();
        assert_eq!(first, ("ptx of kernel a for compute_90".to_string(), false));
        let again = cache.ptx("kernel a", "compute_90", compile).unwrap();
        assert_eq!(again, ("ptx of kernel a for compute_90".to_string(), true));
        assert_eq!(compiles.get(), 1);
        // Another source, architecture or compiler version is another entry.
        cache.ptx("kernel b", "compute_90", compile).unwrap();
        cache.ptx("kernel a", "compute_80", compile).unwrap();
        let newer = PtxCache::new(Some(dir.clone()), "nvrtc 13.0");
        assert!(!newer.ptx("kernel a", "compute_90", compile).unwrap().1);
        assert_eq!(compiles.get(), 4);
        // A damaged entry is compiled again and rewritten.
        let path = cache.path("kernel a", "compute_90").unwrap();
        std::fs::write(&path, "damaged").unwrap();
        assert!(!cache.ptx("kernel a", "compute_90", compile).unwrap().1);
        assert!(cache.ptx("kernel a", "compute_90", compile).unwrap().1);
        assert_eq!(compiles.get(), 5);
        // A compile error is returned and leaves no entry.
        let failing = |_: &str, arch: &str| {
            Err(GpuError::Compile {
                arch: arch.into(),
                log: "error: expected a ';'".into(),
            })
        };
        assert!(cache.ptx("kernel c", "compute_90", failing).is_err());
        assert!(!cache.path("kernel c", "compute_90").unwrap().exists());
        // Without a directory every request compiles.
        let none = PtxCache::new(None, "nvrtc 12.8");
        assert!(!none.ptx("kernel a", "compute_90", compile).unwrap().1);
        assert_eq!(compiles.get(), 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
