// The Schwarz preconditioner's gather and scatter on the GPU
// (src/solve/schwarz/cuda.rs; Yang 2015 §2.7): the block factor's sweeps
// between them are kernels/ilu.cu (RAS) or kernels/ic.cu (AS), over all
// blocks concatenated. The scatter sums in the CPU's order
// (src/solve/schwarz/cpu.rs) with the _rn intrinsics, so the result equals
// the CPU's bit for bit. Both take the trailing `done` gate (gated_off,
// kernels/smooth.cu); u64 is spmv.cu's.

// Schwarz gather: r_B[c] = r[gather[c]] over the concatenated block rows.
extern "C" __global__ void schwarz_gather(int n_blocks_rows, const int* __restrict__ gather,
                                          const double* __restrict__ r, double* rb,
                                          const double* done) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_blocks_rows || gated_off(done)) return;
    rb[c] = r[gather[c]];
}

// Schwarz scatter, one thread per row g of A: z_g = the first listed block
// value plus the others in list order (RAS lists the owner only; AS every
// block row holding g, ascending, as the CPU sums them).
extern "C" __global__ void schwarz_scatter(int n, const u64* __restrict__ ptr,
                                           const int* __restrict__ list,
                                           const double* __restrict__ yb, double* z,
                                           const double* done) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n || gated_off(done)) return;
    u64 p = ptr[g];
    double acc = yb[list[p]];
    for (++p; p < ptr[g + 1]; ++p) acc = __dadd_rn(acc, yb[list[p]]);
    z[g] = acc;
}
