// The truncated Neumann preconditioner (Gupta et al. 2011, §3.3), compiled
// with spmv.cu (uses u64, modsell_row_part). CPU reference:
// src/solve/neumann/cpu.rs; the host side is src/solve/neumann/cuda.rs.
// M^-1 = K^T D^-1 K, K = sum_{j<=m} (-L D^-1)^j: one neumann_scale, then m
// strictly-lower and m strictly-upper neumann_step launches.

// out = D^-1 r (the first Horner term, y0 = D^-1 r).
extern "C" __global__ void neumann_scale(int n, const double* __restrict__ inv_diag,
                                         const double* __restrict__ r,
                                         double* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = inv_diag[i] * r[i];
}

// One Horner step, out_i = base_i - (1/a_ii) sum_{j in T(i)} a_ij g_j with T
// the strictly lower (upper = 0) or strictly upper (upper = 1) part of row i:
// the masked mod-SELL product of spmv.cu. One block per slice, blockDim = H,
// H doubles of dynamic shared memory. out must not alias g or base.
extern "C" __global__ void neumann_step(int n, int upper, const u64* __restrict__ slice_ptr,
                                        const int* __restrict__ codes,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ diag,
                                        const double* __restrict__ inv_diag,
                                        const double* __restrict__ g,
                                        const double* __restrict__ base,
                                        double* __restrict__ out) {
    double g_row;
    // `upper` is the same for the whole grid: both branches synchronise alike.
    const double s =
        upper ? modsell_row_part<double, ROW_STRICT_UPPER>(n, slice_ptr, codes, vals, diag, g, &g_row)
              : modsell_row_part<double, ROW_STRICT_LOWER>(n, slice_ptr, codes, vals, diag, g, &g_row);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) out[row] = base[row] - inv_diag[row] * s;
}
