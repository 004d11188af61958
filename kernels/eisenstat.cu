// SGS-PCG by Eisenstat's trick (appended to spmv.cu in one module; uses
// block_sum, block_partials2 and u64 from there). CPU reference:
// src/solve/eisenstat.rs (ScaledTriangles' row formulas, CpuEisenstat's
// update), in the same operation order with the rounding intrinsics (no FMA
// contraction), so the same colouring gives the same bits per row.
//
// The strictly lower and upper parts of the scaled matrix are plain SELL
// (src/sparse/modsell.rs Sell): row r's k-th entry is slot
// slice_ptr[r / h] + r % h + k * h, columns ascending, padding column -1 at
// the end. The rows are colour-contiguous: a sweep is one launch per colour
// over rows first .. first + count, whose entries reach earlier colours
// (lower part) or later ones (upper part) only.

// sum_j A_ij v_j over row `row` of a SELL triangle, in slot order.
__device__ double eis_row_dot(int h, const u64* __restrict__ slice_ptr,
                              const int* __restrict__ cols, const double* __restrict__ vals,
                              int row, const double* v) {
    const u64 end = slice_ptr[row / h + 1];
    double acc = 0.0;
    for (u64 slot = slice_ptr[row / h] + row % h; slot < end; slot += h) {
        const int c = cols[slot];
        if (c < 0) break;
        acc = __dadd_rn(acc, __dmul_rn(vals[slot], v[c]));
    }
    return acc;
}

// Backward sweep over one colour: p = rho + beta p (beta == 0: p = rho),
// t = p - sum_j U_ij t_j. With sc set (iterations chained on the device),
// beta = sc[2] / sc[3]: this rho . rho over the previous one.
extern "C" __global__ void eis_backward(int first, int count, int h,
                                        const u64* __restrict__ slice_ptr,
                                        const int* __restrict__ cols,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ rho, double beta,
                                        const double* __restrict__ sc,
                                        double* __restrict__ p, double* t) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    const int row = first + k;
    // sc[3] = 0: the last rho . rho was 0 (the exact solution): p = rho = 0
    // from here, alpha = 0 and x stays (0/0 would make x NaN).
    if (sc != nullptr) beta = sc[3] > 0.0 ? __ddiv_rn(sc[2], sc[3]) : 0.0;
    const double p_i = beta == 0.0 ? rho[row] : __dadd_rn(rho[row], __dmul_rn(beta, p[row]));
    const double acc = eis_row_dot(h, slice_ptr, cols, vals, row, t);
    p[row] = p_i;
    t[row] = __dsub_rn(p_i, acc);
}

// Forward sweep over one colour: s = (p - t) - sum_j L_ij s_j and, when g is
// set, g = p + sum_j L_ij t_j (the same entries), with this block's partial
// of p . (t + s) at partials[offset + blockIdx.x].
extern "C" __global__ void eis_forward(int first, int count, int h,
                                       const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ cols,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ p,
                                       const double* __restrict__ t, double* s,
                                       double* __restrict__ g, double* __restrict__ partials,
                                       int offset) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    double pw = 0.0;
    if (k < count) {
        const int row = first + k;
        const u64 end = slice_ptr[row / h + 1];
        double acc_s = 0.0, acc_t = 0.0;
        for (u64 slot = slice_ptr[row / h] + row % h; slot < end; slot += h) {
            const int c = cols[slot];
            if (c < 0) break;
            const double v = vals[slot];
            acc_s = __dadd_rn(acc_s, __dmul_rn(v, s[c]));
            if (g != nullptr) acc_t = __dadd_rn(acc_t, __dmul_rn(v, t[c]));
        }
        const double p_i = p[row], t_i = t[row];
        const double s_i = __dsub_rn(__dsub_rn(p_i, t_i), acc_s);
        s[row] = s_i;
        if (g != nullptr) g[row] = __dadd_rn(p_i, acc_t);
        pw = __dmul_rn(p_i, __dadd_rn(t_i, s_i));
    }
    const double sum = block_sum(pw);
    if (threadIdx.x == 0) partials[offset + blockIdx.x] = sum;
}

