// PCG on the device (compiled with spmv.cu): the scalars stay in
// `st` on the device and the stopping tests of src/solve/pcg.rs (`StopRule`)
// are applied here too, so a chunk of iterations runs with no host round trip
// and stops at the same iteration as the host loop.
//
// Reductions are deterministic: each block writes one partial sum, then the
// partials are added in one fixed order (`reduce_fixed`), either by a separate
// one-block kernel (cg_finish_*: 5 launches per iteration) or, when a launch
// gets a `ticket`, by the last block of the same grid to finish (fence, then
// an atomic ticket: 3 launches per iteration). Both give the same bits.

// Layout of the device state `st`, written by the host at the start of each
// chunk (src/gpu/pcg.rs `run_chunk`).
#define ST_DONE 0         // nonzero: the chunk has stopped; later launches are no-ops
#define ST_ITER 1         // iterations completed
#define ST_RZ 2           // r . z of the pending iteration
#define ST_RZ_OLD 3       // r . z of the last completed iteration
#define ST_ALPHA 4
#define ST_LAST 5         // normalised residual after the last completed iteration
#define ST_BEST 6         // smallest normalised residual so far
#define ST_CAP 7          // the chunk ends after this iteration
#define ST_TOLERANCE 8    // SolverControls and StopRule
#define ST_REL_TOL 9
#define ST_INITIAL 10
#define ST_NORM_FACTOR 11
#define ST_MAX_ITER 12
#define ST_MIN_ITER 13
#define ST_PQ 14          // p . Ap of the last iteration (flexible PCG's beta)
#define ST_BETA 15        // beta of the pending direction update
#define DIVERGENCE_FACTOR 1e10  // pcg.rs DIVERGENCE_FACTOR

// Virtual lanes of the fixed reduction order.
#define REDUCE_LANES 1024

// Sum of p[0..m) in one fixed order whatever the block size (a multiple of 32,
// at most 1024): virtual lane l < 1024 adds p[l], p[l + 1024], ... in turn,
// each virtual warp of 32 lanes adds its lanes by a shuffle tree, and warp 0
// adds the 32 warp sums by the same tree. With 1024 threads this is
// block_sum's order, so a one-block kernel and the last block of a 256- or
// 512-thread grid give the same bits. Valid in thread 0; every thread of the
// block must call it. Loads bypass L1 (__ldcg): in a ticketed launch other
// blocks wrote p during this launch.
__device__ double reduce_fixed(int m, const double* p) {
    __shared__ double lane_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();  // an earlier call may still be reading lane_sums
    for (int vw = warp; vw < 32; vw += warps) {
        double s = 0.0;
#pragma unroll 8
        for (int i = vw * 32 + lane; i < m; i += REDUCE_LANES) s += __ldcg(p + i);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) lane_sums[vw] = s;
    }
    __syncthreads();
    double t = 0.0;
    if (warp == 0) {
        t = lane_sums[lane];
        for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
    }
    return t;
}

// Whether this block is the last of the grid to finish (every thread of the
// block must call it, after thread 0 wrote the block's partials). Thread 0
// takes a ticket with an acquire-release atomic: its partials are published
// before the ticket, and the block that takes the last ticket sees every
// block's partials (its other threads after the barrier). The last block
// resets the ticket for the next launch.
__device__ bool last_block(unsigned* ticket) {
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
        unsigned taken;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;"
                     : "=r"(taken)
                     : "l"(ticket)
                     : "memory");
        is_last = taken == gridDim.x - 1;
        if (is_last) *ticket = 0u;
    }
    __syncthreads();
    return is_last;
}

// StopRule::after_precondition.
__device__ bool stops_after_precondition(double r_z, double last_residual) {
    return (r_z == 0.0 && last_residual == 0.0) || !(r_z > 0.0);
}

