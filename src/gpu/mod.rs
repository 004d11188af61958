//! The CUDA executor (through cudarc's driver API and NVRTC, both loaded at
//! run time, so the binary builds and runs without a CUDA toolkit).
//!
//! `Gpu::new` finds the device, compiles `kernels/*.cu` for its compute
//! capability (cached on disk, see [`cache`]) and loads every kernel: an
//! `extern "C"` kernel by its name, an instance of a kernel template (one
//! source for f64 and f32, `TEMPLATE_MARK`) by the name NVRTC lowers its
//! name expression to;
//! `Gpu::launch` is the one place kernels are launched, each launch's
//! arguments checked against the kernel's declaration ([`kernel_args`]) and
//! errors naming the kernel; `Gpu::capture` records launches into a CUDA
//! graph instead. [`matrix`] holds device SpMV matrices (CSR, SELL,
//! mod-SELL), [`assembly`] the Laplacian assembled on the device into
//! mod-SELL, [`pcg`] the device-resident PCG backend, [`smooth`] the
//! smoothers (Jacobi, multicolour Gauss–Seidel, block Jacobi) as solvers and
//! PCG preconditioners, [`polynomial`] the polynomial preconditioners (f64 and
//! mixed precision), [`deflation`] subdomain deflation, [`ic`] level-scheduled incomplete Cholesky, [`amg`]
//! aggregation AMG (set-up on the device, its cycle a PCG preconditioner),
//! [`cusparse`] the cuSPARSE baseline that `fvpoisson bench` (the binary's
//! `src/bench/`) compares them with (loaded only by the bench), [`krylov`]
//! GMRES and BiCGStab for nonsymmetric systems.

/// AMG's device half, kept in its algorithm's folder (`solve::amg`).
#[path = "../solve/amg/cuda.rs"]
pub mod amg;
pub mod assembly;
pub mod bicgstab;
/// Block-IC's device half, kept in its algorithm's folder (`solve::block_jacobi`).
#[path = "../solve/block_jacobi/cuda.rs"]
pub mod block_jacobi;
pub mod cache;
pub mod cusparse;
/// Deflation's device half, kept in its algorithm's folder (`solve::deflation`).
#[path = "../solve/deflation/cuda.rs"]
pub mod deflation;
/// Eisenstat SGS-PCG's device backend, kept in its method's folder
/// (`solve::eisenstat`).
#[path = "../solve/eisenstat/cuda.rs"]
pub mod eisenstat;
/// FSAI's device application, kept in its algorithm's folder (`solve::fsai`).
#[path = "../solve/fsai/cuda.rs"]
pub mod fsai;
/// FSAI's device set-up, kept in its algorithm's folder (`solve::fsai`).
#[path = "../solve/fsai/cuda_setup.rs"]
pub mod fsai_setup;
mod graphs;
/// Incomplete Cholesky's device half, kept in its algorithm's folder (`solve::ic`).
#[path = "../solve/ic/cuda.rs"]
pub mod ic;
/// ILU(k)'s device half, kept in its algorithm's folder (`solve::ilu`).
#[path = "../solve/ilu/cuda.rs"]
pub mod ilu;
/// Jacobi's device half, kept in its algorithm's folder (`solve::jacobi`).
#[path = "../solve/jacobi/cuda.rs"]
pub mod jacobi;
pub mod kernel_args;
pub mod krylov;
pub mod levels;
pub mod matrix;
pub mod multi;
/// The truncated Neumann preconditioner's device half, kept in its
/// algorithm's folder (`solve::neumann`).
#[path = "../solve/neumann/cuda.rs"]
pub mod neumann;
pub mod pcg;
pub mod peer;
/// The polynomial preconditioners' device half, kept in their algorithm's
/// folder (`solve::polynomial`).
#[path = "../solve/polynomial/cuda.rs"]
pub mod polynomial;
pub mod registered;
mod scan;
/// The Schwarz preconditioners' device half, kept in their algorithm's
/// folder (`solve::schwarz`).
#[path = "../solve/schwarz/cuda.rs"]
pub mod schwarz;
pub mod setup;
pub mod simple;
pub mod smooth;
/// SSOR's device half, kept in its algorithm's folder (`solve::ssor`).
#[path = "../solve/ssor/cuda.rs"]
pub mod ssor;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cache::{CompiledModule, KernelCache, Target};

use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DeviceRepr, LaunchArgs, LaunchConfig, PinnedHostSlice, PushKernelArg, ValidAsZeroBits,
};
pub use kernel_args::KernelArgs;
use kernel_args::{check_arguments, parse_parameters, ParamType};

/// A kernel source under `kernels/`: its file name, the sources before it
/// in [`KERNEL_SOURCES`] whose device functions, types or macros it uses,
/// and its text.
struct KernelSource {
    file: &'static str,
    needs: &'static [&'static str],
    text: &'static str,
}

/// One [`KernelSource`] entry: the file's text is `kernels/FILE`.
macro_rules! kernel_source {
    ($file:literal needs [$($need:literal),*]) => {
        KernelSource {
            file: $file,
            needs: &[$($need),*],
            text: include_str!(concat!("../../kernels/", $file)),
        }
    };
}

/// Kernel sources, each after the sources it needs. Module k is source k
/// with the device functions, types and macros of what it needs, directly
/// or through another source ([`module_sources`]), in list order, but not
/// their kernels ([`without_kernels`]): each kernel is compiled into one
/// module, its source's, and is loaded from it at its first use. A run
/// compiles and loads the few modules it needs ([`Gpu::prefetch`]), each on
/// a thread of its own, so the slowest module to compile, not their sum, is
/// what a cold cache adds to a run; a source whose module took much longer
/// to compile than the others is split (`amg.cu`, `amg_inverse.cu` and
/// `amg_cycle.cu`; `krylov.cu` and `bicgstab.cu`; the coarsest inverse's one
/// cooperative launch, `amg_dense_fused.cu`, is apart from its per-step
/// kernels, and so is its refinement after a value update,
/// `amg_dense_refine.cu`). Every `extern "C" __global__ void NAME(` is a kernel, and so
/// is every instance that a kernel template's [`TEMPLATE_MARK`] line lists
/// ([`kernel_declarations`]).
const KERNEL_SOURCES: &[KernelSource] = &[
    kernel_source!("spmv.cu" needs []),
    kernel_source!("pcg.cu" needs ["spmv.cu"]),
    kernel_source!("assembly.cu" needs ["spmv.cu"]),
    kernel_source!("scan.cu" needs ["spmv.cu"]),
    kernel_source!("assembly_map.cu" needs ["spmv.cu"]),
    kernel_source!("smooth.cu" needs ["spmv.cu"]),
    kernel_source!("ic.cu" needs ["spmv.cu", "pcg.cu", "smooth.cu"]),
    kernel_source!("polynomial.cu" needs ["spmv.cu", "smooth.cu"]),
    kernel_source!("deflation.cu" needs ["spmv.cu", "pcg.cu"]),
    kernel_source!("amg.cu" needs ["spmv.cu"]),
    kernel_source!("amg_inverse.cu" needs ["spmv.cu", "amg.cu"]),
    kernel_source!("amg_dense_fused.cu" needs ["spmv.cu", "amg.cu", "amg_inverse.cu"]),
    kernel_source!("amg_dense_refine.cu" needs ["spmv.cu", "pcg.cu", "amg.cu", "amg_inverse.cu"]),
    kernel_source!("amg_cycle.cu" needs ["spmv.cu", "pcg.cu", "smooth.cu"]),
    kernel_source!("ilu.cu" needs ["spmv.cu", "smooth.cu"]),
    kernel_source!("krylov.cu" needs ["spmv.cu", "pcg.cu"]),
    kernel_source!("bicgstab.cu" needs ["spmv.cu", "pcg.cu", "krylov.cu"]),
    kernel_source!("block_ic.cu" needs ["spmv.cu", "smooth.cu", "ic.cu"]),
    kernel_source!("fsai_apply.cu" needs ["spmv.cu", "smooth.cu"]),
    kernel_source!("fsai.cu" needs ["spmv.cu"]),
    kernel_source!("multi.cu" needs ["spmv.cu", "pcg.cu"]),
    kernel_source!("eisenstat.cu" needs ["spmv.cu"]),
    kernel_source!("simple.cu" needs ["spmv.cu", "assembly.cu"]),
    kernel_source!("peer.cu" needs ["spmv.cu", "pcg.cu"]),
    kernel_source!("ssor.cu" needs ["spmv.cu", "smooth.cu"]),
    kernel_source!("neumann.cu" needs ["spmv.cu"]),
    kernel_source!("schwarz.cu" needs ["spmv.cu", "smooth.cu"]),
];

/// What starts a kernel's definition in a source.
const KERNEL_MARK: &str = "extern \"C\" __global__ void ";
/// A kernel's register budget, written between [`KERNEL_MARK`] and its name.
const LAUNCH_BOUNDS: &str = "__launch_bounds__(";

/// What starts a kernel template's definition in a source: a line of its
/// own naming the template's instances, followed by the template:
///
/// ```text
/// // kernel: amg_copy<double>, amg_copy_f32 = amg_copy<float>
/// template <typename T>
/// __global__ void amg_copy(int n, const T* __restrict__ src, T* __restrict__ dst, const double* done) {
/// ```
///
/// Each instance is `NAME = TEMPLATE<TYPE>`, the kernel Rust launches as
/// NAME, or `TEMPLATE<TYPE>` alone, launched by the template's own name;
/// TYPE is one word (`double`, `float`). A long list goes on over the
/// comment lines that follow, up to the `template` line. The template has
/// the one type parameter `T`. Each instance is compiled from its NVRTC name
/// expression (`TEMPLATE<TYPE>`) and loaded by the name NVRTC lowers it to
/// ([`cache::CompiledModule`]); its parameter list is the template's with
/// `T` read as TYPE ([`kernel_args::instantiate`]), so its launches are
/// checked as any kernel's. A template's body must not differ between its
/// instances beyond `T`: where the two precisions need other operations
/// (`__dadd_rn` against `__fadd_rn`), each is an `extern "C"` kernel.
const TEMPLATE_MARK: &str = "// kernel: ";

/// A kernel of the sources as the host launches it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Declaration {
    /// The name launches give.
    name: &'static str,
    /// Its source's index in [`KERNEL_SOURCES`].
    source: usize,
    /// The text of its parameter list (a template's `T` read as the
    /// instance's type).
    params: String,
    /// A template instance's NVRTC name expression (`amg_copy<float>`);
    /// None for an `extern "C"` kernel, loaded by its name.
    expression: Option<String>,
}

/// The kernels the sources define, in source order: each `extern "C"`
/// kernel, then each instance of each kernel template ([`TEMPLATE_MARK`]);
/// an error names a template whose declaration cannot be read.
fn kernel_declarations() -> Result<Vec<Declaration>, String> {
    let mut declarations = Vec::new();
    for (source, file) in KERNEL_SOURCES.iter().enumerate() {
        let text = file.text;
        for (at, _) in text.match_indices(KERNEL_MARK) {
            let rest = &text[at + KERNEL_MARK.len()..];
            let Some(rest) = past_launch_bounds(rest) else {
                continue;
            };
            let Some(open) = rest.find('(') else { continue };
            let Some(close) = rest[open..].find(')').map(|c| open + c) else {
                continue;
            };
            declarations.push(Declaration {
                name: rest[..open].trim(),
                source,
                params: rest[open + 1..close].to_string(),
                expression: None,
            });
        }
        for at in template_marks(text) {
            let instances = template_instances(&text[at + TEMPLATE_MARK.len()..])
                .map_err(|e| format!("kernels/{}: {e}", file.file))?;
            declarations.extend(instances.into_iter().map(|(name, params, expression)| {
                Declaration {
                    name,
                    source,
                    params,
                    expression: Some(expression),
                }
            }));
        }
    }
    Ok(declarations)
}

/// `text` (after a [`KERNEL_MARK`]) from the kernel's name on: past a
/// `__launch_bounds__(threads, blocks)` that may stand before it; `None`
/// where that clause does not close.
fn past_launch_bounds(text: &str) -> Option<&str> {
    match text.strip_prefix(LAUNCH_BOUNDS) {
        Some(bounds) => bounds
            .find(')')
            .map(|close| bounds[close + 1..].trim_start()),
        None => Some(text),
    }
}

/// Where [`TEMPLATE_MARK`] starts a line of `text`.
fn template_marks(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.match_indices(TEMPLATE_MARK)
        .map(|(at, _)| at)
        .filter(|&at| at == 0 || text[..at].ends_with('\n'))
}

