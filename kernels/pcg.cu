// Jacobi-PCG on the device (appended to spmv.cu in one module): the scalars
// stay in `st` on the device and the stopping tests of src/solve/pcg.rs
// (`StopRule`) are applied here too, so a chunk of iterations runs with no host
// round trip and stops at the same iteration as the host loop. Reductions:
// fixed per-block partials, then one block sums them in a fixed order.

// Layout of the device state `st`.
#define ST_DONE 0      // nonzero: the loop has stopped; later launches are no-ops
#define ST_ITER 1      // iterations completed
#define ST_RZ 2        // r . z of the pending iteration
#define ST_RZ_OLD 3    // r . z of the last completed iteration
#define ST_ALPHA 4
#define ST_LAST 5      // normalised residual after the last completed iteration
#define ST_BEST 6      // smallest normalised residual so far
#define DIVERGENCE_FACTOR 1e10  // pcg.rs DIVERGENCE_FACTOR

// Sum of p[0..m) in a fixed order (one block), valid in thread 0.
__device__ double reduce_fixed(int m, const double* __restrict__ p) {
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) s += p[i];
    return block_sum(s);
}

// out[c] = sum of partials[c*m .. c*m+m) for c < count; one block.
extern "C" __global__ void reduce_partials(int m, int count, const double* __restrict__ partials,
                                           double* __restrict__ out) {
    for (int c = 0; c < count; ++c) {
        const double s = reduce_fixed(m, partials + (size_t)c * m);
        if (threadIdx.x == 0) out[c] = s;
    }
}

// Partial sums of x (for the mean in OpenFOAM's normFactor).
extern "C" __global__ void sum_partials(int n, const double* __restrict__ x,
                                        double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? x[i] : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// r = b - A x (mod-SELL, as spmv_modsell) with partials of sum |r| and of
// OpenFOAM's normFactor sum(|Ax - A xbar| + |b - A xbar|), A xbar = rowSum * mean(x);
// `x_sum` holds sum(x). Partials: [|r| per block][norm per block].
extern "C" __global__ void cg_initial_residual(int n, const u64* __restrict__ slice_ptr,
                                               const int* __restrict__ codes,
                                               const double* __restrict__ vals,
                                               const double* __restrict__ diag,
                                               const double* __restrict__ row_sums,
                                               const double* __restrict__ x_sum,
                                               const double* __restrict__ x,
                                               const double* __restrict__ b,
                                               double* __restrict__ r,
                                               double* __restrict__ partials) {
    extern __shared__ double x_slice[];
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    const double xr = in ? x[row] : 0.0;
    x_slice[t] = xr;
    double ax = in ? diag[row] * xr : 0.0;
    __syncthreads();
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c > 0) ax += vals[k] * __ldg(&x[c - 1]);
        else if (c < 0) ax += vals[k] * x_slice[-(c + 1)];
    }
    double res = 0.0, norm = 0.0;
    if (in) {
        const double a_xbar = row_sums[row] * (*x_sum / n);
        const double ri = b[row] - ax;
        r[row] = ri;
        res = fabs(ri);
        norm = fabs(ax - a_xbar) + fabs(b[row] - a_xbar);
    }
    const double s_res = block_sum(res);
    const double s_norm = block_sum(norm);
    if (t == 0) {
        partials[blockIdx.x] = s_res;
        partials[gridDim.x + blockIdx.x] = s_norm;
    }
}

