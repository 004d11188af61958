// Incomplete Cholesky on the GPU by level scheduling (src/solve/ic/cuda.rs): the rows
// of a triangular sweep are grouped into levels (src/sparse/levels.rs), a row's
// level one more than its deepest dependency, and each launch handles the rows
// of one level, one thread per row, in CSR order (u64, rn_mul etc. from
// spmv.cu).
//
// Every kernel repeats the CPU's operations (src/solve/precond.rs Dic, Ic0) in
// the same order with the _rn intrinsics, which NVRTC never contracts into
// fused multiply-adds, so the factors and the sweeps equal the CPU's bit for
// bit. The sweeps take a trailing `done` gate (kernels/smooth.cu gated_off).

// The bound of one wait in the kernels without synchronisation between
// levels (ic_factor_sync_free, ic_levels_sync_free), in clock cycles.
#define SYNC_FREE_SPIN_CYCLES (1LL << 31)

// Waits until flag[j] (another thread's) is not 0 and returns it; -1 when
// the wait ran past SYNC_FREE_SPIN_CYCLES (the caller gives up).
__device__ int sync_free_wait(const volatile int* flag, int j) {
    const long long start = clock64();
    int v;
    while ((v = flag[j]) == 0)
        if (clock64() - start > SYNC_FREE_SPIN_CYCLES) return -1;
    return v;
}

// A factor value another row's thread wrote: with Coherent (the factorisation
// in one launch, ic_factor_sync_free) read through volatile, past the L1
// cache, which is not coherent between multiprocessors; else a plain load.
template <bool Coherent>
__device__ __forceinline__ double factor_load(const double* p) {
    return Coherent ? *(const volatile double*)p : *p;
}

// DIC pivot of row j: d_j = a_jj - sum over lower slots (ascending) of
// a_ji^2 / d_i (OpenFOAM calcReciprocalD).
template <bool Coherent>
__device__ double ic_dic_pivot(int j, const u64* __restrict__ row_ptr,
                               const int* __restrict__ cols, const double* __restrict__ vals,
                               const u64* __restrict__ diag_slot, const double* d) {
    double dj = vals[diag_slot[j]];
    for (u64 s = row_ptr[j]; s < diag_slot[j]; ++s) {
        const double a = vals[s];
        dj = __dsub_rn(dj, __ddiv_rn(__dmul_rn(a, a), factor_load<Coherent>(&d[cols[s]])));
    }
    return dj;
}

// DILU pivot of row j: d_j = a_jj - sum over lower slots s = (j, i) ascending
// of a_ij a_ji / d_i, a_ij read at the transposed slot.
template <bool Coherent>
__device__ double ic_dilu_pivot(int j, const u64* __restrict__ row_ptr,
                                const int* __restrict__ cols, const double* __restrict__ vals,
                                const u64* __restrict__ diag_slot,
                                const unsigned* __restrict__ transposed, const double* d) {
    double dj = vals[diag_slot[j]];
    for (u64 s = row_ptr[j]; s < diag_slot[j]; ++s)
        dj = __dsub_rn(dj, __ddiv_rn(__dmul_rn(vals[transposed[s]], vals[s]),
                                     factor_load<Coherent>(&d[cols[s]])));
    return dj;
}

// L(i, k) = v also at row k's slot (k, i), found in its upper part
// [lo, end) (columns above k, ascending): the backward sweep reads L's
// columns by rows there. The slot belongs to row k, done before row i starts
// and never read by the factorisation. A row k without that slot (a pattern
// that is not symmetric) lowers failed[1] to i + 1.
__device__ __forceinline__ void ic_ic0_mirror(int i, u64 lo, u64 end,
                                              const int* __restrict__ cols, double* l, double v,
                                              int* failed) {
    u64 hi = end;
    while (lo < hi) {
        const u64 mid = lo + (hi - lo) / 2;
        if (cols[mid] < i) lo = mid + 1;
        else hi = mid;
    }
    if (lo < end && cols[lo] == i) l[lo] = v;
    else atomicMin(&failed[1], i + 1);
}

