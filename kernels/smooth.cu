// Smoothers on mod-SELL (compiled with spmv.cu; uses
// block_sum and u64 from there). CPU references: src/solve/smoother.rs,
// src/solve/block_jacobi/cpu.rs, src/solve/colouring.rs; each row formula is
// evaluated in the same order as there (NVRTC may contract a*b+c into FMA, so
// the iterates agree to round-off, not bit for bit).
//
// Column codes (src/sparse/modsell.rs): code > 0 is column code-1, code < 0 is
// column s*H + (-code-1) of the slice's own rows, 0 is padding.

// Sum over the block, valid in every thread (block_sum's result broadcast).
// The next call cannot overwrite `total` early: thread 0 writes it only after
// the barriers inside block_sum, which every thread reaches after reading it.
__device__ double block_sum_all(double v) {
    __shared__ double total;
    const double s = block_sum(v);
    if (threadIdx.x == 0) total = s;
    __syncthreads();
    return total;
}

// Partials of a . b, one per block (vector_grid blocks).
extern "C" __global__ void dot_partials(int n, const double* __restrict__ a,
                                        const double* __restrict__ b,
                                        double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? a[i] * b[i] : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// The smoother kernels take a trailing `done`: inside PCG's fused loop the
// solve's state, whose first entry is nonzero once the solve has stopped
// (kernels/pcg.cu ST_DONE); the application is then not needed. Null: run.
__device__ bool gated_off(const double* done) { return done != nullptr && done[0] != 0.0; }

// The row of this thread in one level of a level-scheduled factorisation or
// sweep (ic.cu, ilu.cu: a launch per level, thread t of the level's `count`
// rows takes rows[first + t]); -1 past the level's end or, for a sweep with
// its `done` gate, once the solve has stopped.
__device__ __forceinline__ int level_row(int count, int first, const int* __restrict__ rows,
                                         const double* done = nullptr) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count || gated_off(done)) return -1;
    return rows[first + t];
}

// Whether a DILU or ILU pivot breaks down: |pivot| <= tiny (the row's
// threshold) or not finite (the factor kernels then lower `failed`).
__device__ __forceinline__ bool pivot_breaks_down(double pivot, double tiny) {
    return !(fabs(pivot) > tiny) || !isfinite(pivot);
}

// x = 0 (a vector the host holds through a shared reference: PCG's work
// vectors, handed out by the backend's pool, cannot be memset from the host).
extern "C" __global__ void zero_vector(int n, double* __restrict__ x, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.0;
}

// Weighted / L1 Jacobi sweep (Wikberg 2024, §4.1), one block per slice, blockDim =
// H, H doubles of dynamic shared memory (x_own: x of the slice's own rows; not
// named modsell_shared, spmv.cu's untyped array of the mod-SELL row products):
// x_new = x + scale * (b - A x), with
// (b - A x)_i = b_i - a_ii x_i, then minus the off-diagonals in slot order.
// scale = omega / a_ii or 1 / (a_ii + sum |a_ij|). Double-buffered (x_new != x).
// x null means x = 0: x_new = scale * b without reading the matrix (the same
// bits: every product with 0 is an exact 0).
extern "C" __global__ void smooth_jacobi(int n, const u64* __restrict__ slice_ptr,
                                         const int* __restrict__ codes,
                                         const double* __restrict__ vals,
                                         const double* __restrict__ diag,
                                         const double* __restrict__ scale,
                                         const double* __restrict__ b,
                                         const double* __restrict__ x,
                                         double* __restrict__ x_new, const double* done) {
    if (gated_off(done)) return;
    extern __shared__ double x_own[];
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    if (x == nullptr) {
        if (in) x_new[row] = scale[row] * b[row];
        return;
    }
    const double xr = in ? x[row] : 0.0;
    x_own[t] = xr;
    __syncthreads();
    double res = in ? b[row] - diag[row] * xr : 0.0;
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c > 0) res -= vals[k] * __ldg(&x[c - 1]);
        else if (c < 0) res -= vals[k] * x_own[-(c + 1)];
    }
    if (in) x_new[row] = xr + scale[row] * res;
}

