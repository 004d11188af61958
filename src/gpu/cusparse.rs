//! cuSPARSE's SpMV (generic API, through cudarc's bindings) on the device
//! buffers of our own CSR and SELL matrices, for `fvpoisson bench`: the
//! baseline our kernels are compared with, on identical data.
//!
//! libcusparse is loaded at run time, and only by [`Cusparse::load`]: the
//! binary neither links it nor needs it. cudarc's loader asks the dynamic
//! loader (`LD_LIBRARY_PATH`, then the system's library cache) for
//! `libcusparse.so`, `libcusparse.so.13`, `libcusparse.so.12`, ... (the list of
//! `cudarc::get_lib_name_candidates("cusparse")`); where none is found there,
//! `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64` are tried
//! by full path. cudarc panics on a missing library or symbol, so every entry
//! point used here is looked up before the first call, and a missing library
//! is an `Err` naming what was tried.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::ptr::null_mut;

use cudarc::cusparse::sys as cs;
use cudarc::driver::{CudaSlice, DevicePtr};

use super::matrix::DeviceMatrix;
use super::Gpu;

/// Every cuSPARSE function called here (cuSPARSE 12.1 or newer has them).
const SYMBOLS: [&str; 10] = [
    "cusparseCreate",
    "cusparseDestroy",
    "cusparseSetStream",
    "cusparseGetVersion",
    "cusparseCreateCsr",
    "cusparseCreateSlicedEll",
    "cusparseDestroySpMat",
    "cusparseCreateDnVec",
    "cusparseDestroyDnVec",
    "cusparseSpMV_bufferSize",
];
/// Called as well, looked up separately: the SpMV itself and the optional
/// preprocessing step (cuSPARSE 12.4 and newer).
const SPMV: &str = "cusparseSpMV";
const PREPROCESS: &str = "cusparseSpMV_preprocess";

/// Directories tried by full path when the loader's path has no libcusparse.
fn toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|root| PathBuf::from(root).join("lib64"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs
}

/// Makes libcusparse loadable by cudarc, or says why it is not.
fn load_library() -> Result<(), String> {
    // SAFETY: loading the library runs its initialisers, which is what
    // using it requires.
    if unsafe { cs::is_culib_present() } {
        return Ok(());
    }
    let names = cudarc::get_lib_name_candidates("cusparse");
    let mut errors = Vec::new();
    for dir in toolkit_dirs() {
        for name in &names {
            let path = dir.join(name);
            if !path.is_file() {
                continue;
            }
            // SAFETY: as above. The handle is leaked so that the library stays
            // loaded; cudarc then finds it by its soname.
            match unsafe { libloading::Library::new(&path) } {
                Ok(lib) => {
                    std::mem::forget(lib);
                    if unsafe { cs::is_culib_present() } {
                        return Ok(());
                    }
                    errors.push(format!(
                        "{} loads but not under the names cudarc asks for",
                        path.display()
                    ));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    let tried = names.join(", ");
    Err(if errors.is_empty() {
        format!(
            "no libcusparse on the loader's path (LD_LIBRARY_PATH, ld.so.cache) nor in {}; \
             tried {tried}",
            toolkit_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!(
            "libcusparse could not be loaded: {}; set LD_LIBRARY_PATH to the directory of \
             libcusparse and its dependencies",
            errors.join("; ")
        )
    })
}

/// A cuSPARSE status as a result naming the call.
fn check(call: &str, status: cs::cusparseStatus_t) -> Result<(), String> {
    match status {
        cs::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS => Ok(()),
        other => Err(format!("{call}: {other:?}")),
    }
}

/// A device pointer as the `void *` cuSPARSE takes.
fn ptr<T>(gpu: &Gpu, buffer: &CudaSlice<T>) -> *mut c_void {
    let (p, _no_tracking) = buffer.device_ptr(gpu.stream());
    p as usize as *mut c_void
}

/// A cuSPARSE handle on the GPU's stream.
pub struct Cusparse<'g> {
    gpu: &'g Gpu,
    handle: cs::cusparseHandle_t,
    version: i32,
    preprocess: bool,
}

impl<'g> Cusparse<'g> {
    /// Loads libcusparse and creates a handle; `Err` (a sentence) when the
    /// library or one of its entry points is missing or does not start.
    pub fn load(gpu: &'g Gpu) -> Result<Self, String> {
        load_library()?;
        // SAFETY: `load_library` found the library, so `culib` does not panic.
        let lib = unsafe { cs::culib() };
        // SAFETY: a symbol lookup; the type is not used.
        let has =
            |name: &str| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok();
        let missing: Vec<&str> = SYMBOLS
            .into_iter()
            .chain([SPMV])
            .filter(|s| !has(s))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "libcusparse lacks {} (cuSPARSE 12.1 or newer is needed)",
                missing.join(", ")
            ));
        }
        gpu.bind_to_thread().map_err(|e| format!("cuSPARSE: {e}"))?;
        let mut handle = null_mut();
        // SAFETY: cusparseCreate writes a handle; every symbol was checked.
        check("cusparseCreate", unsafe { cs::cusparseCreate(&mut handle) })?;
        let mut this = Self {
            gpu,
            handle,
            version: 0,
            preprocess: has(PREPROCESS),
        };
        let stream = gpu.stream().cu_stream() as cs::cudaStream_t;
        // SAFETY: a live handle and the GPU's live stream.
        check("cusparseSetStream", unsafe {
            cs::cusparseSetStream(handle, stream)
        })?;
        // SAFETY: a live handle.
        check("cusparseGetVersion", unsafe {
            cs::cusparseGetVersion(handle, &mut this.version)
        })?;
        Ok(this)
    }

    /// "major.minor.patch" of the loaded library.
    pub fn version(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100)
    }
}