// IC(0) row i: for each lower slot s = (i, k) ascending,
// l_s = (a_ik - sum_{m<k} l_im l_km) / l_kk over the common lower pattern of
// rows i and k (a merge of two sorted column lists); returns sum l_s^2,
// ascending (ic_ic0_row returns the pivot a_ii minus it). Row k's values are
// other threads' (factor_load); row i's are this thread's own.
template <bool Coherent>
__device__ double ic_ic0_row_merged(int i, const u64* __restrict__ row_ptr,
                                    const int* __restrict__ cols, const double* vals,
                                    const u64* __restrict__ diag_slot, double* l,
                                    const double* l_diag, int* failed) {
    const u64 lo = row_ptr[i], di = diag_slot[i];
    for (u64 s = lo; s < di; ++s) {
        const int k = cols[s];
        double sum = 0.0;
        for_common_columns(cols, lo, s, row_ptr[k], diag_slot[k], [&](u64 p, u64 q) {
            sum = __dadd_rn(sum, __dmul_rn(l[p], factor_load<Coherent>(&l[q])));
        });
        l[s] = __ddiv_rn(__dsub_rn(vals[s], sum), factor_load<Coherent>(&l_diag[k]));
        ic_ic0_mirror(i, diag_slot[k] + 1, row_ptr[k + 1], cols, l, l[s], failed);
    }
    double squares = 0.0;
    for (u64 s = lo; s < di; ++s) squares = __dadd_rn(squares, __dmul_rn(l[s], l[s]));
    return squares;
}

// The most lower entries of a row that ic_ic0_row holds in registers; a
// longer row takes the merge (ic_ic0_row_merged).
#define IC0_ROW_REGISTERS 8

// The IC(0) row of ic_ic0_row_merged with the same operations in the same
// order, its loads independent of each other: the row's columns, values and
// its partners' lower bounds and pivots are loaded first, all at once; then
// each partner k's lower columns are read in ascending order and each is
// looked up among the row's earlier columns (registers), so a product is
// added exactly where the merge adds it, in the same ascending column order.
// The merge instead chains each step on the compare of the last two loads:
// on the hexahedral meshes, whose rows share no lower columns, it walks both
// lists for nothing, a dependent load per step.
template <bool Coherent>
__device__ double ic_ic0_row(int i, const u64* __restrict__ row_ptr,
                             const int* __restrict__ cols, const double* vals,
                             const u64* __restrict__ diag_slot, double* l,
                             const double* l_diag, int* failed) {
    const u64 lo = row_ptr[i], di = diag_slot[i];
    const double a_ii = vals[di];
    double squares;
    if (di - lo > IC0_ROW_REGISTERS) {
        squares =
            ic_ic0_row_merged<Coherent>(i, row_ptr, cols, vals, diag_slot, l, l_diag, failed);
    } else {
        const int count = (int)(di - lo);
        int col[IC0_ROW_REGISTERS];
        double a[IC0_ROW_REGISTERS], lkk[IC0_ROW_REGISTERS], li[IC0_ROW_REGISTERS];
        u64 k_lo[IC0_ROW_REGISTERS], k_end[IC0_ROW_REGISTERS], k_next[IC0_ROW_REGISTERS];
#pragma unroll
        for (int t = 0; t < IC0_ROW_REGISTERS; ++t) {
            if (t < count) {
                col[t] = cols[lo + t];
                a[t] = vals[lo + t];
            }
        }
#pragma unroll
        for (int t = 0; t < IC0_ROW_REGISTERS; ++t) {
            if (t < count) {
                k_lo[t] = row_ptr[col[t]];
                k_next[t] = row_ptr[col[t] + 1];
                k_end[t] = diag_slot[col[t]];
                lkk[t] = factor_load<Coherent>(&l_diag[col[t]]);
            }
        }
        squares = 0.0;
#pragma unroll
        for (int t = 0; t < IC0_ROW_REGISTERS; ++t) {
            if (t < count) {
                double sum = 0.0;
                // Row i's columns before slot t are below k = col[t]; so are
                // k's lower columns: the common ones are found among them.
                if (t > 0) {
                    for (u64 q = k_lo[t]; q < k_end[t]; ++q) {
                        const int c = cols[q];
#pragma unroll
                        for (int u = 0; u < t; ++u)
                            if (col[u] == c)
                                sum = __dadd_rn(sum, __dmul_rn(li[u], factor_load<Coherent>(&l[q])));
                    }
                }
                li[t] = __ddiv_rn(__dsub_rn(a[t], sum), lkk[t]);
                l[lo + t] = li[t];
                ic_ic0_mirror(i, k_end[t] + 1, k_next[t], cols, l, li[t], failed);
            }
        }
#pragma unroll
        for (int t = 0; t < IC0_ROW_REGISTERS; ++t)
            if (t < count) squares = __dadd_rn(squares, __dmul_rn(li[t], li[t]));
    }
    // The diagonal slot keeps a_ii (the factor's diagonal is l_diag) and
    // the upper slots take L's columns from the rows below (ic_ic0_mirror).
    return __dsub_rn(a_ii, squares);
}

