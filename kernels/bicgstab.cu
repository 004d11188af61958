// PBiCGStab as a device loop (uses krylov.cu's kr_* element formulas and
// pcg.cu's reduce_fixed).
//
// The loop (src/gpu/bicgstab.rs): the iteration of
// src/solve/bicgstab.rs with its scalars in the device state `st` (BS_*), its
// stopping tests applied on the device, and each step's sums recorded (BS_REC_*
// per iteration) so that the host replays the generic loop's scalar logic on
// them once per chunk (errors, SolverPerformance, the debug log). Kernels are
// no-ops once st[BS_DONE] is set. Element formulas are the kr_* kernels' above
// (kr_*_at, kr_operator_row), and the sums are their partials added by
// reduce_fixed (the order of reduce_partials): the generic loop's numbers,
// bit for bit.
//
// One iteration, launch by launch (host lines of src/solve/bicgstab.rs):
//   bs_direction   p = r + beta (p - omega v), y = M^-1 p    (bicg_direction, precondition)
//   bs_operator    v = A y, partials of r0 . v                (apply_operator(&y, &mut v, r0))
//   bs_half        s = r - alpha v, z = M^-1 s, sum |s|       (bicg_half, precondition)
//   bs_operator    t = A z, partials of t . s and t . t       (apply_operator(&z, &mut t, s))
//   bs_update      x += alpha y + omega z, r = s - omega t,   (bicg_update, or axpy_dot for
//                  sum |r|, r0 . r; or x += alpha y            the half step's x += alpha y)
// Each reduction is finished (bs_finish_step) by the last block of its grid
// (a ticketed launch) or by the one-block kernel bs_finish.
// With no preconditioner y is p and z is s (not stored: bs_y, bs_z).

#define BS_DONE 0          // nonzero: the loop or the chunk has stopped
#define BS_ITER 1          // iterations completed (full steps)
#define BS_RHO 2           // r0 . r of the pending iteration
#define BS_RHO_OLD 3
#define BS_ALPHA 4
#define BS_OMEGA 5
#define BS_BETA 6          // of the pending direction update (0 on the first)
#define BS_LAST 7          // normalised residual after the last full step
#define BS_BEST 8          // smallest normalised residual so far
#define BS_CAP 9           // the chunk ends after this many iterations
#define BS_TOLERANCE 10    // SolverControls and normFactor
#define BS_REL_TOL 11
#define BS_INITIAL 12
#define BS_NORM_FACTOR 13
#define BS_MAX_ITER 14
#define BS_MIN_ITER 15
#define BS_S_SUM 16        // sum |s| of the pending iteration
#define BS_HALF_AT 17      // chunk iteration whose bs_update does x += alpha y only (-1: none)
#define BS_STATE_LEN 18

// Records of chunk iteration j: rec[BS_REC_HEAD + BS_REC * j + BS_REC_*];
// rec[0] is r0 . r of the prologue (bs_start).
#define BS_REC_HEAD 1
#define BS_REC 6
#define BS_REC_R0_V 0
#define BS_REC_S_SUM 1
#define BS_REC_T_S 2
#define BS_REC_T_T 3
#define BS_REC_R_SUM 4
#define BS_REC_RHO 5

// Steps of bs_finish_step.
#define BS_STEP_START 0
#define BS_STEP_R0_V 1
#define BS_STEP_HALF 2
#define BS_STEP_T 3
#define BS_STEP_UPDATE 4

#define BS_VSMALL 1e-300   // src/solve/bicgstab.rs VSMALL

// The tests at the top of the host loop for the iteration after `iterations`
// completed ones (thread 0): r0 . r and omega must not vanish (else the
// loop stops: the host reports the breakdown, or a clean stop at a zero
// residual), then beta of the direction update.
__device__ void bs_begin_iteration(double* st) {
    const double rho = st[BS_RHO];
    if (isnan(rho) || fabs(rho) < BS_VSMALL) {
        st[BS_DONE] = 1.0;
        return;
    }
    if (st[BS_ITER] == 0.0) {
        st[BS_BETA] = 0.0;
        st[BS_OMEGA] = 0.0;
        return;
    }
    const double omega = st[BS_OMEGA];
    if (isnan(omega) || fabs(omega) < BS_VSMALL) {
        st[BS_DONE] = 1.0;
        return;
    }
    st[BS_BETA] = (rho / st[BS_RHO_OLD]) * (st[BS_ALPHA] / omega);
}

