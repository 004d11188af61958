//! NVRTC compilation with an on-disk cache of the compiled kernels, keyed by
//! a hash of the entry format, the source, its name expressions, the target
//! ([`Target`]: the device's machine code, CUBIN, or PTX) and the NVRTC
//! version. A kernel template's instances are compiled from NVRTC name
//! expressions (`amg_copy<float>`, `nvrtcAddNameExpression`) and loaded by
//! the names NVRTC lowers them to (`nvrtcGetLoweredName`): an entry holds
//! that table before the code ([`CompiledModule`]), so a cache hit needs no
//! NVRTC to find them. A cache entry carries a hash of its own bytes; an
//! entry that fails that check, whose table does not read back whole or does
//! not name the expressions asked for (or that the driver refuses to load)
//! is compiled again and rewritten.
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

/// (name expression, lowered name) per kernel template instance of a module,
/// in the order the expressions were given.
pub type LoweredNames = Vec<(String, String)>;

/// What a module compiles to: its code (CUBIN or PTX) and, for each name
/// expression it was compiled with, the name NVRTC lowered it to, by which
/// the driver finds that kernel template's instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledModule {
    pub code: Vec<u8>,
    pub lowered: LoweredNames,
}

impl CompiledModule {
    /// The lowered name of `expression` (e.g. `amg_copy<float>`).
    pub fn lowered_name(&self, expression: &str) -> Option<&str> {
        self.lowered
            .iter()
            .find(|(e, _)| e == expression)
            .map(|(_, l)| l.as_str())
    }

    /// Whether the table names exactly `expressions`, in their order: an
    /// entry of another set is never taken for this one.
    fn names(&self, expressions: &[String]) -> bool {
        self.lowered.len() == expressions.len()
            && self
                .lowered
                .iter()
                .zip(expressions)
                .all(|((e, _), x)| e == x)
    }
}

/// The entry format, in every key and header: format 1 held the code alone,
/// format 2 the table of lowered names before it. An entry of another format
/// has another name and another header, so it is never misread.
const FORMAT: &str = "2";

const HEADER: &[u8] = b"// fvpoisson cached kernels 2, hash ";

/// The first line of an entry's body: "names N", N table lines follow.
const TABLE: &str = "names ";

/// Whether `name` may stand in a table line: one word, no tab or newline.
fn table_word(name: &str) -> bool {
    !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c.is_control())
}

/// An entry's body: the table of lowered names (`names N`, then N lines
/// `EXPRESSION<TAB>LOWERED`), then the code; None if a name cannot stand in
/// a table line.
fn entry_body(module: &CompiledModule) -> Option<Vec<u8>> {
    let mut body = format!("{TABLE}{}\n", module.lowered.len());
    for (expression, lowered) in &module.lowered {
        if !table_word(expression) || !table_word(lowered) {
            return None;
        }
        body.push_str(&format!("{expression}\t{lowered}\n"));
    }
    let mut body = body.into_bytes();
    body.extend_from_slice(&module.code);
    Some(body)
}

/// The module an entry's body holds, or None where its table is not whole.
fn parse_body(body: &[u8]) -> Option<CompiledModule> {
    let mut rest = body;
    let mut line = || {
        let end = rest.iter().position(|&b| b == b'\n')?;
        let text = std::str::from_utf8(&rest[..end]).ok()?;
        rest = &rest[end + 1..];
        Some(text)
    };
    let count: usize = line()?.strip_prefix(TABLE)?.parse().ok()?;
    let mut lowered = Vec::new();
    for _ in 0..count {
        let (expression, name) = line()?.split_once('\t')?;
        if !table_word(expression) || !table_word(name) {
            return None;
        }
        lowered.push((expression.to_string(), name.to_string()));
    }
    Some(CompiledModule {
        code: rest.to_vec(),
        lowered,
    })
}

/// The entry's module if the hash in its header line matches its bytes and
/// its table reads back whole.
fn read_entry(path: &PathBuf) -> Option<CompiledModule> {
    let bytes = std::fs::read(path).ok()?;
    let line = bytes.iter().position(|&b| b == b'\n')?;
    let hash = std::str::from_utf8(bytes[..line].strip_prefix(HEADER)?).ok()?;
    let stored = u64::from_str_radix(hash, 16).ok()?;
    let body = &bytes[line + 1..];
    if stored != fnv1a(&[body]) {
        return None;
    }
    parse_body(body)
}