// DIC factor, one level: d_j (ic_dic_pivot); breakdown (d_j <= 0 or NaN)
// raises `failed` to the smallest such row + 1 (atomicMin on row + 1 from
// n + 1).
extern "C" __global__ void ic_dic_factor(int count, int first, const int* __restrict__ rows,
                                         const u64* __restrict__ row_ptr,
                                         const int* __restrict__ cols,
                                         const double* __restrict__ vals,
                                         const u64* __restrict__ diag_slot, double* d,
                                         int* failed) {
    const int j = level_row(count, first, rows);
    if (j < 0) return;
    const double dj = ic_dic_pivot<false>(j, row_ptr, cols, vals, diag_slot, d);
    d[j] = dj;
    if (!(dj > 0.0)) atomicMin(failed, j + 1);
}

// DILU factor, one level (OpenFOAM DILUPreconditioner::calcReciprocalD):
// d_j = a_jj - sum over lower slots s = (j, i) ascending of a_ij a_ji / d_i,
// a_ij read at the transposed slot; src/solve/ilu/cpu.rs dilu. A pivot failing
// |d_j| > tiny_j (or not finite) lowers `failed` as in ic_dic_factor.
extern "C" __global__ void ic_dilu_factor(int count, int first, const int* __restrict__ rows,
                                          const u64* __restrict__ row_ptr,
                                          const int* __restrict__ cols,
                                          const double* __restrict__ vals,
                                          const u64* __restrict__ diag_slot,
                                          const unsigned* __restrict__ transposed,
                                          const double* __restrict__ tiny, double* d,
                                          int* failed) {
    const int j = level_row(count, first, rows);
    if (j < 0) return;
    const double dj = ic_dilu_pivot<false>(j, row_ptr, cols, vals, diag_slot, transposed, d);
    d[j] = dj;
    if (pivot_breaks_down(dj, tiny[j])) atomicMin(failed, j + 1);
}

// IC(0) factor, one level: row i's lower values (ic_ic0_row), then
// l_ii = sqrt(a_ii - sum l_s^2). Breakdown as in ic_dic_factor (failed[0]);
// an entry without its transposed partner lowers failed[1]
// (ic_ic0_mirror). l is vals (the factorisation in place: no __restrict__ on
// either).
extern "C" __global__ void ic_ic0_factor(int count, int first, const int* __restrict__ rows,
                                         const u64* __restrict__ row_ptr,
                                         const int* __restrict__ cols, const double* vals,
                                         const u64* __restrict__ diag_slot, double* l,
                                         double* l_diag, int* failed) {
    const int i = level_row(count, first, rows);
    if (i < 0) return;
    const double pivot = ic_ic0_row<false>(i, row_ptr, cols, vals, diag_slot, l, l_diag, failed);
    if (!(pivot > 0.0)) atomicMin(failed, i + 1);
    l_diag[i] = __dsqrt_rn(pivot);
}

// The factorisation in one launch, without synchronisation between levels
// (Liu et al. 2016; DeviceIncompleteCholesky::factorise): a thread per row,
// rows handed to blocks in the order blocks start (a ticket, state[0]),
// waits until every row of its lower pattern is done (done[j] = 1), then
// computes its row as the level kernels do (the same operations in the same
// order: equal bit for bit), makes its writes visible (__threadfence) and
// marks itself done. A wait past SYNC_FREE_SPIN_CYCLES gives up: the row
// marks itself -1, its dependents give up at once, and state[1] = 1 tells
// the host to factorise level by level instead. kind: 0 DIC (factor = d),
// 1 DILU (factor = d; transposed, tiny), 2 IC(0) (factor = l, vals itself:
// in place; l_diag).
// Breakdown as in ic_dic_factor. done and state: zeroed.
extern "C" __global__ void ic_factor_sync_free(int n, int kind, const u64* __restrict__ row_ptr,
                                               const int* __restrict__ cols, const double* vals,
                                               const u64* __restrict__ diag_slot,
                                               const unsigned* __restrict__ transposed,
                                               const double* __restrict__ tiny, double* factor,
                                               double* l_diag, int* done, int* state,
                                               int* failed) {
    __shared__ int block;
    if (threadIdx.x == 0) block = atomicAdd(&state[0], 1);
    __syncthreads();
    const long long t = (long long)block * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int i = (int)t;
    volatile int* vdone = done;
    for (u64 s = row_ptr[i]; s < diag_slot[i]; ++s) {
        if (sync_free_wait(vdone, cols[s]) < 0) {
            vdone[i] = -1;
            atomicExch(&state[1], 1);
            return;
        }
    }
    // The rows waited for wrote before they fenced and marked themselves.
    __threadfence();
    if (kind == 2) {
        const double pivot =
            ic_ic0_row<true>(i, row_ptr, cols, vals, diag_slot, factor, l_diag, failed);
        if (!(pivot > 0.0)) atomicMin(failed, i + 1);
        l_diag[i] = __dsqrt_rn(pivot);
    } else if (kind == 1) {
        const double di = ic_dilu_pivot<true>(i, row_ptr, cols, vals, diag_slot, transposed, factor);
        factor[i] = di;
        if (pivot_breaks_down(di, tiny[i])) atomicMin(failed, i + 1);
    } else {
        const double di = ic_dic_pivot<true>(i, row_ptr, cols, vals, diag_slot, factor);
        factor[i] = di;
        if (!(di > 0.0)) atomicMin(failed, i + 1);
    }
    __threadfence();
    vdone[i] = 1;
}