// SolverControls::converged.
__device__ bool bs_converged(const double* st, double residual) {
    const double rel_tol = st[BS_REL_TOL];
    return residual < st[BS_TOLERANCE] ||
           (rel_tol > 0.0 && residual < rel_tol * st[BS_INITIAL]);
}

// Finishes the reduction of `step` of chunk iteration j from m partials per
// sum (every thread of the block calls it; thread 0 writes).
__device__ void bs_finish_step(int step, int m, const double* partials, double* st, double* rec,
                               int j) {
    const double a = reduce_fixed(m, partials);
    const double b =
        step == BS_STEP_T || step == BS_STEP_UPDATE ? reduce_fixed(m, partials + m) : 0.0;
    if (threadIdx.x != 0) return;
    double* r = rec + BS_REC_HEAD + BS_REC * j;
    if (step == BS_STEP_START) {
        // rho = r0 . r, then the first iteration's tests.
        rec[0] = a;
        st[BS_RHO] = a;
        bs_begin_iteration(st);
    } else if (step == BS_STEP_R0_V) {
        // if !(r0_v.is_finite() && r0_v != 0.0): breakdown; alpha = rho / r0_v.
        r[BS_REC_R0_V] = a;
        if (!(isfinite(a) && a != 0.0)) st[BS_DONE] = 1.0;
        else st[BS_ALPHA] = st[BS_RHO] / a;
    } else if (step == BS_STEP_HALF) {
        // half = s_sum / nf: not finite -> error; converged (and minIter
        // reached) -> x += alpha y and stop.
        r[BS_REC_S_SUM] = a;
        st[BS_S_SUM] = a;
        const double half = a / st[BS_NORM_FACTOR];
        const double it = st[BS_ITER] + 1.0;
        if (!isfinite(half)) {
            st[BS_DONE] = 1.0;
        } else if (bs_converged(st, half) && it >= st[BS_MIN_ITER]) {
            st[BS_HALF_AT] = j;
            st[BS_DONE] = 1.0;
        }
    } else if (step == BS_STEP_T) {
        // if !(t_t.is_finite() && t_t > 0.0): s == 0 -> x += alpha y and
        // stop, else breakdown; omega = t_s / t_t.
        r[BS_REC_T_S] = a;
        r[BS_REC_T_T] = b;
        if (!(isfinite(b) && b > 0.0)) {
            if (st[BS_S_SUM] == 0.0) st[BS_HALF_AT] = j;
            st[BS_DONE] = 1.0;
        } else {
            st[BS_OMEGA] = a / b;
        }
    } else {
        // rho_old = rho; rho = r0 . r; residual = r_sum / nf and its tests
        // (not finite, divergence, convergence or maxIter after minIter);
        // then, unless the loop stops, the next iteration's tests and beta
        // (also at the end of a chunk: the next chunk starts with its
        // direction update).
        r[BS_REC_R_SUM] = a;
        r[BS_REC_RHO] = b;
        st[BS_RHO_OLD] = st[BS_RHO];
        st[BS_RHO] = b;
        const double it = st[BS_ITER] + 1.0;
        st[BS_ITER] = it;
        const double res = a / st[BS_NORM_FACTOR];
        bool done;
        if (!isfinite(res)) done = true;
        else if (res > DIVERGENCE_FACTOR * fmin(st[BS_BEST], res)) done = true;
        else done = (bs_converged(st, res) || it >= st[BS_MAX_ITER]) && it >= st[BS_MIN_ITER];
        st[BS_BEST] = fmin(st[BS_BEST], res);
        st[BS_LAST] = res;
        if (!done) bs_begin_iteration(st);
        if (done || it >= st[BS_CAP]) st[BS_DONE] = 1.0;
    }
}

// ---- Lanes: the loop runs up to BS_MAX_LANES independent systems at once
// (the momentum components of src/gpu/simple.rs: one matrix pattern and
// off-diagonals, a diagonal, right-hand side and x each). Each lane has its
// own vectors, state, records, partials and ticket, their addresses in a
// device table of BsLane (`lanes`, written once by the host); the vector
// kernels run one grid row per lane (blockIdx.y), the operator reads the
// matrix's slots once for every lane (bs_lane_rows). A lane's arithmetic and
// reduction order are those of a loop on its system alone: the same bits.

#define BS_MAX_LANES 3

// One lane's buffers (src/gpu/bicgstab.rs `Lane::table_entry`, 14 addresses).
struct BsLane {
    double *r, *r0, *p, *v, *y, *s, *z, *t;
    const double* inv_diag;
    double *vector_partials, *slice_partials, *st, *rec;
    unsigned* ticket;
};