/// The instances a kernel template declares (`text` from after its
/// [`TEMPLATE_MARK`]): for each, the name launches give, its parameter
/// list with `T` read as its type, and its name expression.
fn template_instances(text: &str) -> Result<Vec<(&str, String, String)>, String> {
    // The list may go on over comment lines of its own (an entry within
    // one line).
    let (first, mut definition) = text.split_once('\n').unwrap_or((text, ""));
    let mut lines = vec![first];
    while let Some(line) = definition.trim_start().strip_prefix("//") {
        let (continued, rest) = line.split_once('\n').unwrap_or((line, ""));
        lines.push(continued);
        definition = rest;
    }
    let list = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
    let error = |what: &str| format!("kernel template '{list}': {what}");
    let header = definition.trim_start();
    let after_template = header
        .strip_prefix("template")
        .map(str::trim_start)
        .and_then(|h| h.strip_prefix('<'))
        .ok_or_else(|| error("no `template <typename T>` on the next line"))?;
    let (parameter, after) = after_template
        .split_once('>')
        .ok_or_else(|| error("the template's parameter list does not close"))?;
    if parameter.split_whitespace().collect::<Vec<_>>() != ["typename", "T"] {
        return Err(error("the template's parameter is not `typename T`"));
    }
    let signature = after
        .trim_start()
        .strip_prefix("__global__")
        .map(str::trim_start)
        .and_then(|h| h.strip_prefix("void "))
        .ok_or_else(|| error("the template is not a `__global__ void` function"))?;
    let open = signature
        .find('(')
        .ok_or_else(|| error("no parameter list"))?;
    let close = signature[open..]
        .find(')')
        .map(|c| open + c)
        .ok_or_else(|| error("the parameter list does not close"))?;
    let template = signature[..open].trim();
    let params = &signature[open + 1..close];
    let word = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !word(template) {
        return Err(error(&format!("'{template}' is not a template name")));
    }
    if list.split(',').all(|instance| instance.trim().is_empty()) {
        return Err(error("no instances"));
    }
    lines
        .iter()
        .flat_map(|line| line.split(','))
        .filter(|instance| !instance.trim().is_empty())
        .map(|instance| {
            let (name, expression) = match instance.split_once('=') {
                Some((name, expression)) => (name.trim(), expression.trim()),
                None => (template, instance.trim()),
            };
            let ty = expression
                .strip_prefix(template)
                .and_then(|e| e.trim_start().strip_prefix('<'))
                .and_then(|e| e.strip_suffix('>'))
                .map(str::trim)
                .filter(|ty| word(ty))
                .ok_or_else(|| error(&format!("'{expression}' is not {template}<TYPE>")))?;
            if !word(name) {
                return Err(error(&format!("'{name}' is not a kernel name")));
            }
            Ok((
                name,
                kernel_args::instantiate(params, "T", ty),
                format!("{template}<{ty}>"),
            ))
        })
        .collect()
}

/// The name expressions of module `k`'s kernel template instances (those
/// of its own source), in source order: what NVRTC instantiates and lowers
/// when it compiles the module.
fn module_expressions(k: usize) -> Result<Vec<String>, String> {
    Ok(kernel_declarations()?
        .into_iter()
        .filter(|d| d.source == k)
        .filter_map(|d| d.expression)
        .collect())
}

/// The sources of module `k`, in list order: source k and every source it
/// needs, directly or through the sources it needs.
fn module_sources(k: usize) -> Vec<usize> {
    let mut held = vec![false; KERNEL_SOURCES.len()];
    held[k] = true;
    // Needs point to earlier sources, so one backward pass closes the set.
    for j in (0..=k).rev() {
        if held[j] {
            for need in KERNEL_SOURCES[j].needs {
                let i = source_index(need).expect("a source needs a listed source");
                held[i] = true;
            }
        }
    }
    (0..=k).filter(|&i| held[i]).collect()
}

/// The text of kernel module `k`: its sources in list order, those it
/// needs without their kernels.
fn module_source(k: usize) -> String {
    module_sources(k)
        .into_iter()
        .map(|i| {
            let source = &KERNEL_SOURCES[i];
            if i == k {
                format!("// ---- kernels/{}\n{}\n", source.file, source.text)
            } else {
                let helpers = without_kernels(source.text);
                format!(
                    "// ---- kernels/{}, without its kernels\n{helpers}\n",
                    source.file
                )
            }
        })
        .collect()
}

/// `text` without its kernels' definitions (each from its [`KERNEL_MARK`],
/// or a kernel template's from its [`TEMPLATE_MARK`] line, to the brace that
/// closes its body, braces in comments and literals skipped): what a module
/// takes from a source it needs. A kernel is an entry point that no other
/// code calls, so dropping it changes nothing else; compiling it again in
/// every module that needs its source cost NVRTC time (most of `pcg.cu`'s
/// and `smooth.cu`'s compile went into each module holding them). A
/// definition whose body does not close is kept from there on, for NVRTC to
/// report.
fn without_kernels(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let kernel = rest
            .find(KERNEL_MARK)
            .map(|at| (at, at + KERNEL_MARK.len()));
        // A template's mark line is a comment, which the scan skips.
        let template = template_marks(rest).next().map(|at| (at, at));
        let Some((at, scan)) = [kernel, template].into_iter().flatten().min() else {
            break;
        };
        out.push_str(&rest[..at]);
        match definition_end(&rest[scan..]) {
            Some(end) => rest = &rest[scan + end..],
            None => {
                rest = &rest[at..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of a kernel's signature and body at the start of `text` (to
/// its closing brace, or to a `;` before any brace: a declaration), or
/// None where it does not close.
fn definition_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(bytes.len(), |e| i + e);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |e| i + 2 + e + 2);
                continue;
            }
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b';' if depth == 0 => return Some(i + 1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the kernel source `file` (e.g. `"assembly.cu"`).
fn source_index(file: &str) -> Option<usize> {
    KERNEL_SOURCES.iter().position(|source| source.file == file)
}

/// A kernel module's code (CUBIN or PTX, [`Target`]): compiled (or read
/// from the cache) at most once per process and target, by whichever thread
/// asks first: a [`Gpu::prefetch`] thread or the first launch. Shared by the
/// GPUs of one architecture (a multi-GPU run compiles once).
type CodeSlot = OnceLock<Result<(CompiledModule, bool), String>>;

/// The code slots of `target`, one per module.
fn code_slots(target: &Target) -> Arc<Vec<CodeSlot>> {
    static SLOTS: Mutex<Vec<(Target, Arc<Vec<CodeSlot>>)>> = Mutex::new(Vec::new());
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, s)) = slots.iter().find(|(t, _)| t == target) {
        return s.clone();
    }
    let s: Arc<Vec<CodeSlot>> = Arc::new(KERNEL_SOURCES.iter().map(|_| OnceLock::new()).collect());
    slots.push((target.clone(), s.clone()));
    s
}

/// The code of module `k` for `target` with its template instances'
/// lowered names, from its slot (waiting for a thread compiling it) or
/// compiled into it now.
fn module_code(
    slots: &[CodeSlot],
    cache: &KernelCache,
    target: &Target,
    k: usize,
) -> Result<(CompiledModule, bool), GpuError> {
    slots[k]
        .get_or_init(|| {
            let expressions = module_expressions(k)?;
            cache
                .code(
                    &module_source(k),
                    &expressions,
                    target,
                    cache::nvrtc_compile,
                )
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|log| GpuError::Compile {
            arch: target.arch().to_string(),
            log,
        })
}

/// A kernel module loaded into one context, or why it could not be.
type ModuleSlot = OnceLock<Result<LoadedModule, String>>;

/// A kernel module in one context and the names its template instances
/// were lowered to (name expression to lowered name).
struct LoadedModule {
    module: Arc<CudaModule>,
    lowered: HashMap<String, String>,
}

/// The kernel modules of one context: compiled (or read from the cache,
/// or waited for) and loaded at most once each, by a [`Gpu::prefetch`]
/// thread or by the first launch that needs one. Shared with the prefetch
/// threads.
struct ModuleLoader {
    ctx: Arc<CudaContext>,
    /// What the modules are compiled to for the device.
    target: Target,
    cache: KernelCache,
    /// The code of each kernel module (shared by the GPUs of this target).
    code: Arc<Vec<CodeSlot>>,
    /// The modules loaded into this context, by index.
    slots: Vec<ModuleSlot>,
    /// Modules asked for by [`Gpu::prefetch`] (being compiled or loaded).
    requested: Vec<AtomicBool>,
    /// Modules a kernel has been loaded from.
    used: Vec<AtomicBool>,
    /// Whether every module loaded so far came from the disk cache.
    all_cached: AtomicBool,
}

impl ModuleLoader {
    /// Module `k`, loaded into the context at most once: its code compiled
    /// (or read from the cache, or waited for) and handed to the driver.
    /// CUBIN loads as is; PTX (the fallback, [`Target`]) is translated by
    /// the driver when loaded, seconds for the larger modules on a machine
    /// whose driver cache is cold, so a [`Gpu::prefetch`] thread loads the
    /// module as well as compiling it, and the first launch finds it loaded
    /// (or waits for that thread) instead of loading it on the run's
    /// critical path.
    fn module(&self, k: usize) -> Result<&LoadedModule, GpuError> {
        self.slots[k]
            .get_or_init(|| {
                let clock = std::time::Instant::now();
                let (code, cached) = module_code(&self.code, &self.cache, &self.target, k)
                    .map_err(|e| e.to_string())?;
                let compiled = clock.elapsed().as_secs_f64();
                let source = module_source(k);
                let expressions = module_expressions(k)?;
                let (module, lowered, cached) = cache::load_code(
                    &self.ctx,
                    &self.cache,
                    &source,
                    &expressions,
                    &self.target,
                    code,
                    cached,
                )
                .map_err(|e| e.to_string())?;
                if !cached {
                    self.all_cached.store(false, Ordering::Release);
                }
                log::debug!(
                    "kernel module {} ({} kB of source): {} {} in {compiled:.2} s, loaded by the driver in {:.2} s",
                    KERNEL_SOURCES[k].file,
                    source.len() / 1000,
                    self.target,
                    if cached { "read from the cache" } else { "compiled" },
                    clock.elapsed().as_secs_f64() - compiled
                );
                Ok(LoadedModule {
                    module,
                    lowered: lowered.into_iter().collect(),
                })
            })
            .as_ref()
            .map_err(|e| GpuError::Invalid(format!("kernel module {k}: {e}")))
    }
}

/// A kernel: the source it is in, its parameter types as declared there
/// (or why they could not be read), a template instance's name expression,
/// its function once loaded.
struct Kernel {
    source: usize,
    params: Result<Vec<ParamType>, String>,
    expression: Option<String>,
    function: OnceLock<CudaFunction>,
}

/// Threads per block of the vector kernels (a multiple of 32).
pub const VECTOR_BLOCK: u32 = 256;

/// Chunks of [`VECTOR_BLOCK`] rows a block of a chunked vector kernel takes
/// (kernels/spmv.cu `VECTOR_CHUNKS`): its partials stay one per chunk, the
/// bits of one block per chunk, while the block's barriers and ticket are
/// paid once for all its chunks.
pub const VECTOR_CHUNKS: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA driver call {call} failed: {error}")]
    Driver { call: &'static str, error: String },
    #[error("NVRTC failed to compile the kernels for {arch}: {log}")]
    Compile { arch: String, log: String },
    #[error(
        "the GPU ran out of memory allocating {bytes} bytes ({free} of {total} bytes free): \
         use a GPU with more memory, a smaller mesh, or --device cpu"
    )]
    OutOfMemory {
        bytes: usize,
        free: usize,
        total: usize,
    },
    #[error("kernel {kernel} failed: {error}")]
    Kernel { kernel: &'static str, error: String },
    #[error("{0}")]
    Invalid(String),
}

/// A device failure as a linear solve's error, its message kept: the GPU
/// solvers pass their device errors on with `?`.
impl From<GpuError> for crate::solve::SolveError {
    fn from(e: GpuError) -> Self {
        Self::Device(e.to_string())
    }
}

/// [`GpuError::Kernel`]'s error for a kernel first launched inside a
/// [`Gpu::capture`], which then loads it outside the capture and records again.
const UNLOADED_IN_CAPTURE: &str = "first launched inside a CUDA graph capture";

/// Wraps a driver result, naming the call.
fn driver<T>(call: &'static str, r: Result<T, cudarc::driver::DriverError>) -> Result<T, GpuError> {
    r.map_err(|e| GpuError::Driver {
        call,
        error: e.to_string(),
    })
}

/// `--device`: where to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    /// The GPU when there is a usable one, else the CPU (with one log line).
    Auto,
    /// The GPU; an error when there is none.
    Gpu,
    Cpu,
}