impl Drop for Cusparse<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle is live; descriptors borrowing it are gone.
        unsafe { cs::cusparseDestroy(self.handle) };
    }
}

/// A dense vector descriptor on a device buffer.
pub struct DenseVector<'v> {
    descr: cs::cusparseDnVecDescr_t,
    _buffer: PhantomData<&'v CudaSlice<f64>>,
}

impl<'v> DenseVector<'v> {
    pub fn new(lib: &Cusparse, v: &'v CudaSlice<f64>) -> Result<Self, String> {
        let mut descr = null_mut();
        // SAFETY: `v` outlives the descriptor (the lifetime 'v).
        check("cusparseCreateDnVec", unsafe {
            cs::cusparseCreateDnVec(
                &mut descr,
                v.len() as i64,
                ptr(lib.gpu, v),
                cs::cudaDataType::CUDA_R_64F,
            )
        })?;
        Ok(Self {
            descr,
            _buffer: PhantomData,
        })
    }

    /// One descriptor per buffer.
    pub fn all(lib: &Cusparse, buffers: &'v [CudaSlice<f64>]) -> Result<Vec<Self>, String> {
        buffers.iter().map(|b| Self::new(lib, b)).collect()
    }
}

impl Drop for DenseVector<'_> {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreateDnVec, destroyed once.
        unsafe { cs::cusparseDestroyDnVec(self.descr) };
    }
}

/// Which cuSPARSE SpMV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CusparseKind {
    CsrAlg1,
    CsrAlg2,
    /// Sliced ELL with the slice height of our SELL.
    SellAlg1,
}

impl CusparseKind {
    pub const ALL: [Self; 3] = [Self::CsrAlg1, Self::CsrAlg2, Self::SellAlg1];

    pub fn name(self) -> &'static str {
        match self {
            Self::CsrAlg1 => "cuSPARSE CSR ALG1",
            Self::CsrAlg2 => "cuSPARSE CSR ALG2",
            Self::SellAlg1 => "cuSPARSE SELL",
        }
    }

    fn algorithm(self) -> cs::cusparseSpMVAlg_t {
        match self {
            Self::CsrAlg1 => cs::cusparseSpMVAlg_t::CUSPARSE_SPMV_CSR_ALG1,
            Self::CsrAlg2 => cs::cusparseSpMVAlg_t::CUSPARSE_SPMV_CSR_ALG2,
            Self::SellAlg1 => cs::cusparseSpMVAlg_t::CUSPARSE_SPMV_SELL_ALG1,
        }
    }
}

/// A cuSPARSE SpMV set up on the buffers of one of our device matrices
/// (CSR for the CSR kinds, SELL for the sliced ELL kind): y = A x.
pub struct CusparseSpmv<'a> {
    lib: &'a Cusparse<'a>,
    descr: cs::cusparseSpMatDescr_t,
    algorithm: cs::cusparseSpMVAlg_t,
    workspace: CudaSlice<u8>,
    /// 32-bit copy of the row or slice offsets, where cuSPARSE refused our
    /// 64-bit offsets next to 32-bit column indices.
    _offsets32: Option<CudaSlice<i32>>,
    /// What the set-up chose (offsets, preprocessing), for the bench note.
    pub note: String,
    _matrix: PhantomData<&'a DeviceMatrix>,
}