__device__ __forceinline__ const BsLane& bs_lane(const u64* lanes, int c) {
    return reinterpret_cast<const BsLane*>(lanes)[c];
}

// y = M^-1 p and z = M^-1 s with Jacobi; p and s themselves without.
__device__ __forceinline__ double* bs_y(const BsLane& l, int jacobi) { return jacobi ? l.y : l.p; }
__device__ __forceinline__ double* bs_z(const BsLane& l, int jacobi) { return jacobi ? l.z : l.s; }

// One block per lane: bs_finish_step over the lane's vector partials
// (`slices` = 0) or slice partials (the separate launch mode).
extern "C" __global__ void bs_finish(int step, int m, int slices, const u64* lanes, int j) {
    const BsLane& l = bs_lane(lanes, blockIdx.y);
    if (l.st[BS_DONE] != 0.0) return;
    bs_finish_step(step, m, slices ? l.slice_partials : l.vector_partials, l.st, l.rec, j);
}

// The lanes' start, one pass over the slots for all of them: rowSum of lane
// c's matrix (the shared slots with diagonal diag_c) into row_sums_c and, when
// inv_c is set, 1/diagonal; for lanes c < k. Per lane the operations and
// their order are modsell_row_sums's (kernels/assembly.cu: the diagonal
// first, then the off-diagonals in slot order, round-to-nearest adds): the
// same bits. One thread per row, one block per slice.
extern "C" __global__ void bs_lane_row_sums(int n, const u64* __restrict__ slice_ptr,
                                            const int* __restrict__ codes,
                                            const double* __restrict__ vals, int k,
                                            const double* diag_0, const double* diag_1,
                                            const double* diag_2, double* row_sums_0,
                                            double* row_sums_1, double* row_sums_2,
                                            double* inv_0, double* inv_1, double* inv_2) {
    const int h = blockDim.x, row = blockIdx.x * h + threadIdx.x;
    if (row >= n) return;
    const double* diag[BS_MAX_LANES] = {diag_0, diag_1, diag_2};
    double* sums[BS_MAX_LANES] = {row_sums_0, row_sums_1, row_sums_2};
    double* inv[BS_MAX_LANES] = {inv_0, inv_1, inv_2};
    double s[BS_MAX_LANES] = {0.0, 0.0, 0.0};
#pragma unroll
    for (int c = 0; c < BS_MAX_LANES; ++c)
        if (c < k) s[c] = diag[c][row];
    const u64 end = slice_ptr[blockIdx.x + 1];
    for (u64 j = slice_ptr[blockIdx.x] + threadIdx.x; j < end; j += h) {
        if (codes[j] == 0) continue;
        const double v = vals[j];
#pragma unroll
        for (int c = 0; c < BS_MAX_LANES; ++c)
            if (c < k) s[c] = __dadd_rn(s[c], v);
    }
#pragma unroll
    for (int c = 0; c < BS_MAX_LANES; ++c) {
        if (c >= k) continue;
        sums[c][row] = s[c];
        if (inv[c] != nullptr) inv[c][row] = __ddiv_rn(1.0, diag[c][row]);
    }
}

// The prologue: r0 = r (scale(1.0, &r, &mut r0)) with partials of r0 . r
// (dot(&r0, &r)); `folded`: the last block finishes (BS_STEP_START). A
// chunked kernel (spmv.cu), as bs_half and bs_update.
extern "C" __global__ void bs_start(int n, const u64* lanes, int folded) {
    const BsLane& l = bs_lane(lanes, blockIdx.y);
    if (l.st[BS_DONE] != 0.0) return;
    double terms[1][VECTOR_CHUNKS] = {};
    for_chunk_rows(n, [&](int c, int i) {
        const double v = 1.0 * l.r[i];
        l.r0[i] = v;
        terms[0][c] = v * l.r[i];
    });
    const int m = vector_chunks(n);
    chunk_partials(terms, 1, m, l.vector_partials);
    if (folded && last_block(l.ticket))
        bs_finish_step(BS_STEP_START, m, l.vector_partials, l.st, l.rec, 0);
}

