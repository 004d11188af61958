// GMRES and BiCGStab steps (src/solve/krylov.rs `KrylovBackend`, device
// backend src/gpu/krylov.rs; compiled with spmv.cu and pcg.cu:
// uses u64, block_sum, modsell_row, reduce_fixed). Every kernel that returns a
// number writes per-block partial sums (layout [sum 0 per block][sum 1 per
// block]...), which reduce_partials (pcg.cu) adds in one fixed order: the
// same bits run to run. Each element formula is the CPU's, in its order.
//
// Fusions: the SpMV returns y . w and y . y (BiCGStab's r0 . A y, t . s and
// t . t; GMRES's norms); the MGS axpy returns the next Gram-Schmidt dot; CGS2
// orthogonalises against a block of up to KR_BATCH basis vectors per launch
// (their addresses in a device table `vs`), reading w once per block of
// vectors; the BiCGStab update writes x and r and returns sum |r| and r0 . r.

#define KR_BATCH 32

// y = inv_diag * v (Jacobi), or y = v when inv_diag is null.
extern "C" __global__ void kr_diagonal(int n, const double* __restrict__ inv_diag,
                                       const double* __restrict__ v, double* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = inv_diag != nullptr ? inv_diag[i] * v[i] : v[i];
}

// r = b - A x (mod-SELL, one block per slice) with partials of sum |r| and r . r.
extern "C" __global__ void kr_residual(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ diag,
                                       const double* __restrict__ x,
                                       const double* __restrict__ b, double* __restrict__ r,
                                       double* __restrict__ partials) {
    double xr;
    const double ax = modsell_row(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    double ri = 0.0;
    if (row < n) {
        ri = b[row] - ax;
        r[row] = ri;
    }
    block_partials2(fabs(ri), ri * ri, partials);
}

// Stores row `row` of y = A v (its value yr) and gives its terms of y . w
// (y . y when w is null) and y . y (0 past n). Shared with bs_operator.
__device__ __forceinline__ void kr_operator_terms(int n, int row, double yr,
                                                  double* __restrict__ y,
                                                  const double* __restrict__ w, double* yw,
                                                  double* yy) {
    *yw = 0.0;
    *yy = 0.0;
    if (row < n) {
        y[row] = yr;
        *yy = yr * yr;
        *yw = w != nullptr ? yr * w[row] : *yy;
    }
}

// This thread's row of y = A v (mod-SELL; every thread of the block calls
// it) and its terms of y . w (y . y when w is null) and y . y (0 past n).
// Shared with the device loop's bs_operator: the same bits.
__device__ void kr_operator_row(int n, const u64* __restrict__ slice_ptr,
                                const int* __restrict__ codes, const double* __restrict__ vals,
                                const double* __restrict__ diag, const double* __restrict__ v,
                                double* __restrict__ y, const double* __restrict__ w,
                                double* yw, double* yy) {
    double vr;
    const double yr = modsell_row(n, slice_ptr, codes, vals, diag, v, &vr);
    kr_operator_terms(n, blockIdx.x * blockDim.x + threadIdx.x, yr, y, w, yw, yy);
}

// y = A v (mod-SELL) with partials of y . w (y . y when w is null) and y . y.
extern "C" __global__ void kr_operator(int n, const u64* __restrict__ slice_ptr,
                                       const int* __restrict__ codes,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ diag,
                                       const double* __restrict__ v, double* __restrict__ y,
                                       const double* __restrict__ w,
                                       double* __restrict__ partials) {
    double yw, yy;
    kr_operator_row(n, slice_ptr, codes, vals, diag, v, y, w, &yw, &yy);
    block_partials2(yw, yy, partials);
}

// y = alpha x.
extern "C" __global__ void kr_scale(int n, double alpha, const double* __restrict__ x,
                                    double* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}

// y += alpha x with partials of y . w (y . y when w is null), after the update.
extern "C" __global__ void kr_axpy_dot(int n, double alpha, const double* __restrict__ x,
                                       double* __restrict__ y, const double* __restrict__ w,
                                       double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double d = 0.0;
    if (i < n) {
        const double yi = y[i] + alpha * x[i];
        y[i] = yi;
        d = yi * (w != nullptr ? w[i] : yi);
    }
    const double s = block_sum(d);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// Partials of v_c . w for the k <= KR_BATCH vectors whose addresses are in
// vs: partials[c * gridDim.x + block].
extern "C" __global__ void kr_multi_dot(int n, int k, const u64* __restrict__ vs,
                                        const double* __restrict__ w,
                                        double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double wi = i < n ? w[i] : 0.0;
    for (int c = 0; c < k; ++c) {
        const double* v = reinterpret_cast<const double*>(vs[c]);
        const double s = block_sum(i < n ? v[i] * wi : 0.0);
        if (threadIdx.x == 0) partials[c * gridDim.x + blockIdx.x] = s;
    }
}

// y += sum_c coeffs[c] v_c (c ascending) for the k <= KR_BATCH vectors of vs,
// with partials of y . y after.
extern "C" __global__ void kr_multi_axpy(int n, int k, const u64* __restrict__ vs,
                                         const double* __restrict__ coeffs,
                                         double* __restrict__ y, double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double yy = 0.0;
    if (i < n) {
        double yi = y[i];
        for (int c = 0; c < k; ++c) {
            const double* v = reinterpret_cast<const double*>(vs[c]);
            yi += coeffs[c] * v[i];
        }
        y[i] = yi;
        yy = yi * yi;
    }
    const double s = block_sum(yy);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// Element i of the BiCGStab direction p = r + beta (p - omega v); beta = 0
// copies r. Shared with bs_direction.
__device__ double kr_direction_at(int i, double beta, double omega, const double* __restrict__ r,
                                  const double* __restrict__ v, double* __restrict__ p) {
    const double pi = beta == 0.0 ? r[i] : r[i] + beta * (p[i] - omega * v[i]);
    p[i] = pi;
    return pi;
}

// BiCGStab direction p = r + beta (p - omega v); beta = 0 copies r.
extern "C" __global__ void kr_bicg_direction(int n, double beta, double omega,
                                             const double* __restrict__ r,
                                             const double* __restrict__ v,
                                             double* __restrict__ p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) kr_direction_at(i, beta, omega, r, v, p);
}

// s_i = r_i - alpha v_i from the loaded values. Shared with bs_half.
__device__ __forceinline__ double kr_half_value(double alpha, double ri, double vi) {
    return ri - alpha * vi;
}

// Element i of s = r - alpha v.
__device__ double kr_half_at(int i, double alpha, const double* __restrict__ r,
                             const double* __restrict__ v, double* __restrict__ s) {
    const double si = kr_half_value(alpha, r[i], v[i]);
    s[i] = si;
    return si;
}

// s = r - alpha v with partials of sum |s|.
extern "C" __global__ void kr_bicg_half(int n, double alpha, const double* __restrict__ r,
                                        const double* __restrict__ v, double* __restrict__ s,
                                        double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double a = 0.0;
    if (i < n) a = fabs(kr_half_at(i, alpha, r, v, s));
    const double sum = block_sum(a);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One element of x += alpha y + omega z, r = s - omega t from the loaded
// values, with its terms of sum |r| (a) and r0 . r (rho). Shared with
// bs_update.
__device__ __forceinline__ void kr_update_values(double alpha, double omega, double yi, double zi,
                                                 double si, double ti, double r0i, double& xi,
                                                 double& ri, double& a, double& rho) {
    xi += alpha * yi + omega * zi;
    ri = si - omega * ti;
    a = fabs(ri);
    rho = r0i * ri;
}

// Element i of x += alpha y + omega z, r = s - omega t, with its terms of
// sum |r| and r0 . r.
__device__ void kr_update_at(int i, double alpha, double omega, const double* __restrict__ y,
                             const double* __restrict__ z, const double* __restrict__ s,
                             const double* __restrict__ t, const double* __restrict__ r0,
                             double* __restrict__ x, double* __restrict__ r, double* a,
                             double* rho) {
    double xi = x[i], ri;
    kr_update_values(alpha, omega, y[i], z[i], s[i], t[i], r0[i], xi, ri, *a, *rho);
    x[i] = xi;
    r[i] = ri;
}

// x += alpha y + omega z, r = s - omega t, with partials of sum |r| and r0 . r.
extern "C" __global__ void kr_bicg_update(int n, double alpha, double omega,
                                          const double* __restrict__ y,
                                          const double* __restrict__ z,
                                          const double* __restrict__ s,
                                          const double* __restrict__ t,
                                          const double* __restrict__ r0,
                                          double* __restrict__ x, double* __restrict__ r,
                                          double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double a = 0.0, rho = 0.0;
    if (i < n) kr_update_at(i, alpha, omega, y, z, s, t, r0, x, r, &a, &rho);
    block_partials2(a, rho, partials);
}
