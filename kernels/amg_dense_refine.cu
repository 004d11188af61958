// Aggregation AMG on the device: the coarsest level's inverse after a value
// update, refined from the previous one instead of factored again (Schulz
// 1933; the iteration's quadratic convergence and its start: Pan & Schreiber
// 1991). A time step changes the coarsest matrix M a little, so the previous
// inverse X0 is close to M^-1, and
//     E_k = I - M X_k,   X_{k+1} = X_k + X_k E_k
// squares the residual each step (E_{k+1} = E_k^2): two tiled products of
// n x n matrices a step, where the blocked Cholesky (amg.cu,
// amg_dense_fused.cu) is a chain of small dependent steps.
//
// Everything is decided on the device, nothing read back. state[0] = go, the
// updates that run (update k runs when k < go); state[1] = the verdict: 0
// iterating, 1 accepted (the refined inverse replaces the factorisation,
// which then returns at once), 2 rejected (the factorisation runs as
// before); state[2] = the residuals that ran. Residual k, from the Frobenius
// norm d_k of E_k (norms[k]), judges X_k, so that only a residual measured
// on the very iterate accepts it:
// - d_k > REFINE_START (or not a number), or M singular: rejected;
// - d_k <= REFINE_ACCEPT: X_k accepted (X_0, the previous inverse, when the
//   matrix hardly changed);
// - k > 0 and d_k > d_{k-1} / 4, at most REFINE_FLOOR: X_k accepted. The
//   iteration stalls at the rounding floor of an entrywise rounded inverse,
//   about eps |M| |X| ~ eps cond(M) (2e-5 on the coarsest level of a 200^3
//   pressure problem with one reference cell); that is the order of the
//   factored inverse's forward error too, though its residual is smaller
//   (it is backward stable). Near that floor E_k is mostly rounding, and X_k
//   E_k, mirrored from its upper triangle, need not lower the residual: a
//   residual that grows past REFINE_START then rejects;
// - else update k runs and residual k + 1 follows; residual `last` rejects.
// The Frobenius norm bounds the spectral one, so d_0 <= REFINE_START < 1
// makes the iteration converge in exact arithmetic, and an accepted d_k < 1
// proves M positive definite as the factorisation would: X_k is symmetric
// and M X_k = I - E_k has its eigenvalues within d_k of 1, so M's inertia is
// X_k^-1's, and X_k is positive definite (X_0 is; X_{k+1} = X_k (2 I - M
// X_k) keeps it so while d_k < 1). A time step that changes the matrix by a
// relative 1e-3 starts near d_0 = 1e-3 sqrt(n).
// Host side: src/solve/amg/cuda.rs (CoarsestRefinement).

#define REFINE_START 0.5
#define REFINE_ACCEPT 1e-8
#define REFINE_FLOOR 1e-3

// E_k = I - M X_k in 32 x 32 tiles (block b: row tile b / t, column tile
// b % t, t = ceil(n / 32); 256 threads), M X_k as M^T X_k (M is exactly
// symmetric); each block's sum of E's squares in partials, and the last
// block (ticket) sets state from their sum, in a fixed order, and records
// d_k in norms[k]. A residual after a verdict returns at once.
extern "C" __global__ void amg_dense_refine_residual(int n, int k, int last, const double* m,
                                                     const double* x, const double* singular,
                                                     double* e, double* partials,
                                                     unsigned* ticket, int* state,
                                                     double* norms) {
    __shared__ double sa[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ double sb[DENSE_PANEL][DENSE_PANEL + 1];
    if (k > 0 && state[1] != 0) return;
    if (singular[0] != 0.0) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            state[0] = 0;
            state[1] = 2;
            state[2] = 1;
            norms[0] = -1.0;  // the log's mark of a singular matrix
        }
        return;
    }
    const int t = (n + 31) / 32;
    const int i0 = 32 * (blockIdx.x / t), j0 = 32 * (blockIdx.x % t);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    dense_tile_product(n, 0, i0, j0, m, x, sa, sb, acc);
    const int j = j0 + tx;
    double squares = 0.0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int i = i0 + ty + 8 * q;
        if (i < n && j < n) {
            const double v = (i == j ? 1.0 : 0.0) - acc[q];
            e[(u64)i * n + j] = v;
            squares += v * v;
        }
    }
    const double s = block_sum(squares);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
    if (!last_block(ticket)) return;
    const double d = sqrt(reduce_fixed(gridDim.x, partials));
    if (threadIdx.x != 0) return;
    norms[k] = d;
    int verdict = 0;
    if (!(d <= REFINE_START)) verdict = 2;
    else if (d <= REFINE_ACCEPT) verdict = 1;
    else if (k > 0 && d > 0.25 * norms[k - 1] && d <= REFINE_FLOOR) verdict = 1;
    else if (k >= last) verdict = 2;
    // X_k is the last iterate either way: update k runs only to go on.
    state[0] = verdict == 0 ? k + 1 : k;
    state[1] = verdict;
    state[2] = k + 1;
}

// X_{k+1} = X_k + X_k E_k when k < state[0]: the upper triangle's 32 x 32
// tiles (block b the b-th of row tile by row tile, t (t + 1) / 2 of them),
// X_k E_k as X_k^T E_k, each entry (i <= j) written at (i, j) and (j, i),
// so X_{k+1} is exactly symmetric like X_k (X_k E_k = X_k - X_k M X_k is
// symmetric).
extern "C" __global__ void amg_dense_refine_update(int n, int k, const double* x, const double* e,
                                                   double* x_next, const int* state) {
    __shared__ double sa[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ double sb[DENSE_PANEL][DENSE_PANEL + 1];
    if (k >= state[0]) return;
    const int t = (n + 31) / 32;
    int ti = 0, r = blockIdx.x;
    while (r >= t - ti) {
        r -= t - ti;
        ++ti;
    }
    const int i0 = 32 * ti, j0 = 32 * (ti + r);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    dense_tile_product(n, 0, i0, j0, x, e, sa, sb, acc);
    const int j = j0 + tx;
    if (j >= n) return;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int i = i0 + ty + 8 * q;
        if (i < n && i <= j) {
            const double v = x[(u64)i * n + j] + acc[q];
            x_next[(u64)i * n + j] = v;
            x_next[(u64)j * n + i] = v;
        }
    }
}

// The accepted inverse into `to` (the operator the cycle reads) when the
// last update wrote it elsewhere (an odd count: state[0] & 1), one thread
// per entry.
extern "C" __global__ void amg_dense_refine_copy(int n, const double* __restrict__ from,
                                                 double* __restrict__ to,
                                                 const int* __restrict__ state) {
    if (state[1] != 1 || (state[0] & 1) == 0) return;
    const u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (i < (u64)n * n) to[i] = from[i];
}