// r . z of iteration j of the chunk (record 3j), its test and beta: r.z /
// r.z_old, or with `flexible` (partials of z . q follow those of r . z)
// -z.q / p.q_old (Polak-Ribiere, src/solve/pcg.rs). Iteration 0 of a chunk
// takes r.z_old from the host; later ones shift it here (a device
// preconditioner) or in finish_update (Jacobi, j = 0 only here).
__device__ void finish_precondition(int m, const double* partials, int flexible, double* st,
                                    double* rec, int j) {
    const double rz = reduce_fixed(m, partials);
    const double zq = flexible ? reduce_fixed(m, partials + m) : 0.0;
    if (threadIdx.x == 0) {
        if (j > 0) st[ST_RZ_OLD] = st[ST_RZ];
        st[ST_RZ] = rz;
        rec[3 * j] = rz;
        st[ST_BETA] = st[ST_ITER] == 0.0 ? 0.0 : flexible ? -zq / st[ST_PQ] : rz / st[ST_RZ_OLD];
        if (stops_after_precondition(rz, st[ST_LAST])) st[ST_DONE] = 1.0;
    }
}

// p . Ap of iteration j of the chunk; alpha = r.z / p.Ap.
__device__ void finish_operator(int m, const double* partials, double* st, double* rec, int j) {
    const double pq = reduce_fixed(m, partials);
    if (threadIdx.x == 0) {
        rec[3 * j + 1] = pq;
        st[ST_PQ] = pq;
        if (!(pq > 0.0)) st[ST_DONE] = 1.0;  // StopRule::after_operator
        else st[ST_ALPHA] = st[ST_RZ] / pq;
    }
}

// End of iteration j of the chunk: the residual tests of
// StopRule::after_update, then, unless the loop or the chunk ends and when
// `with_rz` (Jacobi: z came with the update), r . z of the next iteration,
// its beta and its test.
__device__ void finish_update(int m, const double* partials, int with_rz, double* st,
                              double* rec, int j) {
    const double sum_abs = reduce_fixed(m, partials);
    const double rz = with_rz ? reduce_fixed(m, partials + m) : 0.0;
    if (threadIdx.x != 0) return;
    const double it = st[ST_ITER] + 1.0;
    const double res = sum_abs / st[ST_NORM_FACTOR];
    rec[3 * j + 2] = res;
    st[ST_ITER] = it;
    const double best = fmin(st[ST_BEST], res);
    bool done;
    if (!isfinite(res)) done = true;
    else if (res > DIVERGENCE_FACTOR * best) done = true;
    else {
        const double tolerance = st[ST_TOLERANCE], rel_tol = st[ST_REL_TOL];
        const bool converged =
            res < tolerance || (rel_tol > 0.0 && res < rel_tol * st[ST_INITIAL]);
        done = (converged || it >= st[ST_MAX_ITER]) && it >= st[ST_MIN_ITER];
    }
    st[ST_BEST] = best;
    st[ST_LAST] = res;
    if (!done && it < st[ST_CAP]) {
        if (with_rz) {
            st[ST_RZ_OLD] = st[ST_RZ];
            st[ST_RZ] = rz;
            st[ST_BETA] = rz / st[ST_RZ_OLD];
            rec[3 * (j + 1)] = rz;
            done = stops_after_precondition(rz, res);
        }
    } else {
        done = true;  // the loop stops, or this chunk ends
    }
    if (done) st[ST_DONE] = 1.0;
}

// out[c] = sum of partials[c*m .. c*m+m) for c < count; one block.
extern "C" __global__ void reduce_partials(int m, int count, const double* __restrict__ partials,
                                           double* __restrict__ out) {
    for (int c = 0; c < count; ++c) {
        const double s = reduce_fixed(m, partials + (size_t)c * m);
        if (threadIdx.x == 0) out[c] = s;
    }
}

