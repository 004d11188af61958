// Block-IC (src/solve/block_jacobi/cuda.rs DeviceBlockIc; CPU reference src/solve/block_jacobi/cpu.rs
// BlockIc = solve::precond Dic/Ic0 of the block-diagonal part of A) and the
// mixed-precision Jacobi sweep of the smoothers. Compiled with
// spmv.cu, smooth.cu and ic.cu (u64, gated_off, the rn_ operations).
//
// A block is a mod-SELL slice of H rows, one thread block of H threads, one
// thread per row. Its in-slice entries (codes < 0, column order, as the CPU's
// block diagonal keeps them) are staged in dynamic shared memory, laid out as
// smooth_block's: [x or w: H doubles][coef: H*mnz][nbr: H*mnz ints], entry m
// of local row t at m*H + t; mnz = slice_mnz[slice] (the offsets) and the
// bytes are those of the largest slice (block_shared_bytes).
//
// Triangular sweeps inside the block are level-scheduled: levels[2*row] and
// levels[2*row+1] are the row's forward and backward level inside its block
// (src/sparse/levels.rs on the block diagonal), slice_levels[2*s], [2*s+1]
// the slice's level counts; each level is one pass with a __syncthreads, the
// rows of a level in parallel. Every operation is the CPU's, in its order,
// with the _rn intrinsics (no FMA contraction): factors and sweeps equal the
// CPU's bit for bit in f64.

// The dynamic shared memory of both block kernels.
extern __shared__ double block_ic_smem[];

// rn_mul etc.: kernels/spmv.cu.