impl DeviceChoice {
    /// The GPU to use, or `None` for the CPU.
    pub fn select(self) -> Result<Option<Gpu>, GpuError> {
        match self {
            Self::Cpu => Ok(None),
            Self::Gpu => Gpu::new().map(Some),
            Self::Auto => match Gpu::new() {
                Ok(gpu) => Ok(Some(gpu)),
                Err(e @ GpuError::NoDevice(_)) => {
                    log::info!("no usable GPU ({e}); running on the CPU");
                    Ok(None)
                }
                Err(e) => {
                    log::warn!("the GPU failed to start ({e}); running on the CPU");
                    Ok(None)
                }
            },
        }
    }
}

/// Work [`Gpu::on_side_stream`] enqueued on the side stream: the device's
/// stream waits for it at [`SideWork::join`], before the work that reads
/// its results.
#[must_use = "the device's stream must wait for side-stream work before reading its results"]
pub struct SideWork {
    done: CudaEvent,
}

impl SideWork {
    /// Makes `gpu`'s stream wait (on the device; the host goes on) for the
    /// side-stream work.
    pub fn join(self, gpu: &Gpu) -> Result<(), GpuError> {
        driver("cuStreamWaitEvent", gpu.stream.wait(&self.done))
    }
}

/// One CUDA device with its stream and the compiled kernels.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The second stream of [`Gpu::on_side_stream`], made at its first use.
    side_stream: OnceLock<Arc<CudaStream>>,
    /// [`Gpu::on_side_stream`] is enqueueing: launches, copies and
    /// allocations go to the side stream.
    on_side: AtomicBool,
    kernels: HashMap<&'static str, Kernel>,
    /// The kernel modules, compiled and loaded ahead or at first use.
    modules: Arc<ModuleLoader>,
    name: String,
    compute_capability: (i32, i32),
    /// A [`Gpu::capture`] is recording.
    capturing: AtomicBool,
    /// Synchronise after every launch so asynchronous faults name their kernel
    /// (env `FVPOISSON_GPU_SYNC=1`; slow).
    sync_each_launch: bool,
    /// Device time per kernel, each launch timed alone between two events
    /// (env `FVPOISSON_GPU_PROFILE=1`, which synchronises each launch too);
    /// logged when the device is dropped.
    kernel_profile: Option<Mutex<HashMap<&'static str, KernelTime>>>,
    /// [`Gpu::cooperative_blocks`], read from the device when it opens.
    cooperative_blocks: Option<u32>,
    /// The threads [`Gpu::prefetch`] started, joined when the device is
    /// dropped: a thread still inside NVRTC or loading a module into the
    /// context while the process exits can crash it after the run's work is
    /// done (a short run with an empty kernel cache).
    prefetching: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Page-locked buffers of [`Gpu::upload_with`], allocated at its first
    /// large upload and kept for the next.
    staging: Mutex<Option<Staging>>,
}

/// Bytes of each of the two page-locked buffers through which
/// [`Gpu::upload_with`] moves large arrays: big enough that a copy runs at
/// the bus's speed, small enough that filling one overlaps the copy of the
/// other many times per array.
const STAGING_BYTES: usize = 32 << 20;

/// Arrays below this size go through one pageable copy: filling and copying
/// them in pieces would not pay for the pieces' waits.
const STAGED_MIN_BYTES: usize = 4 << 20;

/// An element type of host arrays the device takes: what
/// [`Gpu::upload`] copies a piece at a time on all cores. Only plain numbers,
/// for which every bit pattern is a value: a staging buffer handed to a fill
/// holds whatever an earlier upload left in it.
pub trait HostElement: DeviceRepr + Default + Clone + Send + Sync + sealed::Plain {}

mod sealed {
    /// Types valid for any bits (no `bool`, no enums).
    pub trait Plain {}
}

macro_rules! host_elements {
    ($($t:ty),*) => {$(
        impl sealed::Plain for $t {}
        impl HostElement for $t {}
    )*};
}
host_elements!(f64, f32, u8, i8, u16, i16, u32, i32, u64, i64, usize, isize);

/// Two page-locked host buffers and, per buffer, an event recorded behind
/// the last copy out of it (the device's event tracking is off, so the
/// buffers' own events are never recorded).
struct Staging {
    buffers: [PinnedHostSlice<u8>; 2],
    copied: [CudaEvent; 2],
}

/// A few device values copied into page-locked host memory behind the
/// queued work and read later: the copy does not wait, and by the time the
/// values are read (after a solve whose residual read-backs drained the
/// stream) they have long landed. The AMG's set-up status words and a
/// pressure right-hand side's consistency sums travel this way.
pub struct DeferredRead<T: DeviceRepr> {
    host: PinnedHostSlice<T>,
    /// Recorded behind the copy: the device's event tracking is off
    /// ([`Gpu::on_device`]), so the pinned slice's own event is never
    /// recorded and cannot say when the copy landed.
    copied: CudaEvent,
    /// A copy was queued that nobody has read yet.
    pending: std::cell::Cell<bool>,
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy> DeferredRead<T> {
    /// Room for `n` values (at least one).
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        // SAFETY: the memory is uninitialised until zeroed below, before
        // anything reads it (zero bits are a valid T); flags 0: cached (the
        // host reads it), not write-combined.
        let mut host = driver("cuMemHostAlloc", unsafe {
            gpu.ctx.alloc_pinned_with_flags::<T>(n.max(1), 0)
        })?;
        let ptr = driver("cuEventSynchronize", host.as_mut_ptr())?;
        // SAFETY: `ptr` points to the n.max(1) elements just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, n.max(1)) };
        let copied = driver(
            "cuEventCreate",
            gpu.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)),
        )?;
        Ok(Self {
            host,
            copied,
            pending: std::cell::Cell::new(false),
        })
    }

    /// Queues the copy of `from` (at most the room given) behind the work
    /// on the stream; nothing waits.
    pub fn start(&mut self, gpu: &Gpu, from: &CudaSlice<T>) -> Result<(), GpuError> {
        if from.len() > self.host.len() {
            return Err(GpuError::Invalid(format!(
                "a deferred read of {} values into room for {}",
                from.len(),
                self.host.len()
            )));
        }
        driver(
            "cuMemcpyDtoHAsync",
            gpu.stream().memcpy_dtoh(from, &mut self.host),
        )?;
        driver("cuEventRecord", self.copied.record(gpu.stream()))?;
        self.pending.set(true);
        Ok(())
    }

    /// The values of the last [`Self::start`] if nobody read them yet
    /// (waiting only for that copy), else `None`.
    pub fn take(&self) -> Result<Option<Vec<T>>, GpuError> {
        if !self.pending.replace(false) {
            return Ok(None);
        }
        driver("cuEventSynchronize", self.copied.synchronize())?;
        let values = driver("cuEventSynchronize", self.host.as_slice())?;
        Ok(Some(values.to_vec()))
    }

    /// Whether a copy is queued that nobody has read yet.
    pub fn pending(&self) -> bool {
        self.pending.get()
    }
}

impl<T: DeviceRepr> Drop for DeferredRead<T> {
    /// A copy still queued into the page-locked memory lands before the
    /// memory is freed (an owner dropped on an error between the copy and
    /// its read).
    fn drop(&mut self) {
        if self.pending.get() {
            let _ = self.copied.synchronize();
        }
    }
}

/// Launches and device time of one kernel under `FVPOISSON_GPU_PROFILE=1`.
#[derive(Clone, Copy, Debug, Default)]
struct KernelTime {
    launches: u64,
    ms: f64,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if !matches!(self.staging.get_mut(), Ok(None)) {
            // Copies out of the page-locked buffers may still be queued: they
            // must land before the buffers are freed.
            let _ = self.stream.synchronize();
            if let Some(side) = self.side_stream.get() {
                let _ = side.synchronize();
            }
        }
        let threads = std::mem::take(
            self.prefetching
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for thread in threads {
            // A thread that panicked left its error in the module's slot.
            let _ = thread.join();
        }
        let unused: Vec<&str> = (0..KERNEL_SOURCES.len())
            .filter(|&k| {
                self.modules.slots[k].get().is_some_and(|r| r.is_ok())
                    && !self.modules.used[k].load(Ordering::Acquire)
            })
            .map(|k| KERNEL_SOURCES[k].file)
            .collect();
        if !unused.is_empty() {
            // Asked for ahead but never launched from: a prefetch list
            // wider than the run (each costs a thread, not wall time).
            log::debug!(
                "kernel modules loaded but not launched from on {}: {}",
                self.name,
                unused.join(", ")
            );
        }
        let Some(profile) = self.kernel_profile.take() else {
            return;
        };
        let profile = profile.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut rows: Vec<_> = profile.into_iter().collect();
        rows.sort_by(|a, b| b.1.ms.total_cmp(&a.1.ms));
        let total: f64 = rows.iter().map(|(_, t)| t.ms).sum();
        let mut table = format!(
            "GPU kernel profile ({}; each launch timed alone, no graphs): {total:.3} ms in all\n\
             {:<44} {:>9} {:>11} {:>9} {:>6}",
            self.name, "kernel", "launches", "total ms", "mean us", "share"
        );
        for (kernel, t) in rows {
            table.push_str(&format!(
                "\n{kernel:<44} {:>9} {:>11.3} {:>9.2} {:>5.1}%",
                t.launches,
                t.ms,
                1e3 * t.ms / t.launches.max(1) as f64,
                100.0 * t.ms / total.max(f64::MIN_POSITIVE)
            ));
        }
        log::info!("{table}");
    }
}

/// [`Gpu::cooperative_blocks`] of the device of `ctx`: both attributes are
/// constants of the device, read once when it opens rather than at each
/// dense inverse.
fn cooperative_blocks_of(ctx: &CudaContext) -> Result<Option<u32>, GpuError> {
    use cudarc::driver::sys::CUdevice_attribute;
    let attribute = |a| driver("cuDeviceGetAttribute", ctx.attribute(a));
    if attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? == 0 {
        return Ok(None);
    }
    let sms = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(u32::try_from(sms).ok().filter(|&s| s > 0))
}

/// The stream-ordered memory pool `cuMemAllocAsync` takes device memory
/// from (cudarc allocates there where the device has pools); None on a
/// device without pools.
fn allocation_pool(ctx: &CudaContext) -> Result<Option<sys::CUmemoryPool>, GpuError> {
    if !ctx.has_async_alloc() {
        return Ok(None);
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local; the device of a live context.
    let r = unsafe { sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()) };
    driver("cuDeviceGetMemPool", r.result())?;
    Ok(Some(pool))
}

/// A `cuuint64_t` attribute of `pool`.
fn pool_attribute(
    pool: sys::CUmemoryPool,
    attribute: sys::CUmemPool_attribute,
) -> Result<u64, GpuError> {
    let mut value: u64 = 0;
    // SAFETY: a live pool and a local of the attribute's type (cuuint64_t).
    let r = unsafe { sys::cuMemPoolGetAttribute(pool, attribute, (&mut value as *mut u64).cast()) };
    driver("cuMemPoolGetAttribute", r.result())?;
    Ok(value)
}

/// Keeps the device memory this process frees in its pool for its next
/// allocations. By default (release threshold 0) the pool hands freed
/// memory back to the driver at every synchronisation, so each set-up,
/// re-set-up and solve mapped its arrays' pages anew: on an 8 M-cell matrix
/// the first touch of a preconditioner's fresh 0.7 GB took several times
/// the pass that wrote it. With the threshold unlimited a freed array's
/// pages serve the next array as they are; other processes see the pool's
/// memory as used while this one lives ([`Gpu::memory`] counts it free).
fn keep_freed_memory(ctx: &CudaContext) -> Result<(), GpuError> {
    use sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    let Some(pool) = allocation_pool(ctx)? else {
        return Ok(());
    };
    let mut unlimited = u64::MAX;
    // SAFETY: a live pool and a local of the attribute's type (cuuint64_t).
    let r = unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut unlimited as *mut u64).cast(),
        )
    };
    driver("cuMemPoolSetAttribute", r.result())
}

impl Gpu {
    /// The first CUDA device; `GpuError::NoDevice` when the driver library or a
    /// device is missing.
    pub fn new() -> Result<Self, GpuError> {
        Self::on_device(0)
    }

