// Polynomial preconditioners (Zhang and Zhang 2013, §2.2–2.7) and the Gershgorin
// bound of their interval; compiled with spmv.cu and smooth.cu (modsell_row_t, u64,
// gated_off). CPU reference: src/solve/polynomial/
// (`Evaluator::apply`), same steps, same operation order:
//   t_0 = D^-1 r;  step j = 1..m:  y = D^-1 A t_in,
//   t_out = mat*y + id*t_in - old*t_old,
//   z = (first step: d_in*t_in, else z) + d_out*t_out.
// T = double, or float for mixed precision (the f32 twin of the mod-SELL
// matrix and f32 work vectors; r read and z written in f64).

// t0 = inv_diag * (T)r.
// kernel: poly_start_f64 = poly_start<double>, poly_start_f32 = poly_start<float>
template <typename T>
__global__ void poly_start(int n, const T* __restrict__ inv_diag, const double* __restrict__ r,
                           T* __restrict__ t0, const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) t0[i] = inv_diag[i] * (T)r[i];
}

// As a smoother sweep x += M^-1 (b - A x): t0 = inv_diag * (T)(b - A x), the
// residual with the f64 matrix (one block per slice, H doubles of shared
// memory; CPU reference `smoother::PreconditionerSmoother`).
// kernel: poly_residual_start_f64 = poly_residual_start<double>,
//         poly_residual_start_f32 = poly_residual_start<float>
template <typename T>
__global__ void poly_residual_start(int n, const u64* __restrict__ slice_ptr,
                                    const int* __restrict__ codes,
                                    const double* __restrict__ vals,
                                    const double* __restrict__ diag,
                                    const double* __restrict__ x, const double* __restrict__ b,
                                    const T* __restrict__ inv_diag, T* __restrict__ t0) {
    double xr;
    const double ax = modsell_row(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) t0[row] = inv_diag[row] * (T)(b[row] - ax);
}

// One recurrence step, one block per mod-SELL slice (blockDim = H, H values
// of T of dynamic shared memory). t_io holds t_{j-2} on entry (read only when
// old != 0; it may hold garbage at the first step) and t_j on exit (not
// written at the last step). `first`: z starts at d_in*t_in (acc not read);
// z non-null: the last step writes the result there in f64 (add_to_z: adds it
// to z, the smoother's x), else to acc. `c`: the step's coefficients mat,
// id, old, d_in, d_out (src/solve/polynomial/mod.rs Step), in device memory so
// that a value re-set-up changes them under a captured graph.
// Both kernels take the trailing `done` gate of PCG's fused loop
// (kernels/smooth.cu gated_off).
// kernel: poly_step_f64 = poly_step<double>, poly_step_f32 = poly_step<float>
template <typename T>
__global__ void poly_step(int n, const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
                          const T* __restrict__ vals, const T* __restrict__ diag,
                          const T* __restrict__ inv_diag, const T* __restrict__ t_in,
                          T* __restrict__ t_io, T* __restrict__ acc, int first,
                          double* __restrict__ z, int add_to_z, const T* __restrict__ c,
                          const double* done) {
    if (gated_off(done)) return;
    const T mat = c[0], id = c[1], old = c[2], d_in = c[3], d_out = c[4];
    T xr;
    const T ax = modsell_row_t<T>(n, slice_ptr, codes, vals, diag, t_in, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const T y = inv_diag[row] * ax;
    const T t_old = old != T(0) ? t_io[row] : T(0);
    const T t = mat * y + id * xr - old * t_old;
    const T a = (first ? d_in * xr : acc[row]) + d_out * t;
    if (z != nullptr) {
        z[row] = add_to_z ? z[row] + (double)a : (double)a;
    } else {
        acc[row] = a;
        t_io[row] = t;
    }
}

// inv_diag = (T)(1 / diag) (1/a_ii rounded once, as on the host).
// kernel: poly_inverse_diagonal_f64 = poly_inverse_diagonal<double>,
//         poly_inverse_diagonal_f32 = poly_inverse_diagonal<float>
template <typename T>
__global__ void poly_inverse_diagonal(int n, const double* __restrict__ diag,
                                      T* __restrict__ inv_diag) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) inv_diag[i] = (T)(1.0 / diag[i]);
}

// The f32 twin of an f64 array (round to nearest, as `as f32` on the host).
extern "C" __global__ void cast_f64_to_f32(int n, const double* __restrict__ from,
                                           float* __restrict__ to) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) to[i] = (float)from[i];
}

// Gershgorin bound of D^-1 A on the device (solve/polynomial/mod.rs
// gershgorin_bound): per row (a_tt + sum |a_tj| over the off-diagonals in
// column order) / a_tt, the CPU's operations; the maximum over rows as the
// bits of positive doubles (ordered as u64) by warp shuffles and one
// atomicMax per warp into out[0]. A diagonal <= 0 or NaN lowers out[1] to
// row + 1 (both set by the host: 0 and n + 1). One thread per row.
extern "C" __global__ void gershgorin_rows(int n, int h, const u64* __restrict__ slice_ptr,
                                           const int* __restrict__ codes,
                                           const double* __restrict__ vals,
                                           const double* __restrict__ diag, u64* out) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    u64 bits = 0;
    if (row < n) {
        const int s = row / h;
        const double d = diag[row];
        if (!(d > 0.0)) {
            atomicMin(&out[1], (u64)row + 1);
        } else {
            double sum = d;
            for (u64 k = slice_ptr[s] + (row - s * h); k < slice_ptr[s + 1]; k += h)
                if (codes[k] != 0) sum = __dadd_rn(sum, fabs(vals[k]));
            bits = (u64)__double_as_longlong(__ddiv_rn(sum, d));
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const u64 other = __shfl_down_sync(0xffffffffu, bits, o);
        bits = other > bits ? other : bits;
    }
    if ((threadIdx.x & 31) == 0 && bits != 0) atomicMax(&out[0], bits);
}
