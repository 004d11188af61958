// Aggregation AMG on the device: the cycle (uses u64, block_sum and
// modsell_row from spmv.cu, gated_off from smooth.cu; the algorithm is the
// CPU reference's, src/solve/amg/cycle). The set-up is in amg.cu. Host
// side: src/solve/amg/cuda.rs.

// ---- The cycle. Every kernel takes a trailing `done` (smooth.cu gated_off):
// inside PCG's fused loop, null or the solve's state, whose first entry is
// nonzero once the solve has stopped; the launch then returns at once (done
// is uniform over the grid, so blocks that synchronise return as a whole).

// Precision: the cycle kernels are kernel templates over T, the type of a
// level's matrix values and vectors, each instantiated by its `// kernel:`
// line as double (precision double; the kernels without a suffix) and float
// (precision mixed, `_f32`: f32 values and vectors; the coarsest operator,
// the K-cycle's dot products and scalars stay f64). The fine level's b is
// PCG's f64 residual in both.

// Entries of a CSR row whose loads amg_csr_row issues together.
#define AMG_ROW_BATCH 8

// Row i of A x on a CSR level with x_j = f(j): the row's products summed in
// stored order (Csr::spmv; the CPU cycle's row_residual). I: the index's type
// as the caller has it. The loads go out AMG_ROW_BATCH entries at a time
// (columns and values, then the gathers), the sum still one entry after the
// other: walked an entry at a time, a coarse row of 20-30 entries is as many
// dependent load pairs in a row, which the few warps of a small level cannot
// hide, so its launches took the same 9-20 us whatever the level's size.
template <typename T, typename I, typename F>
__device__ __forceinline__ T amg_csr_row(const u64* __restrict__ row_ptr,
                                         const unsigned* __restrict__ cols,
                                         const T* __restrict__ vals, I i, const F& f) {
    T acc = T(0);
    u64 k = row_ptr[i];
    const u64 end = row_ptr[i + 1];
    for (; k + AMG_ROW_BATCH <= end; k += AMG_ROW_BATCH) {
        unsigned c[AMG_ROW_BATCH];
        T v[AMG_ROW_BATCH], x[AMG_ROW_BATCH];
#pragma unroll
        for (int m = 0; m < AMG_ROW_BATCH; ++m) {
            c[m] = cols[k + m];
            v[m] = vals[k + m];
        }
#pragma unroll
        for (int m = 0; m < AMG_ROW_BATCH; ++m) x[m] = f(c[m]);
#pragma unroll
        for (int m = 0; m < AMG_ROW_BATCH; ++m) acc += v[m] * x[m];
    }
    for (; k < end; ++k) acc += vals[k] * f(cols[k]);
    return acc;
}

// The iterate a fused kernel reads at row j (see "Fused sweeps" below):
// s_j b_j (x null: one sweep from zero, never stored) or x_j, plus
// θ x_c[agg_j] once the coarse correction is made (xc non-null).
template <typename T, typename B>
struct SweepIterate {
    const T* __restrict__ s;
    const B* __restrict__ b;
    const T* __restrict__ x;
    const unsigned* __restrict__ aggregate;
    const T* __restrict__ xc;
    T theta;
    __device__ __forceinline__ T operator()(unsigned j) const {
        const T base = x == nullptr ? s[j] * (T)b[j] : x[j];
        return xc == nullptr ? base : base + theta * xc[aggregate[j]];
    }
};

// Weighted / L1 Jacobi sweep on a CSR level: x_new = x + scale * (b - A x),
// the row in stored order as the CPU cycle's row_residual (solve::amg::cycle).
// x null means x = 0: x_new = scale * b.
// kernel: amg_jacobi_csr<double>, amg_jacobi_csr_f32 = amg_jacobi_csr<float>
template <typename T>
__global__ void amg_jacobi_csr(int n, const u64* __restrict__ row_ptr,
                               const unsigned* __restrict__ cols, const T* __restrict__ vals,
                               const T* __restrict__ scale, const T* __restrict__ b,
                               const T* __restrict__ x, T* __restrict__ x_new,
                               const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (x == nullptr) {
        x_new[i] = scale[i] * b[i];
        return;
    }
    const T ax = amg_csr_row(row_ptr, cols, vals, i, [&](unsigned j) { return __ldg(&x[j]); });
    x_new[i] = x[i] + scale[i] * (b[i] - ax);
}