// Multicolour Gauss-Seidel (Wikberg 2024, §4.2.1): the rows rows[first .. first+count)
// of one colour, one thread each, in place: x_i = (b_i - sum_j a_ij x_j) / a_ii
// in slot order with the rn_ operations (no FMA contraction: a host evaluation
// in T gives the same bits). No two rows of a colour are coupled, so every x_j
// read belongs to another colour and is not written by this launch. The f32
// instance is the mixed-precision preconditioner's (gpu::smooth): the f32 twin
// of A and an f32 iterate, b read in f64 and rounded; from zero, x is zeroed
// by zero_vector_f32 and widened into z by ic_widen.
// kernel: smooth_colour<double>, smooth_colour_f32 = smooth_colour<float>
template <typename T>
__global__ void smooth_colour(int count, int first, int h, const int* __restrict__ rows,
                              const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
                              const T* __restrict__ vals, const T* __restrict__ diag,
                              const double* __restrict__ b, T* x, const double* done) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count || gated_off(done)) return;
    const int row = rows[first + i];
    const int s = row / h, base = s * h;
    T acc = (T)b[row];
    for (u64 k = slice_ptr[s] + (row - base); k < slice_ptr[s + 1]; k += h) {
        const int c = codes[k];
        if (c > 0) acc = rn_sub(acc, rn_mul(vals[k], x[c - 1]));
        else if (c < 0) acc = rn_sub(acc, rn_mul(vals[k], x[base - c - 1]));
    }
    x[row] = rn_div(acc, diag[row]);
}

