// Aggregation AMG on the device: the coarsest level's inverse from the
// dense Cholesky factor amg.cu forms (DENSE_PANEL from there; u64 from
// spmv.cu). Host side: src/solve/amg/cuda.rs.

// The inverse from the factor l: W = L^-1 by a blocked forward substitution
// on the identity (amg_dense_identity, then per panel of DENSE_PANEL rows
// amg_dense_trinv_panel and amg_dense_trinv_update), then A^-1 = W^T W
// (amg_dense_wtw, exactly symmetric), then, when singular, each column minus
// its mean (amg_dense_project, as CoarsestSolver::inverse). W lives in the
// row-major n x n `w`; its upper triangle stays zero.

// w[e] = I[e] (entry e of the row-major n x n identity).
__device__ void dense_identity_entry(int n, double* w, u64 e) {
    w[e] = e / n == e % n ? 1.0 : 0.0;
}

// w = I, one thread per entry.
extern "C" __global__ void amg_dense_identity(int n, double* __restrict__ w) {
    const u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (e >= (u64)n * n) return;
    dense_identity_entry(n, w, e);
}

// Rows p..p+pb of W for every column j < p + pb (a thread per column):
// L_PP W[P, j] = w[P, j] (w[P, j] holds e_j minus the earlier panels'
// updates), the panel's column in registers.
__device__ void dense_trinv_panel_block(int n, int p, const double* l, double* w, int vb,
                                        DenseTile* s) {
    const int pb = dense_load_diag_block(n, p, l, s);
    __syncthreads();
    const int j = vb * blockDim.x + threadIdx.x;
    if (j >= p + pb) return;
    double v[DENSE_PANEL];
#pragma unroll
    for (int k = 0; k < DENSE_PANEL; ++k) v[k] = k < pb ? w[(u64)(p + k) * n + j] : 0.0;
#pragma unroll
    for (int k = 0; k < DENSE_PANEL; ++k) {
        if (k < pb) {
            v[k] = v[k] / s[k][k];
#pragma unroll
            for (int m = k + 1; m < DENSE_PANEL; ++m)
                if (m < pb) v[m] -= v[k] * s[m][k];
        }
    }
#pragma unroll
    for (int k = 0; k < DENSE_PANEL; ++k)
        if (k < pb) w[(u64)(p + k) * n + j] = v[k];
}

extern "C" __global__ void amg_dense_trinv_panel(int n, int p, const double* __restrict__ l,
                                                 double* __restrict__ w) {
    __shared__ double s[DENSE_PANEL][DENSE_PANEL + 1];
    dense_trinv_panel_block(n, p, l, w, blockIdx.x, s);
}

// w[i][j] -= sum_c L[i][p+c] W[p+c][j] for i >= q = p + DENSE_PANEL and
// j < q: 32 x 32 tiles, block vb the column tile vb % col_tiles of the row
// tile vb / col_tiles (below q); blockDim.x a multiple of 32.
__device__ void dense_trinv_update_block(int n, int p, int col_tiles, const double* l,
                                         double* w, int vb, DenseTile* li, DenseTile* wp) {
    const int q = p + DENSE_PANEL;
    const int i0 = q + 32 * (vb / col_tiles), j0 = 32 * (vb % col_tiles);
    for (int e = threadIdx.x; e < 32 * 32; e += blockDim.x) {
        const int r = e >> 5, c = e & 31;
        li[r][c] = dense_entry_or_zero(n, l, i0 + r, p + c);
        // wp[r][c] = W[p + r][j0 + c] (r the row of the panel)
        wp[r][c] = j0 + c < q ? w[(u64)(p + r) * n + j0 + c] : 0.0;
    }
    __syncthreads();
    const int tx = threadIdx.x & 31;
    const int j = j0 + tx;
    if (j >= q) return;
    for (int r = threadIdx.x >> 5; r < 32; r += blockDim.x >> 5) {
        const int i = i0 + r;
        if (i >= n) break;
        double sum = 0.0;
        for (int c = 0; c < DENSE_PANEL; ++c) sum += li[r][c] * wp[c][tx];
        w[(u64)i * n + j] -= sum;
    }
}