    /// CUDA devices the driver sees; `GpuError::NoDevice` when the driver
    /// library is missing or sees none.
    pub fn device_count() -> Result<usize, GpuError> {
        // SAFETY: only probes whether the shared library can be loaded.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(GpuError::NoDevice(
                "the CUDA driver library (libcuda) is not installed".into(),
            ));
        }
        let count = CudaContext::device_count()
            .map_err(|e| GpuError::NoDevice(format!("the CUDA driver reports {e}")))?;
        if count < 1 {
            return Err(GpuError::NoDevice("the CUDA driver sees no device".into()));
        }
        Ok(count as usize)
    }

    /// CUDA device `ordinal` (0-based; see [`Gpu::device_count`]), its own
    /// context, stream and loaded module (the compiled kernels come from the
    /// disk cache after the first device).
    pub fn on_device(ordinal: usize) -> Result<Self, GpuError> {
        let count = Self::device_count()?;
        if ordinal >= count {
            return Err(GpuError::Invalid(format!(
                "CUDA device {ordinal} asked for, but the driver sees {count} (0..{count})"
            )));
        }
        // SAFETY: only probes whether the NVRTC library can be loaded.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::NoDevice(
                "NVRTC (libnvrtc) is not installed, so the kernels cannot be compiled".into(),
            ));
        }
        let ctx = driver("cuCtxCreate", CudaContext::new(ordinal))?;
        // SAFETY: everything runs on the one stream below, in order, so
        // cudarc's per-buffer event tracking (an event per argument per launch)
        // is not needed (gpu::multi's transfer stream orders itself against it
        // with explicit events).
        unsafe { ctx.disable_event_tracking() };
        keep_freed_memory(&ctx)?;
        // A stream of our own rather than the legacy default stream: only
        // such a stream can be captured into a CUDA graph.
        let stream = driver("cuStreamCreate", ctx.new_stream())?;
        let name = driver("cuDeviceGetName", ctx.name())?;
        let cc = driver("cuDeviceComputeCapability", ctx.compute_capability())?;
        let target = Target::for_device(cc)?;
        log::debug!(
            "kernels compiled to {target} ({name}, compute capability {}.{})",
            cc.0,
            cc.1
        );
        let kernels = kernel_declarations()
            .map_err(GpuError::Invalid)?
            .into_iter()
            .map(|declaration| {
                let kernel = Kernel {
                    source: declaration.source,
                    params: parse_parameters(&declaration.params),
                    expression: declaration.expression,
                    function: OnceLock::new(),
                };
                (declaration.name, kernel)
            })
            .collect();
        let profile = std::env::var("FVPOISSON_GPU_PROFILE").is_ok_and(|v| v == "1");
        let modules = Arc::new(ModuleLoader {
            ctx: ctx.clone(),
            cache: KernelCache::for_nvrtc()?,
            code: code_slots(&target),
            target,
            slots: KERNEL_SOURCES.iter().map(|_| OnceLock::new()).collect(),
            requested: KERNEL_SOURCES
                .iter()
                .map(|_| AtomicBool::new(false))
                .collect(),
            used: KERNEL_SOURCES
                .iter()
                .map(|_| AtomicBool::new(false))
                .collect(),
            all_cached: AtomicBool::new(true),
        });
        let cooperative_blocks = cooperative_blocks_of(&ctx)?;
        Ok(Self {
            ctx,
            stream,
            side_stream: OnceLock::new(),
            on_side: AtomicBool::new(false),
            kernels,
            modules,
            name,
            compute_capability: cc,
            capturing: AtomicBool::new(false),
            sync_each_launch: std::env::var("FVPOISSON_GPU_SYNC").is_ok_and(|v| v == "1")
                || profile,
            kernel_profile: profile.then(Default::default),
            prefetching: Mutex::new(Vec::new()),
            cooperative_blocks,
            staging: Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }
    /// Starts compiling and loading, each on a thread of its own, the
    /// kernel modules of the sources `files` (e.g. `["pcg.cu",
    /// "amg_cycle.cu"]`) and of the sources they need (whose kernels the
    /// host code of a source launches as well: AMG's cycle runs inside
    /// PCG's loop), so that NVRTC overlaps the caller's work (reading the
    /// mesh) and each other; the first launch of a kernel waits for its
    /// module. Unknown names are ignored (logged).
    pub fn prefetch(&self, files: &[&str]) {
        let mut sources: Vec<usize> = files
            .iter()
            .filter_map(|file| {
                let k = source_index(file);
                if k.is_none() {
                    log::warn!("no kernel source {file} to compile ahead");
                }
                k
            })
            .flat_map(module_sources)
            .collect();
        sources.sort_unstable();
        sources.dedup();
        for k in sources {
            let modules = &self.modules;
            if modules.requested[k].swap(true, Ordering::AcqRel) || modules.slots[k].get().is_some()
            {
                continue;
            }
            let loader = modules.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("kernel module {k}"))
                .spawn(move || {
                    // An error stays in the slot and is reported by the
                    // launch that needs the module.
                    let _ = loader.module(k);
                });
            match spawned {
                Ok(thread) => self
                    .prefetching
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(thread),
                Err(e) => log::debug!("compiling module {k} at its first launch: {e}"),
            }
        }
    }

    /// Whether every kernel module loaded so far came from the disk cache.
    pub fn module_cached(&self) -> bool {
        self.modules.all_cached.load(Ordering::Acquire)
    }
    /// The stream this device's work goes to now: its own, or the side
    /// stream while [`Gpu::on_side_stream`] enqueues.
    pub fn stream(&self) -> &Arc<CudaStream> {
        match self.side_stream.get() {
            Some(side) if self.on_side.load(Ordering::Acquire) => side,
            _ => &self.stream,
        }
    }

    /// Runs `enqueue`, whose launches, copies and allocations on this device
    /// go to a second stream that starts after all the device's stream
    /// holds now. The device's stream goes on with what is given to it
    /// next, in parallel, until it waits at [`SideWork::join`]: for work
    /// whose results only later work reads (PISO's pressure matrix and its
    /// preconditioner's re-set-up, while the momentum equation is solved).
    pub fn on_side_stream<R>(
        &self,
        enqueue: impl FnOnce() -> Result<R, GpuError>,
    ) -> Result<(R, SideWork), GpuError> {
        if self.on_side.load(Ordering::Acquire) || self.capturing.load(Ordering::Acquire) {
            return Err(GpuError::Invalid(
                "side-stream work started inside side-stream work or a graph capture".into(),
            ));
        }
        let side = match self.side_stream.get() {
            Some(side) => side,
            None => {
                let made = self.new_stream()?;
                self.side_stream.get_or_init(|| made)
            }
        };
        driver(
            "cuStreamWaitEvent",
            side.wait(&self.stream_event(&self.stream)?),
        )?;
        self.on_side.store(true, Ordering::Release);
        let enqueued = enqueue();
        self.on_side.store(false, Ordering::Release);
        let done = self.stream_event(side)?;
        Ok((enqueued?, SideWork { done }))
    }

    /// An event recorded behind the work `stream` holds now (no timing).
    fn stream_event(&self, stream: &CudaStream) -> Result<CudaEvent, GpuError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        driver("cuEventRecord", stream.record_event(flags))
    }
    /// The device's ordinal (`Gpu::on_device`).
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }
    /// The device's UUID: tells devices apart across processes and nodes,
    /// whatever CUDA_VISIBLE_DEVICES makes of the ordinals.
    pub fn uuid(&self) -> Result<[u8; 16], GpuError> {
        let id = driver("cuDeviceGetUuid", self.ctx.uuid())?;
        Ok(id.bytes.map(|b| b as u8))
    }
    /// A second stream on this device (e.g. for transfers overlapping kernels).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        driver("cuStreamCreate", self.ctx.new_stream())
    }
    /// Returns the allocation pool's idle memory (reserved, not in use) to
    /// the driver; nothing on a device without pools.
    fn release_pool_memory(&self) -> Result<(), GpuError> {
        let Some(pool) = allocation_pool(&self.ctx)? else {
            return Ok(());
        };
        // SAFETY: a live pool; the trim releases only memory no allocation
        // holds.
        let r = unsafe { sys::cuMemPoolTrimTo(pool, 0) };
        driver("cuMemPoolTrimTo", r.result())
    }

    /// Bytes the allocation pool keeps reserved without an allocation in
    /// them (freed by this process, kept for its next allocations:
    /// [`keep_freed_memory`]); 0 on a device without pools.
    pub fn pool_idle_memory(&self) -> Result<usize, GpuError> {
        use sys::CUmemPool_attribute::{
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        };
        let Some(pool) = allocation_pool(&self.ctx)? else {
            return Ok(0);
        };
        let reserved = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        let used = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?;
        Ok(reserved.saturating_sub(used) as usize)
    }

    /// (free, total) device memory in bytes. Free counts the memory this
    /// process's pool holds without an array in it ([`keep_freed_memory`]):
    /// its allocations take that first, so free is what they can still get.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        let (free, total) = driver("cuMemGetInfo", self.ctx.mem_get_info())?;
        Ok(((free + self.pool_idle_memory()?).min(total), total))
    }

    /// Launches `kernel` with the arguments `push` adds, checking the launch.
    pub fn launch<'a>(
        &'a self,
        kernel: &'static str,
        grid: u32,
        block: u32,
        shared_bytes: u32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        self.launch_on(self.stream(), kernel, grid, block, shared_bytes, push)
    }

    /// [`Gpu::launch`] of a vector kernel: a thread for each of `n` entries
    /// (rows, faces, ...) in blocks of [`VECTOR_BLOCK`] threads
    /// ([`vector_grid`]), no shared memory.
    pub fn launch_vector<'a>(
        &'a self,
        kernel: &'static str,
        n: usize,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        self.launch(kernel, vector_grid(n), VECTOR_BLOCK, 0, push)
    }

    /// [`Gpu::launch_vector`] of a chunked vector kernel
    /// ([`chunked_vector_grid`] blocks).
    pub fn launch_chunked<'a>(
        &'a self,
        kernel: &'static str,
        n: usize,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        self.launch(kernel, chunked_vector_grid(n), VECTOR_BLOCK, 0, push)
    }

    /// [`Gpu::launch`] on `stream`, a stream of this device (e.g. a
    /// transfer overlapping the main stream's kernels).
    pub fn launch_on<'a>(
        &'a self,
        stream: &'a Arc<CudaStream>,
        kernel: &'static str,
        grid: u32,
        block: u32,
        shared_bytes: u32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let shape = LaunchShape::plain((grid, 1), block, shared_bytes);
        self.launch_any(stream, kernel, shape, push)
    }

    /// [`Gpu::launch`] with a grid of `grid.1` rows of `grid.0` blocks
    /// (`blockIdx.y` the row: one per independent system of a batch).
    pub fn launch_grid<'a>(
        &'a self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        shared_bytes: u32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let shape = LaunchShape::plain(grid, block, shared_bytes);
        self.launch_any(self.stream(), kernel, shape, push)
    }

    /// [`Gpu::launch`] as a cooperative launch: every block of the grid is
    /// resident at once (the launch fails otherwise), so the kernel may wait
    /// for the other blocks (a grid barrier). `grid` at most
    /// [`Gpu::cooperative_blocks`].
    pub fn launch_cooperative<'a>(
        &'a self,
        kernel: &'static str,
        grid: u32,
        block: u32,
        shared_bytes: u32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let shape = LaunchShape {
            cooperative: true,
            ..LaunchShape::plain((grid, 1), block, shared_bytes)
        };
        self.launch_any(self.stream(), kernel, shape, push)
    }

    /// The blocks of a cooperative launch this device runs, one per
    /// multiprocessor (any kernel of up to 1024 threads whose resources fit
    /// one block on a multiprocessor); `None`: the device has no
    /// cooperative launches.
    pub fn cooperative_blocks(&self) -> Option<u32> {
        self.cooperative_blocks
    }

    /// Every launch of [`Gpu::launch`]'s family: `kernel` on `stream` in
    /// `shape`, its arguments checked against the kernel's declaration,
    /// timed when kernels are profiled.
    fn launch_any<'a>(
        &'a self,
        stream: &'a Arc<CudaStream>,
        kernel: &'static str,
        shape: LaunchShape,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let k = self.kernel(kernel)?;
        let f = self.function_of(kernel, k)?;
        let (grid, rows) = shape.grid;
        if grid == 0 || rows == 0 {
            return Ok(());
        }
        let mut args = KernelArgs::new(stream.launch_builder(f));
        push(&mut args);
        Self::check_arguments(kernel, k, &args)?;
        let mut args = args.into_launch();
        let cfg = LaunchConfig {
            grid_dim: (grid, rows, 1),
            block_dim: (shape.block, 1, 1),
            shared_mem_bytes: shape.shared_bytes,
        };
        // SAFETY: the arguments have the number, order and types of the
        // kernel's declaration (checked above against kernels/*.cu); each
        // caller passes buffers of the sizes the kernel indexes. A
        // cooperative launch that cannot have every block resident is
        // refused by the driver (an error, nothing runs).
        let mut launch = || {
            match shape.cooperative {
                true => unsafe { args.launch_cooperative(cfg) },
                false => unsafe { args.launch(cfg) },
            }
            .map(|_| ())
            .map_err(|e| GpuError::Kernel {
                kernel,
                error: format!("launch: {e}"),
            })
        };
        if let Some(profile) = &self.kernel_profile {
            let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let start = driver("cuEventCreate", self.ctx.new_event(timing))?;
            let end = driver("cuEventCreate", self.ctx.new_event(timing))?;
            driver("cuEventRecord", start.record(stream))?;
            launch()?;
            driver("cuEventRecord", end.record(stream))?;
            end.synchronize().map_err(|e| GpuError::Kernel {
                kernel,
                error: format!("execution: {e}"),
            })?;
            let ms = driver("cuEventElapsedTime", start.elapsed_ms(&end))? as f64;
            let mut profile = profile.lock().unwrap_or_else(|e| e.into_inner());
            let t = profile.entry(kernel).or_default();
            t.launches += 1;
            t.ms += ms;
            return Ok(());
        }
        launch()?;
        if self.sync_each_launch {
            stream.synchronize().map_err(|e| GpuError::Kernel {
                kernel,
                error: format!("execution: {e}"),
            })?;
        }
        Ok(())
    }

    /// Whether every launch is followed by a synchronisation (`FVPOISSON_GPU_SYNC=1`).
    pub fn syncs_each_launch(&self) -> bool {
        self.sync_each_launch
    }

    /// Records the launches `work` makes on the stream into a CUDA graph
    /// (nothing runs) and instantiates it. `work` must only launch kernels:
    /// copies, allocations and synchronisation are not allowed while capturing.
    /// A kernel whose module is not loaded yet ends the capture, is loaded
    /// outside it, and `work` is recorded again (module loading may
    /// synchronise the context, which a capture forbids).
    pub fn capture(
        &self,
        mut work: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<CudaGraph, GpuError> {
        if self.sync_each_launch {
            return Err(GpuError::Invalid(
                "CUDA graphs cannot be captured while FVPOISSON_GPU_SYNC=1 synchronises each launch"
                    .into(),
            ));
        }
        // Each retry loads one more kernel: at most one per kernel.
        for _ in 0..=self.kernels.len() {
            match self.capture_once(&mut work) {
                Err(GpuError::Kernel { kernel, error }) if error == UNLOADED_IN_CAPTURE => {
                    self.function(kernel)?;
                }
                other => return other,
            }
        }
        Err(GpuError::Invalid(
            "a CUDA graph capture kept meeting kernels that were not loaded".into(),
        ))
    }

    fn capture_once(
        &self,
        work: &mut impl FnMut() -> Result<(), GpuError>,
    ) -> Result<CudaGraph, GpuError> {
        driver(
            "cuStreamBeginCapture",
            self.stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        )?;
        self.capturing.store(true, Ordering::Release);
        let recorded = work();
        self.capturing.store(false, Ordering::Release);
        // End the capture whatever happened, so the stream is usable again.
        let graph = driver(
            "cuStreamEndCapture",
            self.stream().end_capture(CUgraphInstantiate_flags(0)),
        );
        recorded?;
        graph?.ok_or_else(|| GpuError::Invalid("the captured CUDA graph is empty".into()))
    }

    /// Replays a graph from [`Gpu::capture`] on the stream.
    pub fn launch_graph(&self, graph: &CudaGraph) -> Result<(), GpuError> {
        driver("cuGraphLaunch", graph.launch())?;
        if self.sync_each_launch {
            self.synchronize()?;
        }
        Ok(())
    }

    /// Whether kernels on this device can read and write `peer`'s memory
    /// (NVLink or PCIe peer access).
    pub fn can_access_peer(&self, peer: &Gpu) -> Result<bool, GpuError> {
        let mut can = 0;
        // SAFETY: both handles are live devices of this process.
        let r = unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer.ctx.cu_device())
        };
        driver("cuDeviceCanAccessPeer", r.result())?;
        Ok(can != 0)
    }

    /// Lets `peer`'s kernels read and write this device's memory: the
    /// allocations of its context and of its stream-ordered pool (where
    /// cudarc allocates). Needs [`Gpu::can_access_peer`] from `peer`.
    pub fn share_memory_with(&self, peer: &Gpu) -> Result<(), GpuError> {
        peer.bind_to_thread()?;
        // SAFETY: the peer's context is current; ours is live.
        let r = unsafe { sys::cuCtxEnablePeerAccess(self.ctx.cu_ctx(), 0) };
        if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            driver("cuCtxEnablePeerAccess", r.result())?;
        }
        let mut pool = std::ptr::null_mut();
        // SAFETY: plain queries and settings of this device's default pool.
        unsafe {
            let r = sys::cuDeviceGetDefaultMemPool(&mut pool, self.ctx.cu_device());
            driver("cuDeviceGetDefaultMemPool", r.result())?;
            let access = sys::CUmemAccessDesc {
                location: sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: peer.ctx.cu_device(),
                },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            driver(
                "cuMemPoolSetAccess",
                sys::cuMemPoolSetAccess(pool, &access, 1).result(),
            )?;
        }
        self.bind_to_thread()
    }

    /// The device address of `buffer`, for kernels that follow pointers
    /// (e.g. into a peer's memory).
    pub fn address<T>(&self, buffer: &CudaSlice<T>) -> u64 {
        let (ptr, _sync) = buffer.device_ptr(self.stream());
        ptr
    }

    /// Makes the device's context current on the calling thread (libraries
    /// on the runtime API, like cuSPARSE, use the current context).
    pub fn bind_to_thread(&self) -> Result<(), GpuError> {
        driver("cuCtxSetCurrent", self.ctx.bind_to_thread())
    }

    /// What a block of `kernel` can have: the most dynamic shared memory (the
    /// device's opt-in maximum less the kernel's static shared memory) and the
    /// most threads its register use allows.
    pub fn kernel_limits(&self, kernel: &'static str) -> Result<KernelLimits, GpuError> {
        use cudarc::driver::sys::CUdevice_attribute;
        let f = self.function(kernel)?;
        let optin = driver(
            "cuDeviceGetAttribute",
            self.ctx.attribute(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            ),
        )?;
        let fixed = driver("cuFuncGetAttribute", f.shared_size_bytes())?;
        let threads = driver("cuFuncGetAttribute", f.max_threads_per_block())?;
        Ok(KernelLimits {
            dynamic_shared_bytes: (optin - fixed).max(0) as usize,
            threads_per_block: threads.max(0) as usize,
        })
    }

    /// Lets `kernel` be launched with `bytes` of dynamic shared memory per
    /// block (above 48 KB a kernel must opt in, Wikberg 2024, §4.3.1 (4.15)).
    pub fn allow_dynamic_shared(&self, kernel: &'static str, bytes: usize) -> Result<(), GpuError> {
        use cudarc::driver::sys::CUfunction_attribute;
        let bytes = i32::try_from(bytes).map_err(|_| {
            GpuError::Invalid(format!("{bytes} bytes of shared memory for {kernel}"))
        })?;
        // cuFuncSetAttribute acts on the calling thread's current context.
        self.bind_to_thread()?;
        driver(
            "cuFuncSetAttribute",
            self.function(kernel)?.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            ),
        )
    }

    /// The arguments of a launch of `kernel` against its declaration.
    fn check_arguments(
        kernel: &'static str,
        k: &Kernel,
        args: &KernelArgs,
    ) -> Result<(), GpuError> {
        let declared = k.params.as_ref().map_err(|e| GpuError::Kernel {
            kernel,
            error: format!("its declaration cannot be read: {e}"),
        })?;
        let (given, count) = args.given();
        check_arguments(declared, given, count).map_err(|e| GpuError::Kernel {
            kernel,
            error: format!("launch: {e}"),
        })
    }

    fn function(&self, kernel: &'static str) -> Result<&CudaFunction, GpuError> {
        self.function_of(kernel, self.kernel(kernel)?)
    }

    /// Kernel `kernel` of the sources.
    fn kernel(&self, kernel: &'static str) -> Result<&Kernel, GpuError> {
        self.kernels.get(kernel).ok_or_else(|| GpuError::Kernel {
            kernel,
            error: "no such kernel in the sources".into(),
        })
    }

    /// The function of kernel `k` (named `kernel`), loaded at its first use.
    fn function_of<'k>(
        &'k self,
        kernel: &'static str,
        k: &'k Kernel,
    ) -> Result<&'k CudaFunction, GpuError> {
        if let Some(f) = k.function.get() {
            return Ok(f);
        }
        if self.capturing.load(Ordering::Acquire) {
            return Err(GpuError::Kernel {
                kernel,
                error: UNLOADED_IN_CAPTURE.into(),
            });
        }
        let modules = &self.modules;
        let ahead = modules.requested[k.source].load(Ordering::Acquire)
            || modules.slots[k.source].get().is_some();
        if !ahead {
            // A run kind whose prefetch list misses a source it launches.
            log::debug!(
                "kernel module {} was not asked for ahead: compiled at the first launch of {kernel}",
                KERNEL_SOURCES[k.source].file
            );
        }
        let clock = std::time::Instant::now();
        let loaded = modules.module(k.source)?;
        modules.used[k.source].store(true, Ordering::Release);
        let waited = clock.elapsed().as_secs_f64();
        if waited > 0.01 {
            log::debug!("the first launch of {kernel} waited {waited:.2} s for its kernel module");
        }
        // A template instance is in the module under the name NVRTC
        // lowered its expression to.
        let symbol = match &k.expression {
            None => kernel,
            Some(expression) => loaded
                .lowered
                .get(expression)
                .ok_or_else(|| GpuError::Kernel {
                    kernel,
                    error: format!("the compiled module has no lowered name for {expression}"),
                })?,
        };
        let f = loaded
            .module
            .load_function(symbol)
            .map_err(|e| GpuError::Kernel {
                kernel,
                error: format!("not found in the compiled module: {e}"),
            })?;
        Ok(k.function.get_or_init(|| f))
    }

    /// Waits for the work queued on the stream in use ([`Gpu::stream`]),
    /// with the side-stream work joined into it.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        driver("cuStreamSynchronize", self.stream().synchronize())
    }

    /// `host` on the device; a large array goes through the page-locked
    /// buffers of [`Self::upload_with`] (several times the bus speed of the
    /// driver's pageable path).
    pub fn upload<T: HostElement>(&self, host: &[T]) -> Result<CudaSlice<T>, GpuError> {
        if size_of_val(host) >= STAGED_MIN_BYTES {
            return self.upload_staged(host);
        }
        self.upload_pageable(host)
    }

    /// `host` on the device by one pageable copy.
    fn upload_pageable<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, GpuError> {
        let r = self.stream().clone_htod(host);
        self.allocation("cuMemcpyHtoD", size_of_val(host), r)
    }
    /// An array of `len` elements made on the host a piece at a time and
    /// uploaded: `fill(start, piece)` writes elements `start..start +
    /// piece.len()` into `piece` (every element; it may use all cores). A
    /// large array never exists whole in host memory: its pieces are made in
    /// two page-locked buffers in turn, each copied to the device while the
    /// other is filled, so that making the array and moving it overlap and
    /// the copy runs at the bus's speed rather than through the driver's
    /// pageable path. The copies are queued on the device's stream like any
    /// upload.
    pub fn upload_with<T: HostElement>(
        &self,
        len: usize,
        fill: impl Fn(usize, &mut [T]),
    ) -> Result<CudaSlice<T>, GpuError> {
        let mut arrays =
            self.upload_units_with(len, &[1], |start, pieces| fill(start, pieces[0]))?;
        Ok(arrays.pop().expect("one array"))
    }

    /// Arrays of `units` units each, array a holding `widths[a]` elements
    /// per unit, made on the host a piece of units at a time and uploaded
    /// as [`Self::upload_with`] makes one: `fill(first, pieces)` writes
    /// units `first..first + n` of every array, `pieces[a]` holding `n ·
    /// widths[a]` elements. Entries that come from one computation per unit
    /// (a face's |S_f|, Δ coefficient and correction vector) are computed
    /// once for all the arrays that hold them.
    pub fn upload_units_with<T: HostElement>(
        &self,
        units: usize,
        widths: &[usize],
        fill: impl Fn(usize, &mut [&mut [T]]),
    ) -> Result<Vec<CudaSlice<T>>, GpuError> {
        let size = size_of::<T>();
        let per_unit: usize = widths.iter().sum();
        if units * per_unit * size < STAGED_MIN_BYTES
            || per_unit * size > STAGING_BYTES
            || !STAGING_BYTES.is_multiple_of(size)
        {
            let mut hosts: Vec<Vec<T>> = widths
                .iter()
                .map(|w| vec![T::default(); units * w])
                .collect();
            fill(
                0,
                &mut hosts.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(),
            );
            return hosts
                .iter()
                .map(|host| self.upload_pageable(host))
                .collect();
        }
        // SAFETY: every element is written by the copies below before the
        // slices are handed out (the pieces cover 0..units).
        let mut devices = widths
            .iter()
            .map(|w| {
                let r = unsafe { self.stream().alloc::<T>((units * w).max(1)) };
                self.allocation("cuMemAlloc", units * w * size, r)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut guard = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let staging = self.staging_in(&mut guard)?;
        let per_piece = STAGING_BYTES / size / per_unit;
        for (piece, first) in (0..units).step_by(per_piece).enumerate() {
            let end = (first + per_piece).min(units);
            let b = piece % 2;
            // The copy queued from this buffer two pieces ago has landed (an
            // event never recorded counts as done).
            driver("cuEventSynchronize", staging.copied[b].synchronize())?;
            let bytes = driver("cuMemHostGetPointer", staging.buffers[b].as_mut_ptr())?;
            // SAFETY: the buffer holds STAGING_BYTES bytes, page-aligned (so
            // aligned for T), no copy reads it now (waited above), and a
            // HostElement is a plain number, valid for any bits an earlier
            // piece left (the fill writes every element of this one). The
            // piece's units of all arrays fit: per_piece · per_unit elements.
            let mut rest: &mut [T] = unsafe {
                std::slice::from_raw_parts_mut(bytes.cast::<T>(), (end - first) * per_unit)
            };
            let mut pieces = Vec::with_capacity(widths.len());
            for &w in widths {
                let (piece, after) = rest.split_at_mut((end - first) * w);
                pieces.push(piece);
                rest = after;
            }
            fill(first, &mut pieces);
            for ((host, &w), device) in pieces.iter().zip(widths).zip(&mut devices) {
                let mut view = device.slice_mut(first * w..end * w);
                driver(
                    "cuMemcpyHtoDAsync",
                    self.stream().memcpy_htod(&**host, &mut view),
                )?;
            }
            driver("cuEventRecord", staging.copied[b].record(self.stream()))?;
        }
        Ok(devices)
    }

    /// `host` uploaded through [`Self::upload_with`]'s page-locked buffers,
    /// each piece copied into them by all cores.
    pub fn upload_staged<T: HostElement>(&self, host: &[T]) -> Result<CudaSlice<T>, GpuError> {
        use rayon::prelude::*;
        self.upload_with(host.len(), |start, piece| {
            let source = &host[start..start + piece.len()];
            piece
                .par_chunks_mut(1 << 16)
                .zip(source.par_chunks(1 << 16))
                .for_each(|(to, from)| to.clone_from_slice(from));
        })
    }

    /// The staging buffers kept in `slot` (the locked `staging` field),
    /// allocated there at their first use by an upload or a download.
    fn staging_in<'s>(&self, slot: &'s mut Option<Staging>) -> Result<&'s mut Staging, GpuError> {
        let staging = match slot.take() {
            Some(staging) => staging,
            None => self.new_staging()?,
        };
        Ok(slot.insert(staging))
    }

    fn new_staging(&self) -> Result<Staging, GpuError> {
        let buffer = || {
            // SAFETY: the bytes are written by a fill before any copy reads
            // them. Flags 0: cached memory, as a fill may read what it wrote.
            driver("cuMemHostAlloc", unsafe {
                self.ctx.alloc_pinned_with_flags::<u8>(STAGING_BYTES, 0)
            })
        };
        let event = || {
            driver(
                "cuEventCreate",
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)),
            )
        };
        Ok(Staging {
            buffers: [buffer()?, buffer()?],
            copied: [event()?, event()?],
        })
    }

    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        let r = self.stream().alloc_zeros(n.max(1));
        self.allocation("cuMemAlloc", n.max(1) * size_of::<T>(), r)
    }

    /// Checks the result of an allocating call; out of memory becomes
    /// [`GpuError::OutOfMemory`] with the device's free and total memory,
    /// and the pool's idle memory goes back to the driver first
    /// ([`keep_freed_memory`] keeps it otherwise): what a failed attempt
    /// reserved, and what this process freed earlier, must not stay out of
    /// reach of the work that follows the error (a smaller attempt, another
    /// process on the device).
    fn allocation<T>(
        &self,
        call: &'static str,
        bytes: usize,
        r: Result<T, cudarc::driver::DriverError>,
    ) -> Result<T, GpuError> {
        use cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        match r {
            Err(e) if e.0 == CUDA_ERROR_OUT_OF_MEMORY => {
                if let Err(trim) = self.release_pool_memory() {
                    log::debug!("returning the pool's idle memory after {e}: {trim}");
                }
                let (free, total) = self.memory().unwrap_or((0, 0));
                Err(GpuError::OutOfMemory { bytes, free, total })
            }
            r => driver(call, r),
        }
    }
    /// Sets every element to zero.
    pub fn zero<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        dev: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        driver("cuMemsetD8", self.stream().memset_zeros(dev))
    }
    /// `dev` copied to the host. A large array comes through the two
    /// page-locked buffers of [`Self::upload_with`], a piece at a time: the
    /// device copies the next piece into one buffer while all cores copy the
    /// last out of the other into the array. The driver's pageable path
    /// copies through a page-locked buffer of its own on one thread, and the
    /// first touch of a fresh array's pages then runs on that thread too
    /// (192 MB, an 8 M-cell vector field, took about 250 ms that way).
    pub fn download<T: HostElement>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>, GpuError> {
        let size = size_of::<T>();
        let n = dev.len();
        if n * size < STAGED_MIN_BYTES || !STAGING_BYTES.is_multiple_of(size) {
            return driver("cuMemcpyDtoH", self.stream().clone_dtoh(dev));
        }
        let mut host = vec![T::default(); n];
        self.download_staged(dev, &mut host)?;
        Ok(host)
    }

    /// The first `len` values of `dev` ([`Self::download`] cut short): a
    /// buffer's meaningful prefix (a buffer sized for the most it may hold,
    /// or one of no values, which is allocated one long).
    pub fn download_prefix<T: HostElement>(
        &self,
        dev: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>, GpuError> {
        let mut host = self.download(dev)?;
        host.truncate(len);
        Ok(host)
    }

    /// [`Self::download`] into `host`, of `dev`'s length: a large array
    /// through the page-locked buffers, a small one by the driver's copy.
    pub fn download_into<T: HostElement>(
        &self,
        dev: &CudaSlice<T>,
        host: &mut [T],
    ) -> Result<(), GpuError> {
        if host.len() != dev.len() {
            return Err(GpuError::Invalid(format!(
                "a download of {} values into room for {}",
                dev.len(),
                host.len()
            )));
        }
        if size_of_val(host) < STAGED_MIN_BYTES || !STAGING_BYTES.is_multiple_of(size_of::<T>()) {
            driver("cuMemcpyDtoH", self.stream().memcpy_dtoh(dev, host))?;
            return self.synchronize();
        }
        self.download_staged(dev, host)
    }

    /// `dev` into `host` (of its length) through the page-locked buffers.
    fn download_staged<T: HostElement>(
        &self,
        dev: &CudaSlice<T>,
        host: &mut [T],
    ) -> Result<(), GpuError> {
        use rayon::prelude::*;
        let per_piece = STAGING_BYTES / size_of::<T>();
        let mut guard = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let staging = self.staging_in(&mut guard)?;
        let pieces: Vec<(usize, usize)> = (0..host.len())
            .step_by(per_piece)
            .map(|first| (first, (first + per_piece).min(host.len())))
            .collect();
        // Piece k goes through buffer k % 2; the copy of piece k + 1 is queued
        // before the host reads piece k, so the two overlap.
        let mut buffers = Vec::with_capacity(2);
        for buffer in &mut staging.buffers {
            buffers.push(driver("cuMemHostGetPointer", buffer.as_mut_ptr())?.cast::<T>());
        }
        let queue = |k: usize, copied: &[CudaEvent; 2]| -> Result<(), GpuError> {
            let (first, end) = pieces[k];
            // SAFETY: the buffer holds STAGING_BYTES bytes, page-aligned (so
            // aligned for T), room for per_piece ≥ end − first elements; the
            // host read the piece it held before this copy is queued (the
            // loop below reads piece k − 1 before queueing piece k + 1).
            let to = unsafe { std::slice::from_raw_parts_mut(buffers[k % 2], end - first) };
            driver(
                "cuMemcpyDtoHAsync",
                self.stream().memcpy_dtoh(&dev.slice(first..end), to),
            )?;
            driver("cuEventRecord", copied[k % 2].record(self.stream()))
        };
        queue(0, &staging.copied)?;
        for k in 0..pieces.len() {
            if k + 1 < pieces.len() {
                queue(k + 1, &staging.copied)?;
            }
            driver("cuEventSynchronize", staging.copied[k % 2].synchronize())?;
            let (first, end) = pieces[k];
            // SAFETY: the copy into this buffer has landed (waited above) and
            // wrote its end − first elements; a HostElement is valid for any
            // bits.
            let from = unsafe { std::slice::from_raw_parts(buffers[k % 2], end - first) };
            host[first..end]
                .par_chunks_mut(1 << 16)
                .zip(from.par_chunks(1 << 16))
                .for_each(|(to, from)| to.clone_from_slice(from));
        }
        Ok(())
    }
    pub fn write<T: DeviceRepr>(&self, host: &[T], dev: &mut CudaSlice<T>) -> Result<(), GpuError> {
        driver("cuMemcpyHtoD", self.stream().memcpy_htod(host, dev))
    }
    pub fn copy<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut CudaSlice<T>,
    ) -> Result<(), GpuError> {
        driver("cuMemcpyDtoD", self.stream().memcpy_dtod(src, dst))
    }

    /// Records `work`'s device time as phase `phase` of `times`: two events
    /// on the stream around its launches, read later ([`PhaseTimes::read`]),
    /// so the host does not wait here as [`Gpu::time_ms`] does.
    pub fn time_phase(
        &self,
        times: &PhaseTimes,
        phase: usize,
        work: impl FnOnce() -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = driver("cuEventCreate", self.ctx.new_event(timing))?;
        driver("cuEventRecord", start.record(self.stream()))?;
        work()?;
        let end = driver("cuEventCreate", self.ctx.new_event(timing))?;
        driver("cuEventRecord", end.record(self.stream()))?;
        times.marks.borrow_mut().push((phase, start, end));
        Ok(())
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read + written): the
    /// median of 20 copies of `bytes` after 3 untimed ones, each timed by
    /// events. The floor of a phase that must move B bytes is B over it.
    pub fn copy_bandwidth(&self, bytes: usize) -> Result<f64, GpuError> {
        let n = (bytes / 8).max(1);
        let src: CudaSlice<f64> = self.zeros(n)?;
        let mut dst: CudaSlice<f64> = self.zeros(n)?;
        for _ in 0..3 {
            self.copy(&src, &mut dst)?;
        }
        let mut ms = (0..20)
            .map(|_| self.time_ms(|| self.copy(&src, &mut dst)))
            .collect::<Result<Vec<f64>, GpuError>>()?;
        ms.sort_by(f64::total_cmp);
        Ok(2.0 * (n * 8) as f64 / (ms[ms.len() / 2] * 1e-3) / 1e9)
    }

    /// Device time of `work` in milliseconds, between two events on the stream.
    pub fn time_ms(&self, work: impl FnOnce() -> Result<(), GpuError>) -> Result<f64, GpuError> {
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = driver("cuEventCreate", self.ctx.new_event(timing))?;
        let end = driver("cuEventCreate", self.ctx.new_event(timing))?;
        driver("cuEventRecord", start.record(self.stream()))?;
        work()?;
        driver("cuEventRecord", end.record(self.stream()))?;
        driver("cuEventSynchronize", end.synchronize())?;
        Ok(driver("cuEventElapsedTime", start.elapsed_ms(&end))? as f64)
    }
}