/// cusparseSpMV and cusparseSpMV_preprocess (the same arguments).
type SpmvCall = unsafe fn(
    cs::cusparseHandle_t,
    cs::cusparseOperation_t,
    *const c_void,
    cs::cusparseConstSpMatDescr_t,
    cs::cusparseConstDnVecDescr_t,
    *const c_void,
    cs::cusparseDnVecDescr_t,
    cs::cudaDataType,
    cs::cusparseSpMVAlg_t,
    *mut c_void,
) -> cs::cusparseStatus_t;

/// Scalars of y = alpha A x + beta y.
const ALPHA: f64 = 1.0;
const BETA: f64 = 0.0;

impl<'a> CusparseSpmv<'a> {
    /// Sets up `kind` on `m` (which must be CSR for the CSR kinds, SELL for
    /// the SELL kind), checking it runs on `x` → `y`. 64-bit offsets are
    /// tried first (our buffers as they are), then a 32-bit copy.
    pub fn new(
        lib: &'a Cusparse<'a>,
        kind: CusparseKind,
        m: &'a DeviceMatrix,
        nnz: usize,
        x: &DenseVector,
        y: &DenseVector,
    ) -> Result<Self, String> {
        let wide = Self::try_new(lib, kind, m, nnz, None, x, y);
        let wide_error = match wide {
            Ok(mut s) => {
                s.note = format!("64-bit offsets, our buffers, {}", s.note);
                return Ok(s);
            }
            Err(e) => e,
        };
        let offsets = Self::offsets32(lib.gpu, m)?;
        let mut s = Self::try_new(lib, kind, m, nnz, Some(offsets), x, y)
            .map_err(|e| format!("64-bit offsets: {wide_error}; 32-bit offsets: {e}"))?;
        s.note = format!("32-bit offset copy (64-bit: {wide_error}), {}", s.note);
        Ok(s)
    }

    /// The row (CSR) or slice (SELL) offsets of `m` as 32-bit integers.
    fn offsets32(gpu: &Gpu, m: &DeviceMatrix) -> Result<CudaSlice<i32>, String> {
        let wide = match m {
            DeviceMatrix::Csr { row_ptr, .. } => row_ptr,
            DeviceMatrix::Sell { slice_ptr, .. } => slice_ptr,
            DeviceMatrix::ModSell(_) => return Err("cuSPARSE has no mod-SELL".into()),
        };
        let host = gpu.download(wide).map_err(|e| e.to_string())?;
        let narrow: Vec<i32> = host
            .iter()
            .map(|&o| i32::try_from(o))
            .collect::<Result<_, _>>()
            .map_err(|_| "offsets exceed 32 bits".to_string())?;
        gpu.upload(&narrow).map_err(|e| e.to_string())
    }