/// Writes atomically ([`crate::io::write_atomic`]: a temporary file of its
/// own per call, so ranks on threads of one process that compile the same
/// kernels at once do not write into one file); a failure only costs a
/// compile next time, so it is logged, not returned.
fn write_entry(path: &Path, module: &CompiledModule) {
    let Some(body) = entry_body(module) else {
        log::warn!("could not cache the compiled kernels: a lowered name is not one word");
        return;
    };
    let header = format!("{:016x}\n", fnv1a(&[&body]));
    let result = path
        .parent()
        .map_or(Ok(()), crate::io::create_dir_all)
        .and_then(|()| {
            crate::io::write_atomic(path, |w| {
                w.write_all(HEADER)?;
                w.write_all(header.as_bytes())?;
                w.write_all(&body)
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

/// Compiles `source` for `target`, each of `expressions` (name expressions
/// of kernel template instances, e.g. `amg_copy<float>`) instantiated and
/// its lowered name read back.
fn compile(
    source: &str,
    expressions: &[String],
    target: &Target,
) -> Result<CompiledModule, GpuError> {
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
    let expressions_c = expressions
        .iter()
        .map(|e| std::ffi::CString::new(e.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| error("a name expression holds a NUL byte".into()))?;
    for (expression, c_expression) in expressions.iter().zip(&expressions_c) {
        // SAFETY: a live program and a NUL-terminated string NVRTC copies.
        unsafe { sys::nvrtcAddNameExpression(program.0, c_expression.as_ptr()) }
            .result()
            .map_err(|e| error(format!("nvrtcAddNameExpression({expression}): {e}")))?;
    }
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
    let mut lowered = Vec::with_capacity(expressions.len());
    for (expression, c_expression) in expressions.iter().zip(&expressions_c) {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a compiled live program given this expression before
        // compiling; NVRTC points `name` at a string the program owns,
        // copied below before the program is destroyed.
        unsafe { sys::nvrtcGetLoweredName(program.0, c_expression.as_ptr(), &mut name) }
            .result()
            .map_err(|e| error(format!("nvrtcGetLoweredName({expression}): {e}")))?;
        if name.is_null() {
            return Err(error(format!("no lowered name for {expression}")));
        }
        // SAFETY: non-null, NUL-terminated, alive while `program` is.
        let name = unsafe { std::ffi::CStr::from_ptr(name) };
        lowered.push((expression.clone(), name.to_string_lossy().into_owned()));
    }
    Ok(CompiledModule { code, lowered })
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

    /// The entry of `source` compiled with `expressions` for `target`: its
    /// kind ("cubin" or "ptx") is part of the key and of the name, so a PTX
    /// entry is never read as machine code; the entry format is part of the
    /// key, so an entry of another format is never read.
    pub fn path(&self, source: &str, expressions: &[String], target: &Target) -> Option<PathBuf> {
        let ext = if target.cubin { "cubin" } else { "ptx" };
        let expressions = expressions.join("\n");
        let key = fnv1a(&[
            FORMAT.as_bytes(),
            source.as_bytes(),
            expressions.as_bytes(),
            target.arch.as_bytes(),
            ext.as_bytes(),
            self.compiler.as_bytes(),
        ]);
        self.dir
            .as_ref()
            .map(|d| d.join(format!("kernels-{}-{key:016x}.{ext}", target.arch)))
    }

    /// The module of `source` with `expressions` for `target` and whether it
    /// came from the cache: a valid entry naming every expression, else
    /// `compile(source, expressions, target)`, stored for next time.
    pub fn code(
        &self,
        source: &str,
        expressions: &[String],
        target: &Target,
        compile: impl FnOnce(&str, &[String], &Target) -> Result<CompiledModule, GpuError>,
    ) -> Result<(CompiledModule, bool), GpuError> {
        let path = self.path(source, expressions, target);
        if let Some(module) = path
            .as_ref()
            .and_then(read_entry)
            .filter(|m| m.names(expressions))
        {
            return Ok((module, true));
        }
        Ok((
            self.compile_and_store(source, expressions, target, compile)?,
            false,
        ))
    }

    /// Compiles and (over)writes the entry: for a miss, or an entry the
    /// driver refused to load.
    pub fn compile_and_store(
        &self,
        source: &str,
        expressions: &[String],
        target: &Target,
        compile: impl FnOnce(&str, &[String], &Target) -> Result<CompiledModule, GpuError>,
    ) -> Result<CompiledModule, GpuError> {
        let module = compile(source, expressions, target)?;
        if !module.names(expressions) {
            return Err(GpuError::Compile {
                arch: target.arch.clone(),
                log: "the compiled module does not name every kernel template instance".into(),
            });
        }
        if let Some(path) = self.path(source, expressions, target) {
            write_entry(&path, &module);
        }
        Ok(module)
    }
}

/// Compiles `source` for `target` with NVRTC, instantiating `expressions`:
/// CUBIN or PTX bytes and the expressions' lowered names.
pub fn nvrtc_compile(
    source: &str,
    expressions: &[String],
    target: &Target,
) -> Result<CompiledModule, GpuError> {
    compile(source, expressions, target)
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

/// Loads `module` (of `source` with `expressions` for `target`, from
/// `cache` where `cached`) into `ctx`; a cached entry the driver refuses is
/// compiled again and rewritten. Returns the loaded module, the lowered
/// names of the code loaded, and whether it came from the cache.
pub fn load_code(
    ctx: &Arc<CudaContext>,
    cache: &KernelCache,
    source: &str,
    expressions: &[String],
    target: &Target,
    module: CompiledModule,
    cached: bool,
) -> Result<(Arc<CudaModule>, LoweredNames, bool), GpuError> {
    let CompiledModule { code, lowered } = module;
    if !cached {
        return Ok((load_image(ctx, target, code)?, lowered, false));
    }
    match load_image(ctx, target, code) {
        Ok(loaded) => Ok((loaded, lowered, true)),
        Err(e) => {
            log::warn!("cached kernels failed to load ({e}); compiling again");
            let module = cache.compile_and_store(source, expressions, target, compile)?;
            Ok((load_image(ctx, target, module.code)?, module.lowered, false))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code without kernel template instances.
    fn plain(code: &[u8]) -> CompiledModule {
        CompiledModule {
            code: code.to_vec(),
            lowered: Vec::new(),
        }
    }

    #[test]
    fn threads_writing_one_entry_leave_a_whole_one() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-race");
        let path = dir.join("k.cubin");
        let modules: Vec<CompiledModule> = (0..8u8)
            .map(|k| CompiledModule {
                code: vec![k; 400_000],
                lowered: vec![(format!("k<{k}>"), format!("_Z1kILi{k}EEvv"))],
            })
            .collect();
        std::thread::scope(|s| {
            for module in &modules {
                s.spawn(|| write_entry(&path, module));
            }
        });
        let entry = read_entry(&path).expect("a whole entry");
        assert!(modules.contains(&entry));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn entries_with_a_bad_hash_are_rejected() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-test");
        let path = dir.join("k.ptx");
        write_entry(&path, &plain(b"ptx text\nline 2"));
        assert_eq!(read_entry(&path), Some(plain(b"ptx text\nline 2")));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("line 2", "line 3")).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::write(&path, "garbage").unwrap();
        assert_eq!(read_entry(&path), None);
        // Machine code: any bytes, NULs and newlines included, come back whole.
        let elf: Vec<u8> = b"\x7fELF\x02\x01\0\0\n\n\0\xff".repeat(100);
        write_entry(&path, &plain(&elf));
        assert_eq!(read_entry(&path), Some(plain(&elf)));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_entry(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    /// The lowered names come back with the code; a table that is cut short
    /// or garbled is refused even under a matching hash, and an entry of the
    /// format before (the code alone) is never read.
    #[test]
    fn entries_hold_the_lowered_names() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson-cache-names");
        let path = dir.join("k.cubin");
        let module = CompiledModule {
            code: b"\x7fELF\n\0names 9\n\t".repeat(50),
            lowered: vec![
                (
                    "amg_copy<double>".into(),
                    "_Z8amg_copyIdEviPKT_PS0_PKd".into(),
                ),
                (
                    "amg_copy<float>".into(),
                    "_Z8amg_copyIfEviPKT_PS0_PKd".into(),
                ),
            ],
        };
        write_entry(&path, &module);
        let read = read_entry(&path).expect("a whole entry");
        assert_eq!(read, module);
        assert_eq!(
            read.lowered_name("amg_copy<float>"),
            Some("_Z8amg_copyIfEviPKT_PS0_PKd")
        );
        assert_eq!(read.lowered_name("amg_copy<int>"), None);
        // A body under a hash of its own bytes: only the table can refuse it.
        let with_hash = |body: &[u8]| {
            let mut bytes = HEADER.to_vec();
            bytes.extend_from_slice(format!("{:016x}\n", fnv1a(&[body])).as_bytes());
            bytes.extend_from_slice(body);
            std::fs::write(&path, bytes).unwrap();
            read_entry(&path)
        };
        let body = entry_body(&module).unwrap();
        assert_eq!(with_hash(&body), Some(module.clone()));
        let text = String::from_utf8_lossy(&body).into_owned();
        let table_end = text.find("_PS0_PKd\n\u{7f}").unwrap() + "_PS0_PKd\n".len();
        let table = &text[..table_end];
        // Cut short: fewer lines than counted, or no code line at all.
        assert_eq!(
            with_hash(table.replace("names 2", "names 3").as_bytes()),
            None
        );
        assert_eq!(with_hash(&body[..20]), None);
        assert_eq!(with_hash(b"names 2\n"), None);
        // Garbled: no count, a line without its tab, a name with a space.
        assert_eq!(
            with_hash(table.replace("names 2", "names two").as_bytes()),
            None
        );
        assert_eq!(with_hash(table.replacen('\t', "", 1).as_bytes()), None);
        assert_eq!(
            with_hash(table.replace("<float>", "<float >").as_bytes()),
            None
        );
        assert_eq!(with_hash(b"no table\ncode"), None);
        // The format before: the header line, then the code.
        let code = b"code".to_vec();
        let old = [
            &b"// fvpoisson cached kernels, hash "[..],
            format!("{:016x}\n", fnv1a(&[&code])).as_bytes(),
            &code,
        ]
        .concat();
        std::fs::write(&path, old).unwrap();
        assert_eq!(read_entry(&path), None);
        // A name that cannot stand in a table line is not cached.
        let spaced = CompiledModule {
            code: code.clone(),
            lowered: vec![("k<unsigned int>".into(), "_Z1kIjEvv".into())],
        };
        assert_eq!(entry_body(&spaced), None);
        std::fs::remove_file(&path).unwrap();
        write_entry(&path, &spaced);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
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
        let none: &[String] = &[];
        let compile = |source: &str, expressions: &[String], target: &Target| {
            compiles.set(compiles.get() + 1);
            Ok(CompiledModule {
                code: format!("code of {source} for {target}").into_bytes(),
                lowered: expressions
                    .iter()
                    .map(|e| (e.clone(), format!("lowered_{}", e.len())))
                    .collect(),
            })
        };
        let code = |(module, cached): (CompiledModule, bool)| (module.code, cached);
        let first = code(cache.code("kernel a", none, &cubin, compile).unwrap());
        assert_eq!(first, (b"code of kernel a for CUBIN sm_90".to_vec(), false));
        let again = code(cache.code("kernel a", none, &cubin, compile).unwrap());
        assert_eq!(again, (first.0.clone(), true));
        assert_eq!(compiles.get(), 1);
        // Another source, target or compiler version is another entry; the
        // kind is in the name, so PTX is never read as machine code.
        cache.code("kernel b", none, &cubin, compile).unwrap();
        let from_ptx = code(cache.code("kernel a", none, &ptx, compile).unwrap());
        assert_eq!(
            from_ptx,
            (b"code of kernel a for PTX compute_90".to_vec(), false)
        );
        cache
            .code("kernel a", none, &Target::cubin((8, 0)), compile)
            .unwrap();
        let (cubin_path, ptx_path) = (
            cache.path("kernel a", none, &cubin).unwrap(),
            cache.path("kernel a", none, &ptx).unwrap(),
        );
        assert_eq!(cubin_path.extension().unwrap(), "cubin");
        assert_eq!(ptx_path.extension().unwrap(), "ptx");
        let newer = KernelCache::new(Some(dir.clone()), "nvrtc 13.0");
        assert!(!newer.code("kernel a", none, &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 5);
        // A damaged entry is compiled again and rewritten.
        std::fs::write(&cubin_path, "damaged").unwrap();
        assert!(!cache.code("kernel a", none, &cubin, compile).unwrap().1);
        assert!(cache.code("kernel a", none, &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 6);
        // Name expressions are part of the key; a hit gives their lowered
        // names back without compiling.
        let instances = ["k<double>".to_string(), "k<float>".to_string()];
        assert_ne!(
            cache.path("kernel a", &instances, &cubin),
            cache.path("kernel a", none, &cubin)
        );
        let (compiled, cached) = cache.code("kernel a", &instances, &cubin, compile).unwrap();
        assert!(!cached);
        let (hit, cached) = cache.code("kernel a", &instances, &cubin, compile).unwrap();
        assert!(cached);
        assert_eq!(hit, compiled);
        assert_eq!(hit.lowered_name("k<float>"), Some("lowered_8"));
        assert_eq!(compiles.get(), 7);
        // An entry whose table does not name the expressions asked for (a
        // colliding key) is compiled again.
        let instances_path = cache.path("kernel a", &instances, &cubin).unwrap();
        write_entry(&instances_path, &plain(b"other"));
        assert!(
            !cache
                .code("kernel a", &instances, &cubin, compile)
                .unwrap()
                .1
        );
        assert_eq!(compiles.get(), 8);
        // A compile error is returned and leaves no entry; so does a
        // compile that leaves an instance without its lowered name.
        let failing = |_: &str, _: &[String], target: &Target| {
            Err(GpuError::Compile {
                arch: target.arch().into(),
                log: "error: expected a ';'".into(),
            })
        };
        assert!(cache.code("kernel c", none, &cubin, failing).is_err());
        assert!(!cache.path("kernel c", none, &cubin).unwrap().exists());
        let unnamed = |_: &str, _: &[String], _: &Target| Ok(plain(b"code"));
        assert!(cache.code("kernel c", &instances, &cubin, unnamed).is_err());
        assert!(!cache.path("kernel c", &instances, &cubin).unwrap().exists());
        // Without a directory every request compiles.
        let uncached = KernelCache::new(None, "nvrtc 12.8");
        assert!(!uncached.code("kernel a", none, &cubin, compile).unwrap().1);
        assert_eq!(compiles.get(), 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// NVRTC writes an ELF image for `sm_XY` and PTX text for `compute_XY`,
    /// each template instance named by an expression under its lowered
    /// name; a source that does not compile gives NVRTC's log. Needs NVRTC
    /// only (no device).
    #[test]
    fn nvrtc_writes_machine_code_or_ptx() {
        if !crate::gpu::nvrtc_present() {
            return;
        }
        let source = "extern \"C\" __global__ void twice(double* x) { x[threadIdx.x] *= 2.0; }\n\
                      template <typename T>\n\
                      __global__ void thrice(T* __restrict__ x) { x[threadIdx.x] *= T(3); }";
        let instances = ["thrice<double>".to_string(), "thrice<float>".to_string()];
        let archs = supported_archs().unwrap();
        assert!(!archs.is_empty());
        let cc = (archs[0] / 10, archs[0] % 10);
        let cubin = nvrtc_compile(source, &instances, &Target::cubin(cc)).unwrap();
        assert_eq!(&cubin.code[..4], b"\x7fELF");
        let ptx = nvrtc_compile(source, &instances, &Target::ptx(cc)).unwrap();
        let text = std::str::from_utf8(&ptx.code).unwrap();
        assert!(text.contains(".entry twice"), "{text}");
        assert!(!ptx.code.contains(&0));
        for module in [&cubin, &ptx] {
            assert_eq!(module.lowered.len(), 2);
            let double = module.lowered_name("thrice<double>").unwrap();
            let float = module.lowered_name("thrice<float>").unwrap();
            assert!(
                double.contains("thrice") && double != float,
                "{double} {float}"
            );
        }
        let float = ptx.lowered_name("thrice<float>").unwrap();
        assert!(text.contains(&format!(".entry {float}")), "{text}");
        match nvrtc_compile("__global__ void broken( {", &[], &Target::cubin(cc)) {
            Err(GpuError::Compile { arch, log }) => {
                assert_eq!(arch, format!("sm_{}{}", cc.0, cc.1));
                assert!(log.contains("error"), "{log}");
            }
            other => panic!("{other:?}"),
        }
    }
}