/// Device times of a run's phases recorded without waiting
/// ([`Gpu::time_phase`]): a multi-step set-up that timed each step with
/// [`Gpu::time_ms`] would wait for the device at every one of them, and its
/// next launches would start on an idle device.
#[derive(Default)]
pub struct PhaseTimes {
    marks: std::cell::RefCell<Vec<(usize, CudaEvent, CudaEvent)>>,
}

impl PhaseTimes {
    /// The summed milliseconds of each phase 0, 1, … (at least `phases`
    /// entries), once the last recorded phase is done.
    pub fn read(&self, phases: usize) -> Result<Vec<f64>, GpuError> {
        let marks = self.marks.borrow();
        let len = marks.iter().map(|m| m.0 + 1).max().unwrap_or(0).max(phases);
        let mut ms = vec![0.0; len];
        if let Some((_, _, last)) = marks.last() {
            driver("cuEventSynchronize", last.synchronize())?;
        }
        for (phase, start, end) in marks.iter() {
            ms[*phase] += f64::from(driver("cuEventElapsedTime", start.elapsed_ms(end))?);
        }
        Ok(ms)
    }
}

/// Per-block limits of a kernel on this device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLimits {
    pub dynamic_shared_bytes: usize,
    pub threads_per_block: usize,
}

/// The geometry of one launch: `grid.1` rows of `grid.0` blocks of `block`
/// threads, `shared_bytes` of dynamic shared memory each, and whether every
/// block must be resident at once (a cooperative launch).
#[derive(Clone, Copy)]
struct LaunchShape {
    grid: (u32, u32),
    block: u32,
    shared_bytes: u32,
    cooperative: bool,
}

