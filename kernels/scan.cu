// Exclusive prefix sums on the device, shared by the set-ups (AMG, IC, FSAI,
// Eisenstat, the assembly map); compiled with spmv.cu (u64). Host side:
// src/gpu/scan.rs.
//
// Exclusive scan of unsigned counts into u64 offsets (deterministic:
// integer sums). Tiles of SCAN_TILE = blockDim * SCAN_ITEMS elements, each
// thread owning SCAN_ITEMS consecutive ones. Launch: SCAN_BLOCK threads.

#define SCAN_BLOCK 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_BLOCK * SCAN_ITEMS)

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at
// most 1024); the block total goes to *total (valid in every thread after the
// call). Safe to call repeatedly.
__device__ u64 block_exclusive_scan(u64 v, u64* total) {
    __shared__ u64 warp_totals[32];
    __shared__ u64 block_total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 inclusive = v;
    for (int o = 1; o < 32; o <<= 1) {
        const u64 up = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += up;
    }
    __syncthreads();  // an earlier call may still be reading warp_totals
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        u64 w = lane < warps ? warp_totals[lane] : 0ULL;
        u64 w_inclusive = w;
        for (int o = 1; o < 32; o <<= 1) {
            const u64 up = __shfl_up_sync(0xffffffffu, w_inclusive, o);
            if (lane >= o) w_inclusive += up;
        }
        if (lane < warps) warp_totals[lane] = w_inclusive - w;  // exclusive
        if (lane == warps - 1) block_total = w_inclusive;
    }
    __syncthreads();
    *total = block_total;
    return warp_totals[warp] + inclusive - v;
}

// The SCAN_ITEMS counts of this thread (0 past n) and their sum.
__device__ u64 scan_thread_items(int n, const unsigned* __restrict__ counts, unsigned* items) {
    const long long first = (long long)blockIdx.x * SCAN_TILE + (long long)threadIdx.x * SCAN_ITEMS;
    u64 sum = 0;
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const long long i = first + k;
        items[k] = i < n ? counts[i] : 0u;
        sum += items[k];
    }
    return sum;
}

// Part 1: the sum of each tile.
extern "C" __global__ void scan_tiles(int n, const unsigned* __restrict__ counts,
                                          u64* __restrict__ tile_sums) {
    unsigned items[SCAN_ITEMS];
    u64 total;
    block_exclusive_scan(scan_thread_items(n, counts, items), &total);
    if (threadIdx.x == 0) tile_sums[blockIdx.x] = total;
}

// Part 2 (one block): tile_sums becomes its exclusive prefix sum, in chunks
// of blockDim with a carry; the grand total goes to offsets[n].
extern "C" __global__ void scan_tile_offsets(int tiles, u64* tile_sums, int n,
                                                 u64* __restrict__ offsets) {
    u64 carry = 0;
    for (int base = 0; base < tiles; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const u64 v = i < tiles ? tile_sums[i] : 0ULL;
        u64 total;
        const u64 before = block_exclusive_scan(v, &total);
        if (i < tiles) tile_sums[i] = carry + before;
        carry += total;
    }
    if (threadIdx.x == 0) offsets[n] = carry;
}

// Part 3: offsets[i] = sum of counts[0 .. i).
extern "C" __global__ void scan_apply(int n, const unsigned* __restrict__ counts,
                                          const u64* __restrict__ tile_offsets,
                                          u64* __restrict__ offsets) {
    unsigned items[SCAN_ITEMS];
    u64 total;
    u64 running = tile_offsets[blockIdx.x] +
                  block_exclusive_scan(scan_thread_items(n, counts, items), &total);
    const long long first = (long long)blockIdx.x * SCAN_TILE + (long long)threadIdx.x * SCAN_ITEMS;
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        const long long i = first + k;
        if (i < n) offsets[i] = running;
        running += items[k];
    }
}

// Parts 1-3 in one block when n <= SCAN_TILE (one tile: the small levels'
// scans take one launch instead of three; the same integer sums).
extern "C" __global__ void scan_single(int n, const unsigned* __restrict__ counts,
                                           u64* __restrict__ offsets) {
    unsigned items[SCAN_ITEMS];
    u64 total;
    u64 running = block_exclusive_scan(scan_thread_items(n, counts, items), &total);
    const int first = threadIdx.x * SCAN_ITEMS;
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        if (first + k < n) offsets[first + k] = running;
        running += items[k];
    }
    if (threadIdx.x == 0) offsets[n] = total;
}