// Jones-Plassmann priority: the "lowbias32" integer hash (colouring.rs jp_priority).
__device__ unsigned jp_hash(unsigned x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

// Whether row u outranks row v: larger hash, ties by larger index.
__device__ bool jp_above(int u, int v) {
    const unsigned hu = jp_hash((unsigned)u), hv = jp_hash((unsigned)v);
    return hu > hv || (hu == hv && u > v);
}

// Jones-Plassmann round, part 1: candidate[v] = 1 for uncoloured rows (colour
// -1) that outrank all their uncoloured neighbours. Reads colours only, so the
// candidates form an independent set.
extern "C" __global__ void jp_select(int n, int h, const u64* __restrict__ slice_ptr,
                                     const int* __restrict__ codes,
                                     const int* __restrict__ colour,
                                     int* __restrict__ candidate) {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    int selected = 0;
    if (colour[v] < 0) {
        selected = 1;
        const int s = v / h, base = s * h;
        for (u64 k = slice_ptr[s] + (v - base); k < slice_ptr[s + 1]; k += h) {
            const int c = codes[k];
            if (c == 0) continue;
            const int u = (int)modsell_column(c, base);
            if (colour[u] < 0 && jp_above(u, v)) {
                selected = 0;
                break;
            }
        }
    }
    candidate[v] = selected;
}

// Jones-Plassmann round, part 2: each candidate takes the smallest colour no
// neighbour has (first fit). No neighbour of a candidate is a candidate, so the
// colours read here do not change during the launch. `uncoloured` counts the
// rows still uncoloured after the round (zeroed by the host before).
extern "C" __global__ void jp_assign(int n, int h, const u64* __restrict__ slice_ptr,
                                     const int* __restrict__ codes, int* colour,
                                     const int* __restrict__ candidate,
                                     int* __restrict__ uncoloured) {
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    if (!candidate[v]) {
        if (colour[v] < 0) atomicAdd(uncoloured, 1);
        return;
    }
    // Colours first .. first+63 as a bit mask; move on while all 64 are taken.
    for (int first = 0;; first += 64) {
        unsigned long long used = 0ULL;
        for_modsell_offdiagonals(v, h, slice_ptr, codes, [&](u64, unsigned u) {
            const int cu = colour[u];
            if (cu >= first && cu < first + 64) used |= 1ULL << (cu - first);
        });
        if (used != ~0ULL) {
            colour[v] = first + __ffsll((long long)~used) - 1;
            return;
        }
    }
}

// ---- Block Jacobi (Wikberg 2024, §4.3.1 `smooth_kern`) ----

#define INNER_JACOBI 0
#define INNER_GS 1
#define INNER_SYM_GS 2
#define INNER_CG 3

// The block kernel is a template over the value type T of the matrix, the
// iterate and the shared local block: T = double (smooth_block) or float
// (smooth_block_f32, mixed precision: the f32 twin of A and an f32 iterate,
// b read in f64 and rounded). The reductions (block residual norms, p.Ap) are
// summed in double in both; the scalars they give (alpha, beta) are rounded
// to T before they multiply vectors.

// Per thread: its row's in-slice off-diagonals, m-th at coef[m*H + t], local
// column nbr[m*H + t], m < cnt (no padding is read).
template <typename T>
struct LocalRow {
    const T* coef;
    const int* nbr;
    int cnt;
    T b, d;
};

// start - sum_m coef_m * lv[nbr_m], in stored order.
template <typename T>
__device__ T minus_off(const LocalRow<T>& a, T start, const T* lv) {
    const int h = blockDim.x, t = threadIdx.x;
    for (int m = 0; m < a.cnt; ++m) start -= a.coef[m * h + t] * lv[a.nbr[m * h + t]];
    return start;
}

// Jacobi steps damped by omega from 0 (the first is y = omega b/d); stops
// when the block's squared residual <= stop (stop > 0) or after max_iter steps.
template <typename T>
__device__ T inner_jacobi(const LocalRow<T>& a, T* lv, int max_iter, double stop,
                          double omega_) {
    const int t = threadIdx.x;
    const T omega = (T)omega_;
    T y = omega * a.b / a.d;
    for (int it = 1; it < max_iter; ++it) {
        __syncthreads();  // earlier readers of lv are done
        lv[t] = y;
        __syncthreads();
        const T res = minus_off(a, a.b - a.d * y, lv);
        if (stop > 0.0 && block_sum_all((double)(res * res)) <= stop) break;
        y += omega * res / a.d;
    }
    return y;
}

// Warp-serialised Gauss-Seidel from 0 (Wikberg 2024, §4.3.1 GS_device): warps in order
// (then in reverse when symmetric), each computing its rows from lv (earlier
// warps new, its own and later ones old: Jacobi inside a warp) and writing
// them after the whole warp has read. One barrier per warp.
template <typename T>
__device__ T inner_gs(const LocalRow<T>& a, T* lv, int max_iter, double stop, bool symmetric) {
    const int t = threadIdx.x, warp = t >> 5, n_warps = blockDim.x >> 5;
    T y = 0;
    __syncthreads();
    lv[t] = 0;
    __syncthreads();
    for (int it = 0; it < max_iter; ++it) {
        const int steps = symmetric ? 2 * n_warps : n_warps;
        for (int k = 0; k < steps; ++k) {
            const int w = k < n_warps ? k : 2 * n_warps - 1 - k;
            if (warp == w) {
                y = minus_off(a, a.b, lv) / a.d;
                __syncwarp();
                lv[t] = y;
            }
            __syncthreads();
        }
        if (stop > 0.0) {
            const T res = minus_off(a, a.b - a.d * y, lv);
            if (block_sum_all((double)(res * res)) <= stop) break;
        }
    }
    return y;
}

// Conjugate gradients from 0 on the block (Wikberg 2024, §4.3.1 CG_device); r0 = |b|^2.
template <typename T>
__device__ T inner_cg(const LocalRow<T>& a, T* lv, int max_iter, double stop, double r0) {
    const int h = blockDim.x, t = threadIdx.x;
    T y = 0, r = a.b, p = a.b;
    double rr = r0;
    for (int it = 0; it < max_iter; ++it) {
        __syncthreads();
        lv[t] = p;
        __syncthreads();
        T ap = a.d * p;
        for (int m = 0; m < a.cnt; ++m) ap += a.coef[m * h + t] * lv[a.nbr[m * h + t]];
        const double p_ap = block_sum_all((double)(p * ap));
        if (!(p_ap > 0.0)) break;
        const T alpha = (T)(rr / p_ap);
        y += alpha * p;
        r -= alpha * ap;
        const double rr_new = block_sum_all((double)(r * r));
        if (rr_new <= stop) break;
        p = r + (T)(rr_new / rr) * p;
        rr = rr_new;
    }
    return y;
}

// One block-Jacobi sweep: one thread block per slice, blockDim = H. x_in null
// (synchronous only) means x = 0: neither x nor the out-of-slice columns are
// read, with the same result bits. Dynamic shared memory: [lv: H T][coef:
// H*mnz T][nbr: H*mnz ints], mnz = the largest slice_mnz (the offsets use this
// slice's slice_mnz[l]). The block stages x of its rows in lv, forms the block
// residual b - A x (rows past n: a_ii = 1, b = 0, x = 0) while collecting its
// in-slice entries, solves A_ll y = residual with the inner solver (skipped
// when the residual is 0), and writes x + y. Synchronous: x_out != x_in.
// Asynchronous: x_out == x_in, read and written in place (so no __restrict__
// and no __ldg on x). `tol2` = innerTolerance^2 (0: a fixed max_iter steps);
// `omega` damps the inner Jacobi steps.
// T = double; or mixed precision (`_f32`, a PCG preconditioner sweeping from
// zero): the f32 twin of A, f32 iterates (widened into z by ic_widen after
// the last sweep); shared memory [lv: H floats][coef: H*mnz floats][nbr:
// H*mnz ints].
// kernel: smooth_block<double>, smooth_block_f32 = smooth_block<float>
template <typename T>
__global__ void smooth_block(int n, const u64* __restrict__ slice_ptr,
                             const int* __restrict__ codes, const T* __restrict__ vals,
                             const T* __restrict__ diag, const int* __restrict__ slice_mnz,
                             const double* __restrict__ b, const T* x_in, T* x_out,
                             int inner, int max_iter, double tol2, double omega,
                             const double* done) {
    if (gated_off(done)) return;
    extern __shared__ double smem[];
    const int h = blockDim.x, t = threadIdx.x, l = blockIdx.x, row = l * h + t;
    const bool in = row < n;
    const int mnz = slice_mnz[l];
    T* lv = (T*)smem;
    T* coef = lv + h;
    int* nbr = (int*)(coef + (size_t)h * mnz);
    const bool from_zero = x_in == nullptr;
    const T xi = in && !from_zero ? x_in[row] : (T)0;
    LocalRow<T> a;
    a.coef = coef;
    a.nbr = nbr;
    a.cnt = 0;
    a.d = in ? diag[row] : (T)1;
    a.b = in ? (T)b[row] - a.d * xi : (T)0;
    lv[t] = xi;
    __syncthreads();
    const u64 start = slice_ptr[l], end = slice_ptr[l + 1];
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c > 0) {
            if (!from_zero) a.b -= vals[k] * x_in[c - 1];
        } else if (c < 0) {
            const int j = -(c + 1);
            const T v = vals[k];
            a.b -= v * lv[j];
            coef[a.cnt * h + t] = v;
            nbr[a.cnt * h + t] = j;
            ++a.cnt;
        }
    }
    // block_sum_all's barriers also order the coef/nbr writes before any read.
    const double r0 = block_sum_all((double)(a.b * a.b));
    T y = 0;
    if (r0 > 0.0) {
        const double stop = tol2 * r0;
        switch (inner) {
            case INNER_JACOBI: y = inner_jacobi(a, lv, max_iter, stop, omega); break;
            case INNER_GS: y = inner_gs(a, lv, max_iter, stop, false); break;
            case INNER_SYM_GS: y = inner_gs(a, lv, max_iter, stop, true); break;
            default: y = inner_cg(a, lv, max_iter, stop, r0); break;
        }
    }
    if (in) x_out[row] = xi + y;
    if (x_out == x_in) __threadfence();  // asynchronous: publish to blocks still running
}