// p = r + beta (p - omega v) (beta = 0 copies r: kr_bicg_direction), then
// y = inv_diag * p (kr_diagonal; not stored without a preconditioner: y is p).
extern "C" __global__ void bs_direction(int n, const u64* lanes, int jacobi) {
    const BsLane& l = bs_lane(lanes, blockIdx.y);
    if (l.st[BS_DONE] != 0.0) return;
    const double beta = l.st[BS_BETA], omega = l.st[BS_OMEGA];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double pi = kr_direction_at(i, beta, omega, l.r, l.v, l.p);
    if (jacobi) l.y[i] = l.inv_diag[i] * pi;
}

// This thread's rows of out_c = A_c in_c for the lanes c whose bit of
// `active` is set, A_c the slots of (slice_ptr, codes, vals) with diagonal
// diag[c]: each slot's code and value is read once for all lanes. Per lane
// the operations and their order are modsell_row's (the same bits). Every
// thread of the block calls it (it synchronises). Dynamic shared memory:
// BS_MAX_LANES * H doubles (each lane's slice of in_c).
__device__ void bs_lane_rows(int n, const u64* __restrict__ slice_ptr,
                             const int* __restrict__ codes, const double* __restrict__ vals,
                             const double* const* diag, const double* const* in, unsigned active,
                             double* acc) {
    double* x_slice = reinterpret_cast<double*>(modsell_shared);
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool inside = row < n;
#pragma unroll
    for (int c = 0; c < BS_MAX_LANES; ++c) {
        if (!((active >> c) & 1u)) continue;
        const double xr = inside ? in[c][row] : 0.0;
        x_slice[c * h + t] = xr;
        acc[c] = inside ? diag[c][row] * xr : 0.0;
    }
    __syncthreads();
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    u64 k = start + t;
    for (; k + h < end; k += 2 * (u64)h) {
        const int c0 = codes[k], c1 = codes[k + h];
        const double v0 = vals[k], v1 = vals[k + h];
#pragma unroll
        for (int c = 0; c < BS_MAX_LANES; ++c) {
            if (!((active >> c) & 1u)) continue;
            const double x0 = modsell_x(c0, in[c], x_slice + c * h),
                         x1 = modsell_x(c1, in[c], x_slice + c * h);
            if (c0 != 0) acc[c] += v0 * x0;
            if (c1 != 0) acc[c] += v1 * x1;
        }
    }
    if (k < end) {
        const int c0 = codes[k];
        if (c0 != 0) {
            const double v0 = vals[k];
#pragma unroll
            for (int c = 0; c < BS_MAX_LANES; ++c)
                if ((active >> c) & 1u) acc[c] += v0 * modsell_x(c0, in[c], x_slice + c * h);
        }
    }
}

// For every lane c < k not done: out = A_c in with partials of out . w and,
// for BS_STEP_T, of out . out (kr_operator_row's terms): v = A y with r0 . v
// (BS_STEP_R0_V), or t = A z with t . s and t . t (BS_STEP_T); diag_c is
// lane c's diagonal. One block per slice for all lanes; `folded`: the last
// block (ticket `operator_ticket`) finishes `step` of chunk iteration j of
// every lane it ran. At most 512 threads a block (the slice height), four
// blocks resident per multiprocessor (at most 32 registers a thread): the
// lanes' gathers are latency-bound, so more loads in flight pay more than the
// registers (three blocks: 85 us a launch on the 1 M-cell cavity, four: 78).
extern "C" __global__ void __launch_bounds__(512, 4) bs_operator(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const double* __restrict__ vals, const double* diag_0,
                                       const double* diag_1, const double* diag_2,
                                       const u64* lanes, int k, int jacobi, int step, int j,
                                       int folded, unsigned* operator_ticket) {
    unsigned active = 0;
    const double* diag[BS_MAX_LANES] = {diag_0, diag_1, diag_2};
    const double* in[BS_MAX_LANES] = {nullptr, nullptr, nullptr};
#pragma unroll
    for (int c = 0; c < BS_MAX_LANES; ++c) {
        if (c >= k) continue;
        const BsLane& l = bs_lane(lanes, c);
        if (l.st[BS_DONE] != 0.0) continue;
        active |= 1u << c;
        in[c] = step == BS_STEP_T ? bs_z(l, jacobi) : bs_y(l, jacobi);
    }
    if (active == 0) return;
    double acc[BS_MAX_LANES] = {0.0, 0.0, 0.0};
    bs_lane_rows(n, slice_ptr, codes, vals, diag, in, active, acc);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int c = 0; c < BS_MAX_LANES; ++c) {
        if (!((active >> c) & 1u)) continue;
        const BsLane& l = bs_lane(lanes, c);
        double* out = step == BS_STEP_T ? l.t : l.v;
        const double* w = step == BS_STEP_T ? l.s : l.r0;
        double yw, yy;
        kr_operator_terms(n, row, acc[c], out, w, &yw, &yy);
        if (step == BS_STEP_T) {
            block_partials2(yw, yy, l.slice_partials);
        } else {
            const double s = block_sum(yw);
            if (threadIdx.x == 0) l.slice_partials[blockIdx.x] = s;
        }
    }
    if (folded && last_block(operator_ticket)) {
        for (int c = 0; c < k; ++c) {
            if (!((active >> c) & 1u)) continue;
            const BsLane& l = bs_lane(lanes, c);
            bs_finish_step(step, gridDim.x, l.slice_partials, l.st, l.rec, j);
        }
    }
}