// x[i] = 1 / x[i] (DIC stores the reciprocal of d*, as OpenFOAM does).
extern "C" __global__ void ic_reciprocal(int n, double* x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __drcp_rn(x[i]);
}

// The sweeps in precision T, each a kernel template instantiated by its
// `// kernel:` line in double (no suffix) and float (`_f32`): T = double
// writes z directly (the bit-exact path); T = float (mixed precision) runs on
// f32 copies of the values and the factor and an f32 work vector w, read from
// r (f64) by the forward sweep and widened into z by ic_widen after the
// backward one.

// DIC forward sweep, one level: w_j = rd_j r_j, then w_j -= (rd_j a_ji) w_i
// over the lower slots in order (w_i final: an earlier level).
// kernel: ic_dic_forward<double>, ic_dic_forward_f32 = ic_dic_forward<float>
template <typename T>
__global__ void ic_dic_forward(int count, int first, const int* __restrict__ rows,
                               const u64* __restrict__ row_ptr, const int* __restrict__ cols,
                               const T* __restrict__ vals, const u64* __restrict__ diag_slot,
                               const T* __restrict__ rd, const double* __restrict__ r, T* w,
                               const double* done) {
    const int j = level_row(count, first, rows, done);
    if (j < 0) return;
    const T rdj = rd[j];
    T acc = rn_mul(rdj, (T)r[j]);
    for (u64 s = row_ptr[j]; s < diag_slot[j]; ++s)
        acc = rn_sub(acc, rn_mul(rn_mul(rdj, vals[s]), w[cols[s]]));
    w[j] = acc;
}

// DIC backward sweep, one level: w_i -= (rd_i a_ik) w_k over the upper slots
// in descending order (w_k final: an earlier backward level).
// kernel: ic_dic_backward<double>, ic_dic_backward_f32 = ic_dic_backward<float>
template <typename T>
__global__ void ic_dic_backward(int count, int first, const int* __restrict__ rows,
                                const u64* __restrict__ row_ptr, const int* __restrict__ cols,
                                const T* __restrict__ vals, const u64* __restrict__ diag_slot,
                                const T* __restrict__ rd, T* w, const double* done) {
    const int i = level_row(count, first, rows, done);
    if (i < 0) return;
    const T rdi = rd[i];
    T acc = w[i];
    for (u64 s = row_ptr[i + 1]; s > diag_slot[i] + 1; --s)
        acc = rn_sub(acc, rn_mul(rn_mul(rdi, vals[s - 1]), w[cols[s - 1]]));
    w[i] = acc;
}

// IC(0) forward sweep L y = r, one level: y_i = (r_i - sum l_s y_k) / l_ii.
// kernel: ic_ic0_forward<double>, ic_ic0_forward_f32 = ic_ic0_forward<float>
template <typename T>
__global__ void ic_ic0_forward(int count, int first, const int* __restrict__ rows,
                               const u64* __restrict__ row_ptr, const int* __restrict__ cols,
                               const u64* __restrict__ diag_slot, const T* __restrict__ l,
                               const T* __restrict__ l_diag, const double* __restrict__ r,
                               T* z, const double* done) {
    const int i = level_row(count, first, rows, done);
    if (i < 0) return;
    T sum = T(0);
    for (u64 s = row_ptr[i]; s < diag_slot[i]; ++s) sum = rn_add(sum, rn_mul(l[s], z[cols[s]]));
    z[i] = rn_div(rn_sub((T)r[i], sum), l_diag[i]);
}

// IC(0) backward sweep L^T z = y, one level, row-oriented: the CPU subtracts
// l_ik z_i from z_k for i descending, then divides by l_kk; here row k walks
// its upper slots (k, i) descending, which hold l_ik (ic_ic0_mirror).
// kernel: ic_ic0_backward<double>, ic_ic0_backward_f32 = ic_ic0_backward<float>
template <typename T>
__global__ void ic_ic0_backward(int count, int first, const int* __restrict__ rows,
                                const u64* __restrict__ row_ptr, const int* __restrict__ cols,
                                const u64* __restrict__ diag_slot, const T* __restrict__ l,
                                const T* __restrict__ l_diag, T* z, const double* done) {
    const int k = level_row(count, first, rows, done);
    if (k < 0) return;
    T acc = z[k];
    for (u64 s = row_ptr[k + 1]; s > diag_slot[k] + 1; --s)
        acc = rn_sub(acc, rn_mul(l[s - 1], z[cols[s - 1]]));
    z[k] = rn_div(acc, l_diag[k]);
}