extern "C" __global__ void amg_dense_trinv_update(int n, int p, int col_tiles,
                                                  const double* __restrict__ l,
                                                  double* __restrict__ w) {
    __shared__ double li[32][33];
    __shared__ double wp[32][33];
    dense_trinv_update_block(n, p, col_tiles, l, w, blockIdx.x, li, wp);
}

// acc[m] += sum_{k_begin <= k < n} a[k][i0 + ty + 8 m] b[k][j0 + tx], the
// 32 x 32 tile at (i0, j0) of A^T B for the row-major n x n a and b (tx =
// threadIdx.x & 31, ty = threadIdx.x >> 5; blockDim.x = 256, each thread a
// column, every 8th row), k in chunks of 32 staged in shared memory, rows
// and columns past n read as 0.
__device__ void dense_tile_product(int n, int k_begin, int i0, int j0, const double* a,
                                   const double* b, DenseTile* sa, DenseTile* sb,
                                   double (&acc)[4]) {
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int k0 = k_begin; k0 < n; k0 += 32) {
        for (int e = threadIdx.x; e < 32 * 32; e += blockDim.x) {
            const int kk = e >> 5, c = e & 31;
            const bool in = k0 + kk < n;
            const u64 row = (u64)(k0 + kk) * n;
            sa[kk][c] = in && i0 + c < n ? a[row + i0 + c] : 0.0;
            sb[kk][c] = in && j0 + c < n ? b[row + j0 + c] : 0.0;
        }
        __syncthreads();
        for (int kk = 0; kk < 32; ++kk) {
            const double v = sb[kk][tx];
#pragma unroll
            for (int m = 0; m < 4; ++m) acc[m] += sa[kk][ty + 8 * m] * v;
        }
        __syncthreads();
    }
}

// inv[i][j] = sum_{k >= max(i, j)} W[k][i] W[k][j] (= (W^T W)_ij = A^-1),
// 32 x 32 output tiles (block vb: column tile vb % t, row tile vb / t, t =
// ceil(n / 32)) by dense_tile_product; blockDim.x = 256.
__device__ void dense_wtw_block(int n, const double* w, double* inv, int vb, DenseTile* wi,
                                DenseTile* wj) {
    const int t = (n + 31) / 32;
    const int i0 = 32 * (vb / t), j0 = 32 * (vb % t);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    dense_tile_product(n, max(i0, j0), i0, j0, w, w, wi, wj, acc);
    const int j = j0 + tx;
    if (j >= n) return;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int i = i0 + ty + 8 * m;
        if (i < n) inv[(u64)i * n + j] = acc[m];
    }
}

extern "C" __global__ void amg_dense_wtw(int n, const double* __restrict__ w,
                                         double* __restrict__ inv) {
    __shared__ double wi[32][33];
    __shared__ double wj[32][33];
    dense_wtw_block(n, w, inv, blockIdx.x, wi, wj);
}

// When singular[0] != 0: inv[i][j] -= mean_i inv[i][j] (each column minus its
// mean). Blocks of 256 threads: 32 columns (block vb the columns 32 vb..),
// 8 row groups summed in a fixed order (part: 8 rows of a shared tile).
__device__ void dense_project_block(int n, const double* singular, double* inv, int vb,
                                    DenseTile* part) {
    if (singular[0] == 0.0) return;
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int j = 32 * vb + tx;
    double s = 0.0;
    if (j < n)
        for (int i = ty; i < n; i += 8) s += inv[(u64)i * n + j];
    part[ty][tx] = s;
    __syncthreads();
    double total = 0.0;
    for (int g = 0; g < 8; ++g) total += part[g][tx];
    const double mean = total / n;
    if (j < n)
        for (int i = ty; i < n; i += 8) inv[(u64)i * n + j] -= mean;
}

extern "C" __global__ void amg_dense_project(int n, const double* __restrict__ singular,
                                             double* __restrict__ inv) {
    __shared__ double part[8][33];
    dense_project_block(n, singular, inv, blockIdx.x, part);
}