// s = r - alpha v with partials of sum |s| (kr_bicg_half), then z =
// inv_diag * s (kr_diagonal; not stored without a preconditioner: z is s).
// The loads of all the block's chunks go out before their stores.
extern "C" __global__ void bs_half(int n, const u64* lanes, int jacobi, int j, int folded) {
    const BsLane& l = bs_lane(lanes, blockIdx.y);
    if (l.st[BS_DONE] != 0.0) return;
    const double alpha = l.st[BS_ALPHA];
    double rv[VECTOR_CHUNKS], vv[VECTOR_CHUNKS];
    for_chunk_rows(n, [&](int c, int i) {
        rv[c] = l.r[i];
        vv[c] = l.v[i];
    });
    double terms[1][VECTOR_CHUNKS] = {};
    for_chunk_rows(n, [&](int c, int i) {
        const double si = kr_half_value(alpha, rv[c], vv[c]);
        l.s[i] = si;
        terms[0][c] = fabs(si);
        if (jacobi) l.z[i] = l.inv_diag[i] * si;
    });
    const int m = vector_chunks(n);
    chunk_partials(terms, 1, m, l.vector_partials);
    if (folded && last_block(l.ticket))
        bs_finish_step(BS_STEP_HALF, m, l.vector_partials, l.st, l.rec, j);
}

// x += alpha y + omega z, r = s - omega t with partials of sum |r| and r0 . r
// (kr_bicg_update's kr_update_values); x of lane c is x_c. Once done, only
// the launch of the iteration that stopped at its half step (BS_HALF_AT = j)
// runs: x += alpha y (kr_axpy_dot). The loads of all the block's chunks go
// out before their stores.
extern "C" __global__ void bs_update(int n, const u64* lanes, int jacobi, double* x_0,
                                     double* x_1, double* x_2, int j, int folded) {
    const BsLane& l = bs_lane(lanes, blockIdx.y);
    double* x = blockIdx.y == 0 ? x_0 : blockIdx.y == 1 ? x_1 : x_2;
    const double* y = bs_y(l, jacobi);
    const double alpha = l.st[BS_ALPHA];
    if (l.st[BS_DONE] != 0.0) {
        if (l.st[BS_HALF_AT] != (double)j) return;
        for_chunk_rows(n, [&](int, int i) { x[i] = x[i] + alpha * y[i]; });
        return;
    }
    const double omega = l.st[BS_OMEGA];
    const double* z = bs_z(l, jacobi);
    double yv[VECTOR_CHUNKS], zv[VECTOR_CHUNKS], sv[VECTOR_CHUNKS], tv[VECTOR_CHUNKS],
        r0v[VECTOR_CHUNKS], xv[VECTOR_CHUNKS];
    for_chunk_rows(n, [&](int c, int i) {
        yv[c] = y[i];
        zv[c] = z[i];
        sv[c] = l.s[i];
        tv[c] = l.t[i];
        r0v[c] = l.r0[i];
        xv[c] = x[i];
    });
    double terms[2][VECTOR_CHUNKS] = {};  // sum |r|, r0 . r
    for_chunk_rows(n, [&](int c, int i) {
        double ri;
        kr_update_values(alpha, omega, yv[c], zv[c], sv[c], tv[c], r0v[c], xv[c], ri,
                         terms[0][c], terms[1][c]);
        x[i] = xv[c];
        l.r[i] = ri;
    });
    const int m = vector_chunks(n);
    chunk_partials(terms, 2, m, l.vector_partials);
    if (folded && last_block(l.ticket))
        bs_finish_step(BS_STEP_UPDATE, m, l.vector_partials, l.st, l.rec, j);
}
