// Incomplete LU on the GPU by level scheduling (src/solve/ilu/cuda.rs; Yang
// 2015 §2.9-2.11): the numeric ILU factorisation on the padded ILU(k) pattern
// and the forward/backward sweeps, one launch per level, one thread per row.
// The Schwarz preconditioner's gather and scatter are kernels/schwarz.cu.
//
// The factor and the sweeps repeat src/solve/ilu/cpu.rs operation for operation
// with the _rn intrinsics (no FMA contraction), so factors and applications
// equal the CPU's bit for bit. L is unit lower (strictly lower slots), U the
// diagonal and upper slots, in place in `lu` (u64 from spmv.cu). The sweeps
// take the trailing `done` gate (level_row, kernels/smooth.cu).

// ILU factor, one level (IKJ): for each lower slot s = (i, k) ascending,
// l = lu_ik / u_kk, then lu_ij -= l * u_kj for the upper slots (k, j) of row k
// whose column is in row i (a merge of two sorted column lists; row k is
// final: an earlier level). A pivot failing |u_ii| > tiny_i (or not finite)
// lowers `failed` to row + 1 (atomicMin from n + 1).
extern "C" __global__ void ilu_factor(int count, int first, const int* __restrict__ rows,
                                      const u64* __restrict__ row_ptr,
                                      const int* __restrict__ cols,
                                      const u64* __restrict__ diag_slot,
                                      const double* __restrict__ tiny, double* lu, int* failed) {
    const int i = level_row(count, first, rows);
    if (i < 0) return;
    const u64 end = row_ptr[i + 1], di = diag_slot[i];
    for (u64 s = row_ptr[i]; s < di; ++s) {
        const int k = cols[s];
        const double l = __ddiv_rn(lu[s], lu[diag_slot[k]]);
        lu[s] = l;
        for_common_columns(cols, s + 1, end, diag_slot[k] + 1, row_ptr[k + 1], [&](u64 p, u64 q) {
            lu[p] = __dsub_rn(lu[p], __dmul_rn(l, lu[q]));
        });
    }
    const double u = lu[di];
    if (pivot_breaks_down(u, tiny[i])) atomicMin(failed, i + 1);
}

// Forward sweep L y = r, one level: y_i = r_i - sum l_ik y_k (k ascending).
extern "C" __global__ void ilu_forward(int count, int first, const int* __restrict__ rows,
                                       const u64* __restrict__ row_ptr,
                                       const int* __restrict__ cols,
                                       const u64* __restrict__ diag_slot,
                                       const double* __restrict__ lu,
                                       const double* __restrict__ r, double* z,
                                       const double* done) {
    const int i = level_row(count, first, rows, done);
    if (i < 0) return;
    double acc = r[i];
    for (u64 s = row_ptr[i]; s < diag_slot[i]; ++s)
        acc = __dsub_rn(acc, __dmul_rn(lu[s], z[cols[s]]));
    z[i] = acc;
}

// Backward sweep U x = y in place, one level: x_i = (y_i - sum u_ij x_j) / u_ii
// (j ascending; x_j final: an earlier backward level).
extern "C" __global__ void ilu_backward(int count, int first, const int* __restrict__ rows,
                                        const u64* __restrict__ row_ptr,
                                        const int* __restrict__ cols,
                                        const u64* __restrict__ diag_slot,
                                        const double* __restrict__ lu, double* z,
                                        const double* done) {
    const int i = level_row(count, first, rows, done);
    if (i < 0) return;
    const u64 di = diag_slot[i];
    double acc = z[i];
    for (u64 s = di + 1; s < row_ptr[i + 1]; ++s)
        acc = __dsub_rn(acc, __dmul_rn(lu[s], z[cols[s]]));
    z[i] = __ddiv_rn(acc, lu[di]);
}