    fn try_new(
        lib: &'a Cusparse<'a>,
        kind: CusparseKind,
        m: &'a DeviceMatrix,
        nnz: usize,
        offsets32: Option<CudaSlice<i32>>,
        x: &DenseVector,
        y: &DenseVector,
    ) -> Result<Self, String> {
        let gpu = lib.gpu;
        let (offsets_type, offsets_ptr) = match (&offsets32, m) {
            (Some(o), _) => (cs::cusparseIndexType_t::CUSPARSE_INDEX_32I, ptr(gpu, o)),
            (None, DeviceMatrix::Csr { row_ptr: o, .. })
            | (None, DeviceMatrix::Sell { slice_ptr: o, .. }) => {
                (cs::cusparseIndexType_t::CUSPARSE_INDEX_64I, ptr(gpu, o))
            }
            (None, DeviceMatrix::ModSell(_)) => return Err("cuSPARSE has no mod-SELL".into()),
        };
        let i32_index = cs::cusparseIndexType_t::CUSPARSE_INDEX_32I;
        let base = cs::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
        let f64_type = cs::cudaDataType::CUDA_R_64F;
        let mut descr = null_mut();
        match (kind, m) {
            (
                CusparseKind::CsrAlg1 | CusparseKind::CsrAlg2,
                DeviceMatrix::Csr {
                    n, cols, values, ..
                },
            ) => {
                // Our column indices are u32 below 2^31 (checked at upload),
                // the same bits as cuSPARSE's 32-bit signed indices.
                // SAFETY: the buffers outlive the descriptor (lifetime 'a).
                check("cusparseCreateCsr", unsafe {
                    cs::cusparseCreateCsr(
                        &mut descr,
                        *n as i64,
                        *n as i64,
                        nnz as i64,
                        offsets_ptr,
                        ptr(gpu, cols),
                        ptr(gpu, values),
                        offsets_type,
                        i32_index,
                        base,
                        f64_type,
                    )
                })?
            }
            (
                CusparseKind::SellAlg1,
                DeviceMatrix::Sell {
                    n,
                    slice_height,
                    cols,
                    values,
                    ..
                },
            ) => {
                // Our SELL is cuSPARSE's sliced ELL: slices of `slice_height`
                // rows stored column-major, padding column −1, value 0.
                // SAFETY: as above.
                check("cusparseCreateSlicedEll", unsafe {
                    cs::cusparseCreateSlicedEll(
                        &mut descr,
                        *n as i64,
                        *n as i64,
                        nnz as i64,
                        values.len() as i64,
                        *slice_height as i64,
                        offsets_ptr,
                        ptr(gpu, cols),
                        ptr(gpu, values),
                        offsets_type,
                        i32_index,
                        base,
                        f64_type,
                    )
                })?
            }
            _ => {
                return Err(format!(
                    "{} needs our {} matrix",
                    kind.name(),
                    if kind == CusparseKind::SellAlg1 {
                        "SELL"
                    } else {
                        "CSR"
                    }
                ))
            }
        }
        let algorithm = kind.algorithm();
        // From here on `Drop` destroys the descriptor.
        let mut this = Self {
            lib,
            descr,
            algorithm,
            workspace: gpu.zeros(1).map_err(|e| e.to_string())?,
            _offsets32: offsets32,
            note: String::new(),
            _matrix: PhantomData,
        };
        let mut size = 0usize;
        // SAFETY: live handle, descriptors and host scalars.
        check("cusparseSpMV_bufferSize", unsafe {
            cs::cusparseSpMV_bufferSize(
                lib.handle,
                cs::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
                &ALPHA as *const f64 as *const c_void,
                this.descr,
                x.descr,
                &BETA as *const f64 as *const c_void,
                y.descr,
                f64_type,
                algorithm,
                &mut size,
            )
        })?;
        this.workspace = gpu.zeros(size.max(1)).map_err(|e| e.to_string())?;
        // Optional: where cuSPARSE refuses it, the SpMV runs unprepared (said in the note).
        let mut preprocessed = "preprocessed".to_string();
        if lib.preprocess {
            if let Err(e) = this.call(PREPROCESS, cs::cusparseSpMV_preprocess, x, y) {
                preprocessed = format!("not preprocessed ({e})");
            }
        } else {
            preprocessed = "not preprocessed (cuSPARSE before 12.4)".into();
        }
        this.note = preprocessed;
        this.spmv(x, y)?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        Ok(this)
    }

    /// y = A x on the GPU's stream (asynchronous).
    pub fn spmv(&self, x: &DenseVector, y: &DenseVector) -> Result<(), String> {
        self.call(SPMV, cs::cusparseSpMV, x, y)
    }

    /// `f` (`name`: cusparseSpMV or its preprocessing step, which take the
    /// same arguments) for y = A x with this SpMV's workspace.
    fn call(
        &self,
        name: &str,
        f: SpmvCall,
        x: &DenseVector,
        y: &DenseVector,
    ) -> Result<(), String> {
        // SAFETY: live handle, descriptors, workspace (of the size
        // cusparseSpMV_bufferSize asked for) and host scalars.
        check(name, unsafe {
            f(
                self.lib.handle,
                cs::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
                &ALPHA as *const f64 as *const c_void,
                self.descr,
                x.descr,
                &BETA as *const f64 as *const c_void,
                y.descr,
                cs::cudaDataType::CUDA_R_64F,
                self.algorithm,
                ptr(self.lib.gpu, &self.workspace),
            )
        })
    }
}

impl Drop for CusparseSpmv<'_> {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreateCsr/SlicedEll, destroyed once.
        unsafe { cs::cusparseDestroySpMat(self.descr) };
    }
}