// Factorisation, once per matrix: one block per slice. DIC (ic0 = 0):
// d_t = a_tt - sum over lower in-block slots (ascending) of a^2 / d_col,
// ic_diag = 1/d (OpenFOAM calcReciprocalD). IC(0) (ic0 = 1): for each lower
// slot m of row t, l = (a - sum_{common lower columns < col} l_tp l_kq) / l_kk,
// then l_tt = sqrt(a_tt - sum l^2); ic_diag = l_tt, ic_off at each in-slice
// mod-SELL slot: L's value for lower slots, l_it (the transposed entry) for
// upper slots (t, i), which the backward sweep reads. A pivot <= 0 or NaN
// lowers `failed` to row + 1 (atomicMin from n + 1). Mixed precision
// (ic_diag_f32 non-null): the f32 sweep's factors rounded here as well,
// ic_diag_f32 per row and ic_off_f32 at the in-slice slots (DIC: A's
// values, which its sweep reads), the only slots that sweep reads; a
// separate copy would pass over every slot of the matrix again.
extern "C" __global__ void block_ic_factor(int n, const u64* __restrict__ slice_ptr,
                                           const int* __restrict__ codes,
                                           const double* __restrict__ vals,
                                           const double* __restrict__ diag,
                                           const int* __restrict__ slice_mnz,
                                           const int* __restrict__ levels,
                                           const int* __restrict__ slice_levels, int ic0,
                                           double* __restrict__ ic_diag,
                                           double* __restrict__ ic_off,
                                           float* __restrict__ ic_diag_f32,
                                           float* __restrict__ ic_off_f32, int* failed) {
    const int h = blockDim.x, t = threadIdx.x, l = blockIdx.x, row = l * h + t;
    const bool in = row < n;
    const int mnz = slice_mnz[l];
    double* piv = block_ic_smem;
    double* coef = block_ic_smem + h;
    int* nbr = (int*)(coef + (size_t)h * mnz);
    const u64 start = slice_ptr[l], end = slice_ptr[l + 1];
    int cnt = 0;
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c < 0) {
            coef[cnt * h + t] = vals[k];
            nbr[cnt * h + t] = -(c + 1);
            ++cnt;
        }
    }
    // Unused entries past a row's count: column h (after every local column),
    // so that the merges of IC(0) stop there.
    for (int m = cnt; m < mnz; ++m) nbr[m * h + t] = h;
    const int level = in ? levels[2 * row] : 0;
    const int n_levels = slice_levels[2 * l];
    const double a_tt = in ? diag[row] : 1.0;
    __syncthreads();
    for (int lev = 0; lev < n_levels; ++lev) {
        if (lev == level) {
            double pivot;
            if (!ic0) {
                pivot = a_tt;
                for (int m = 0; m < cnt && nbr[m * h + t] < t; ++m) {
                    const double a = coef[m * h + t];
                    pivot = __dsub_rn(pivot, __ddiv_rn(__dmul_rn(a, a), piv[nbr[m * h + t]]));
                }
                piv[t] = pivot;
            } else {
                for (int m = 0; m < cnt && nbr[m * h + t] < t; ++m) {
                    const int k = nbr[m * h + t];
                    double sum = 0.0;
                    int p = 0, q = 0;
                    while (p < m && q < mnz && nbr[q * h + k] < k) {
                        const int cp = nbr[p * h + t], cq = nbr[q * h + k];
                        if (cp < cq) {
                            ++p;
                        } else if (cp > cq) {
                            ++q;
                        } else {
                            sum = __dadd_rn(sum, __dmul_rn(coef[p * h + t], coef[q * h + k]));
                            ++p;
                            ++q;
                        }
                    }
                    coef[m * h + t] = __ddiv_rn(__dsub_rn(coef[m * h + t], sum), piv[k]);
                }
                double squares = 0.0;
                for (int m = 0; m < cnt && nbr[m * h + t] < t; ++m)
                    squares = __dadd_rn(squares, __dmul_rn(coef[m * h + t], coef[m * h + t]));
                pivot = __dsub_rn(a_tt, squares);
                piv[t] = __dsqrt_rn(pivot);
            }
            if (in && !(pivot > 0.0)) atomicMin(failed, row + 1);
        }
        __syncthreads();
    }
    if (!in) return;
    const bool f32 = ic_diag_f32 != nullptr;
    if (!ic0) {
        const double rd = __drcp_rn(piv[t]);
        ic_diag[row] = rd;
        if (!f32) return;
        ic_diag_f32[row] = (float)rd;
        for (u64 k = start + t; k < end; k += h)
            if (codes[k] < 0) ic_off_f32[k] = (float)vals[k];
        return;
    }
    ic_diag[row] = piv[t];
    if (f32) ic_diag_f32[row] = (float)piv[t];
    int m = 0;
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c >= 0) continue;
        const int i = -(c + 1);
        double value;
        if (i < t) {
            value = coef[m * h + t];
        } else {
            // Row i's lower entry (i, t): its value l_it.
            value = 0.0;
            for (int q = 0; q < mnz && nbr[q * h + i] < i; ++q)
                if (nbr[q * h + i] == t) value = coef[q * h + i];
        }
        // Mixed precision keeps only the f32 factor (ic_off null).
        if (ic_off) ic_off[k] = value;
        if (f32) ic_off_f32[k] = (float)value;
        ++m;
    }
}