// PCG's r . z of the z the cycle's last fine sweep wrote (r = the sweep's b,
// `term` this row's r_i z_i rounded alone, 0 past n): the partials
// cg_precondition stores from r and z, bit for bit (chunk_partials_of_block in
// chunks of `chunk` rows, its block size), then with a ticket the last block's
// finish_precondition of iteration j; gpu::smooth::LoopDot on the host. Every
// thread of the block must call it.
__device__ void sweep_rz_partials(int n, double term, int chunk, double* partials, double* st,
                                  double* rec, int j, unsigned* ticket) {
    const int m = (n + chunk - 1) / chunk;
    chunk_partials_of_block(term, chunk, m, partials);
    if (ticket != nullptr && last_block(ticket)) finish_precondition(m, partials, 0, st, rec, j);
}

// Mixed precision, fine level: a Jacobi sweep on the f32 twin of the
// mod-SELL matrix (one block per slice, blockDim = H, H floats of dynamic
// shared memory), b = PCG's f64 residual rounded: x_new = x + scale (b - A x)
// with A x as modsell_row_t (diagonal first, then the slots). x null: x = 0.
// z non-null: the sweep's result is widened into z (the cycle's last sweep
// writes the preconditioned residual) instead of x_new; with rz_partials,
// also PCG's r . z of it (sweep_rz_partials).
extern "C" __global__ void amg_jacobi_modsell_f32(int n, const u64* __restrict__ slice_ptr,
                                                  const int* __restrict__ codes,
                                                  const float* __restrict__ vals,
                                                  const float* __restrict__ diag,
                                                  const float* __restrict__ scale,
                                                  const double* __restrict__ b,
                                                  const float* __restrict__ x,
                                                  float* __restrict__ x_new,
                                                  double* __restrict__ z, double* rz_partials,
                                                  int rz_chunk, double* st, double* rec, int j,
                                                  unsigned* ticket, const double* done) {
    if (gated_off(done)) return;
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const bool in = row < n;
    float out = 0.0f;
    if (x == nullptr) {  // uniform: no block synchronises
        if (in) out = scale[row] * (float)b[row];
    } else {
        float xr;
        const float ax = modsell_row_t<float>(n, slice_ptr, codes, vals, diag, x, &xr);
        if (in) out = xr + scale[row] * ((float)b[row] - ax);
    }
    if (in) {
        if (z != nullptr) z[row] = (double)out;
        else x_new[row] = out;
    }
    if (rz_partials != nullptr)
        sweep_rz_partials(n, in ? __dmul_rn(b[row], (double)out) : 0.0, rz_chunk, rz_partials,
                          st, rec, j, ticket);
}