// ---- Device set-up of the point preconditioners (src/gpu/setup.rs) ----

// failed[0] = the smallest row + 1 whose diagonal is not positive (missing
// entries are stored as 0; NaN fails), from n + 1 set by the host: the CPU's
// check (solve/precond.rs Triangles::new). One thread per row.
extern "C" __global__ void diag_check(int n, const double* __restrict__ diag, u64* failed) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && !(diag[row] > 0.0)) atomicMin(failed, (u64)row + 1);
}

// Row scales of the point smoothers and of truncated Neumann, one thread per
// row over the mod-SELL pattern: mode 0 omega / a_ii (weighted Jacobi),
// 1 1 / (a_ii + sum |a_ij| over the off-diagonals in slot = column order,
// L1 Jacobi), 2 1 / a_ii. The CPU's operations in its order with _rn
// intrinsics (solve/smoother.rs PointJacobi, solve/neumann.rs): equal bit for
// bit. scale_f32 (null: none) gets the scale rounded to f32 (Rust `as f32`).
extern "C" __global__ void jacobi_scales(int n, int h, const u64* __restrict__ slice_ptr,
                                         const int* __restrict__ codes,
                                         const double* __restrict__ vals,
                                         const double* __restrict__ diag, int mode, double omega,
                                         double* __restrict__ scale,
                                         float* __restrict__ scale_f32) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const double d = diag[row];
    double s;
    if (mode == 0) {
        s = __ddiv_rn(omega, d);
    } else if (mode == 1) {
        const int sl = row / h;
        double sum = d;
        for (u64 k = slice_ptr[sl] + (row - sl * h); k < slice_ptr[sl + 1]; k += h)
            if (codes[k] != 0) sum = __dadd_rn(sum, fabs(vals[k]));
        s = __ddiv_rn(1.0, sum);
    } else {
        s = __ddiv_rn(1.0, d);
    }
    scale[row] = s;
    if (scale_f32 != nullptr) scale_f32[row] = __double2float_rn(s);
}