// z = M^-1 r (Jacobi: r * inv_diag; identity when inv_diag is null) and
// partials of r . z.
extern "C" __global__ void cg_precondition(int n, const double* __restrict__ r,
                                           const double* __restrict__ inv_diag,
                                           double* __restrict__ z, double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double rz = 0.0;
    if (i < n) {
        const double zi = inv_diag != nullptr ? r[i] * inv_diag[i] : r[i];
        z[i] = zi;
        rz = r[i] * zi;
    }
    const double s = block_sum(rz);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// StopRule::after_precondition.
__device__ bool stops_after_precondition(double r_z, double last_residual) {
    return (r_z == 0.0 && last_residual == 0.0) || !(r_z > 0.0);
}

// r . z of the chunk's first iteration; record 0 gets it.
extern "C" __global__ void cg_finish_precondition(int m, const double* __restrict__ partials,
                                                  double* __restrict__ st,
                                                  double* __restrict__ rec) {
    const double rz = reduce_fixed(m, partials);
    if (threadIdx.x == 0) {
        st[ST_RZ] = rz;
        rec[0] = rz;
        if (stops_after_precondition(rz, st[ST_LAST])) st[ST_DONE] = 1.0;
    }
}

// p = z + beta p, beta = r.z / r.z_old (0 on the first iteration: p = z).
// With `st` null, beta is `host_beta` (one step driven from the host).
extern "C" __global__ void cg_direction(int n, const double* __restrict__ st, double host_beta,
                                        const double* __restrict__ z, double* __restrict__ p) {
    double beta = host_beta;
    if (st != nullptr) {
        if (st[ST_DONE] != 0.0) return;
        beta = st[ST_ITER] == 0.0 ? 0.0 : st[ST_RZ] / st[ST_RZ_OLD];
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = beta == 0.0 ? z[i] : z[i] + beta * p[i];
}

// p . Ap of iteration j of the chunk; alpha = r.z / p.Ap.
extern "C" __global__ void cg_finish_operator(int m, const double* __restrict__ partials,
                                              double* __restrict__ st, double* __restrict__ rec,
                                              int j) {
    if (st[ST_DONE] != 0.0) return;
    const double pq = reduce_fixed(m, partials);
    if (threadIdx.x == 0) {
        rec[3 * j + 1] = pq;
        if (!(pq > 0.0)) st[ST_DONE] = 1.0;  // StopRule::after_operator
        else st[ST_ALPHA] = st[ST_RZ] / pq;
    }
}

// x += alpha p, r -= alpha q, then (z non-null) z = M^-1 r; partials of sum |r|
// and r . z: [|r| per block][r.z per block]. alpha from st[ST_ALPHA], or
// `alpha_ptr` when st is null.
extern "C" __global__ void cg_update(int n, const double* __restrict__ st,
                                     const double* __restrict__ alpha_ptr,
                                     const double* __restrict__ p, const double* __restrict__ q,
                                     double* __restrict__ x, double* __restrict__ r,
                                     const double* __restrict__ inv_diag, double* __restrict__ z,
                                     double* __restrict__ partials) {
    double alpha;
    if (st != nullptr) {
        if (st[ST_DONE] != 0.0) return;
        alpha = st[ST_ALPHA];
    } else {
        alpha = *alpha_ptr;
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double res = 0.0, rz = 0.0;
    if (i < n) {
        x[i] += alpha * p[i];
        const double ri = r[i] - alpha * q[i];
        r[i] = ri;
        res = fabs(ri);
        if (z != nullptr) {
            const double zi = inv_diag != nullptr ? ri * inv_diag[i] : ri;
            z[i] = zi;
            rz = ri * zi;
        }
    }
    const double s_res = block_sum(res);
    const double s_rz = block_sum(rz);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s_res;
        partials[gridDim.x + blockIdx.x] = s_rz;
    }
}

// End of iteration j of the chunk: the residual tests of StopRule::after_update,
// then, if the loop goes on, r . z of the next iteration and its test.
extern "C" __global__ void cg_finish_update(int m, const double* __restrict__ partials,
                                            double* __restrict__ st, double* __restrict__ rec,
                                            int j, double tolerance, double rel_tol,
                                            double initial, double norm_factor,
                                            double max_iter, double min_iter) {
    if (st[ST_DONE] != 0.0) return;
    const double sum_abs = reduce_fixed(m, partials);
    const double rz = reduce_fixed(m, partials + m);
    if (threadIdx.x != 0) return;
    const double it = st[ST_ITER] + 1.0;
    const double res = sum_abs / norm_factor;
    rec[3 * j + 2] = res;
    st[ST_ITER] = it;
    const double best = fmin(st[ST_BEST], res);
    bool done;
    if (!isfinite(res)) done = true;
    else if (res > DIVERGENCE_FACTOR * best) done = true;
    else {
        const bool converged = res < tolerance || (rel_tol > 0.0 && res < rel_tol * initial);
        done = (converged || it >= max_iter) && it >= min_iter;
    }
    st[ST_BEST] = best;
    st[ST_LAST] = res;
    if (!done) {
        st[ST_RZ_OLD] = st[ST_RZ];
        st[ST_RZ] = rz;
        rec[3 * (j + 1)] = rz;
        done = stops_after_precondition(rz, res);
    }
    if (done) st[ST_DONE] = 1.0;
}
