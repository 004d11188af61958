// SGS-PCG by Eisenstat's trick (compiled with spmv.cu; uses
// block_sum, block_partials2 and u64 from there). CPU reference:
// src/solve/eisenstat/cpu.rs (ScaledTriangles' row formulas, CpuEisenstat's
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
// the triangles is row perm[i] of r; src/solve/eisenstat/cuda.rs, sorted rows).
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
// rho . rho over this iteration's p . q (src/solve/eisenstat/cuda.rs SCALARS).
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
// carries (predicted checks, src/solve/eisenstat/cpu.rs residual_row).
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

// ---- The set-up on the device (src/solve/eisenstat/cuda.rs,
// DeviceEisenstat::with_sorted_rows)
// from the resident mod-SELL matrix A (colour-contiguous rows, column codes as
// in smooth.cu), equal to the host's ScaledTriangles of A in the sweeps' row
// order (src/solve/eisenstat/mod.rs length_sorted_order) uploaded as SELL.

// The colour c of row i: colour_ptr[c] <= i < colour_ptr[c + 1].
__device__ int eis_colour_of(int i, const int* __restrict__ colour_ptr, int n_colours) {
    int lo = 0, hi = n_colours;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (colour_ptr[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Per row its strictly lower and upper entry counts; a row coupled to a row
// of its own colour lowers failed[0] to row + 1 (atomicMin from n + 1), a
// diagonal entry that is not positive (or not a number) failed[1] (the
// diagonal check folded in: one launch and one read-back fewer);
// totals[0], totals[1] (zeroed by the host) sum the counts (a warp sum, then
// one atomic per warp). One thread per row; blockDim a multiple of 32.
extern "C" __global__ void eis_setup_rows(int n, int h, const u64* __restrict__ slice_ptr,
                                          const int* __restrict__ codes,
                                          const double* __restrict__ diag,
                                          const int* __restrict__ colour_ptr, int n_colours,
                                          unsigned* __restrict__ lower_len,
                                          unsigned* __restrict__ upper_len, int* failed,
                                          u64* totals) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    u64 lower = 0, upper = 0;
    if (row < n) {
        if (!(diag[row] > 0.0)) atomicMin(&failed[1], row + 1);
        const int c = eis_colour_of(row, colour_ptr, n_colours);
        const int first = colour_ptr[c], end = colour_ptr[c + 1];
        for_modsell_offdiagonals(row, h, slice_ptr, codes, [&](u64, unsigned column) {
            const int col = (int)column;
            if (col >= first && col < end) atomicMin(&failed[0], row + 1);
            if (col < row) ++lower;
            else ++upper;
        });
        lower_len[row] = (unsigned)lower;
        upper_len[row] = (unsigned)upper;
    }
    for (int o = 16; o > 0; o >>= 1) {
        lower += __shfl_down_sync(0xffffffffu, lower, o);
        upper += __shfl_down_sync(0xffffffffu, upper, o);
    }
    if ((threadIdx.x & 31) == 0 && (lower != 0 || upper != 0)) {
        atomicAdd(&totals[0], lower);
        atomicAdd(&totals[1], upper);
    }
}

// The sweeps' row order (length_sorted_order): inside each colour, windows
// of `window` rows, each sorted by (lower, upper) length descending, ties by
// row ascending (a stable sort); window <= 0: the identity. Row r goes to
// order[new] = r, new_of[r] = new, new = window start + its rank. One
// thread per row (a window of at most `window` rows is scanned).
extern "C" __global__ void eis_setup_order(int n, const int* __restrict__ colour_ptr,
                                           int n_colours, int window,
                                           const unsigned* __restrict__ lower_len,
                                           const unsigned* __restrict__ upper_len,
                                           int* __restrict__ order, int* __restrict__ new_of) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    int at = r;
    if (window > 0) {
        const int c = eis_colour_of(r, colour_ptr, n_colours);
        const int first = colour_ptr[c], end = colour_ptr[c + 1];
        const int start = first + ((r - first) / window) * window;
        const int stop = min(start + window, end);
        const unsigned lr = lower_len[r], ur = upper_len[r];
        int rank = 0;
        for (int q = start; q < stop; ++q) {
            const unsigned lq = lower_len[q], uq = upper_len[q];
            const bool before = lq > lr || (lq == lr && (uq > ur || (uq == ur && q < r)));
            rank += before;
        }
        at = start + rank;
    }
    order[at] = r;
    new_of[r] = at;
}

// Scales in the sweeps' order: sqrt_diag[i] = sqrt(a_rr), inv_sqrt_diag[i] =
// 1 / sqrt_diag[i] for r = order[i], and inv_sqrt_old[r] the same in A's
// order (the fill's factors). One thread per row.
extern "C" __global__ void eis_setup_scales(int n, const double* __restrict__ diag,
                                            const int* __restrict__ order,
                                            double* __restrict__ sqrt_diag,
                                            double* __restrict__ inv_sqrt_diag,
                                            double* __restrict__ inv_sqrt_old) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int r = order[i];
    const double s = __dsqrt_rn(diag[r]);
    const double inv = __ddiv_rn(1.0, s);
    sqrt_diag[i] = s;
    inv_sqrt_diag[i] = inv;
    inv_sqrt_old[r] = inv;
}

