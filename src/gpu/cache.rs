//! NVRTC compilation with an on-disk cache of the compiled kernels, keyed by
//! a hash of the source, the target ([`Target`]: the device's machine code,
//! CUBIN, or PTX) and the NVRTC version. A cache entry carries a hash of its
//! own bytes; an entry that fails that check (or that the driver refuses to
//! load) is compiled again and rewritten.
//!
//! NVRTC compiles for the device's `sm_XY` straight to CUBIN when it knows
//! that architecture (`nvrtcGetSupportedArchs`), so loading a module is a copy
//! to the device: PTX would be translated by the driver at load time, which
//! for the larger modules took as long again as the compile on a machine whose
//! driver cache was cold. An NVRTC older than the GPU compiles PTX for
//! `compute_XY` instead (the driver's translation then does what NVRTC could
//! not), as does `FVPOISSON_GPU_PTX=1`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;

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

/// What NVRTC compiles a module to for one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `sm_XY` (CUBIN) or `compute_XY` (PTX).
    arch: String,
    cubin: bool,
}

impl Target {
    /// The device's machine code: the driver loads it without translating.
    pub fn cubin((major, minor): (i32, i32)) -> Self {
        Self {
            arch: format!("sm_{major}{minor}"),
            cubin: true,
        }
    }

    /// PTX of the device's virtual architecture, which the driver translates
    /// when the module is loaded.
    pub fn ptx((major, minor): (i32, i32)) -> Self {
        Self {
            arch: format!("compute_{major}{minor}"),
            cubin: false,
        }
    }

    /// CUBIN for compute capability `cc` when `supported` (the architectures
    /// NVRTC can write machine code for, as `nvrtcGetSupportedArchs` lists
    /// them: 10 major + minor) holds it, else PTX.
    pub fn choose(cc: (i32, i32), supported: &[i32]) -> Self {
        if supported.contains(&(10 * cc.0 + cc.1)) {
            Self::cubin(cc)
        } else {
            Self::ptx(cc)
        }
    }

    /// The target for a device of compute capability `cc` with the NVRTC
    /// loaded: [`Target::choose`] over its supported architectures, PTX
    /// where `FVPOISSON_GPU_PTX=1`.
    pub fn for_device(cc: (i32, i32)) -> Result<Self, GpuError> {
        if std::env::var("FVPOISSON_GPU_PTX").is_ok_and(|v| v == "1") {
            return Ok(Self::ptx(cc));
        }
        Ok(Self::choose(cc, &supported_archs()?))
    }

    /// `sm_XY` or `compute_XY`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Whether the modules are machine code (else PTX).
    pub fn is_cubin(&self) -> bool {
        self.cubin
    }

    /// "CUBIN" or "PTX".
    pub fn kind(&self) -> &'static str {
        if self.cubin {
            "CUBIN"
        } else {
            "PTX"
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.arch)
    }
}

/// The architectures the loaded NVRTC writes machine code for (10 major +
/// minor, e.g. 90 for `sm_90`).
pub fn supported_archs() -> Result<Vec<i32>, GpuError> {
    use cudarc::nvrtc::sys;
    let failed = |call: &str, status| GpuError::Compile {
        arch: String::new(),
        log: format!("{call} returned {status:?}"),
    };
    let mut count = 0;
    // SAFETY: writes one int.
    let status = unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) };
    if status != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(failed("nvrtcGetNumSupportedArchs", status));
    }
    let mut archs = vec![0; count.max(0) as usize];
    if archs.is_empty() {
        return Ok(archs);
    }
    // SAFETY: writes `count` ints into a buffer of that many.
    let status = unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    if status != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(failed("nvrtcGetSupportedArchs", status));
    }
    Ok(archs)
}

const HEADER: &[u8] = b"// fvpoisson cached kernels, hash ";

/// The entry's code if the hash in its header line matches its bytes.
fn read_entry(path: &PathBuf) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let line = bytes.iter().position(|&b| b == b'\n')?;
    let hash = std::str::from_utf8(bytes[..line].strip_prefix(HEADER)?).ok()?;
    let stored = u64::from_str_radix(hash, 16).ok()?;
    let body = &bytes[line + 1..];
    (stored == fnv1a(&[body])).then(|| body.to_vec())
}

