// FSAI application z = G^T (G r) (CPU reference: solve::fsai::FsaiPreconditioner,
// two Csr::spmv). G and G^T are both stored as CSR (gpu::amg::DeviceCsr), so each
// product is a gather, one thread per row, the row's products summed in stored
// column order with __dmul_rn/__dadd_rn (no FMA contraction): the device result
// equals the CPU's bit for bit. Uses u64 (spmv.cu) and gated_off (smooth.cu):
// `done` is PCG's fused-loop gate.

// Row i of M x: the row's `len` entries at start + stride k, k ascending,
// vals[at] x[cols[at]] summed in that order with _rn operations. Both storages
// sum through it, so their results are equal bit for bit.
__device__ __forceinline__ double fsai_row_product(const unsigned* __restrict__ cols,
                                                   const double* __restrict__ vals,
                                                   const double* __restrict__ x, u64 start,
                                                   u64 len, u64 stride) {
    double acc = 0.0;
    for (u64 k = 0; k < len; ++k) {
        const u64 at = start + stride * k;
        acc = __dadd_rn(acc, __dmul_rn(vals[at], __ldg(&x[cols[at]])));
    }
    return acc;
}

// y = M x for a CSR matrix M (G, then G^T).
extern "C" __global__ void fsai_csr_product(int n, const u64* __restrict__ row_ptr,
                                            const unsigned* __restrict__ cols,
                                            const double* __restrict__ vals,
                                            const double* __restrict__ x, double* __restrict__ y,
                                            const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u64 start = row_ptr[i];
    y[i] = fsai_row_product(cols, vals, x, start, row_ptr[i + 1] - start, 1);
}

// y = M x with M in 32-row slices (SELL-32, rows in their own order, no
// sorting): entry k of row i at slice_ptr[i / 32] + 32 k + i % 32, so the 32
// threads of a warp read consecutive words at each k. Same sum, same order as
// fsai_csr_product (bit-equal results); the slots past a row's length are
// padding and never read.
extern "C" __global__ void fsai_sell_product(int n, const u64* __restrict__ slice_ptr,
                                             const unsigned* __restrict__ row_len,
                                             const unsigned* __restrict__ cols,
                                             const double* __restrict__ vals,
                                             const double* __restrict__ x, double* __restrict__ y,
                                             const double* done) {
    if (gated_off(done)) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u64 base = slice_ptr[i >> 5] + (u64)(i & 31);
    y[i] = fsai_row_product(cols, vals, x, base, row_len[i], 32);
}