// z = (double)w after the f32 sweeps (mixed precision), gated.
extern "C" __global__ void ic_widen(int n, const float* __restrict__ w, double* __restrict__ z,
                                    const double* done) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || gated_off(done)) return;
    z[i] = (double)w[i];
}

// ---- Structure on the device (src/solve/ic/cuda.rs DeviceIncompleteCholesky::on_device):
// what the host set-up derives from its CSR, derived from the resident
// mod-SELL matrix. The set-up builds the CSR and its diagonal slots in one
// pass (ic_modsell_csr below), then the transposed slots where asked
// (ic_transposed_slots); ic_modsell_to_csr followed by ic_diag_slots is the
// same CSR in steps, kept as the reference the tests hold the pass to
// (device_csr_slots).

// diag_slot[i] = the slot of column i in row i (present: the device CSR
// stores every diagonal). One thread per row.
extern "C" __global__ void ic_diag_slots(int n, const u64* __restrict__ row_ptr,
                                         const int* __restrict__ cols,
                                         u64* __restrict__ diag_slot) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s)
        if (cols[s] == i) {
            diag_slot[i] = s;
            return;
        }
}

// transposed[s] = the slot (j, i) of each slot s = (i, j) (binary search of
// row j's ascending columns; solve/ilu/mod.rs transposed_slots), 32-bit (the
// CSR has fewer than 2^32 entries: half the bytes of u64 to allocate at the
// set-up and to read in IC(0)'s backward sweep). A missing
// partner lowers failed[0] to i + 1 (atomicMin from n + 1). One thread per row.
extern "C" __global__ void ic_transposed_slots(int n, const u64* __restrict__ row_ptr,
                                               const int* __restrict__ cols,
                                               unsigned* __restrict__ transposed, int* failed) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s) {
        const int j = cols[s];
        u64 lo = row_ptr[j], hi = row_ptr[j + 1];
        while (lo < hi) {
            const u64 mid = lo + (hi - lo) / 2;
            if (cols[mid] < i) lo = mid + 1;
            else hi = mid;
        }
        if (lo < row_ptr[j + 1] && cols[lo] == i) {
            transposed[s] = (unsigned)lo;
        } else {
            transposed[s] = 0;
            atomicMin(failed, i + 1);
        }
    }
}

// The CSR of a mod-SELL matrix with its values in one pass (src/gpu/levels.rs
// csr_of_modsell): the diagonal and the stored off-diagonals, columns
// ascending, the order of amg_modsell_to_csr, the values moved with their
// columns (no slot map). One thread per row.
extern "C" __global__ void ic_modsell_to_csr(int n, int h, const u64* __restrict__ slice_ptr,
                                             const int* __restrict__ codes,
                                             const double* __restrict__ modsell_vals,
                                             const double* __restrict__ diag,
                                             const u64* __restrict__ row_ptr,
                                             unsigned* __restrict__ cols,
                                             double* __restrict__ vals) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    struct Values {
        const double* modsell_vals;
        const double* diag;
        double* vals;
        __device__ void diagonal(u64 at, int row) const { vals[at] = diag[row]; }
        __device__ void entry(u64 at, u64 k) const { vals[at] = modsell_vals[k]; }
        __device__ void shift(u64 to, u64 from) const { vals[to] = vals[from]; }
    };
    modsell_row_to_csr(row, h, slice_ptr, codes, row_ptr, cols, Values{modsell_vals, diag, vals});
}

// ---- The CSR and its slots in one pass (src/gpu/levels.rs csr_pass): a thread
// per row reads its mod-SELL slots once and writes its CSR row (the diagonal
// and the stored off-diagonals, columns ascending: the CSR of
// ic_modsell_to_csr) and its diagonal slot, and checks the diagonal and the
// colouring. Each entry's place is its rank in the row (the count of the
// row's columns below it, the diagonal counted as column row), so nothing is
// moved in global memory and every slot of the row is written exactly once
// (the columns are distinct); a row's slots are independent loads. The
// transposed slots (IC(0), DILU) come after, from the written rows
// (ic_transposed_slots: a search in the partner's CSR row reads one or two
// sectors, where ranking the entry among the partner's mod-SELL slots read
// one sector per slot).

// The most mod-SELL slots of a row held in registers (fully unrolled: the
// ranks are compares of registers); a row of more slots ranks each entry by
// reading its slots again (cached).
#define IC_CSR_REGISTERS 16

