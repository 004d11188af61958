// SSOR sweeps of one colour (CPU reference: solve::ssor::Ssor in the same
// colouring). Rows of one colour are never neighbours, so they update at
// once: one thread per row of the colour, the row's products over its part
// (the strictly lower part in colour order for the forward sweep, the upper
// for the backward one) summed in stored column order with
// __dmul_rn/__dadd_rn (no FMA contraction), as the CPU does:
//   forward  (scale = 0): x_i = w_i rhs_i − w_i Σ part_ij x_j   (x = y, rhs = r)
//   backward (scale = s): x_i = s rhs_i − w_i Σ part_ij x_j     (x = z, rhs = y)
// with w_i = ω / a_ii and s = (2 − ω) / ω. Uses u64 (spmv.cu) and gated_off
// (smooth.cu): `done` is PCG's fused-loop gate.
extern "C" __global__ void ssor_colour(int count, const unsigned* __restrict__ rows, int offset,
                                       const u64* __restrict__ row_ptr,
                                       const unsigned* __restrict__ cols,
                                       const double* __restrict__ vals,
                                       const double* __restrict__ w, double scale,
                                       const double* __restrict__ rhs, double* x,
                                       const double* done) {
    if (gated_off(done)) return;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    const unsigned i = rows[offset + t];
    double acc = 0.0;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        acc = __dadd_rn(acc, __dmul_rn(vals[k], x[cols[k]]));
    const double first = scale == 0.0 ? __dmul_rn(w[i], rhs[i]) : __dmul_rn(scale, rhs[i]);
    x[i] = __dsub_rn(first, __dmul_rn(w[i], acc));
}