impl LaunchShape {
    /// A launch that is not cooperative.
    fn plain(grid: (u32, u32), block: u32, shared_bytes: u32) -> Self {
        Self {
            grid,
            block,
            shared_bytes,
            cooperative: false,
        }
    }
}

/// An error unless `n` rows fit the kernels' 32-bit row indices; `what`
/// is the error's subject and verb ("the GPU solver takes").
pub(crate) fn check_row_count(n: usize, what: &str) -> Result<(), GpuError> {
    if n >= i32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "{what} fewer than 2^31 rows, this matrix has {n}"
        )));
    }
    Ok(())
}

/// Grid size of a vector kernel over n elements.
pub fn vector_grid(n: usize) -> u32 {
    n.div_ceil(VECTOR_BLOCK as usize) as u32
}

/// Grid size of a chunked vector kernel over n elements
/// ([`VECTOR_CHUNKS`] chunks a block); its partials are still
/// [`vector_grid`]`(n)` per sum.
pub fn chunked_vector_grid(n: usize) -> u32 {
    vector_grid(n).div_ceil(VECTOR_CHUNKS)
}

/// A number no other call in this process returns: names a set of device
/// buffers that captured CUDA graphs may hold (`LoopProjection::id`,
/// `DevicePreconditioner::graph_key`).
pub(crate) fn unique_buffers_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A null device pointer for optional kernel arguments.
pub const NULL: u64 = 0;