// Partial sums of x (of scale * x when `scale` is set: the original unknowns
// of an equilibrated system), for the mean in OpenFOAM's normFactor.
extern "C" __global__ void sum_partials(int n, const double* __restrict__ x,
                                        const double* __restrict__ scale,
                                        double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double v = 0.0;
    if (i < n) v = scale != nullptr ? scale[i] * x[i] : x[i];
    const double s = block_sum(v);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// r = b - A x (mod-SELL) with partials of sum |r| and of OpenFOAM's normFactor
// sum(|Ax - A xbar| + |b - A xbar|), A xbar = rowSum * mean(x); `x_sum` holds
// sum(x). With `unscale` set the system is equilibrated (src/solve/equilibrate.rs):
// the sums are over the original system's A x = w Â y, b = w b̂, r = w r̂ with
// w = unscale, and rowSum is the original matrix's. Partials: [|r| per
// block][norm per block].
extern "C" __global__ void cg_initial_residual(int n, const u64* __restrict__ slice_ptr,
                                               const int* __restrict__ codes,
                                               const double* __restrict__ vals,
                                               const double* __restrict__ diag,
                                               const double* __restrict__ row_sums,
                                               const double* __restrict__ x_sum,
                                               const double* __restrict__ unscale,
                                               const double* __restrict__ x,
                                               const double* __restrict__ b,
                                               double* __restrict__ r,
                                               double* __restrict__ partials) {
    double xr;
    const double ax_scaled = modsell_row(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    double res = 0.0, norm = 0.0;
    if (row < n) {
        const double a_xbar = row_sums[row] * (*x_sum / n);
        const double ri = b[row] - ax_scaled;
        r[row] = ri;
        double ax = ax_scaled, bi = b[row], r_original = ri;
        if (unscale != nullptr) {
            const double w = unscale[row];
            ax = w * ax_scaled;
            bi = w * b[row];
            r_original = w * ri;
        }
        res = fabs(r_original);
        norm = fabs(ax - a_xbar) + fabs(bi - a_xbar);
    }
    block_partials2(res, norm, partials);
}

// z = M^-1 r (Jacobi: r * inv_diag; identity when inv_diag is null), stored
// when z is set, and partials of r . z; or, with `z_ready`, z already applied
// by a device preconditioner and read from z (then, with `q` set, flexible
// PCG: partials of z . q follow). With `st` a no-op once done. With a ticket
// the last block finishes iteration j's r . z (finish_precondition). A
// chunked kernel (spmv.cu): gpu::chunked_vector_grid blocks.
extern "C" __global__ void cg_precondition(int n, const double* __restrict__ r,
                                           const double* __restrict__ inv_diag, int z_ready,
                                           double* __restrict__ z, const double* __restrict__ q,
                                           double* partials, double* st, double* rec, int j,
                                           unsigned* ticket) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    double terms[2][VECTOR_CHUNKS] = {};  // r . z, z . q
    for_chunk_rows(n, [&](int c, int i) {
        double zi;
        if (z_ready) {
            zi = z[i];
            if (q != nullptr) terms[1][c] = zi * q[i];
        } else {
            zi = inv_diag != nullptr ? r[i] * inv_diag[i] : r[i];
            if (z != nullptr) z[i] = zi;
        }
        terms[0][c] = r[i] * zi;
    });
    const int m = vector_chunks(n);
    chunk_partials(terms, q != nullptr ? 2 : 1, m, partials);
    if (ticket != nullptr && last_block(ticket))
        finish_precondition(m, partials, q != nullptr, st, rec, j);
}

// One block: finish_precondition.
extern "C" __global__ void cg_finish_precondition(int m, const double* partials, int flexible,
                                                  double* st, double* rec, int j) {
    if (st[ST_DONE] != 0.0) return;
    finish_precondition(m, partials, flexible, st, rec, j);
}

// p = z + beta p, beta from st[ST_BETA] (0 on the first iteration: p = z).
// With `st` null, beta is `host_beta` (one step driven from the host).
extern "C" __global__ void cg_direction(int n, const double* __restrict__ st, double host_beta,
                                        const double* __restrict__ z, double* __restrict__ p) {
    double beta = host_beta;
    if (st != nullptr) {
        if (st[ST_DONE] != 0.0) return;
        beta = st[ST_BETA];
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = beta == 0.0 ? z[i] : z[i] + beta * p[i];
}

// q = A p (mod-SELL, one block per slice) with partials of p . q. A no-op
// once `st` says done; with a ticket the last block finishes iteration j
// (alpha).
extern "C" __global__ void cg_operator(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ diag,
                                       const double* __restrict__ p, double* __restrict__ q,
                                       double* partials, double* st, double* rec, int j,
                                       unsigned* ticket) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    double pr;
    const double qr = modsell_row(n, slice_ptr, codes, vals, diag, p, &pr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) q[row] = qr;
    const double s = block_sum(pr * qr);  // 0 past n: pr = qr = 0
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
    if (ticket != nullptr && last_block(ticket)) finish_operator(gridDim.x, partials, st, rec, j);
}

// One block: finish_operator.
extern "C" __global__ void cg_finish_operator(int m, const double* partials, double* st,
                                              double* rec, int j) {
    if (st[ST_DONE] != 0.0) return;
    finish_operator(m, partials, st, rec, j);
}

// p . q of a q changed after cg_operator (deflation: q = P A p, see
// deflation.cu), as partials per block of VECTOR_BLOCK rows; a no-op once done;
// with a ticket the last block finishes iteration j (alpha).
extern "C" __global__ void cg_operator_dot(int n, const double* __restrict__ p,
                                           const double* __restrict__ q, double* partials,
                                           double* st, double* rec, int j, unsigned* ticket) {
    if (st[ST_DONE] != 0.0) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? p[i] * q[i] : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
    if (ticket != nullptr && last_block(ticket)) finish_operator(gridDim.x, partials, st, rec, j);
}

// x += alpha p, r -= alpha q, with partials of sum |r| (of |unscale * r| when
// `unscale` is set: the original system's residual of an equilibrated one)
// and, when `with_rz`, of r . z for z = r * inv_diag (Jacobi; stored in z when
// z is set) or z = r (inv_diag null; not stored: the direction update reads r).
// Partials: [|r| per chunk][r.z per chunk], m chunks (a chunked kernel,
// spmv.cu: the loads of all the block's chunks are issued before their
// stores). Every thread of the block must call it.
__device__ void update_rows(int n, int m, double alpha, const double* __restrict__ p,
                            const double* __restrict__ q, double* __restrict__ x,
                            double* __restrict__ r, const double* __restrict__ unscale,
                            int with_rz, const double* __restrict__ inv_diag,
                            double* __restrict__ z, double* partials) {
    double pv[VECTOR_CHUNKS], qv[VECTOR_CHUNKS], xv[VECTOR_CHUNKS], rv[VECTOR_CHUNKS];
    for_chunk_rows(n, [&](int c, int i) {
        pv[c] = p[i];
        qv[c] = q[i];
        xv[c] = x[i];
        rv[c] = r[i];
    });
    double terms[2][VECTOR_CHUNKS] = {};  // sum |r|, r . z
    for_chunk_rows(n, [&](int c, int i) {
        x[i] = xv[c] + alpha * pv[c];
        const double ri = rv[c] - alpha * qv[c];
        r[i] = ri;
        terms[0][c] = fabs(unscale != nullptr ? unscale[i] * ri : ri);
        if (with_rz) {
            const double zi = inv_diag != nullptr ? ri * inv_diag[i] : ri;
            if (z != nullptr) z[i] = zi;
            terms[1][c] = ri * zi;
        }
    });
    chunk_partials(terms, 2, m, partials);
}

// update_rows with alpha from st[ST_ALPHA], or *alpha_ptr when st is null. A
// no-op once `st` says done; with a ticket the last block finishes iteration
// j. A chunked kernel: gpu::chunked_vector_grid blocks.
extern "C" __global__ void cg_update(int n, double* st, const double* __restrict__ alpha_ptr,
                                     const double* __restrict__ p, const double* __restrict__ q,
                                     double* __restrict__ x, double* __restrict__ r,
                                     const double* __restrict__ unscale, int with_rz,
                                     const double* __restrict__ inv_diag, double* __restrict__ z,
                                     double* partials, double* rec, int j, unsigned* ticket) {
    double alpha;
    if (st != nullptr) {
        if (st[ST_DONE] != 0.0) return;
        alpha = st[ST_ALPHA];
    } else {
        alpha = *alpha_ptr;
    }
    const int m = vector_chunks(n);
    update_rows(n, m, alpha, p, q, x, r, unscale, with_rz, inv_diag, z, partials);
    if (ticket != nullptr && last_block(ticket)) finish_update(m, partials, with_rz, st, rec, j);
}

// One block: finish_update.
extern "C" __global__ void cg_finish_update(int m, const double* partials, int with_rz,
                                            double* st, double* rec, int j) {
    if (st[ST_DONE] != 0.0) return;
    finish_update(m, partials, with_rz, st, rec, j);
}

// ---- PCG in Chronopoulos-Gear form (one reduction per iteration; A. T.
// Chronopoulos and C. W. Gear, J. Comput. Appl. Math. 25 (1989) 153-168),
// the multi-GPU device loop's default (src/gpu/multi.rs): with u = M r and
// w = A u, s = A p is carried by the recurrence s = w + beta s, so sum|r|,
// r.u and w.u of one iteration are reduced together and
// p.Ap = w.u - beta^2 p.Ap_old (exact-arithmetic CG; the same iterates as
// the two-reduction form up to rounding). The state and records are the
// two-reduction form's (ST_*, 3 records per iteration), so the host reads
// them alike.

// p.Ap and alpha of iteration j from the recurrence (thread 0 only):
// p.Ap = w.u - beta^2 p.Ap_old (= w.u when beta = 0: the first iteration).
__device__ void operator_from_recurrence(double wu, double* st, double* rec, int j) {
    const double beta = st[ST_BETA];
    const double pq = beta == 0.0 ? wu : wu - beta * beta * st[ST_PQ];
    if (rec != nullptr) rec[3 * j + 1] = pq;
    st[ST_PQ] = pq;
    if (!(pq > 0.0)) st[ST_DONE] = 1.0;  // StopRule::after_operator
    else st[ST_ALPHA] = st[ST_RZ] / pq;
}

// Finish of a single reduction (every thread of the block calls it).
// `prologue` (the chunk's start, sums = [r.u, w.u] of the current r): r.u,
// beta and its test as finish_precondition, then p.Ap and alpha of
// iteration 0. Else (sums = [sum|r|, r.u, w.u] after iteration j's update):
// finish_update's residual tests, r.u and beta, then p.Ap and alpha of
// iteration j + 1.
__device__ void finish_single(int prologue, const double* sums, double* st, double* rec, int j) {
    if (prologue) finish_precondition(1, sums, 0, st, rec, 0);
    else finish_update(1, sums, 1, st, rec, j);
    __syncthreads();
    if (threadIdx.x == 0 && st[ST_DONE] == 0.0)
        operator_from_recurrence(sums[prologue ? 1 : 2], st, rec, prologue ? 0 : j + 1);
}

// One block: finish_single on sums already added over the ranks.
extern "C" __global__ void cg_finish_single(int prologue, const double* sums, double* st,
                                            double* rec, int j) {
    if (st[ST_DONE] != 0.0) return;
    finish_single(prologue, sums, st, rec, j);
}

// The vector step of a single-reduction iteration: u = M r (Jacobi: r *
// inv_diag; none: r) of the current r, p = u + beta p, s = w + beta s,
// x += alpha p, r -= alpha s, then u = M r of the new r (stored when u is
// set) with partials [sum|r| per block][r.u per block]. A no-op once done.
extern "C" __global__ void cg_single_update(int n, const double* st,
                                            const double* __restrict__ inv_diag,
                                            double* __restrict__ p, double* __restrict__ s,
                                            const double* __restrict__ w, double* __restrict__ x,
                                            double* __restrict__ r, double* __restrict__ u,
                                            double* partials) {
    if (st[ST_DONE] != 0.0) return;
    const double alpha = st[ST_ALPHA], beta = st[ST_BETA];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double res = 0.0, ru = 0.0;
    if (i < n) {
        const double ri = r[i];
        const double di = inv_diag != nullptr ? inv_diag[i] : 1.0;
        const double ui = inv_diag != nullptr ? ri * di : ri;
        const double pi = beta == 0.0 ? ui : ui + beta * p[i];
        const double si = beta == 0.0 ? w[i] : w[i] + beta * s[i];
        p[i] = pi;
        s[i] = si;
        x[i] += alpha * pi;
        const double rn = ri - alpha * si;
        r[i] = rn;
        const double un = inv_diag != nullptr ? rn * di : rn;
        if (u != nullptr) u[i] = un;
        res = fabs(rn);
        ru = rn * un;
    }
    block_partials2(res, ru, partials);
}