// Slot counts of each SELL slice of 32 (`th`) rows in the sweeps' order:
// th * the longest row, for the lower and the upper part (the exclusive
// scan of these is the slice pointers). One thread per slice.
extern "C" __global__ void eis_setup_widths(int n, int th, const int* __restrict__ order,
                                            const unsigned* __restrict__ lower_len,
                                            const unsigned* __restrict__ upper_len,
                                            unsigned* __restrict__ lower_slots,
                                            unsigned* __restrict__ upper_slots) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if ((long long)s * th >= n) return;
    unsigned lw = 0, uw = 0;
    for (int i = s * th; i < min(n, (s + 1) * th); ++i) {
        lw = max(lw, lower_len[order[i]]);
        uw = max(uw, upper_len[order[i]]);
    }
    lower_slots[s] = lw * th;
    upper_slots[s] = uw * th;
}

// Appends (col, val) to a SELL row kept sorted by column (insertion).
__device__ void eis_insert(int* __restrict__ cols, double* __restrict__ vals, u64 base, int th,
                           int count, int col, double val) {
    int p = count;
    while (p > 0 && cols[base + (u64)(p - 1) * th] > col) {
        cols[base + (u64)p * th] = cols[base + (u64)(p - 1) * th];
        vals[base + (u64)p * th] = vals[base + (u64)(p - 1) * th];
        --p;
    }
    cols[base + (u64)p * th] = col;
    vals[base + (u64)p * th] = val;
}

// The two SELL parts in the sweeps' order: row i (A's row r = order[i])
// takes its entries a_rc, scaled (a_rc / sqrt(a_rr)) / sqrt(a_cc) as
// (a_rc * inv_r) * inv_c (ScaledTriangles' order), at column new_of[c],
// columns ascending; the lower part those with c < r, the upper the rest;
// padding column -1, value 0 to the slice's width (rows past n: all
// padding). One thread per row of the slices (n rounded up to th).
extern "C" __global__ void eis_setup_fill(int n, int h, const u64* __restrict__ slice_ptr,
                                          const int* __restrict__ codes,
                                          const double* __restrict__ vals,
                                          const double* __restrict__ inv_sqrt_old,
                                          const int* __restrict__ order,
                                          const int* __restrict__ new_of, int th,
                                          const u64* __restrict__ lower_ptr,
                                          int* __restrict__ lower_cols,
                                          double* __restrict__ lower_vals,
                                          const u64* __restrict__ upper_ptr,
                                          int* __restrict__ upper_cols,
                                          double* __restrict__ upper_vals, int n_slices) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_slices * th) return;
    const int ts = i / th;
    const u64 lower_base = lower_ptr[ts] + i % th, upper_base = upper_ptr[ts] + i % th;
    const int lower_width = (int)((lower_ptr[ts + 1] - lower_ptr[ts]) / th);
    const int upper_width = (int)((upper_ptr[ts + 1] - upper_ptr[ts]) / th);
    int lower = 0, upper = 0;
    if (i < n) {
        const int r = order[i];
        const double inv_r = inv_sqrt_old[r];
        for_modsell_offdiagonals(r, h, slice_ptr, codes, [&](u64 k, unsigned column) {
            const int c = (int)column;
            const double v = __dmul_rn(__dmul_rn(vals[k], inv_r), inv_sqrt_old[c]);
            if (c < r) {
                eis_insert(lower_cols, lower_vals, lower_base, th, lower, new_of[c], v);
                ++lower;
            } else {
                eis_insert(upper_cols, upper_vals, upper_base, th, upper, new_of[c], v);
                ++upper;
            }
        });
    }
    for (int m = lower; m < lower_width; ++m) {
        lower_cols[lower_base + (u64)m * th] = -1;
        lower_vals[lower_base + (u64)m * th] = 0.0;
    }
    for (int m = upper; m < upper_width; ++m) {
        upper_cols[upper_base + (u64)m * th] = -1;
        upper_vals[upper_base + (u64)m * th] = 0.0;
    }
}
