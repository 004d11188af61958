// Aggregation AMG on the device: the coarsest level's inverse (amg.cu's
// factor and amg_inverse.cu's steps) in one cooperative launch. Its own
// module, so that the launch-per-step kernels compile apart from it.
// Host side: src/solve/amg/cuda.rs.

// ---- The whole inverse in one cooperative launch (every block resident,
// gridDim.x blocks of 256 threads): the steps above in their order, each
// step's blocks vb handed out as vb = blockIdx.x, + gridDim.x, ..., a grid
// barrier (dense_grid_sync) wherever one step reads what an earlier one
// wrote. Independent steps share a stretch between two barriers: W = I with
// the first diagonal block; panel p's rows below it with the rows p.. of W
// (both read only L's diagonal block p); the trailing update of panel p with
// W's update below panel p (disjoint parts of L and W). 2 + 2 ceil(n / 32)
// barriers, where the launch per step takes about 4 n / 32 launches (each a
// host call and a gap on the device).

// Spins of a grid barrier before it gives up (about a second; only a launch
// whose blocks are not all resident waits that long).
#define DENSE_SPIN_CYCLES (1LL << 31)

// Grid barrier: bar[0] counts the arrived blocks (back to 0 at each
// barrier), bar[1] is the generation; both zeroed before the launch. As
// cooperative groups' grid sync does it: a block barrier, thread 0 fences
// (the block's writes visible on the device), arrives and waits for the
// generation to move (the last block to arrive moves it), fences again (the
// block's later reads after every block's writes), a block barrier. A wait
// past DENSE_SPIN_CYCLES sets *failed = -1 and stops waiting.
__device__ void dense_grid_sync(unsigned* bar, int* failed) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* generation = bar + 1;
        const unsigned g = *generation;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            const long long start = clock64();
            while (*generation == g) {
                if (clock64() - start > DENSE_SPIN_CYCLES) {
                    atomicExch(failed, -1);
                    break;
                }
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// Whether *failed is set, one read for the whole block (the factor's steps
// are skipped uniformly per block, as the launch per step returns at once).
__device__ bool dense_has_failed(const int* failed, int* shared_word) {
    if (threadIdx.x == 0) *shared_word = *(const volatile int*)failed;
    __syncthreads();
    const bool f = *shared_word != 0;
    __syncthreads();  // every thread read the word before it is written again
    return f;
}

// dense_symmetric_inverse in one launch: dense (may be w), singular, factor,
// w, failed (0 on entry) and inverse as the launch per step takes them;
// barrier: 2 words, zeroed. No __restrict__: a step reads what another
// block wrote in an earlier step (no read-only cache path). With `refined`
// (amg_dense_refine.cu's state, or null) saying the refined inverse was
// accepted, every block returns at once.
extern "C" __global__ void amg_dense_inverse_fused(int n, const double* dense,
                                                   const double* singular, double* factor,
                                                   double* w, int* failed, double* inverse,
                                                   unsigned* barrier, const int* refined) {
    __shared__ double t0[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ double t1[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ int bad, word;
    if (refined != nullptr && refined[1] == 1) return;
    const u64 nn = (u64)n * n;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const int rows_per_block = blockDim.x >> 5;
    // (M + M^T) / 2, shifted when singular (amg_dense_symmetrise).
    for (u64 e = first; e < nn; e += stride) dense_symmetrise_entry(n, dense, singular, factor, e);
    dense_grid_sync(barrier, failed);
    // W = I (w may be dense, read above) and the first diagonal block.
    for (u64 e = first; e < nn; e += stride) dense_identity_entry(n, w, e);
    if (blockIdx.x == 0 && !dense_has_failed(failed, &word))
        dense_factor_diag(n, 0, factor, failed, t0, &bad);
    dense_grid_sync(barrier, failed);
    for (int p = 0; p < n; p += DENSE_PANEL) {
        const int below = n - p - DENSE_PANEL;
        const int columns = min(p + DENSE_PANEL, n);
        // Panel p's rows below its diagonal block; rows p.. of W.
        if (below > 0 && !dense_has_failed(failed, &word)) {
            const int blocks = (below + rows_per_block - 1) / rows_per_block;
            for (int vb = blockIdx.x; vb < blocks; vb += gridDim.x) {
                dense_panel_block(n, p, factor, vb, t0);
                __syncthreads();
            }
        }
        const int panel_blocks = (columns + blockDim.x - 1) / blockDim.x;
        for (int vb = blockIdx.x; vb < panel_blocks; vb += gridDim.x) {
            dense_trinv_panel_block(n, p, factor, w, vb, t1);
            __syncthreads();
        }
        dense_grid_sync(barrier, failed);
        if (below <= 0) break;
        // The trailing update (and the next diagonal block); W below panel p.
        const int tiles = (below + 31) / 32;
        if (!dense_has_failed(failed, &word)) {
            const int blocks = tiles * (tiles + 1) / 2;
            for (int vb = blockIdx.x; vb < blocks; vb += gridDim.x) {
                dense_update_block(n, p, factor, failed, vb, t0, t1, &bad);
                __syncthreads();
            }
        }
        const int col_tiles = (columns + 31) / 32;
        for (int vb = blockIdx.x; vb < col_tiles * tiles; vb += gridDim.x) {
            dense_trinv_update_block(n, p, col_tiles, factor, w, vb, t0, t1);
            __syncthreads();
        }
        dense_grid_sync(barrier, failed);
    }
    const int t = (n + 31) / 32;
    for (int vb = blockIdx.x; vb < t * t; vb += gridDim.x) {
        dense_wtw_block(n, w, inverse, vb, t0, t1);
        __syncthreads();
    }
    dense_grid_sync(barrier, failed);
    for (int vb = blockIdx.x; vb < t; vb += gridDim.x) {
        dense_project_block(n, singular, inverse, vb, t0);
        __syncthreads();
    }
}