/// Pushes `buffer` (a device slice or a view of one), or a null pointer when
/// there is none (optional kernel arguments).
pub fn arg_or_null<'a, B>(args: &mut KernelArgs<'a>, buffer: Option<B>)
where
    B: kernel_args::KernelArg,
    LaunchArgs<'a>: PushKernelArg<B>,
{
    match buffer {
        Some(b) => args.arg(b),
        None => args.arg::<&u64>(&NULL),
    };
}

/// Whether tests must fail without a device (env `FVPOISSON_REQUIRE_GPU=1`).
pub fn gpu_required() -> bool {
    std::env::var("FVPOISSON_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Whether NVRTC can be loaded, for a test that compiles kernels without a
/// device: false (after printing `skipped: no NVRTC`) when it cannot and
/// `FVPOISSON_REQUIRE_GPU` is not 1.
pub fn nvrtc_present() -> bool {
    // SAFETY: only probes whether the shared library can be loaded.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return true;
    }
    if gpu_required() {
        panic!("FVPOISSON_REQUIRE_GPU=1 but NVRTC (libnvrtc) cannot be loaded");
    }
    println!("skipped: no NVRTC (libnvrtc is not on the library path)");
    false
}

/// The lock file GPU test processes share, in the temporary directory: each
/// holds it shared from its first [`test_device`] on, and a test that fills
/// the device's memory takes it alone ([`DeviceAlone`]), so that test
/// binaries run side by side do not see one another's allocations fail.
const TEST_LOCK_FILE: &str = "fvpoisson-gpu-tests.lock";

/// This process's handle on [`TEST_LOCK_FILE`], locked shared when first
/// opened; `None` where the file cannot be opened (tests then run without
/// the lock, as before it existed).
fn test_lock() -> Option<&'static std::fs::File> {
    static LOCK: OnceLock<Option<std::fs::File>> = OnceLock::new();
    LOCK.get_or_init(|| {
        let path = std::env::temp_dir().join(TEST_LOCK_FILE);
        let mut open = std::fs::OpenOptions::new();
        let file = open
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path))
            .ok()?;
        flock(&file, libc::LOCK_SH);
        Some(file)
    })
    .as_ref()
}

/// `flock(2)` on `file`, again after a signal; a failure leaves the lock as
/// it was (the tests then run as without it).
fn flock(file: &std::fs::File, operation: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process keeps open.
    while unsafe { libc::flock(file.as_raw_fd(), operation) } != 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
}

/// The device held alone against other test processes: from [`Self::take`]
/// until it is dropped, no other process that uses [`test_device`] starts
/// a test on it, and this one waits until those running have ended. The
/// other threads of this process are the test's to keep off (a lock of its
/// own).
pub struct DeviceAlone(());

impl DeviceAlone {
    /// Waits until no other test process holds the device, then holds it.
    pub fn take() -> Self {
        if let Some(file) = test_lock() {
            flock(file, libc::LOCK_EX);
        }
        Self(())
    }
}

impl Drop for DeviceAlone {
    fn drop(&mut self) {
        if let Some(file) = test_lock() {
            flock(file, libc::LOCK_SH);
        }
    }
}