// rho = C^-1 D^-1/2 r over one colour: rho_i = r_i / sqrt(d_i) - sum_j L_ij rho_j.
// With perm set, the sweeps' rows are a renumbering of x's and r's (row i of
// the triangles is row perm[i] of r; src/gpu/eisenstat.rs, sorted rows).
extern "C" __global__ void eis_initial(int first, int count, int h,
                                       const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ cols,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ inv_sqrt_diag,
                                       const int* __restrict__ perm,
                                       const double* __restrict__ r, double* rho) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    const int row = first + k;
    const double acc = eis_row_dot(h, slice_ptr, cols, vals, row, rho);
    const double r_i = r[perm != nullptr ? perm[row] : row];
    rho[row] = __dsub_rn(__dmul_rn(inv_sqrt_diag[row], r_i), acc);
}

// x += alpha (t / sqrt(d)), rho -= alpha (t + s) and, when r is set,
// r -= alpha (sqrt(d) g), with partials of sum |r| (0 without r) and
// rho . rho (block_partials2's layout). alpha = sc[2] / sc[0]: the last
// rho . rho over this iteration's p . q (src/gpu/eisenstat.rs SCALARS).
extern "C" __global__ void eis_update(int n, double* sc,
                                      const double* __restrict__ inv_sqrt_diag,
                                      const double* __restrict__ sqrt_diag,
                                      const double* __restrict__ t,
                                      const double* __restrict__ s,
                                      const double* __restrict__ g,
                                      const int* __restrict__ perm, double* __restrict__ x,
                                      double* __restrict__ rho, double* __restrict__ r,
                                      double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // p . q not positive (breakdown, or p = 0 at the exact solution): x
    // stays; the host stops with the recorded p . q.
    const double alpha = sc[0] > 0.0 ? __ddiv_rn(sc[2], sc[0]) : 0.0;
    // The previous rho . rho for the next beta, before the reduction
    // overwrites sc[2] (every block has read it above).
    if (i == 0) sc[3] = sc[2];
    double r_abs = 0.0, rho_rho = 0.0;
    if (i < n) {
        const double t_i = t[i];
        const int j = perm != nullptr ? perm[i] : i;  // x's and r's row
        x[j] = __dadd_rn(x[j], __dmul_rn(alpha, __dmul_rn(inv_sqrt_diag[i], t_i)));
        const double rho_i = __dsub_rn(rho[i], __dmul_rn(alpha, __dadd_rn(t_i, s[i])));
        rho[i] = rho_i;
        if (r != nullptr) {
            const double r_i = __dsub_rn(r[j], __dmul_rn(alpha, __dmul_rn(sqrt_diag[i], g[i])));
            r[j] = r_i;
            r_abs = fabs(r_i);
        }
        rho_rho = __dmul_rn(rho_i, rho_i);
    }
    block_partials2(r_abs, rho_rho, partials);
}

// Iteration j of a chain: records[3j..3j+3] = p . q, sum |r|, rho . rho (sc[0..3]).
extern "C" __global__ void eis_record(const double* __restrict__ sc, double* __restrict__ records,
                                      int j) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        for (int c = 0; c < 3; ++c) records[3 * j + c] = sc[c];
    }
}

// r = D^1/2 C rho over all rows (it reads rho only): r_i = sqrt(d_i) (rho_i +
// sum_j L_ij rho_j), stored at row perm[i] when perm is set, with this block's
// partial of sum |r| at partials[blockIdx.x]. The residual the recursion
// carries (predicted checks, src/solve/eisenstat.rs residual_row).
extern "C" __global__ void eis_residual(int n, int h, const u64* __restrict__ slice_ptr,
                                        const int* __restrict__ cols,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ sqrt_diag,
                                        const int* __restrict__ perm,
                                        const double* __restrict__ rho, double* __restrict__ r,
                                        double* __restrict__ partials) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    double r_abs = 0.0;
    if (row < n) {
        const double acc = eis_row_dot(h, slice_ptr, cols, vals, row, rho);
        const double r_i = __dmul_rn(sqrt_diag[row], __dadd_rn(rho[row], acc));
        r[perm != nullptr ? perm[row] : row] = r_i;
        r_abs = fabs(r_i);
    }
    const double sum = block_sum(r_abs);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}