/// Writes atomically ([`crate::io::write_atomic`]: a temporary file of its
/// own per call, so ranks on threads of one process that compile the same
/// kernels at once do not write into one file); a failure only costs a
/// compile next time, so it is logged, not returned.
fn write_entry(path: &Path, code: &[u8]) {
    let header = format!("{:016x}\n", fnv1a(&[code]));
    let result = path
        .parent()
        .map_or(Ok(()), crate::io::create_dir_all)
        .and_then(|()| {
            crate::io::write_atomic(path, |w| {
                w.write_all(HEADER)?;
                w.write_all(header.as_bytes())?;
                w.write_all(code)
            })
        });
    if let Err(e) = result {
        log::warn!("could not cache the compiled kernels: {e}");
    }
}

/// An NVRTC program, destroyed when dropped.
struct Program(cudarc::nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program, destroyed only here.
        let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
    }
}

/// NVRTC's text (a log) as a string, without its terminating NUL.
fn c_text(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn compile(source: &str, target: &Target) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::{result, sys};
    let error = |log: String| GpuError::Compile {
        arch: target.arch.clone(),
        log,
    };
    let src = std::ffi::CString::new(source)
        .map_err(|_| error("the kernel source holds a NUL byte".into()))?;
    let program = Program(
        result::create_program(&src, Some(c"fvpoisson_kernels.cu"))
            .map_err(|e| error(format!("nvrtcCreateProgram: {e}")))?,
    );
    let options = [
        format!("--gpu-architecture={}", target.arch),
        "--std=c++17".to_string(),
    ];
    // SAFETY: the program is live until `program` drops; `src` outlives it.
    if let Err(e) = unsafe { result::compile_program(program.0, &options) } {
        // SAFETY: as above.
        let log = unsafe { result::get_program_log(program.0) }
            .map(|log| c_text(&log))
            .unwrap_or_else(|l| format!("{e} (no log: {l})"));
        return Err(error(log));
    }
    let mut size = 0usize;
    // SAFETY: a compiled live program; each call writes `size` or a buffer
    // of `size` bytes.
    let status = unsafe {
        if target.cubin {
            sys::nvrtcGetCUBINSize(program.0, &mut size)
        } else {
            sys::nvrtcGetPTXSize(program.0, &mut size)
        }
    };
    status
        .result()
        .map_err(|e| error(format!("getting the {} size: {e}", target.kind())))?;
    let mut code = vec![0u8; size];
    // SAFETY: as above, into a buffer of `size` bytes.
    let status = unsafe {
        if target.cubin {
            sys::nvrtcGetCUBIN(program.0, code.as_mut_ptr().cast())
        } else {
            sys::nvrtcGetPTX(program.0, code.as_mut_ptr().cast())
        }
    };
    status
        .result()
        .map_err(|e| error(format!("getting the {}: {e}", target.kind())))?;
    if !target.cubin {
        // PTX is text ending in a NUL, which loading adds back.
        while code.last() == Some(&0) {
            code.pop();
        }
    }
    Ok(code)
}

/// The on-disk kernel cache of one NVRTC version: where the entry of a
/// source and a target lives, and the cached-or-compiled code of it. Apart
/// from the driver so that its logic is tested without a device.
#[derive(Clone, Debug)]
pub struct KernelCache {
    /// None: no cache directory (every load compiles).
    dir: Option<PathBuf>,
    /// "nvrtc MAJOR.MINOR", part of every key.
    compiler: String,
}

impl KernelCache {
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

    /// The entry of `source` compiled for `target`: its kind ("cubin" or
    /// "ptx") is part of the key and of the name, so a PTX entry is never
    /// read as machine code.
    pub fn path(&self, source: &str, target: &Target) -> Option<PathBuf> {
        let ext = if target.cubin { "cubin" } else { "ptx" };
        let key = fnv1a(&[
            source.as_bytes(),
            target.arch.as_bytes(),
            ext.as_bytes(),
            self.compiler.as_bytes(),
        ]);
        self.dir
            .as_ref()
            .map(|d| d.join(format!("kernels-{}-{key:016x}.{ext}", target.arch)))
    }