/// The device for a test: `None` (after printing `skipped: no CUDA device`)
/// when there is none and `FVPOISSON_REQUIRE_GPU` is not 1. The process
/// holds [`TEST_LOCK_FILE`] shared from here on.
pub fn test_device() -> Option<Gpu> {
    test_lock();
    match Gpu::new() {
        Ok(gpu) => Some(gpu),
        Err(e @ GpuError::NoDevice(_)) if !gpu_required() => {
            println!("skipped: no CUDA device ({e})");
            None
        }
        Err(e) => panic!("FVPOISSON_REQUIRE_GPU=1 or device error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While a test holds the device alone, another process's shared lock
    /// on the test lock file (another open file, as another process has)
    /// is refused; once it lets go, the shared lock is granted.
    #[test]
    fn a_device_held_alone_keeps_other_test_processes_waiting() {
        use std::os::fd::AsRawFd;
        let alone = DeviceAlone::take();
        let other = std::fs::File::open(std::env::temp_dir().join(TEST_LOCK_FILE)).unwrap();
        // SAFETY: flock on a descriptor this test keeps open.
        let try_shared =
            || unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
        assert!(!try_shared());
        drop(alone);
        assert!(try_shared());
    }

    /// Every kernel name the host launches (a string literal after
    /// `launch(` or `kernel_limits(`/`allow_dynamic_shared(` in src/gpu) is
    /// defined once in the kernel sources: a typo fails here, not on a device.
    #[test]
    fn every_kernel_declaration_has_known_parameter_types() {
        let declarations = kernel_declarations().unwrap();
        assert!(declarations.len() > 200, "{}", declarations.len());
        for d in declarations {
            let params = parse_parameters(&d.params)
                .unwrap_or_else(|e| panic!("{} in {}: {e}", d.name, KERNEL_SOURCES[d.source].file));
            assert!(!params.is_empty(), "{}", d.name);
        }
    }

    /// Every instance a kernel template lists parses, with `T` read as its
    /// type; instances of one template differ in their parameter types.
    #[test]
    fn kernel_template_instances_parse() {
        let declarations = kernel_declarations().unwrap();
        let instances: Vec<&Declaration> = declarations
            .iter()
            .filter(|d| d.expression.is_some())
            .collect();
        assert!(instances.len() >= 2, "{}", instances.len());
        for d in &instances {
            let expression = d.expression.as_deref().unwrap();
            let (template, ty) = expression
                .strip_suffix('>')
                .unwrap()
                .split_once('<')
                .unwrap();
            assert!(["double", "float"].contains(&ty), "{expression}");
            assert!(
                d.name == template || d.name.starts_with(template),
                "{} = {expression}",
                d.name
            );
            let declared = parse_parameters(&d.params).unwrap();
            let pair: Vec<&&Declaration> = instances
                .iter()
                .filter(|e| {
                    e.expression
                        .as_deref()
                        .unwrap()
                        .starts_with(&format!("{template}<"))
                })
                .collect();
            assert!(pair.contains(&d), "{template}");
            for other in pair {
                let theirs = parse_parameters(&other.params).unwrap();
                assert_eq!(theirs.len(), declared.len(), "{template}");
                if other.expression != d.expression {
                    // T stands in the signature: the instances' launches
                    // are told apart by their argument types.
                    assert_ne!(theirs, declared, "{template}");
                }
            }
        }
        let copy_f32 = declarations
            .iter()
            .find(|d| d.name == "amg_copy_f32")
            .unwrap();
        assert_eq!(copy_f32.expression.as_deref(), Some("amg_copy<float>"));
        assert_eq!(
            parse_parameters(&copy_f32.params).unwrap(),
            [
                ParamType::Value(kernel_args::CType::Int),
                ParamType::Pointer(kernel_args::CType::Float),
                ParamType::Pointer(kernel_args::CType::Float),
                ParamType::Pointer(kernel_args::CType::Double)
            ]
        );
        let copy = declarations.iter().find(|d| d.name == "amg_copy").unwrap();
        assert_eq!(copy.expression.as_deref(), Some("amg_copy<double>"));
        // Each module's expressions are those of its own source's instances.
        let all: usize = (0..KERNEL_SOURCES.len())
            .map(|k| module_expressions(k).unwrap().len())
            .sum();
        assert_eq!(all, instances.len());
    }

    /// The instance list and the template under it, and what is refused.
    #[test]
    fn kernel_templates_declare_their_instances() {
        let text = "amg_copy<double>,\n//   amg_copy_f32 = amg_copy< float >\n\
                    template <typename T>\n\
                    __global__ void amg_copy(int n, const T* __restrict__ src, T* dst) {}";
        let instances = template_instances(text).unwrap();
        assert_eq!(
            instances,
            [
                (
                    "amg_copy",
                    "int n, const double* __restrict__ src, double* dst".to_string(),
                    "amg_copy<double>".to_string()
                ),
                (
                    "amg_copy_f32",
                    "int n, const float* __restrict__ src, float* dst".to_string(),
                    "amg_copy<float>".to_string()
                ),
            ]
        );
        let body = "\ntemplate <typename T>\n__global__ void k(T* x) {}";
        for (list, what) in [
            ("k<double>", ""),
            ("k2 = j<double>", "is not k<TYPE>"),
            ("k<unsigned int>", "is not k<TYPE>"),
            ("k f = k<float>", "is not a kernel name"),
            (" ", "no instances"),
        ] {
            let text = format!("{list}{body}");
            let result = template_instances(&text);
            match what {
                "" => assert!(result.is_ok(), "{list}: {result:?}"),
                _ => assert!(result.unwrap_err().contains(what), "{list}"),
            }
        }
        for (definition, what) in [
            ("\n__global__ void k(T* x) {}", "template <typename T>"),
            (
                "\ntemplate <int N>\n__global__ void k(int* x) {}",
                "typename T",
            ),
            (
                "\ntemplate <typename T>\n__device__ void k(T* x) {}",
                "__global__ void",
            ),
            (
                "\ntemplate <typename T>\n__global__ void k(T* x",
                "does not close",
            ),
        ] {
            let err = template_instances(&format!("k<double>{definition}")).unwrap_err();
            assert!(err.contains(what), "{definition}: {err}");
        }
        // The mark counts only at the start of a line.
        let marks: Vec<usize> =
            template_marks("// kernel: a<double>\nx; // kernel: b<float>\n// kernel: c<float>")
                .collect();
        assert_eq!(marks, [0, 44]);
    }

    #[test]
    fn launched_kernels_are_defined_once() {
        let declarations = kernel_declarations().unwrap();
        let names: Vec<&str> = declarations.iter().map(|d| d.name).collect();
        assert!(names.len() > 40, "{names:?}");
        for n in &names {
            assert!(
                n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{n}"
            );
            assert_eq!(names.iter().filter(|m| *m == n).count(), 1, "{n} twice");
        }
        let expressions: Vec<&str> = declarations
            .iter()
            .filter_map(|d| d.expression.as_deref())
            .collect();
        for e in &expressions {
            let twice = expressions.iter().filter(|f| *f == e).count();
            assert_eq!(twice, 1, "{e} instantiated twice");
        }
        // This module's files, and the device halves of the algorithm
        // folders (`src/solve/NAME/cuda*.rs`, compiled as `gpu::NAME`).
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("src/gpu"), root.join("src/solve")];
        let mut checked = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let device_half = path
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("cuda") && f.ends_with(".rs"));
            if path.starts_with(root.join("src/solve")) && !device_half {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Up to the unit tests (this one's own literals would match).
            let text = text.split("#[cfg(test)]").next().unwrap();
            for call in [
                "launch(",
                "launch_grid(",
                "launch_vector(",
                "kernel_limits(",
                "allow_dynamic_shared(",
            ] {
                for (at, _) in text.match_indices(call) {
                    let rest = text[at + call.len()..].trim_start();
                    let Some(literal) = rest.strip_prefix('"') else {
                        continue;
                    };
                    let name = &literal[..literal.find('"').unwrap()];
                    assert!(
                        names.contains(&name),
                        "{}: kernel {name} is not defined",
                        path.display()
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 40, "found only {checked} launches");
    }

    /// A large upload goes through the page-locked buffers in pieces (the
    /// last one short, the buffers reused several times) and lands whole;
    /// a small one takes the pageable copy. Large downloads come back
    /// through the same buffers (the arrays made piece by piece on the
    /// device side are read back by either path).
    #[test]
    fn staged_uploads_land_every_element() {
        let Some(gpu) = test_device() else { return };
        let n = 3 * STAGING_BYTES / 8 + 12_345;
        let values: Vec<f64> = (0..n).map(|i| (i as f64).sqrt() - 7.0).collect();
        assert_eq!(gpu.download(&gpu.upload(&values).unwrap()).unwrap(), values);
        let bytes: Vec<u8> = (0..STAGING_BYTES + 3).map(|i| (i % 251) as u8).collect();
        assert_eq!(gpu.download(&gpu.upload(&bytes).unwrap()).unwrap(), bytes);
        // Made a piece at a time: each piece is told where it starts.
        let made = gpu
            .upload_with(n, |start, piece: &mut [f64]| {
                for (k, v) in piece.iter_mut().enumerate() {
                    *v = ((start + k) as f64).sqrt() - 7.0;
                }
            })
            .unwrap();
        assert_eq!(gpu.download(&made).unwrap(), values);
        let small = [1u32, 2, 3];
        assert_eq!(gpu.download(&gpu.upload(&small).unwrap()).unwrap(), small);
        // Downloads of exactly one and two pieces, and of one element past
        // them, against the driver's pageable copy.
        let per_piece = STAGING_BYTES / 8;
        for len in [per_piece, per_piece + 1, 2 * per_piece, 2 * per_piece + 1] {
            let made = gpu
                .upload_with(len, |start, piece: &mut [f64]| {
                    for (k, v) in piece.iter_mut().enumerate() {
                        *v = (start + k) as f64 * 0.5 - 3.0;
                    }
                })
                .unwrap();
            let pageable = gpu.stream.clone_dtoh(&made).unwrap();
            assert_eq!(pageable.len(), len);
            assert_eq!(gpu.download(&made).unwrap(), pageable, "{len} elements");
            let mut into = vec![f64::NAN; len];
            gpu.download_into(&made, &mut into).unwrap();
            assert_eq!(into, pageable, "{len} elements into an array");
        }
        let mut small = [0u32; 3];
        gpu.download_into(&gpu.upload(&[4u32, 5, 6]).unwrap(), &mut small)
            .unwrap();
        assert_eq!(small, [4, 5, 6]);
        let mut short = [0u32; 2];
        assert!(gpu
            .download_into(&gpu.upload(&[4u32, 5, 6]).unwrap(), &mut short)
            .is_err());
    }

    /// Module k holds source k and what it needs, in list order; a source
    /// needs only sources before it; each kernel is defined in exactly one
    /// module, its source's; prefetch names resolve.
    #[test]
    fn modules_hold_their_source_and_its_needs() {
        for (k, source) in KERNEL_SOURCES.iter().enumerate() {
            let held = module_sources(k);
            assert_eq!(held.last(), Some(&k), "{}", source.file);
            assert!(held.windows(2).all(|w| w[0] < w[1]), "{}", source.file);
            for need in source.needs {
                let i = source_index(need).unwrap_or_else(|| panic!("{need}"));
                assert!(i < k, "{} needs the later {need}", source.file);
                assert!(module_sources(i).iter().all(|j| held.contains(j)));
            }
        }
        assert_eq!(module_sources(0), vec![0]);
        // The definitions of `d` in `text`.
        let definitions = |text: &str, d: &Declaration| match &d.expression {
            None => text
                .match_indices(KERNEL_MARK)
                .filter_map(|(at, _)| past_launch_bounds(&text[at + KERNEL_MARK.len()..]))
                .filter(|rest| rest.starts_with(&format!("{}(", d.name)))
                .count(),
            Some(e) => text
                .matches(&format!("__global__ void {}(", &e[..e.find('<').unwrap()]))
                .count(),
        };
        let modules: Vec<String> = (0..KERNEL_SOURCES.len()).map(module_source).collect();
        for d in kernel_declarations().unwrap() {
            for (k, text) in modules.iter().enumerate() {
                assert_eq!(
                    definitions(text, &d),
                    usize::from(k == d.source),
                    "{} in module {k}",
                    d.name
                );
            }
        }
        // What a module takes from the sources it needs is all of their text
        // but their kernels: the device functions are still there.
        let amg_cycle = &modules[source_index("amg_cycle.cu").unwrap()];
        assert!(amg_cycle.contains("gated_off("), "smooth.cu's gate");
        assert!(amg_cycle.contains("modsell_row"), "spmv.cu's row helper");
        assert_eq!(source_index("spmv.cu"), Some(0));
        for file in ["assembly.cu", "amg.cu", "amg_cycle.cu", "simple.cu"] {
            assert!(source_index(file).is_some(), "{file}");
        }
        assert_eq!(source_index("nothing.cu"), None);
    }

    #[test]
    fn chunked_kernels_take_as_many_chunks_as_their_grids_assume() {
        let spmv = KERNEL_SOURCES[source_index("spmv.cu").unwrap()].text;
        let chunks = regex::Regex::new(r"#define VECTOR_CHUNKS (\d+)")
            .unwrap()
            .captures(spmv)
            .expect("spmv.cu defines VECTOR_CHUNKS")[1]
            .parse::<u32>()
            .unwrap();
        assert_eq!(chunks, VECTOR_CHUNKS);
        // Every chunk of n rows has a block: grid × chunks × block ≥ n.
        for n in [1, 255, 256, 257, 1023, 1024, 1025, 1_000_000] {
            let covered = chunked_vector_grid(n) * VECTOR_CHUNKS * VECTOR_BLOCK;
            assert!(covered as usize >= n, "{n}");
            assert!((covered as usize) < n + (VECTOR_CHUNKS * VECTOR_BLOCK) as usize);
        }
    }

    #[test]
    fn kernels_are_cut_out_whole() {
        let text = "#define N 4\n\
            __device__ int f(int x) { return x + N; }\n\
            extern \"C\" __global__ void k1(int* a) {\n\
                // a brace in a comment: {\n\
                /* and } here */ if (a) { a[0] = f('}'); }\n\
                const char* s = \"}{\\\"}\";\n\
            }\n\
            struct S { int v; };\n\
            extern \"C\" __global__ void k2(int* a);\n\
            extern \"C\" __global__ void k3(int* a) { a[1] = 2; }\n\
            __device__ int g() { return 1; }\n\
            // kernel: k4<double>, k4_f32 = k4<float>\n\
            template <typename T>\n\
            __global__ void k4(T* a) { if (a) { a[2] = T(3); } }\n\
            template <typename T> __device__ T h(T x) { return x; }\n\
            // kernel: k5<double>\n\
            template <typename T>\n\
            __global__ void k5(T* a) { a[3] = h('{'); }\n";
        let helpers = without_kernels(text);
        assert!(!helpers.contains("__global__"), "{helpers}");
        assert!(!helpers.contains("// kernel:"), "{helpers}");
        assert!(
            !helpers.contains("a[2]") && !helpers.contains("a[3]"),
            "{helpers}"
        );
        assert!(
            helpers.contains("template <typename T> __device__ T h(T x) { return x; }"),
            "{helpers}"
        );
        for kept in [
            "#define N 4",
            "__device__ int f(int x) { return x + N; }",
            "struct S { int v; };",
            "__device__ int g() { return 1; }",
        ] {
            assert!(helpers.contains(kept), "{kept} in {helpers}");
        }
        assert!(!helpers.contains("a[1] = 2") && !helpers.contains("brace in a comment"));
        // A body that never closes is kept for NVRTC to report.
        let open = "__device__ int f();\nextern \"C\" __global__ void k(int* a) { if (a) {";
        assert_eq!(without_kernels(open), open);
        assert_eq!(without_kernels("int x;"), "int x;");
    }

    /// Every module compiles with NVRTC to machine code for an architecture
    /// it supports (Hopper's where it can), and each kernel is an entry
    /// point of exactly one of them. Needs NVRTC, not a device.
    #[test]
    fn every_module_compiles_and_defines_each_kernel_once() {
        if !nvrtc_present() {
            return;
        }
        let archs = cache::supported_archs().unwrap();
        let arch = if archs.contains(&90) {
            90
        } else {
            archs[archs.len() - 1]
        };
        let target = Target::cubin((arch / 10, arch % 10));
        let images: Vec<CompiledModule> = (0..KERNEL_SOURCES.len())
            .map(|k| {
                let clock = std::time::Instant::now();
                let expressions = module_expressions(k).unwrap();
                let image = cache::nvrtc_compile(&module_source(k), &expressions, &target)
                    .unwrap_or_else(|e| panic!("{}: {e}", KERNEL_SOURCES[k].file));
                println!(
                    "{:<16} {} in {:.2} s",
                    KERNEL_SOURCES[k].file,
                    target,
                    clock.elapsed().as_secs_f64()
                );
                image
            })
            .collect();
        let holds = |image: &[u8], symbol: &[u8]| image.windows(symbol.len()).any(|w| w == symbol);
        for d in kernel_declarations().unwrap() {
            // A template instance's symbol is its lowered name.
            let name = match &d.expression {
                None => d.name,
                Some(e) => images[d.source]
                    .lowered_name(e)
                    .unwrap_or_else(|| panic!("{e} has no lowered name")),
            };
            // A symbol's name in the ELF string table, between NULs.
            let symbol = [&b"\0"[..], name.as_bytes(), b"\0"].concat();
            let holding: Vec<usize> = (0..images.len())
                .filter(|&k| holds(&images[k].code, &symbol))
                .collect();
            assert_eq!(holding, vec![d.source], "{}", d.name);
        }
    }

    /// The names a source defines at file scope for other sources: macros,
    /// types, functions and constants (kernels are launched, not called).
    fn file_scope_names(text: &str) -> std::collections::HashSet<String> {
        let mut top = String::new();
        let mut depth = 0usize;
        for ch in text.chars() {
            match ch {
                '{' => {
                    if depth == 0 {
                        top.push('{');
                    }
                    depth += 1;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        top.push_str("}\n");
                    }
                }
                _ if depth == 0 => top.push(ch),
                _ => {}
            }
        }
        let patterns = [
            r"#define\s+(\w+)",
            r"\b(?:struct|class|union|enum)\s+(\w+)",
            r"\btypedef\b[^;]*\b(\w+)\s*;",
            r"\busing\s+(\w+)\s*=",
            r"\b(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?\{",
            r"(?:constexpr|__constant__|const)\s+[\w:<> ]+?\s(\w+)\s*(?:=|\[)",
        ];
        let kernels: std::collections::HashSet<&str> =
            regex::Regex::new(r#"__global__ void (\w+)"#)
                .unwrap()
                .captures_iter(text)
                .map(|c| c.get(1).unwrap().as_str())
                .collect();
        let mut names = std::collections::HashSet::new();
        for (i, pattern) in patterns.iter().enumerate() {
            let scope = if i == 0 { text } else { top.as_str() };
            for c in regex::Regex::new(pattern).unwrap().captures_iter(scope) {
                let name = c.get(1).unwrap().as_str();
                if !kernels.contains(name)
                    && !["if", "for", "while", "switch", "return"].contains(&name)
                {
                    names.insert(name.to_string());
                }
            }
        }
        names
    }

    /// Each source's `needs` lists every other source whose file-scope
    /// names it uses (macros, types, device functions, constants): a module
    /// compiled without one would fail only on a device, with NVRTC.
    #[test]
    fn sources_declare_what_they_use() {
        let comments = regex::Regex::new(r"(?s)//[^\n]*|/\*.*?\*/").unwrap();
        let word = regex::Regex::new(r"\b\w+\b").unwrap();
        let texts: Vec<String> = KERNEL_SOURCES
            .iter()
            .map(|s| comments.replace_all(s.text, "").into_owned())
            .collect();
        let defined: Vec<_> = texts.iter().map(|t| file_scope_names(t)).collect();
        for (k, source) in KERNEL_SOURCES.iter().enumerate() {
            let used: std::collections::HashSet<&str> =
                word.find_iter(&texts[k]).map(|m| m.as_str()).collect();
            let held = module_sources(k);
            for (j, other) in KERNEL_SOURCES.iter().enumerate().filter(|&(j, _)| j != k) {
                let from_other: Vec<&String> = defined[j]
                    .iter()
                    .filter(|n| used.contains(n.as_str()) && !defined[k].contains(*n))
                    .collect();
                if !from_other.is_empty() {
                    assert!(
                        held.contains(&j),
                        "kernels/{} uses {from_other:?} of kernels/{} but does not need it",
                        source.file,
                        other.file
                    );
                }
            }
        }
    }
}