// One off-diagonal (row, col) of value v at CSR slot `at`: written, and its
// colour checked (colour range [colour_first, colour_end) of the row; a row
// coupled inside its colour lowers flags[1] to row + 1).
__device__ __forceinline__ void ic_csr_entry(int row, unsigned col, double v, u64 at,
                                             unsigned* __restrict__ cols,
                                             double* __restrict__ vals, int colour_first,
                                             int colour_end, int* flags) {
    cols[at] = col;
    vals[at] = v;
    if ((int)col >= colour_first && (int)col < colour_end) atomicMin(&flags[1], row + 1);
}

// The pass on one row (arguments as ic_modsell_csr's); returns the row's
// count of columns below it minus its count above it.
__device__ __forceinline__ unsigned ic_modsell_csr_row(
    int row, int n, int h, const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
    const double* __restrict__ modsell_vals, const double* __restrict__ diag,
    const u64* __restrict__ row_ptr, unsigned* __restrict__ cols, double* __restrict__ vals,
    u64* __restrict__ diag_slot, const int* __restrict__ colour_ptr, int n_colours, int* flags) {
    const int s = row / h, base = s * h;
    const u64 first = slice_ptr[s] + (row - base), end = slice_ptr[s + 1];
    const u64 start = row_ptr[row];
    const double d = diag[row];
    if (!(d > 0.0)) atomicMin(&flags[2], row + 1);
    // The row's colour: colour_ptr[c] <= row < colour_ptr[c + 1] (none: an
    // empty range).
    int colour_first = 0, colour_end = 0;
    if (colour_ptr) {
        int lo = 0, hi = n_colours;
        while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            if (colour_ptr[mid] <= row) lo = mid;
            else hi = mid;
        }
        colour_first = colour_ptr[lo];
        colour_end = colour_ptr[lo + 1];
    }
    // Columns below the row: the diagonal's rank.
    u64 below = 0;
    if (end <= first + (u64)IC_CSR_REGISTERS * h) {
        // At most IC_CSR_REGISTERS slots; padding (code 0) as column
        // UINT_MAX, which no column's rank counts.
        unsigned col[IC_CSR_REGISTERS];
        double v[IC_CSR_REGISTERS];
#pragma unroll
        for (int t = 0; t < IC_CSR_REGISTERS; ++t) {
            const u64 k = first + (u64)t * h;
            const int c = k < end ? codes[k] : 0;
            col[t] = c != 0 ? modsell_column(c, base) : 0xffffffffu;
            v[t] = c != 0 ? modsell_vals[k] : 0.0;
        }
#pragma unroll
        for (int t = 0; t < IC_CSR_REGISTERS; ++t) below += col[t] < (unsigned)row;
#pragma unroll
        for (int t = 0; t < IC_CSR_REGISTERS; ++t) {
            if (col[t] == 0xffffffffu) continue;
            u64 rank = (unsigned)row < col[t];
#pragma unroll
            for (int u = 0; u < IC_CSR_REGISTERS; ++u) rank += col[u] < col[t];
            ic_csr_entry(row, col[t], v[t], start + rank, cols, vals, colour_first, colour_end,
                         flags);
        }
    } else {
        for (u64 k = first; k < end; k += h) {
            const int c = codes[k];
            if (c == 0) continue;
            const unsigned col = modsell_column(c, base);
            below += col < (unsigned)row;
            u64 rank = (unsigned)row < col;
            for (u64 q = first; q < end; q += h) {
                const int cq = codes[q];
                rank += cq != 0 && modsell_column(cq, base) < col;
            }
            ic_csr_entry(row, col, modsell_vals[k], start + rank, cols, vals, colour_first,
                         colour_end, flags);
        }
    }
    const u64 at = start + below;
    cols[at] = (unsigned)row;
    vals[at] = d;
    diag_slot[row] = at;
    const u64 above = row_ptr[row + 1] - start - 1 - below;
    return (unsigned)below - (unsigned)above;
}

// The pass. colour_ptr: null without a colouring, else the colours' first
// rows then n (n_colours + 1 of them, rows colour-contiguous); flags:
// [missing partner (ic_transposed_slots), coupled in a colour, diagonal not
// positive], each the first such row + 1, from n + 1, then the pattern's
// balance: the entries below the diagonal minus those above, summed modulo
// 2^32 (one add per block; zero from the start), not zero where the pattern
// is not symmetric (IC(0)'s check: each entry below the diagonal then finds
// its partner, ic_ic0_mirror, so the counts being equal makes the pairing
// complete). blockDim.x a multiple of 32, at most 1024.
extern "C" __global__ void ic_modsell_csr(int n, int h, const u64* __restrict__ slice_ptr,
                                          const int* __restrict__ codes,
                                          const double* __restrict__ modsell_vals,
                                          const double* __restrict__ diag,
                                          const u64* __restrict__ row_ptr,
                                          unsigned* __restrict__ cols, double* __restrict__ vals,
                                          u64* __restrict__ diag_slot,
                                          const int* __restrict__ colour_ptr, int n_colours,
                                          int* flags) {
    __shared__ unsigned warp_balance[32];
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned balance = 0;
    if (row < n)
        balance = ic_modsell_csr_row(row, n, h, slice_ptr, codes, modsell_vals, diag, row_ptr,
                                     cols, vals, diag_slot, colour_ptr, n_colours, flags);
    for (int o = 16; o > 0; o >>= 1) balance += __shfl_xor_sync(0xffffffffu, balance, o);
    if ((threadIdx.x & 31) == 0) warp_balance[threadIdx.x >> 5] = balance;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned sum = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) sum += warp_balance[w];
        if (sum != 0) atomicAdd((unsigned*)&flags[3], sum);
    }
}