    /// The code of `source` for `target` and whether it came from the
    /// cache: a valid entry, else `compile(source, target)`, stored for
    /// next time.
    pub fn code(
        &self,
        source: &str,
        target: &Target,
        compile: impl FnOnce(&str, &Target) -> Result<Vec<u8>, GpuError>,
    ) -> Result<(Vec<u8>, bool), GpuError> {
        let path = self.path(source, target);
        if let Some(code) = path.as_ref().and_then(read_entry) {
            return Ok((code, true));
        }
        Ok((self.compile_and_store(source, target, compile)?, false))
    }

    /// Compiles and (over)writes the entry: for a miss, or an entry the
    /// driver refused to load.
    pub fn compile_and_store(
        &self,
        source: &str,
        target: &Target,
        compile: impl FnOnce(&str, &Target) -> Result<Vec<u8>, GpuError>,
    ) -> Result<Vec<u8>, GpuError> {
        let code = compile(source, target)?;
        if let Some(path) = self.path(source, target) {
            write_entry(&path, &code);
        }
        Ok(code)
    }
}

/// Compiles `source` for `target` with NVRTC: CUBIN or PTX bytes.
pub fn nvrtc_compile(source: &str, target: &Target) -> Result<Vec<u8>, GpuError> {
    compile(source, target)
}

/// Hands `code` to the driver (`cuModuleLoadData`, which tells a CUBIN from
/// PTX by its bytes; PTX gets its terminating NUL back).
fn load_image(
    ctx: &Arc<CudaContext>,
    target: &Target,
    mut code: Vec<u8>,
) -> Result<Arc<CudaModule>, GpuError> {
    if !target.cubin {
        code.push(0);
    }
    ctx.load_module(Ptx::from_binary(code))
        .map_err(|e| GpuError::Driver {
            call: "cuModuleLoadData",
            error: e.to_string(),
        })
}

