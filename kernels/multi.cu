// Multi-GPU PCG (src/gpu/multi.rs): the halo exchange of one rank's local
// system (src/sparse/distribute.rs numbering [interior | boundary | halo]) and
// the parts of A x that read the halo. Compiled with spmv.cu and pcg.cu
// (block_sum, ST_DONE). No FMA contraction, so a row's sum is the CPU's
// left-to-right sum of products.

// buf[i] = x[idx[i]]: the owned values the neighbours read, packed in the
// order of their halo slots.
extern "C" __global__ void halo_pack(int n, const unsigned* __restrict__ idx,
                                     const double* __restrict__ x, double* __restrict__ buf) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = x[idx[i]];
}

// y[row0 + i] += (A_oh x_halo)_i for the n boundary rows: A_oh in CSR, its
// columns indexing the halo buffer. With `partials` set (the device-driven
// loop, y = A p): the block's partial of sum_i p[row0 + i] (A_oh x_halo)_i, the
// halo's share of p . Ap (cg_operator's slice partials hold p . A_oo p); a
// no-op once `st` says done (st may be null).
extern "C" __global__ void halo_add(int n, int row0, const u64* __restrict__ row_ptr,
                                    const unsigned* __restrict__ cols,
                                    const double* __restrict__ vals,
                                    const double* __restrict__ x_halo, double* __restrict__ y,
                                    const double* __restrict__ p, double* __restrict__ partials,
                                    const double* __restrict__ st) {
    if (st != nullptr && st[ST_DONE] != 0.0) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double dot = 0.0;
    if (i < n) {
        double acc = 0.0;
        for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
            acc = __dadd_rn(acc, __dmul_rn(vals[k], x_halo[cols[k]]));
        y[row0 + i] = __dadd_rn(y[row0 + i], acc);
        if (partials != nullptr) dot = __dmul_rn(p[row0 + i], acc);
    }
    if (partials == nullptr) return;
    const double s = block_sum(dot);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// r = b - ax for the n owned rows (ax = A x with the halo added), with
// partials of sum |r| and of OpenFOAM's normFactor sum(|Ax - A xbar| +
// |b - A xbar|), A xbar = rowSum * mean (mean of x over every rank, from the
// host); ax may be r itself. Partials: [|r| per block][norm per block], as cg_initial_residual.
extern "C" __global__ void halo_initial_residual(int n, double mean, const double* ax,
                                                 const double* __restrict__ b,
                                                 const double* __restrict__ row_sums,
                                                 double* r, double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    double res = 0.0, norm = 0.0;
    if (i < n) {
        // ax and r are the same buffer: read A x once, before r overwrites it.
        const double a_xbar = row_sums[i] * mean, axi = ax[i], bi = b[i];
        const double ri = bi - axi;
        r[i] = ri;
        res = fabs(ri);
        norm = fabs(axi - a_xbar) + fabs(bi - a_xbar);
    }
    block_partials2(res, norm, partials);
}