// r = b - A x on the mod-SELL fine level in precision T (one block per slice,
// blockDim = H, H values of T of dynamic shared memory, as spmv_modsell), b
// (f64) rounded to T (mixed precision, `_f32`: on the f32 twin of the fine
// level, r in f32).
// kernel: amg_residual_modsell<double>, amg_residual_modsell_f32 = amg_residual_modsell<float>
template <typename T>
__global__ void amg_residual_modsell(int n, const u64* __restrict__ slice_ptr,
                                     const int* __restrict__ codes,
                                     const T* __restrict__ vals, const T* __restrict__ diag,
                                     const double* __restrict__ b, const T* __restrict__ x,
                                     T* __restrict__ r, const double* done) {
    if (gated_off(done)) return;
    T xr;
    const T ax = modsell_row_t<T>(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r[row] = (T)b[row] - ax;
}

// b_c[I] = sum of r over I's members, ascending (R = P^T).
// kernel: amg_restrict<double>, amg_restrict_f32 = amg_restrict<float>
template <typename T>
__global__ void amg_restrict(int nc, const u64* __restrict__ member_ptr,
                             const unsigned* __restrict__ members, const T* __restrict__ r,
                             T* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    T s = T(0);
    for (u64 k = member_ptr[I]; k < member_ptr[I + 1]; ++k) s += r[members[k]];
    bc[I] = s;
}

// Residual and restriction fused on a CSR level: b_c[I] = sum over I's
// members i, ascending, of (b_i - sum_j a_ij x_j), columns in order; x null
// means the iterate of one sweep from zero, x_j = s_j b_j, never stored (the
// fused cycle: the pre-sweep's launch and vector gone). A group
// of AMG_RR_LANES lanes per coarse row computes one member's residual each;
// the group's first lane adds them in ascending order, so the bits are those
// of one thread doing it all. (One thread per coarse row left a level of 60 k
// coarse rows at 15 warps per SM, each walking 4-8 rows in a row: bound by
// memory latency.) Launch AMG_RR_LANES threads per coarse row, blocks a
// multiple of 32.
#define AMG_RR_LANES 8
// kernel: amg_residual_restrict_csr<double>,
//         amg_residual_restrict_csr_f32 = amg_residual_restrict_csr<float>
template <typename T>
__global__ void amg_residual_restrict_csr(int nc, const u64* __restrict__ member_ptr,
                                          const unsigned* __restrict__ members,
                                          const u64* __restrict__ row_ptr,
                                          const unsigned* __restrict__ cols,
                                          const T* __restrict__ vals, const T* __restrict__ scale,
                                          const T* __restrict__ b, const T* __restrict__ x,
                                          T* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int I = t / AMG_RR_LANES, lane = t % AMG_RR_LANES;
    // The whole group leaves together: its lanes share I.
    if (I >= nc) return;
    const unsigned group = 0xffu << ((threadIdx.x % 32) & ~(AMG_RR_LANES - 1));
    const u64 end = member_ptr[I + 1];
    const SweepIterate<T, T> f{scale, b, x, nullptr, nullptr, T(0)};
    T s = T(0);
    for (u64 base = member_ptr[I]; base < end; base += AMG_RR_LANES) {
        T r = T(0);
        if (base + lane < end) {
            const unsigned i = members[base + lane];
            r = b[i] - amg_csr_row(row_ptr, cols, vals, i, f);
        }
        const int count = (int)(end - base < AMG_RR_LANES ? end - base : AMG_RR_LANES);
        for (int m = 0; m < count; ++m) s += __shfl_sync(group, r, m, AMG_RR_LANES);
    }
    if (lane == 0) bc[I] = s;
}

// Prolongation and correction: x_out[i] = x_in[i] + factor * x_c[aggregate[i]]
// (x_out may be x_in; factor rounded to T).
// kernel: amg_prolong<double>, amg_prolong_f32 = amg_prolong<float>
template <typename T>
__global__ void amg_prolong(int n, const unsigned* __restrict__ aggregate,
                            const T* __restrict__ xc, double factor, const T* x_in, T* x_out,
                            const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x_out[i] = x_in[i] + (T)factor * xc[aggregate[i]];
}

// dst = src.
// kernel: amg_copy<double>, amg_copy_f32 = amg_copy<float>
template <typename T>
__global__ void amg_copy(int n, const T* __restrict__ src, T* __restrict__ dst,
                         const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// Coarsest level: x = M b with M dense (row-major n x n, f64), one warp per
// row, lanes summing j = lane, lane + 32, ... in f64, then a fixed shuffle
// tree; x rounded to T.
// kernel: amg_dense_apply<double>, amg_dense_apply_f32 = amg_dense_apply<float>
template <typename T>
__global__ void amg_dense_apply(int n, const double* __restrict__ m, const T* __restrict__ b,
                                T* __restrict__ x, const double* done) {
    if (gated_off(done)) return;
    const int lane = threadIdx.x & 31;
    const int row = grid_warp();
    if (row >= n) return;  // whole warps leave together
    const double* mr = m + (u64)row * n;
    double s = 0.0;
#pragma unroll 8
    for (int j = lane; j < n; j += 32) s += mr[j] * (double)b[j];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) x[row] = (T)s;
}

// ---- K-cycle (Notay & Vassilevski 2008; solve::amg::cycle k_step): two
// flexible-CG steps on a coarse level, the scalars kept on the device in
// `k` (K_* slots), so the cycle stays a sequence of launches.

#define K_RHO1 0   // c . v, v = A c, c = B b
#define K_ALPHA1 1 // c . b
#define K_GAMMA 2  // d . v, d = B r
#define K_BETA 3   // d . w, w = A d
#define K_ALPHA2 4 // d . r
#define K_SLOTS 5

// y = A x on a CSR level (row in stored order, as Csr::spmv).
// kernel: amg_spmv_csr<double>, amg_spmv_csr_f32 = amg_spmv_csr<float>
template <typename T>
__global__ void amg_spmv_csr(int n, const u64* __restrict__ row_ptr,
                             const unsigned* __restrict__ cols, const T* __restrict__ vals,
                             const T* __restrict__ x, T* __restrict__ y, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = amg_csr_row(row_ptr, cols, vals, i, [&](unsigned j) { return __ldg(&x[j]); });
}

// Per-block partial sums of a . b in f64 (VECTOR_BLOCK threads, block_sum's
// order; f32 products are exact in f64).
// kernel: amg_dot_partials<double>, amg_dot_partials_f32 = amg_dot_partials<float>
template <typename T>
__global__ void amg_dot_partials(int n, const T* __restrict__ a, const T* __restrict__ b,
                                 double* __restrict__ partials, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? (double)a[i] * (double)b[i] : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// k[slot] = the sum of the m partials in reduce_fixed's order (one block).
extern "C" __global__ void amg_dot_finish(int m, const double* __restrict__ partials,
                                          double* __restrict__ k, int slot, const double* done) {
    if (gated_off(done)) return;
    const double s = reduce_fixed(m, partials);
    if (threadIdx.x == 0) k[slot] = s;
}

// The first step's length alpha1 / rho1 (0 when rho1 is not positive: the
// CPU then returns x = 0).
__device__ __forceinline__ double k_step1(const double* k) {
    return k[K_RHO1] > 0.0 ? k[K_ALPHA1] / k[K_RHO1] : 0.0;
}

// r = b - (alpha1 / rho1) v (the step rounded to T).
// kernel: amg_k_residual<double>, amg_k_residual_f32 = amg_k_residual<float>
template <typename T>
__global__ void amg_k_residual(int n, const T* __restrict__ b, const T* __restrict__ v,
                               const double* __restrict__ k, T* __restrict__ r,
                               const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const T step1 = (T)k_step1(k);
    r[i] = b[i] - step1 * v[i];
}

// x = cc c + cd d: rho2 = beta - gamma^2 / rho1; when rho2 > 1e-14 beta,
// cc = step1 - gamma alpha2 / (rho1 rho2) and cd = alpha2 / rho2, else the
// first step alone (d in the span of c); x = 0 when rho1 is not positive.
// The coefficients in f64, rounded to T.
// kernel: amg_k_combine<double>, amg_k_combine_f32 = amg_k_combine<float>
template <typename T>
__global__ void amg_k_combine(int n, const T* __restrict__ c, const T* __restrict__ d,
                              const double* __restrict__ k, T* __restrict__ x,
                              const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double rho1 = k[K_RHO1];
    if (!(rho1 > 0.0)) {
        x[i] = T(0);
        return;
    }
    const double step1 = k[K_ALPHA1] / rho1;
    const double gamma = k[K_GAMMA], beta = k[K_BETA], alpha2 = k[K_ALPHA2];
    const double rho2 = beta - gamma * gamma / rho1;
    double cc = step1, cd = 0.0;
    if (rho2 > 1e-14 * beta) {
        cc = step1 - gamma * alpha2 / (rho1 * rho2);
        cd = alpha2 / rho2;
    }
    x[i] = (T)cc * c[i] + (T)cd * d[i];
}

// ---- Fused sweeps. Two kinds of launch read an iterate that is never
// stored, each kernel computing it per entry (SweepIterate):
// - the fused cycle (setting `fused`, one sweep before and after the coarse
//   correction, a visit from x = 0): the pre-smoothed iterate s∘b (one
//   Jacobi sweep from zero) and the corrected iterate s∘b + θ P x_c. A
//   visit is residual (+ restriction) and one post-sweep, each one pass
//   over the matrix;
// - two sweeps or more: the first two sweeps from zero are one launch (the
//   second reads s∘b), and with an even count the prolongation and the first
//   post-sweep are one launch (it reads x + θ P x_c).
// Per level this removes the launches of a sweep from zero and of the
// prolongation, and their vector traffic; on the coarse levels, where a
// launch costs more than its bytes, those launches were a third of the
// cycle's. The arithmetic is the unfused cycle's (solve::amg::cycle) up to
// the order of contraction. The coarse levels' residual from s∘b is
// amg_residual_restrict_csr's with x null.

// (A x)_row on a mod-SELL level with x_j = f(j) (modsell_row_t's order: the
// diagonal, then the slots); *x_row = f(row). One block per slice,
// blockDim = H, H values of T in dynamic shared memory.
template <typename T, typename F>
__device__ T modsell_row_fused(int n, const u64* __restrict__ slice_ptr,
                               const int* __restrict__ codes, const T* __restrict__ vals,
                               const T* __restrict__ diag, const F& f, T* x_row) {
    T* x_slice = reinterpret_cast<T*>(modsell_shared);
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    const T xr = in ? f(row) : T(0);
    x_slice[t] = xr;
    T acc = in ? diag[row] * xr : T(0);
    __syncthreads();
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    // Two slots per trip, as modsell_row_part: both slots' loads and the
    // iterate's gathers are issued before the first product (the sums stay
    // in slot order).
    const auto iterate = [&](int c) {
        return c > 0 ? f(c - 1) : c < 0 ? x_slice[-(c + 1)] : T(0);
    };
    u64 k = start + t;
    for (; k + h < end; k += 2 * (u64)h) {
        const int c0 = codes[k], c1 = codes[k + h];
        const T v0 = vals[k], v1 = vals[k + h];
        const T x0 = iterate(c0), x1 = iterate(c1);
        if (c0 != 0) acc += v0 * x0;
        if (c1 != 0) acc += v1 * x1;
    }
    if (k < end && codes[k] != 0) acc += vals[k] * iterate(codes[k]);
    *x_row = xr;
    return acc;
}

// Fine level (mod-SELL), fused pre-smoothing and residual: r = b - A (s∘b).
// kernel: amg_fine_residual_zero<double>,
//         amg_fine_residual_zero_f32 = amg_fine_residual_zero<float>
template <typename T>
__global__ void amg_fine_residual_zero(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const T* __restrict__ vals, const T* __restrict__ diag,
                                       const T* __restrict__ scale,
                                       const double* __restrict__ b, T* __restrict__ r,
                                       const double* done) {
    if (gated_off(done)) return;
    const SweepIterate<T, double> f{scale, b, nullptr, nullptr, nullptr, T(0)};
    T xr;
    const T ax = modsell_row_fused<T>(n, slice_ptr, codes, vals, diag, f, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r[row] = (T)b[row] - ax;
}

// Fine level (mod-SELL), a Jacobi sweep from the fused iterate y
// (SweepIterate: x null, s∘b; xc non-null, + θ P x_c): y + s (b - A y),
// written in f64 into z when z is non-null (the cycle's last sweep, the
// preconditioned residual; with rz_partials, also PCG's r . z of it,
// sweep_rz_partials), else into x_out.
// kernel: amg_fine_jacobi_fused<double>,
//         amg_fine_jacobi_fused_f32 = amg_fine_jacobi_fused<float>
template <typename T>
__global__ void amg_fine_jacobi_fused(int n, const u64* __restrict__ slice_ptr,
                                      const int* __restrict__ codes, const T* __restrict__ vals,
                                      const T* __restrict__ diag, const T* __restrict__ scale,
                                      const double* __restrict__ b, const T* __restrict__ x,
                                      const unsigned* __restrict__ aggregate,
                                      const T* __restrict__ xc, double theta,
                                      T* __restrict__ x_out, double* __restrict__ z,
                                      double* rz_partials, int rz_chunk, double* st, double* rec,
                                      int j, unsigned* ticket, const double* done) {
    if (gated_off(done)) return;
    const SweepIterate<T, double> f{scale, b, x, aggregate, xc, (T)theta};
    T xr;
    const T ax = modsell_row_fused<T>(n, slice_ptr, codes, vals, diag, f, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const bool in = row < n;
    T out = T(0);
    if (in) {
        out = xr + scale[row] * ((T)b[row] - ax);
        if (z != nullptr) z[row] = (double)out;
        else x_out[row] = out;
    }
    if (rz_partials != nullptr)
        sweep_rz_partials(n, in ? __dmul_rn(b[row], (double)out) : 0.0, rz_chunk, rz_partials,
                          st, rec, j, ticket);
}

// Coarse level (CSR), a Jacobi sweep from the fused iterate y (SweepIterate:
// x null, s∘b; xc non-null, + θ P x_c): x_out = y + s (b - A y).
// kernel: amg_jacobi_fused_csr<double>,
//         amg_jacobi_fused_csr_f32 = amg_jacobi_fused_csr<float>
template <typename T>
__global__ void amg_jacobi_fused_csr(int n, const u64* __restrict__ row_ptr,
                                     const unsigned* __restrict__ cols,
                                     const T* __restrict__ vals, const T* __restrict__ scale,
                                     const T* __restrict__ b, const T* __restrict__ x,
                                     const unsigned* __restrict__ aggregate,
                                     const T* __restrict__ xc, double theta,
                                     T* __restrict__ x_out, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const SweepIterate<T, T> f{scale, b, x, aggregate, xc, (T)theta};
    const T ax = amg_csr_row(row_ptr, cols, vals, i, f);
    x_out[i] = f(i) + scale[i] * (b[i] - ax);
}