// One block-IC sweep x_out = x + M^-1 (b - A x), M the block's DIC or IC(0)
// (as a preconditioner: x_in null means x = 0, and x_out = M^-1 b). The
// residual in f64 with the f64 matrix, b - a_tt x_t then the off-diagonals
// in slot (column) order, as block_jacobi.rs; the sweeps in T: DIC's ic_off
// is A's values (the f32 twin for T = float), IC(0)'s the factor's slots.
// DIC: w = rd r, w -= (rd a) w_col over lower slots ascending, then over
// upper slots descending. IC(0): y = (r - sum l y_col) / l_tt forward,
// z = (y - sum l_it z_i, upper slots descending) / l_tt backward.
// Both instances take the trailing `done` gate of PCG's fused loop.
//
// A thread holds BLOCK_IC_SWEEP_ROWS rows of the h-row slice (local rows t,
// t + blockDim.x, ...) and loads their slots together. A level holds a few
// dozen of a block's rows, so with one thread per row most threads waited at
// every level's barrier; the slices resident on a multiprocessor were bound
// by threads (512 per slice) and shared memory. Half the threads, the local
// columns in 16 bits and the values in T keep more slices' levels and loads
// in flight: 8-11 % off block-IC's PCG solve at 8 M rows (docs/src/
// measurements.md, "block-IC's sweep"). Each row's operations and their order
// are those of one thread per row, so the bits are too. Shared memory:
// [w: h doubles][coef: h*mnz T][nbr: h*mnz unsigned shorts]
// (block_ic_sweep_shared_bytes in src/solve/block_jacobi/cuda.rs). The
// block has ceil(h / BLOCK_IC_SWEEP_ROWS) threads (DeviceBlockIc::sweep); h
// is a multiple of 32 (mod-SELL), and the guards on t < h hold for any h.
#define BLOCK_IC_SWEEP_ROWS 2
// kernel: block_ic_sweep_f64 = block_ic_sweep<double>, block_ic_sweep_f32 = block_ic_sweep<float>
template <typename T>
__global__ void block_ic_sweep(int n, int h, const u64* __restrict__ slice_ptr,
                               const int* __restrict__ codes, const double* __restrict__ vals,
                               const double* __restrict__ diag,
                               const int* __restrict__ slice_mnz, const double* __restrict__ b,
                               const double* __restrict__ x_in, double* __restrict__ x_out,
                               const T* __restrict__ ic_diag, const T* __restrict__ ic_off,
                               int ic0, const int* __restrict__ levels,
                               const int* __restrict__ slice_levels, const double* done) {
    if (gated_off(done)) return;
    constexpr int R = BLOCK_IC_SWEEP_ROWS;
    const int l = blockIdx.x, mnz = slice_mnz[l];
    double* lv = block_ic_smem;
    T* coef = (T*)(block_ic_smem + h);
    unsigned short* nbr = (unsigned short*)(coef + (size_t)h * mnz);
    const bool from_zero = x_in == nullptr;
    int ts[R];
    bool in[R];
    double xi[R], res[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
        ts[j] = threadIdx.x + j * blockDim.x;
        const int row = l * h + ts[j];
        in[j] = ts[j] < h && row < n;
        xi[j] = in[j] && !from_zero ? x_in[row] : 0.0;
        // From x = 0, b - a_tt 0 is b (a_tt > 0 once factorised): a_tt is not read.
        res[j] = !in[j] ? 0.0 : from_zero ? b[row] : __dsub_rn(b[row], __dmul_rn(diag[row], xi[j]));
        if (ts[j] < h) lv[ts[j]] = xi[j];
    }
    __syncthreads();
    const u64 start = slice_ptr[l], end = slice_ptr[l + 1];
    // Slot by slot, the thread's rows together (their loads in flight at
    // once); each row still takes its slots in order.
    const int width = (int)((end - start) / (u64)h);
    int cnt[R];
#pragma unroll
    for (int j = 0; j < R; ++j) cnt[j] = 0;
    for (int m = 0; m < width; ++m) {
        const u64 k0 = start + (u64)m * h;
        int c[R];
        T off[R];
#pragma unroll
        for (int j = 0; j < R; ++j) c[j] = ts[j] < h ? codes[k0 + ts[j]] : 0;
#pragma unroll
        for (int j = 0; j < R; ++j) off[j] = c[j] < 0 ? ic_off[k0 + ts[j]] : T(0);
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int t = ts[j];
            const u64 k = k0 + t;
            if (c[j] > 0) {
                if (!from_zero) res[j] = __dsub_rn(res[j], __dmul_rn(vals[k], x_in[c[j] - 1]));
            } else if (c[j] < 0) {
                const int i = -(c[j] + 1);
                // From x = 0 the residual is b: A's values are not read, only
                // the factor's (the zeros a product with x = 0 would subtract
                // change no bit of x_out = 0 + y).
                if (!from_zero) res[j] = __dsub_rn(res[j], __dmul_rn(vals[k], lv[i]));
                coef[cnt[j] * h + t] = off[j];
                nbr[cnt[j] * h + t] = (unsigned short)i;
                ++cnt[j];
            }
        }
    }
    __syncthreads();  // lv (x) is read; it holds w (T) from here
    T* w = (T*)lv;
    T d[R], r[R], y[R];
    int fw[R], bw[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
        const int row = l * h + ts[j];
        d[j] = in[j] ? ic_diag[row] : T(1);
        // A thread's row past the slice takes no level; a row past n takes
        // level 0 with an empty row, as one thread per row did.
        fw[j] = in[j] ? levels[2 * row] : (ts[j] < h ? 0 : -1);
        bw[j] = in[j] ? levels[2 * row + 1] : (ts[j] < h ? 0 : -1);
        r[j] = (T)res[j];
        y[j] = ic0 ? T(0) : rn_mul(d[j], r[j]);
    }
    for (int lev = 0; lev < slice_levels[2 * l]; ++lev) {
#pragma unroll
        for (int j = 0; j < R; ++j) {
            if (lev != fw[j]) continue;
            const int t = ts[j];
            if (ic0) {
                T sum = T(0);
                for (int m = 0; m < cnt[j] && nbr[m * h + t] < t; ++m)
                    sum = rn_add(sum, rn_mul(coef[m * h + t], w[nbr[m * h + t]]));
                y[j] = rn_div(rn_sub(r[j], sum), d[j]);
            } else {
                for (int m = 0; m < cnt[j] && nbr[m * h + t] < t; ++m)
                    y[j] = rn_sub(y[j], rn_mul(rn_mul(d[j], coef[m * h + t]), w[nbr[m * h + t]]));
            }
            w[t] = y[j];
        }
        __syncthreads();
    }
    for (int lev = 0; lev < slice_levels[2 * l + 1]; ++lev) {
#pragma unroll
        for (int j = 0; j < R; ++j) {
            if (lev != bw[j]) continue;
            const int t = ts[j];
            if (ic0) {
                for (int m = cnt[j] - 1; m >= 0 && nbr[m * h + t] > t; --m)
                    y[j] = rn_sub(y[j], rn_mul(coef[m * h + t], w[nbr[m * h + t]]));
                y[j] = rn_div(y[j], d[j]);
            } else {
                for (int m = cnt[j] - 1; m >= 0 && nbr[m * h + t] > t; --m)
                    y[j] = rn_sub(y[j], rn_mul(rn_mul(d[j], coef[m * h + t]), w[nbr[m * h + t]]));
            }
            w[t] = y[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < R; ++j)
        if (in[j]) x_out[l * h + ts[j]] = __dadd_rn(xi[j], (double)y[j]);
}

// Block-IC's structure, once per pattern, on the device (no host pass over
// the matrix): one block of H threads per slice, 2H ints of dynamic shared
// memory. Per row its in-slice off-diagonal count, its forward level (1 +
// the deepest in-slice lower neighbour, 0 without one) and backward level
// (the same over upper neighbours), computed in rounds: a row takes its
// level once all its neighbours on that side have theirs (at most H
// rounds; a level, once set, never changes). Writes levels[2*row],
// levels[2*row+1], slice_mnz[s] (the slice's largest count) and
// slice_levels[2*s], [2*s+1] (its level counts), and raises maxima[0..3] to
// the largest count and level counts over all slices (zeroed by the host).
// The CPU reference is the host set-up (src/sparse/levels.rs LevelSchedule
// on the block diagonal, src/sparse/blocks.rs in_slice_counts).
extern "C" __global__ void block_ic_structure(int n, const u64* __restrict__ slice_ptr,
                                              const int* __restrict__ codes,
                                              int* __restrict__ slice_mnz,
                                              int* __restrict__ levels,
                                              int* __restrict__ slice_levels,
                                              int* __restrict__ maxima) {
    __shared__ int slice_max[3];
    const int h = blockDim.x, t = threadIdx.x, l = blockIdx.x, row = l * h + t;
    const bool in = row < n;
    int* fw = (int*)block_ic_smem;
    int* bw = fw + h;
    const u64 start = slice_ptr[l], end = slice_ptr[l + 1];
    int cnt = 0;
    if (in)
        for (u64 k = start + t; k < end; k += h) cnt += codes[k] < 0;
    fw[t] = in ? -1 : 0;
    bw[t] = in ? -1 : 0;
    if (t < 3) slice_max[t] = 0;
    __syncthreads();
    for (;;) {
        int f = -1, b = -1;
        if (in && (fw[t] < 0 || bw[t] < 0)) {
            bool f_ready = fw[t] < 0, b_ready = bw[t] < 0;
            int f_deepest = -1, b_deepest = -1;
            for (u64 k = start + t; k < end; k += h) {
                const int c = codes[k];
                if (c >= 0) continue;
                const int j = -(c + 1);
                if (j < t) {
                    if (fw[j] < 0) f_ready = false;
                    else f_deepest = max(f_deepest, fw[j]);
                } else {
                    if (bw[j] < 0) b_ready = false;
                    else b_deepest = max(b_deepest, bw[j]);
                }
            }
            if (f_ready) f = f_deepest + 1;
            if (b_ready) b = b_deepest + 1;
        }
        __syncthreads();  // every read of this round before any write
        if (f >= 0) fw[t] = f;
        if (b >= 0) bw[t] = b;
        if (!__syncthreads_or(in && (fw[t] < 0 || bw[t] < 0))) break;
    }
    if (in) {
        levels[2 * row] = fw[t];
        levels[2 * row + 1] = bw[t];
        atomicMax(&slice_max[0], cnt);
        atomicMax(&slice_max[1], fw[t] + 1);
        atomicMax(&slice_max[2], bw[t] + 1);
    }
    __syncthreads();
    if (t == 0) {
        slice_mnz[l] = slice_max[0];
        slice_levels[2 * l] = slice_max[1];
        slice_levels[2 * l + 1] = slice_max[2];
        for (int q = 0; q < 3; ++q) atomicMax(&maxima[q], slice_max[q]);
    }
}

// Mixed-precision weighted / L1 Jacobi as a PCG preconditioner
// (gpu::smooth, Method::JacobiF32): sweeps from x = 0 in f32 on the f32 twin
// of A, x_new = x + scale (r - A x) with r read in f64 and rounded, (r - A x)_i
// = r_i - a_ii x_i then the off-diagonals in slot order (smooth_jacobi's
// order, _rn: equal to a host f32 evaluation). x null: x_new = scale r. One
// block per slice, H floats of x of the slice's own rows in shared memory.
// ic_widen writes z in f64 after the last sweep.
extern "C" __global__ void smooth_jacobi_f32(int n, const u64* __restrict__ slice_ptr,
                                             const int* __restrict__ codes,
                                             const float* __restrict__ vals,
                                             const float* __restrict__ diag,
                                             const float* __restrict__ scale,
                                             const double* __restrict__ b,
                                             const float* __restrict__ x,
                                             float* __restrict__ x_new, const double* done) {
    if (gated_off(done)) return;
    float* x_own = (float*)block_ic_smem;
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    const float br = in ? (float)b[row] : 0.0f;
    if (x == nullptr) {
        if (in) x_new[row] = __fmul_rn(scale[row], br);
        return;
    }
    const float xr = in ? x[row] : 0.0f;
    x_own[t] = xr;
    __syncthreads();
    float res = in ? __fsub_rn(br, __fmul_rn(diag[row], xr)) : 0.0f;
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c > 0) res = __fsub_rn(res, __fmul_rn(vals[k], x[c - 1]));
        else if (c < 0) res = __fsub_rn(res, __fmul_rn(vals[k], x_own[-(c + 1)]));
    }
    if (in) x_new[row] = __fadd_rn(xr, __fmul_rn(scale[row], res));
}

// x = 0 in f32, gated.
extern "C" __global__ void zero_vector_f32(int n, float* __restrict__ x, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.0f;
}