// New values on the CSR pattern ic_modsell_to_csr made from a matrix of the
// same pattern (value-only re-set-up): each stored entry written to its
// column's slot, found by binary search of the row's ascending columns; the
// diagonal to diag_slot. One thread per row.
extern "C" __global__ void ic_modsell_values(int n, int h, const u64* __restrict__ slice_ptr,
                                             const int* __restrict__ codes,
                                             const double* __restrict__ modsell_vals,
                                             const double* __restrict__ diag,
                                             const u64* __restrict__ row_ptr,
                                             const unsigned* __restrict__ cols,
                                             const u64* __restrict__ diag_slot,
                                             double* __restrict__ vals) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const int s = row / h, base = s * h;
    vals[diag_slot[row]] = diag[row];
    for (u64 k = slice_ptr[s] + (row - base); k < slice_ptr[s + 1]; k += h) {
        const int c = codes[k];
        if (c == 0) continue;
        const unsigned col = modsell_column(c, base);
        u64 lo = row_ptr[row], hi = row_ptr[row + 1];
        while (lo < hi) {
            const u64 mid = lo + (hi - lo) / 2;
            if (cols[mid] < col) lo = mid + 1;
            else hi = mid;
        }
        if (lo < row_ptr[row + 1] && cols[lo] == col) vals[lo] = modsell_vals[k];
    }
}

// rows[i] = i (the level lists of a colour-contiguous order).
extern "C" __global__ void ic_identity_rows(int n, int* __restrict__ rows) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) rows[i] = i;
}

// ---- The level schedule on the device (src/sparse/levels.rs LevelSchedule on
// the device CSR; DeviceLevels::on_device) by wavefronts (Kahn's topological
// sort, level by level): a row's level is 1 + the deepest level of the rows
// it depends on (lower sweep: the columns j < i of its row; upper != 0: the
// columns j > i), 0 without any. pending[i] counts the dependencies not yet
// placed; placing level L's rows decrements the pending count of each row
// that depends on them, and a row whose count reaches 0 has all its
// dependencies in levels <= L, its deepest in L (else it would have reached
// 0 earlier): it is appended to level L + 1. rows lists the levels one after
// the other (level_ptr[L] .. level_ptr[L + 1]; the order inside a level is
// the atomics', its rows being independent); state[0] is the number of rows
// placed, state[1] the launches' ticket (pcg.cu last_block). Each launch's
// last block writes the next level's end, so one launch per level, no
// read-back. The work is each row's entries twice plus, per dependency, the
// dependent's row scanned for the entry back (a pattern that is not
// symmetric then stalls instead of placing a row early; the host sees the
// stall and takes its own schedule).

// Whether row m's dependencies (lower: j < m; upper: j > m) include i.
__device__ bool wave_depends(const u64* __restrict__ row_ptr, const int* __restrict__ cols,
                             int upper, int m, int i) {
    for (u64 s = row_ptr[m]; s < row_ptr[m + 1]; ++s)
        if (cols[s] == i) return upper ? i > m : i < m;
    return false;
}