/// Loads `code` (of `source` for `target`, from `cache` where `cached`)
/// into `ctx`; a cached entry the driver refuses is compiled again and
/// rewritten.
pub fn load_code(
    ctx: &Arc<CudaContext>,
    cache: &KernelCache,
    source: &str,
    target: &Target,
    code: Vec<u8>,
    cached: bool,
) -> Result<(Arc<CudaModule>, bool), GpuError> {
    if !cached {
        return Ok((load_image(ctx, target, code)?, false));
    }
    match load_image(ctx, target, code) {
        Ok(module) => Ok((module, true)),
        Err(e) => {
            log::warn!("cached kernels failed to load ({e}); compiling again");
            let code = cache.compile_and_store(source, target, compile)?;
            Ok((load_image(ctx, target, code)?, false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_writing_one_entry_leave_a_whole_one() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-race");
        let path = dir.join("k.cubin");
        let codes: Vec<Vec<u8>> = (0..8u8).map(|k| vec![k; 400_000]).collect();
        std::thread::scope(|s| {
            for code in &codes {
                s.spawn(|| write_entry(&path, code));
            }
        });
        let entry = read_entry(&path).expect("a whole entry");
        assert!(codes.contains(&entry));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_with_a_bad_hash_are_rejected() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-test");
        let path = dir.join("k.ptx");
        write_entry(&path, b"ptx text\nline 2");
        assert_eq!(read_entry(&path).as_deref(), Some(&b"ptx text\nline 2"[..]));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("line 2", "line 3")).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(read_entry(&path), None);
        // Machine code: any bytes, NULs and newlines included, come back whole.
        let elf: Vec<u8> = b"\x7fELF\x02\x01\0\0\n\n\0\xff".repeat(100);
        write_entry(&path, &elf);
        assert_eq!(read_entry(&path), Some(elf.clone()));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    #[test]
    fn the_target_is_machine_code_where_nvrtc_knows_the_architecture() {
        let hopper = Target::choose((9, 0), &[75, 80, 86, 89, 90, 100]);
        assert_eq!(hopper, Target::cubin((9, 0)));
        assert_eq!((hopper.arch(), hopper.is_cubin()), ("sm_90", true));
        assert_eq!(hopper.to_string(), "CUBIN sm_90");
        // An NVRTC older than the GPU: PTX, which the driver translates.
        let newer = Target::choose((12, 1), &[75, 80, 86, 89, 90]);
        assert_eq!((newer.arch(), newer.is_cubin()), ("compute_121", false));
        assert_eq!(newer.to_string(), "PTX compute_121");
        assert!(!Target::choose((9, 0), &[]).is_cubin());
    }

    #[test]
    fn the_cache_compiles_once_per_source_target_and_compiler() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-kernelcache");
        let cache = KernelCache::new(Some(dir.clone()), "nvrtc 12.8");
        let (cubin, ptx) = (Target::cubin((9, 0)), Target::ptx((9, 0)));
        let compiles = std::cell::Cell::new(0);
        let compile = |source: &str, target: &Target| {
            compiles.set(compiles.get() + 1);
            Ok(format!("code of {source} for {target}").into_bytes())
        };
        let first = cache.code("kernel a", &cubin, compile).unwrap();
        assert_eq!(first, (b"code of kernel a for CUBIN sm_90".to_vec(), false));
        let again = cache.code("kernel a", &cubin, compile).unwrap();
        assert_eq!(again, (first.0.clone(), true));
        assert_eq!(compiles.get(), 1);
        // Another source, target or compiler version is another entry; the
        // kind is in the name, so PTX is never read as machine code.
        cache.code("kernel b", &cubin, compile).unwrap();
        let (code, cached) = cache.code("kernel a", &ptx, compile).unwrap();
        assert_eq!(
            (code, cached),
            (b"code of kernel a for PTX compute_90".to_vec(), false)
        );
        cache
            .code("kernel a", &Target::cubin((8, 0)), compile)
            .unwrap();
        let (cubin_path, ptx_path) = (
            cache.path("kernel a", &cubin).unwrap(),
            cache.path("kernel a", &ptx).unwrap(),
        );
        assert_eq!(cubin_path.extension().unwrap(), "cubin");
        assert_eq!(ptx_path.extension().unwrap(), "ptx");
        let newer = KernelCache::new(Some(dir.clone()), "nvrtc 13.0");
        assert!(!newer.code("kernel a", &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 5);
        // A damaged entry is compiled again and rewritten.
        std::fs::write(&cubin_path, "damaged").unwrap();
        assert!(!cache.code("kernel a", &cubin, compile).unwrap().1);
        assert!(cache.code("kernel a", &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 6);
        // A compile error is returned and leaves no entry.
        let failing = |_: &str, target: &Target| {
            Err(GpuError::Compile {
                arch: target.arch().into(),
                log: "error: expected a ';'".into(),
            })
        };
        assert!(cache.code("kernel c", &cubin, failing).is_err());
        assert!(!cache.path("kernel c", &cubin).unwrap().exists());
        // Without a directory every request compiles.
        let none = KernelCache::new(None, "nvrtc 12.8");
        assert!(!none.code("kernel a", &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// NVRTC writes an ELF image for `sm_XY` and PTX text for `compute_XY`;
    /// a source that does not compile gives NVRTC's log. Needs NVRTC only
    /// (no device).
    #[test]
    fn nvrtc_writes_machine_code_or_ptx() {
        if !crate::gpu::nvrtc_present() {
            return;
        }
        let source = "extern \"C\" __global__ void twice(double* x) { x[threadIdx.x] *= 2.0; }";
        let archs = supported_archs().unwrap();
        assert!(!archs.is_empty());
        let cc = (archs[0] / 10, archs[0] % 10);
        let cubin = nvrtc_compile(source, &Target::cubin(cc)).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF");
        let ptx = nvrtc_compile(source, &Target::ptx(cc)).unwrap();
        let text = std::str::from_utf8(&ptx).unwrap();
        assert!(text.contains(".entry twice"), "{text}");
        assert!(!ptx.contains(&0));
        match nvrtc_compile("__global__ void broken( {", &Target::cubin(cc)) {
            Err(GpuError::Compile { arch, log }) => {
                assert_eq!(arch, format!("sm_{}{}", cc.0, cc.1));
                assert!(log.contains("error"), "{log}");
            }
            other => panic!("{other:?}"),
        }
    }
}