// ---- The level schedule in one launch, without synchronisation between
// levels (Liu et al. 2016's synchronisation-free triangular
// solve, applied to the levels; DeviceLevels::sync_free): a thread per row
// waits until each row it depends on (lower: the columns j < i of its row;
// upper != 0: j > i, rows taken from the last) has its level, then takes one
// more than the deepest. level[i] holds the level + 1 and starts at 0
// (pending, zeroed memory); a row whose wait exceeds SYNC_FREE_SPIN_CYCLES
// gives up and writes -1, which its dependents take up at once, and
// state[2] = 1 tells the host to take the wavefronts
// instead (no hang, whatever the scheduling). Rows are handed to blocks in
// the order blocks start (a ticket, state[0]), so a row waits only on rows
// of blocks already running: with independent thread scheduling (compute
// capability 7.0 on, the host checks) every wait ends. state[1]: the deepest
// level (atomicMax).
extern "C" __global__ void ic_levels_sync_free(int n, const u64* __restrict__ row_ptr,
                                               const int* __restrict__ cols, int upper,
                                               int* level, int* state) {
    __shared__ int block;
    if (threadIdx.x == 0) block = atomicAdd(&state[0], 1);
    __syncthreads();
    const long long t = (long long)block * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int i = upper ? n - 1 - (int)t : (int)t;
    volatile int* lv = level;
    int deepest = 0;  // the deepest dependency's level + 1 (0: none)
    for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s) {
        const int j = cols[s];
        if (upper ? j <= i : j >= i) continue;
        const int lj = sync_free_wait(lv, j);
        if (lj < 0) {
            lv[i] = -1;
            atomicExch(&state[2], 1);
            return;
        }
        deepest = max(deepest, lj);
    }
    // This row's level is `deepest`; stored + 1.
    lv[i] = deepest + 1;
    atomicMax(&state[1], deepest);
}

// counts[l] += 1 for each row of level l (level[i] = l + 1).
extern "C" __global__ void ic_levels_count(int n, const int* __restrict__ level,
                                           unsigned* counts) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[level[i] - 1], 1u);
}

// rows[level_ptr[l] ..] = the rows of level l (in no particular order within
// a level: a sweep's rows of one level are independent). fill: zeroed.
extern "C" __global__ void ic_levels_scatter(int n, const int* __restrict__ level,
                                             const u64* __restrict__ level_ptr,
                                             unsigned* fill, int* __restrict__ rows) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int l = level[i] - 1;
    rows[level_ptr[l] + atomicAdd(&fill[l], 1u)] = i;
}

// Whether the lower sweep's levels, reversed, order the upper sweep: they do
// when every entry (i, j) above the diagonal has its partner (j, i), for then
// j depends on i in the lower sweep and lies in a later level, so the
// reversed levels finish j before i. A row i with an unpartnered upper entry
// lowers failed[0] to i + 1 (atomicMin from n + 1). One thread per row
// (DeviceLevels::reversed: one launch instead of an upper wavefront).
extern "C" __global__ void ic_upper_mirrored(int n, const u64* __restrict__ row_ptr,
                                             const int* __restrict__ cols, int* failed) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s) {
        const int j = cols[s];
        if (j > i && !wave_depends(row_ptr, cols, 0, j, i)) {
            atomicMin(failed, i + 1);
            return;
        }
    }
}

// Every thread's appends, then the last block to finish publishes the rows
// placed so far as level_ptr[slot].
__device__ void wave_close(int* state, int* level_ptr, int slot) {
    __threadfence();
    __syncthreads();
    if (last_block((unsigned*)&state[1]) && threadIdx.x == 0)
        level_ptr[slot] = atomicAdd(&state[0], 0);
}

// Each row's dependency count; the rows without any are level 0
// (level_ptr[1] written by the last block; state and level_ptr[0] zero).
extern "C" __global__ void ic_wave_init(int n, const u64* __restrict__ row_ptr,
                                        const int* __restrict__ cols, int upper,
                                        int* __restrict__ pending, int* __restrict__ rows,
                                        int* state, int* level_ptr) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int count = 0;
        for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s) {
            const int j = cols[s];
            count += upper ? j > i : j < i;
        }
        pending[i] = count;
        if (count == 0) rows[atomicAdd(&state[0], 1)] = i;
    }
    wave_close(state, level_ptr, 1);
}

// Level `level` placed (rows level_ptr[level] .. level_ptr[level + 1]): its
// dependents' counts decremented, those reaching 0 appended as level + 1,
// whose end the last block writes to level_ptr[level + 2]. A grid-stride
// loop over the level's rows (a fixed grid: the level's size stays on the
// device); an empty level (past the last) appends nothing.
extern "C" __global__ void ic_wave_step(const u64* __restrict__ row_ptr,
                                        const int* __restrict__ cols, int upper, int level,
                                        int* rows, int* pending, int* state, int* level_ptr) {
    const int begin = level_ptr[level], end = level_ptr[level + 1];
    for (int t = begin + blockIdx.x * blockDim.x + threadIdx.x; t < end;
         t += gridDim.x * blockDim.x) {
        const int i = rows[t];
        for (u64 s = row_ptr[i]; s < row_ptr[i + 1]; ++s) {
            const int m = cols[s];
            if (upper ? m >= i : m <= i) continue;
            if (!wave_depends(row_ptr, cols, upper, m, i)) continue;
            if (atomicSub(&pending[m], 1) == 1) rows[atomicAdd(&state[0], 1)] = m;
        }
    }
    wave_close(state, level_ptr, level + 2);
}
