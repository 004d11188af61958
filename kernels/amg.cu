// Aggregation AMG on the device (compiled with spmv.cu, pcg.cu and smooth.cu;
// uses u64, block_sum and modsell_row from spmv.cu). The algorithm is
// the CPU reference's (src/solve/amg): pairwise matching
// in Jacobi-style rounds, leaders numbered by an exclusive scan, Galerkin
// products per coarse row in the CPU's summation order, so that the aggregates
// are the same and the coarse matrices the same bits. Host side: src/gpu/amg.rs.
//
// Device CSR: u64 row pointers, unsigned columns ascending in each row, the
// diagonal stored. No atomics touch floating-point values; integer atomics
// only count (their totals do not depend on the order) or hand out slots that
// a sort then puts in a fixed order.

// ---- Exclusive scan of unsigned counts into u64 offsets (deterministic:
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
extern "C" __global__ void amg_scan_tiles(int n, const unsigned* __restrict__ counts,
                                          u64* __restrict__ tile_sums) {
    unsigned items[SCAN_ITEMS];
    u64 total;
    block_exclusive_scan(scan_thread_items(n, counts, items), &total);
    if (threadIdx.x == 0) tile_sums[blockIdx.x] = total;
}

// Part 2 (one block): tile_sums becomes its exclusive prefix sum, in chunks
// of blockDim with a carry; the grand total goes to offsets[n].
extern "C" __global__ void amg_scan_tile_offsets(int tiles, u64* tile_sums, int n,
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
extern "C" __global__ void amg_scan_apply(int n, const unsigned* __restrict__ counts,
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
extern "C" __global__ void amg_scan_single(int n, const unsigned* __restrict__ counts,
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

// ---- mod-SELL -> CSR of the same matrix (ModSell::to_csr: the diagonal and
// the stored off-diagonals, ascending columns). Column codes as in smooth.cu.

// lengths[row] = 1 (diagonal) + the row's nonzero codes.
extern "C" __global__ void amg_modsell_row_lengths(int n, int h, const u64* __restrict__ slice_ptr,
                                                   const int* __restrict__ codes,
                                                   unsigned* __restrict__ lengths) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const int s = row / h;
    unsigned len = 1;
    for (u64 k = slice_ptr[s] + (row - s * h); k < slice_ptr[s + 1]; k += h) len += codes[k] != 0;
    lengths[row] = len;
}

// The CSR pattern: columns ascending (insertion sort of the row, whose columns
// are distinct) and, per entry, its mod-SELL slot (-(row + 1): the diagonal
// of row), from which amg_csr_values_from_modsell takes the values.
extern "C" __global__ void amg_modsell_to_csr(int n, int h, const u64* __restrict__ slice_ptr,
                                              const int* __restrict__ codes,
                                              const u64* __restrict__ row_ptr,
                                              unsigned* __restrict__ cols,
                                              long long* __restrict__ source) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    // Each entry carries its mod-SELL slot (the diagonal: -(row + 1)).
    struct Slots {
        long long* source;
        __device__ void diagonal(u64 at, int row) const { source[at] = -1 - (long long)row; }
        __device__ void entry(u64 at, u64 k) const { source[at] = (long long)k; }
        __device__ void shift(u64 to, u64 from) const { source[to] = source[from]; }
    };
    modsell_row_to_csr(row, h, slice_ptr, codes, row_ptr, cols, Slots{source});
}

// CSR values from the mod-SELL arrays through the slot map (also the
// value-only update of the fine level), one thread per entry.
extern "C" __global__ void amg_csr_values_from_modsell(u64 nnz, const long long* __restrict__ source,
                                                       const double* __restrict__ modsell_vals,
                                                       const double* __restrict__ diag,
                                                       double* __restrict__ vals) {
    const u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (k >= nnz) return;
    const long long s = source[k];
    vals[k] = s < 0 ? diag[-1 - s] : modsell_vals[s];
}

// ---- Pairwise matching (spec "Pairwise matching", solve::amg::matching):
// Jacobi-style rounds. partner[i] < 0: unmatched. matched[r] counts the rows
// matched in round r; a round after one that matched nothing is skipped (its
// state would not change), so all rounds are launched without reading
// anything back.

// The spec's pair hash, wrapping 32-bit arithmetic (lo < hi).
__device__ __forceinline__ unsigned amg_pair_hash(unsigned lo, unsigned hi) {
    unsigned h = (lo * 0x9E3779B1u) ^ hi;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    h *= 0x297A2D39u;
    h ^= h >> 15;
    return h;
}

// A coupling is strong when s_ij >= STRONG_FRACTION * s_i and * s_j
// (matching.rs STRONG_FRACTION).
#define STRONG_FRACTION 0.5

// The matching's start (one launch): strongest[i] = s_i = max over the
// off-diagonals of -a_ij (0 when none is negative), in column order as
// matching.rs strongest_couplings; every row unmatched; the rounds' counters
// matched[0 .. rounds) zeroed.
extern "C" __global__ void amg_match_start(int n, const u64* __restrict__ row_ptr,
                                           const unsigned* __restrict__ cols,
                                           const double* __restrict__ vals,
                                           double* __restrict__ strongest,
                                           int* __restrict__ partner, int rounds,
                                           int* __restrict__ matched) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0)
        for (int r = 0; r < rounds; ++r) matched[r] = 0;
    if (i >= n) return;
    double m = 0.0;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if ((int)cols[k] != i && -vals[k] > m) m = -vals[k];
    strongest[i] = m;
    partner[i] = -1;
}

// Round part 1: cand[i] = the unmatched neighbour j of unmatched i with
// s_ij = -a_ij > 0 and the largest key (strong_ij, pair hash), the smaller j
// on equal keys (columns ascend; replaced only on a strictly greater key);
// -1 for none or for matched rows.
extern "C" __global__ void amg_match_candidates(int n, const u64* __restrict__ row_ptr,
                                                const unsigned* __restrict__ cols,
                                                const double* __restrict__ vals,
                                                const double* __restrict__ strongest,
                                                const int* __restrict__ partner,
                                                int* __restrict__ cand,
                                                const int* __restrict__ matched_before) {
    if (matched_before != nullptr && *matched_before == 0) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int best = -1;
    if (partner[i] < 0) {
        bool best_strong = false;
        unsigned best_h = 0;
        const double s_i = strongest[i];
        for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) {
            const int j = (int)cols[k];
            if (j == i) continue;
            const double s = -vals[k];
            // As the CPU's test (a NaN coupling passes it but is never strong).
            if (s <= 0.0 || partner[j] >= 0) continue;
            const bool strong = s >= STRONG_FRACTION * s_i && s >= STRONG_FRACTION * strongest[j];
            const unsigned h = amg_pair_hash((unsigned)min(i, j), (unsigned)max(i, j));
            if (best < 0 || (strong && !best_strong) || (strong == best_strong && h > best_h)) {
                best = j;
                best_strong = strong;
                best_h = h;
            }
        }
    }
    cand[i] = best;
}

// Round part 2: unmatched i and cand(i) = j with cand(j) = i are matched.
extern "C" __global__ void amg_match_handshake(int n, int* __restrict__ partner,
                                               const int* __restrict__ cand,
                                               int* __restrict__ matched,
                                               const int* __restrict__ matched_before) {
    if (matched_before != nullptr && *matched_before == 0) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || partner[i] >= 0) return;
    const int j = cand[i];
    if (j >= 0 && cand[j] == i) {
        partner[i] = j;
        atomicAdd(matched, 1);
    }
}

// After the rounds (AMG_SPEC Changes 17:45, matching.rs join_singletons):
// host[i] = for an unmatched row, the neighbour j != i in a pair with s_ij =
// -a_ij > 0 and the largest (s_ij, pair hash), the smaller j on equal keys
// (columns ascend; replaced only on a strictly greater key); -1 for none and
// for paired rows. Reads the final partners only. Also leader[i] = 1 when i
// leads its aggregate: the smaller row of a pair, or a row neither paired nor
// joined to a pair (joiners never lead).
extern "C" __global__ void amg_join_singletons(int n, const u64* __restrict__ row_ptr,
                                               const unsigned* __restrict__ cols,
                                               const double* __restrict__ vals,
                                               const int* __restrict__ partner,
                                               int* __restrict__ host,
                                               unsigned* __restrict__ leader) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int best = -1;
    if (partner[i] < 0) {
        double best_s = 0.0;
        unsigned best_h = 0;
        for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) {
            const int j = (int)cols[k];
            if (j == i) continue;
            const double s = -vals[k];
            if (s <= 0.0 || partner[j] < 0) continue;
            const unsigned h = amg_pair_hash((unsigned)min(i, j), (unsigned)max(i, j));
            if (best < 0 || s > best_s || (s == best_s && h > best_h)) {
                best = j;
                best_s = s;
                best_h = h;
            }
        }
    }
    host[i] = best;
    const int p = partner[i];
    leader[i] = (p < 0 ? best < 0 : i < p) ? 1u : 0u;
}

// The pass's map i -> number of its leader (leader_offsets: exclusive scan
// of the leader flags): min(i, partner) for a paired row, min(host,
// partner[host]) for a joined one, i for a singleton.
extern "C" __global__ void amg_pass_aggregates(int n, const int* __restrict__ partner,
                                               const int* __restrict__ host,
                                               const u64* __restrict__ leader_offsets,
                                               unsigned* __restrict__ aggregate) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int p = partner[i], h = host[i];
    const int leader = p >= 0 ? min(i, p) : h >= 0 ? min(h, partner[h]) : i;
    aggregate[i] = (unsigned)leader_offsets[leader];
}

// ---- Galerkin product of one pass (spec "Galerkin product for one pass"),
// per coarse row I (bounds, columns: a thread; fill, values: a warp) with members members[member_ptr[I] ..
// member_ptr[I+1]) ascending (amg_count_members .. amg_sort_members below).
// Symbolic: the distinct coarse columns, sorted, and for every fine entry k
// of the members' rows the slot dest[k] of its coarse entry. Numeric: the
// coarse row zeroed, then a_ik added to slot dest[k] member by member, entry
// by entry in stored order: each coarse entry sums its contributions in
// encounter order, the CPU's order.

// bound[I] = entries of the members' rows (room for the distinct columns).
extern "C" __global__ void amg_galerkin_bounds(int nc, const u64* __restrict__ member_ptr,
                                               const unsigned* __restrict__ members,
                                               const u64* __restrict__ row_ptr,
                                               unsigned* __restrict__ bound) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    u64 b = 0;
    for (u64 m = member_ptr[I]; m < member_ptr[I + 1]; ++m) {
        const unsigned r = members[m];
        b += row_ptr[r + 1] - row_ptr[r];
    }
    bound[I] = (unsigned)b;
}

// The distinct coarse columns of I, ascending, at scratch[bound_ptr[I] ..);
// count[I] = how many.
extern "C" __global__ void amg_galerkin_columns(int nc, const u64* __restrict__ member_ptr,
                                                const unsigned* __restrict__ members,
                                                const u64* __restrict__ row_ptr,
                                                const unsigned* __restrict__ cols,
                                                const unsigned* __restrict__ aggregate,
                                                const u64* __restrict__ bound_ptr,
                                                unsigned* __restrict__ scratch,
                                                unsigned* __restrict__ count) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    unsigned* list = scratch + bound_ptr[I];
    unsigned len = 0;
    for (u64 m = member_ptr[I]; m < member_ptr[I + 1]; ++m) {
        const unsigned r = members[m];
        for (u64 k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
            const unsigned J = aggregate[cols[k]];
            // Insert J into the ascending list unless present.
            unsigned p = len;
            while (p > 0 && list[p - 1] > J) --p;
            if (p > 0 && list[p - 1] == J) continue;
            for (unsigned t = len; t > p; --t) list[t] = list[t - 1];
            list[p] = J;
            ++len;
        }
    }
    count[I] = len;
}

// Position of J in the ascending cols[lo .. hi) (present).
__device__ __forceinline__ u64 find_column(const unsigned* cols, u64 lo, u64 hi, unsigned J) {
    while (hi - lo > 1) {
        const u64 mid = lo + (hi - lo) / 2;
        if (cols[mid] <= J) lo = mid;
        else hi = mid;
    }
    return lo;
}

// The coarse columns copied to their place and the slot of every fine entry
// (a binary search in the row's distinct columns). A warp per coarse row
// (blockDim.x a multiple of 32), lanes along the entries.
extern "C" __global__ void amg_galerkin_fill(int nc, const u64* __restrict__ member_ptr,
                                             const unsigned* __restrict__ members,
                                             const u64* __restrict__ row_ptr,
                                             const unsigned* __restrict__ cols,
                                             const unsigned* __restrict__ aggregate,
                                             const u64* __restrict__ bound_ptr,
                                             const unsigned* __restrict__ scratch,
                                             const u64* __restrict__ coarse_row_ptr,
                                             unsigned* __restrict__ coarse_cols,
                                             u64* __restrict__ dest) {
    const int lane = threadIdx.x & 31;
    const int I = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5);
    if (I >= nc) return;  // whole warps leave together
    const u64 start = coarse_row_ptr[I], len = coarse_row_ptr[I + 1] - start;
    const unsigned* list = scratch + bound_ptr[I];
    for (u64 c = lane; c < len; c += 32) coarse_cols[start + c] = list[c];
    for (u64 m = member_ptr[I]; m < member_ptr[I + 1]; ++m) {
        const unsigned r = members[m];
        const u64 k1 = row_ptr[r + 1];
        for (u64 k = row_ptr[r] + lane; k < k1; k += 32)
            dest[k] = start + find_column(list, 0, len, aggregate[cols[k]]);
    }
}

// Numeric: the coarse values of I from the members' values (set-up and
// value-only re-set-up alike), each coarse entry zeroed then summed in the
// members' entry order (the CPU's). A warp per coarse row (blockDim.x a
// multiple of 32): lane j accumulates coarse entry c0 + j in a register
// while the members' entries (read 32 at a time) are broadcast one by one.
extern "C" __global__ void amg_galerkin_values(int nc, const u64* __restrict__ member_ptr,
                                               const unsigned* __restrict__ members,
                                               const u64* __restrict__ row_ptr,
                                               const double* __restrict__ vals,
                                               const u64* __restrict__ dest,
                                               const u64* __restrict__ coarse_row_ptr,
                                               double* __restrict__ coarse_vals) {
    const int lane = threadIdx.x & 31;
    const int I = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5);
    if (I >= nc) return;  // whole warps leave together
    const u64 start = coarse_row_ptr[I], len = coarse_row_ptr[I + 1] - start;
    const u64 m0 = member_ptr[I], m1 = member_ptr[I + 1];
    for (u64 c0 = 0; c0 < len; c0 += 32) {
        const u64 mine = start + c0 + lane;
        double acc = 0.0;
        for (u64 m = m0; m < m1; ++m) {
            const unsigned r = members[m];
            const u64 k1 = row_ptr[r + 1];
            for (u64 kb = row_ptr[r]; kb < k1; kb += 32) {
                const u64 k = kb + lane;
                u64 d = 0;
                double v = 0.0;
                if (k < k1) {
                    d = dest[k];
                    v = vals[k];
                }
                const int cnt = (int)(k1 - kb < 32 ? k1 - kb : 32);
                for (int t = 0; t < cnt; ++t) {
                    const u64 dt = __shfl_sync(0xffffffffu, d, t);
                    const double vt = __shfl_sync(0xffffffffu, v, t);
                    if (dt == mine) acc = __dadd_rn(acc, vt);
                }
            }
        }
        if (c0 + lane < len) coarse_vals[mine] = acc;
    }
}

// ---- The level's aggregates (passes composed) and their members, ascending.

// aggregate[i] = next[aggregate[i]] (one more pass composed).
extern "C" __global__ void amg_compose(int n, unsigned* __restrict__ aggregate,
                                       const unsigned* __restrict__ next) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) aggregate[i] = next[aggregate[i]];
}

// size[I] = members of aggregate I (zeroed before).
extern "C" __global__ void amg_count_members(int n, const unsigned* __restrict__ aggregate,
                                             unsigned* __restrict__ size) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&size[aggregate[i]], 1u);
}

// Each row into a free place of its aggregate's segment (cursor zeroed
// before); amg_sort_members then fixes the order.
extern "C" __global__ void amg_place_members(int n, const unsigned* __restrict__ aggregate,
                                             const u64* __restrict__ member_ptr,
                                             unsigned* __restrict__ cursor,
                                             unsigned* __restrict__ members) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned I = aggregate[i];
    members[member_ptr[I] + atomicAdd(&cursor[I], 1u)] = (unsigned)i;
}

// Sorts each aggregate's members ascending (insertion sort: a few rows).
extern "C" __global__ void amg_sort_members(int nc, const u64* __restrict__ member_ptr,
                                            unsigned* __restrict__ members) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    const u64 start = member_ptr[I], end = member_ptr[I + 1];
    for (u64 k = start + 1; k < end; ++k) {
        const unsigned v = members[k];
        u64 p = k;
        while (p > start && members[p - 1] > v) {
            members[p] = members[p - 1];
            --p;
        }
        members[p] = v;
    }
}

// ---- Smoother set-up on a CSR level.

#define SCALE_JACOBI 0
#define SCALE_L1 1

// scale[i] = omega / a_ii (weighted Jacobi) or 1 / (a_ii + sum_{j != i}
// |a_ij|) in column order (L1-Jacobi, solve::smoother::l1_row_norm). *bad =
// the smallest row whose a_ii is not positive and finite (kept when none).
extern "C" __global__ void amg_smoother_scale(int n, const u64* __restrict__ row_ptr,
                                              const unsigned* __restrict__ cols,
                                              const double* __restrict__ vals, int kind,
                                              double omega, double* __restrict__ scale,
                                              int* __restrict__ bad) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double d = 0.0;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if ((int)cols[k] == i) d = vals[k];
    double l1 = d;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if ((int)cols[k] != i) l1 += fabs(vals[k]);
    scale[i] = kind == SCALE_L1 ? 1.0 / l1 : omega / d;
    if (!(d > 0.0) || isinf(d)) atomicMin(bad, i);
}

// ---- The cycle. Every kernel takes a trailing `done` (smooth.cu gated_off):
// inside PCG's fused loop, null or the solve's state, whose first entry is
// nonzero once the solve has stopped; the launch then returns at once (done
// is uniform over the grid, so blocks that synchronise return as a whole).

// Precision: the cycle kernels are templates over T, the type of a level's
// matrix values and vectors: double (precision double; the wrappers without
// a suffix) or float (precision mixed, `_f32`: f32 values and vectors; the
// coarsest operator, the K-cycle's dot products and scalars stay f64). The
// fine level's b is PCG's f64 residual in both.

// Weighted / L1 Jacobi sweep on a CSR level: x_new = x + scale * (b - A x),
// the row in stored order as the CPU cycle's row_residual (solve::amg::cycle).
// x null means x = 0: x_new = scale * b.
template <typename T>
__device__ void amg_jacobi_csr_t(int n, const u64* __restrict__ row_ptr,
                                 const unsigned* __restrict__ cols, const T* __restrict__ vals,
                                 const T* __restrict__ scale, const T* __restrict__ b,
                                 const T* __restrict__ x, T* __restrict__ x_new) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (x == nullptr) {
        x_new[i] = scale[i] * b[i];
        return;
    }
    T ax = T(0);
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) ax += vals[k] * __ldg(&x[cols[k]]);
    x_new[i] = x[i] + scale[i] * (b[i] - ax);
}

extern "C" __global__ void amg_jacobi_csr(int n, const u64* __restrict__ row_ptr,
                                          const unsigned* __restrict__ cols,
                                          const double* __restrict__ vals,
                                          const double* __restrict__ scale,
                                          const double* __restrict__ b,
                                          const double* __restrict__ x,
                                          double* __restrict__ x_new, const double* done) {
    if (gated_off(done)) return;
    amg_jacobi_csr_t<double>(n, row_ptr, cols, vals, scale, b, x, x_new);
}

extern "C" __global__ void amg_jacobi_csr_f32(int n, const u64* __restrict__ row_ptr,
                                              const unsigned* __restrict__ cols,
                                              const float* __restrict__ vals,
                                              const float* __restrict__ scale,
                                              const float* __restrict__ b,
                                              const float* __restrict__ x,
                                              float* __restrict__ x_new, const double* done) {
    if (gated_off(done)) return;
    amg_jacobi_csr_t<float>(n, row_ptr, cols, vals, scale, b, x, x_new);
}

// Mixed precision, fine level: a Jacobi sweep on the f32 twin of the
// mod-SELL matrix (one block per slice, blockDim = H, H floats of dynamic
// shared memory), b = PCG's f64 residual rounded: x_new = x + scale (b - A x)
// with A x as modsell_row_t (diagonal first, then the slots). x null: x = 0.
// z non-null: the sweep's result is widened into z (the cycle's last sweep
// writes the preconditioned residual) instead of x_new.
extern "C" __global__ void amg_jacobi_modsell_f32(int n, const u64* __restrict__ slice_ptr,
                                                  const int* __restrict__ codes,
                                                  const float* __restrict__ vals,
                                                  const float* __restrict__ diag,
                                                  const float* __restrict__ scale,
                                                  const double* __restrict__ b,
                                                  const float* __restrict__ x,
                                                  float* __restrict__ x_new,
                                                  double* __restrict__ z, const double* done) {
    if (gated_off(done)) return;
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    float out;
    if (x == nullptr) {  // uniform: no block synchronises
        if (row >= n) return;
        out = scale[row] * (float)b[row];
    } else {
        float xr;
        const float ax = modsell_row_t<float>(n, slice_ptr, codes, vals, diag, x, &xr);
        if (row >= n) return;
        out = xr + scale[row] * ((float)b[row] - ax);
    }
    if (z != nullptr) z[row] = (double)out;
    else x_new[row] = out;
}

// r = b - A x on the mod-SELL fine level (one block per slice, blockDim = H,
// H doubles of dynamic shared memory, as spmv_modsell).
extern "C" __global__ void amg_residual_modsell(int n, const u64* __restrict__ slice_ptr,
                                                const int* __restrict__ codes,
                                                const double* __restrict__ vals,
                                                const double* __restrict__ diag,
                                                const double* __restrict__ b,
                                                const double* __restrict__ x,
                                                double* __restrict__ r, const double* done) {
    if (gated_off(done)) return;
    double xr;
    const double ax = modsell_row(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r[row] = b[row] - ax;
}

// Mixed precision: r = b - A x on the f32 twin of the fine level, b (f64)
// rounded, r in f32.
extern "C" __global__ void amg_residual_modsell_f32(int n, const u64* __restrict__ slice_ptr,
                                                    const int* __restrict__ codes,
                                                    const float* __restrict__ vals,
                                                    const float* __restrict__ diag,
                                                    const double* __restrict__ b,
                                                    const float* __restrict__ x,
                                                    float* __restrict__ r, const double* done) {
    if (gated_off(done)) return;
    float xr;
    const float ax = modsell_row_t<float>(n, slice_ptr, codes, vals, diag, x, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r[row] = (float)b[row] - ax;
}

// b_c[I] = sum of r over I's members, ascending (R = P^T).
template <typename T>
__device__ void amg_restrict_t(int nc, const u64* __restrict__ member_ptr,
                               const unsigned* __restrict__ members, const T* __restrict__ r,
                               T* __restrict__ bc) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    T s = T(0);
    for (u64 k = member_ptr[I]; k < member_ptr[I + 1]; ++k) s += r[members[k]];
    bc[I] = s;
}

extern "C" __global__ void amg_restrict(int nc, const u64* __restrict__ member_ptr,
                                        const unsigned* __restrict__ members,
                                        const double* __restrict__ r, double* __restrict__ bc,
                                        const double* done) {
    if (gated_off(done)) return;
    amg_restrict_t<double>(nc, member_ptr, members, r, bc);
}

extern "C" __global__ void amg_restrict_f32(int nc, const u64* __restrict__ member_ptr,
                                            const unsigned* __restrict__ members,
                                            const float* __restrict__ r, float* __restrict__ bc,
                                            const double* done) {
    if (gated_off(done)) return;
    amg_restrict_t<float>(nc, member_ptr, members, r, bc);
}

// Residual and restriction fused on a CSR level: b_c[I] = sum over I's
// members i, ascending, of (b_i - sum_j a_ij x_j), columns in order. A group
// of AMG_RR_LANES lanes per coarse row computes one member's residual each;
// the group's first lane adds them in ascending order, so the bits are those
// of one thread doing it all. (One thread per coarse row left a level of 60 k
// coarse rows at 15 warps per SM, each walking 4-8 rows in a row: bound by
// memory latency.) Launch AMG_RR_LANES threads per coarse row, blocks a
// multiple of 32.
#define AMG_RR_LANES 8
template <typename T>
__device__ void amg_residual_restrict_csr_t(int nc, const u64* __restrict__ member_ptr,
                                            const unsigned* __restrict__ members,
                                            const u64* __restrict__ row_ptr,
                                            const unsigned* __restrict__ cols,
                                            const T* __restrict__ vals, const T* __restrict__ b,
                                            const T* __restrict__ x, T* __restrict__ bc) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int I = t / AMG_RR_LANES, lane = t % AMG_RR_LANES;
    // The whole group leaves together: its lanes share I.
    if (I >= nc) return;
    const unsigned group = 0xffu << ((threadIdx.x % 32) & ~(AMG_RR_LANES - 1));
    const u64 end = member_ptr[I + 1];
    T s = T(0);
    for (u64 base = member_ptr[I]; base < end; base += AMG_RR_LANES) {
        T r = T(0);
        if (base + lane < end) {
            const unsigned i = members[base + lane];
            T ax = T(0);
            for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) ax += vals[k] * __ldg(&x[cols[k]]);
            r = b[i] - ax;
        }
        const int count = (int)(end - base < AMG_RR_LANES ? end - base : AMG_RR_LANES);
        for (int m = 0; m < count; ++m) s += __shfl_sync(group, r, m, AMG_RR_LANES);
    }
    if (lane == 0) bc[I] = s;
}

extern "C" __global__ void amg_residual_restrict_csr(int nc, const u64* __restrict__ member_ptr,
                                                     const unsigned* __restrict__ members,
                                                     const u64* __restrict__ row_ptr,
                                                     const unsigned* __restrict__ cols,
                                                     const double* __restrict__ vals,
                                                     const double* __restrict__ b,
                                                     const double* __restrict__ x,
                                                     double* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    amg_residual_restrict_csr_t<double>(nc, member_ptr, members, row_ptr, cols, vals, b, x, bc);
}

extern "C" __global__ void amg_residual_restrict_csr_f32(
    int nc, const u64* __restrict__ member_ptr, const unsigned* __restrict__ members,
    const u64* __restrict__ row_ptr, const unsigned* __restrict__ cols,
    const float* __restrict__ vals, const float* __restrict__ b, const float* __restrict__ x,
    float* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    amg_residual_restrict_csr_t<float>(nc, member_ptr, members, row_ptr, cols, vals, b, x, bc);
}

// Prolongation and correction: x_out[i] = x_in[i] + factor * x_c[aggregate[i]]
// (x_out may be x_in; factor rounded to T).
template <typename T>
__device__ void amg_prolong_t(int n, const unsigned* __restrict__ aggregate,
                              const T* __restrict__ xc, double factor, const T* x_in, T* x_out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x_out[i] = x_in[i] + (T)factor * xc[aggregate[i]];
}

extern "C" __global__ void amg_prolong(int n, const unsigned* __restrict__ aggregate,
                                       const double* __restrict__ xc, double factor,
                                       const double* x_in, double* x_out, const double* done) {
    if (gated_off(done)) return;
    amg_prolong_t<double>(n, aggregate, xc, factor, x_in, x_out);
}

extern "C" __global__ void amg_prolong_f32(int n, const unsigned* __restrict__ aggregate,
                                           const float* __restrict__ xc, double factor,
                                           const float* x_in, float* x_out, const double* done) {
    if (gated_off(done)) return;
    amg_prolong_t<float>(n, aggregate, xc, factor, x_in, x_out);
}

// dst = src.
template <typename T>
__device__ void amg_copy_t(int n, const T* __restrict__ src, T* __restrict__ dst) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

extern "C" __global__ void amg_copy(int n, const double* __restrict__ src,
                                    double* __restrict__ dst, const double* done) {
    if (gated_off(done)) return;
    amg_copy_t<double>(n, src, dst);
}

extern "C" __global__ void amg_copy_f32(int n, const float* __restrict__ src,
                                        float* __restrict__ dst, const double* done) {
    if (gated_off(done)) return;
    amg_copy_t<float>(n, src, dst);
}

// Coarsest level: x = M b with M dense (row-major n x n, f64), one warp per
// row, lanes summing j = lane, lane + 32, ... in f64, then a fixed shuffle
// tree; x rounded to T.
template <typename T>
__device__ void amg_dense_apply_t(int n, const double* __restrict__ m, const T* __restrict__ b,
                                  T* __restrict__ x) {
    const int lane = threadIdx.x & 31;
    const int row = (int)((blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5);
    if (row >= n) return;  // whole warps leave together
    const double* mr = m + (u64)row * n;
    double s = 0.0;
    for (int j = lane; j < n; j += 32) s += mr[j] * (double)b[j];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) x[row] = (T)s;
}

extern "C" __global__ void amg_dense_apply(int n, const double* __restrict__ m,
                                           const double* __restrict__ b,
                                           double* __restrict__ x, const double* done) {
    if (gated_off(done)) return;
    amg_dense_apply_t<double>(n, m, b, x);
}

extern "C" __global__ void amg_dense_apply_f32(int n, const double* __restrict__ m,
                                               const float* __restrict__ b,
                                               float* __restrict__ x, const double* done) {
    if (gated_off(done)) return;
    amg_dense_apply_t<float>(n, m, b, x);
}

// ---- The coarsest level's operator, formed on the device (set-up): a dense
// Cholesky factor and the inverse W^T W, W = L^-1, both blocked in panels of
// 32 with many blocks per launch (the host's nalgebra inverse takes ~1 s at
// 1000 rows). Nothing is read back: the singularity test and the pivot check
// stay on the device. The matrix is the one the CPU's CoarsestSolver factors
// (symmetrised, shifted when singular), row-major.

// The coarsest CSR matrix scattered into the zeroed row-major n x n `dense`
// (one thread per row).
extern "C" __global__ void amg_dense_scatter(int n, const u64* __restrict__ row_ptr,
                                             const unsigned* __restrict__ cols,
                                             const double* __restrict__ vals,
                                             double* __restrict__ dense) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) dense[(u64)i * n + cols[k]] = vals[k];
}

// The set-up's status words (read back once, after the coarsest operator):
// status[l] = INT_MAX for l < levels (amg_smoother_scale's smallest bad row
// of level l), status[levels] = 0 (amg_dense_panel's failed pivot).
extern "C" __global__ void amg_status_reset(int levels, int* __restrict__ status) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < levels) status[l] = 0x7fffffff;
    if (l == levels) status[l] = 0;
}

// Per row of the coarsest CSR matrix: the sum of its entries in column order
// (the dense row's sum: its zeros add nothing) and its diagonal, for
// amg_dense_singular.
extern "C" __global__ void amg_dense_row_sums(int n, const u64* __restrict__ row_ptr,
                                              const unsigned* __restrict__ cols,
                                              const double* __restrict__ vals,
                                              double* __restrict__ sums,
                                              double* __restrict__ diag) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = 0.0, d = 0.0;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) {
        s = __dadd_rn(s, vals[k]);
        if ((int)cols[k] == i) d = vals[k];
    }
    sums[i] = s;
    diag[i] = d;
}

// CoarsestSolver's singularity test on the device (one thread, the host's
// order: row by row): A_L is singular when sum_i |sums_i| <= tol * sum_i
// a_ii. out[0] = 1 (singular) or 0, out[1] = the shift sum_i a_ii / (n n).
// No read-back: amg_dense_symmetrise and amg_dense_project read out.
extern "C" __global__ void amg_dense_singular(int n, const double* __restrict__ sums,
                                              const double* __restrict__ diag, double tol,
                                              double* __restrict__ out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double d = 0.0, r = 0.0;
    for (int i = 0; i < n; ++i) d = __dadd_rn(d, diag[i]);
    for (int i = 0; i < n; ++i) r = __dadd_rn(r, fabs(sums[i]));
    out[0] = r <= __dmul_rn(tol, d) ? 1.0 : 0.0;
    out[1] = __ddiv_rn(d, __dmul_rn((double)n, (double)n));
}

// The matrix CoarsestSolver factors, as the host forms it: m = dense (+ the
// shift everywhere when singular[0] != 0; singular as amg_dense_singular
// writes it), then (m + m^T) / 2; one thread per entry (entry e of the
// row-major n x n out).
__device__ void dense_symmetrise_entry(int n, const double* dense, const double* singular,
                                       double* out, u64 e) {
    const u64 i = e / n, j = e % n;
    double a = dense[i * n + j], b = dense[j * n + i];
    if (singular[0] != 0.0) {
        a = __dadd_rn(a, singular[1]);
        b = __dadd_rn(b, singular[1]);
    }
    out[e] = __dmul_rn(__dadd_rn(a, b), 0.5);
}

extern "C" __global__ void amg_dense_symmetrise(int n, const double* __restrict__ dense,
                                                const double* __restrict__ singular,
                                                double* __restrict__ out) {
    const u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (e >= (u64)n * n) return;
    dense_symmetrise_entry(n, dense, singular, out, e);
}

// In-place blocked Cholesky A = L L^T of the row-major n x n matrix a (its
// lower triangle, diagonal included, becomes L; the upper triangle is not
// read), right-looking in panels of DENSE_PANEL columns:
// - amg_dense_diag (once, one block): the first panel's diagonal block L11;
// - per panel p (its first column): amg_dense_panel solves L21 L11^T = A21,
//   a warp per row; then, if rows remain, amg_dense_update subtracts L21 L21^T
//   from the trailing lower triangle in 32 x 32 tiles (a block each), and the
//   block of the first tile (the next panel's diagonal block, which no other
//   block of that launch reads) factors it.
// Diagonal blocks are factored in shared memory by dense_factor_diag. *failed
// = k + 1 for the first pivot k that is not positive (NaN included); 0 while
// the factor exists. Once set, every later launch returns at once.
//
// Each step's work is a __device__ function of its block number vb (the
// blockIdx.x of the step's own launch), its shared tiles passed in: the
// launch per step (amg_dense_diag .. amg_dense_project) and the one
// cooperative launch of every step (amg_dense_inverse_fused) run the same
// code for every (vb, thread), so they write the same bits.
#define DENSE_PANEL 32

// A row of a DENSE_PANEL x (DENSE_PANEL + 1) shared tile (the extra column
// keeps a tile's columns in distinct banks).
typedef double DenseTile[DENSE_PANEL + 1];

// The diagonal block at (p, p) (pb = min(DENSE_PANEL, n - p) rows) factored
// in place by the whole block (unblocked right-looking Cholesky in the
// shared tile s; bad: a shared word); false (and *failed set) at a pivot
// that is not positive.
__device__ bool dense_factor_diag(int n, int p, double* a, int* failed, DenseTile* s, int* bad) {
    const int pb = min(DENSE_PANEL, n - p);
    for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
        const int i = e / pb, j = e % pb;
        if (j <= i) s[i][j] = a[(u64)(p + i) * n + p + j];
    }
    if (threadIdx.x == 0) *bad = 0;
    __syncthreads();
    for (int k = 0; k < pb; ++k) {
        if (threadIdx.x == 0) {
            const double d = s[k][k];
            const double pivot = d > 0.0 ? __dsqrt_rn(d) : 0.0;
            s[k][k] = pivot;
            if (pivot == 0.0) {
                *bad = p + k + 1;
                *failed = *bad;
            }
        }
        __syncthreads();
        if (*bad != 0) return false;  // shared: the whole block leaves
        for (int i = k + 1 + threadIdx.x; i < pb; i += blockDim.x)
            s[i][k] = __ddiv_rn(s[i][k], s[k][k]);
        __syncthreads();
        for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
            const int i = e / pb, j = e % pb;
            if (j > k && j <= i) s[i][j] = __dsub_rn(s[i][j], __dmul_rn(s[i][k], s[j][k]));
        }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
        const int i = e / pb, j = e % pb;
        if (j <= i) a[(u64)(p + i) * n + p + j] = s[i][j];
    }
    return true;
}

extern "C" __global__ void amg_dense_diag(int n, int p, double* a, int* failed) {
    __shared__ double s[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ int bad;
    if (*failed != 0) return;
    dense_factor_diag(n, p, a, failed, s, &bad);
}

// Rows p + DENSE_PANEL.. of panel p: forward substitution with the factored
// L11, lane k owning column k; blockDim.x / 32 rows per block.
__device__ void dense_panel_block(int n, int p, double* a, int vb, DenseTile* s) {
    const int pb = min(DENSE_PANEL, n - p);
    for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
        const int i = e / pb, j = e % pb;
        if (j <= i) s[i][j] = a[(u64)(p + i) * n + p + j];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = p + pb + vb * (blockDim.x >> 5) + warp;
    if (i >= n) return;  // whole warps leave together
    double* row = a + (u64)i * n + p;
    double v = lane < pb ? row[lane] : 0.0;
    for (int k = 0; k < pb; ++k) {
        const double x = __ddiv_rn(__shfl_sync(0xffffffffu, v, k), s[k][k]);
        if (lane == k) v = x;
        else if (lane > k && lane < pb) v = __dsub_rn(v, __dmul_rn(x, s[lane][k]));
    }
    if (lane < pb) row[lane] = v;
}

extern "C" __global__ void amg_dense_panel(int n, int p, double* a, const int* failed) {
    __shared__ double s[DENSE_PANEL][DENSE_PANEL + 1];
    if (*failed != 0) return;  // uniform: an earlier panel failed
    dense_panel_block(n, p, a, blockIdx.x, s);
}

// The trailing update of panel p: a[i][j] -= sum_k L[i][p+k] L[j][p+k] for
// q = p + DENSE_PANEL <= j <= i < n, one 32 x 32 tile of the lower triangle
// per block (tiles numbered row by row: tile vb is (ti, tj), tj <= ti),
// blockDim.x a multiple of 32 (each thread a column of the tile, every
// blockDim/32-th row). The block of tile 0 then factors the diagonal block
// at (q, q) (in li, once every thread is done with it).
__device__ void dense_update_block(int n, int p, double* a, int* failed, int vb, DenseTile* li,
                                   DenseTile* lj, int* bad) {
    const int q = p + DENSE_PANEL;
    // Tile b → (ti, tj): ti(ti+1)/2 <= b < (ti+1)(ti+2)/2.
    const long long b = vb;
    int ti = (int)((sqrt(8.0 * (double)b + 1.0) - 1.0) / 2.0);
    while ((long long)ti * (ti + 1) / 2 > b) --ti;
    while ((long long)(ti + 1) * (ti + 2) / 2 <= b) ++ti;
    const int tj = (int)(b - (long long)ti * (ti + 1) / 2);
    const int i0 = q + 32 * ti, j0 = q + 32 * tj;
    for (int e = threadIdx.x; e < 32 * 32; e += blockDim.x) {
        const int r = e >> 5, c = e & 31;
        li[r][c] = i0 + r < n ? a[(u64)(i0 + r) * n + p + c] : 0.0;
        lj[r][c] = j0 + r < n ? a[(u64)(j0 + r) * n + p + c] : 0.0;
    }
    __syncthreads();
    const int tx = threadIdx.x & 31;
    const int j = j0 + tx;
    for (int r = threadIdx.x >> 5; r < 32; r += blockDim.x >> 5) {
        const int i = i0 + r;
        if (i >= n || j > i) continue;
        double sum = 0.0;
        for (int c = 0; c < DENSE_PANEL; ++c)
            sum = __dadd_rn(sum, __dmul_rn(li[r][c], lj[tx][c]));
        double* e = a + (u64)i * n + j;
        *e = __dsub_rn(*e, sum);
    }
    if (b != 0) return;
    __syncthreads();  // the tile's updated entries, written above, are read next
    dense_factor_diag(n, q, a, failed, li, bad);
}

extern "C" __global__ void amg_dense_update(int n, int p, double* a, int* failed) {
    __shared__ double li[32][33];
    __shared__ double lj[32][33];
    __shared__ int bad;
    if (*failed != 0) return;
    dense_update_block(n, p, a, failed, blockIdx.x, li, lj, &bad);
}

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
    const int pb = min(DENSE_PANEL, n - p);
    for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
        const int i = e / pb, k = e % pb;
        if (k <= i) s[i][k] = l[(u64)(p + i) * n + p + k];
    }
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
        li[r][c] = i0 + r < n ? l[(u64)(i0 + r) * n + p + c] : 0.0;
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

// inv[i][j] = sum_{k >= max(i, j)} W[k][i] W[k][j] (= (W^T W)_ij = A^-1),
// 32 x 32 output tiles (block vb: column tile vb % t, row tile vb / t, t =
// ceil(n / 32)), k in chunks of 32 staged in shared memory; blockDim.x = 256
// (each thread a column, every 8th row).
__device__ void dense_wtw_block(int n, const double* w, double* inv, int vb, DenseTile* wi,
                                DenseTile* wj) {
    const int t = (n + 31) / 32;
    const int i0 = 32 * (vb / t), j0 = 32 * (vb % t);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (int k0 = max(i0, j0); k0 < n; k0 += 32) {
        for (int e = threadIdx.x; e < 32 * 32; e += blockDim.x) {
            const int kk = e >> 5, c = e & 31;
            const bool in = k0 + kk < n;
            wi[kk][c] = in && i0 + c < n ? w[(u64)(k0 + kk) * n + i0 + c] : 0.0;
            wj[kk][c] = in && j0 + c < n ? w[(u64)(k0 + kk) * n + j0 + c] : 0.0;
        }
        __syncthreads();
        for (int kk = 0; kk < 32; ++kk) {
            const double b = wj[kk][tx];
#pragma unroll
            for (int m = 0; m < 4; ++m) acc[m] += wi[kk][ty + 8 * m] * b;
        }
        __syncthreads();
    }
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
// block wrote in an earlier step (no read-only cache path).
extern "C" __global__ void amg_dense_inverse_fused(int n, const double* dense,
                                                   const double* singular, double* factor,
                                                   double* w, int* failed, double* inverse,
                                                   unsigned* barrier) {
    __shared__ double t0[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ double t1[DENSE_PANEL][DENSE_PANEL + 1];
    __shared__ int bad, word;
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

// ---- K-cycle (Notay & Vassilevski 2008; solve::amg::cycle k_step): two
// flexible-CG steps on a coarse level, the scalars kept on the device in
// `k` (K_* slots), so the cycle stays a sequence of launches.

#define K_RHO1 0   // c . v, v = A c, c = B b
#define K_ALPHA1 1 // c . b
#define K_GAMMA 2  // d . v, d = B r
#define K_BETA 3   // d . w, w = A d
#define K_ALPHA2 4 // d . r
#define K_SLOTS 5

// y = A x on a CSR level (row in stored order, as Csr::spmv).
template <typename T>
__device__ void amg_spmv_csr_t(int n, const u64* __restrict__ row_ptr,
                               const unsigned* __restrict__ cols, const T* __restrict__ vals,
                               const T* __restrict__ x, T* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T acc = T(0);
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) acc += vals[k] * __ldg(&x[cols[k]]);
    y[i] = acc;
}

extern "C" __global__ void amg_spmv_csr(int n, const u64* __restrict__ row_ptr,
                                        const unsigned* __restrict__ cols,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ x, double* __restrict__ y,
                                        const double* done) {
    if (gated_off(done)) return;
    amg_spmv_csr_t<double>(n, row_ptr, cols, vals, x, y);
}

extern "C" __global__ void amg_spmv_csr_f32(int n, const u64* __restrict__ row_ptr,
                                            const unsigned* __restrict__ cols,
                                            const float* __restrict__ vals,
                                            const float* __restrict__ x, float* __restrict__ y,
                                            const double* done) {
    if (gated_off(done)) return;
    amg_spmv_csr_t<float>(n, row_ptr, cols, vals, x, y);
}

// Per-block partial sums of a . b in f64 (VECTOR_BLOCK threads, block_sum's
// order; f32 products are exact in f64).
template <typename T>
__device__ void amg_dot_partials_t(int n, const T* __restrict__ a, const T* __restrict__ b,
                                   double* __restrict__ partials) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double s = block_sum(i < n ? (double)a[i] * (double)b[i] : 0.0);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

extern "C" __global__ void amg_dot_partials(int n, const double* __restrict__ a,
                                            const double* __restrict__ b,
                                            double* __restrict__ partials, const double* done) {
    if (gated_off(done)) return;
    amg_dot_partials_t<double>(n, a, b, partials);
}

extern "C" __global__ void amg_dot_partials_f32(int n, const float* __restrict__ a,
                                                const float* __restrict__ b,
                                                double* __restrict__ partials, const double* done) {
    if (gated_off(done)) return;
    amg_dot_partials_t<float>(n, a, b, partials);
}

// k[slot] = the sum of the m partials in reduce_fixed's order (one block).
extern "C" __global__ void amg_dot_finish(int m, const double* __restrict__ partials,
                                          double* __restrict__ k, int slot, const double* done) {
    if (gated_off(done)) return;
    const double s = reduce_fixed(m, partials);
    if (threadIdx.x == 0) k[slot] = s;
}

// The first step's length alpha1 / rho1 (0 when rho1 is not positive: the
// CPU then returns x = 0).
__device__ __forceinline__ double k_step1(const double* k) {
    return k[K_RHO1] > 0.0 ? k[K_ALPHA1] / k[K_RHO1] : 0.0;
}

// r = b - (alpha1 / rho1) v (the step rounded to T).
template <typename T>
__device__ void amg_k_residual_t(int n, const T* __restrict__ b, const T* __restrict__ v,
                                 const double* __restrict__ k, T* __restrict__ r) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const T step1 = (T)k_step1(k);
    r[i] = b[i] - step1 * v[i];
}

extern "C" __global__ void amg_k_residual(int n, const double* __restrict__ b,
                                          const double* __restrict__ v,
                                          const double* __restrict__ k, double* __restrict__ r,
                                          const double* done) {
    if (gated_off(done)) return;
    amg_k_residual_t<double>(n, b, v, k, r);
}

extern "C" __global__ void amg_k_residual_f32(int n, const float* __restrict__ b,
                                              const float* __restrict__ v,
                                              const double* __restrict__ k, float* __restrict__ r,
                                              const double* done) {
    if (gated_off(done)) return;
    amg_k_residual_t<float>(n, b, v, k, r);
}

// x = cc c + cd d: rho2 = beta - gamma^2 / rho1; when rho2 > 1e-14 beta,
// cc = step1 - gamma alpha2 / (rho1 rho2) and cd = alpha2 / rho2, else the
// first step alone (d in the span of c); x = 0 when rho1 is not positive.
// The coefficients in f64, rounded to T.
template <typename T>
__device__ void amg_k_combine_t(int n, const T* __restrict__ c, const T* __restrict__ d,
                                const double* __restrict__ k, T* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double rho1 = k[K_RHO1];
    if (!(rho1 > 0.0)) {
        x[i] = T(0);
        return;
    }
    const double step1 = k[K_ALPHA1] / rho1;
    const double gamma = k[K_GAMMA], beta = k[K_BETA], alpha2 = k[K_ALPHA2];
    const double rho2 = beta - gamma * gamma / rho1;
    double cc = step1, cd = 0.0;
    if (rho2 > 1e-14 * beta) {
        cc = step1 - gamma * alpha2 / (rho1 * rho2);
        cd = alpha2 / rho2;
    }
    x[i] = (T)cc * c[i] + (T)cd * d[i];
}

extern "C" __global__ void amg_k_combine(int n, const double* __restrict__ c,
                                         const double* __restrict__ d,
                                         const double* __restrict__ k, double* __restrict__ x,
                                         const double* done) {
    if (gated_off(done)) return;
    amg_k_combine_t<double>(n, c, d, k, x);
}

extern "C" __global__ void amg_k_combine_f32(int n, const float* __restrict__ c,
                                             const float* __restrict__ d,
                                             const double* __restrict__ k, float* __restrict__ x,
                                             const double* done) {
    if (gated_off(done)) return;
    amg_k_combine_t<float>(n, c, d, k, x);
}

// ---- Fused cycle (setting `fused`, one sweep before and after the coarse
// correction, a visit from x = 0): the pre-smoothed iterate s∘b (one Jacobi
// sweep from zero) and the corrected iterate s∘b + θ P x_c are never stored;
// the kernels that read them compute them per entry. Per level this removes
// the pre-sweep and the prolongation launches and their vector traffic: a
// visit is residual (+ restriction) and one post-sweep, each one pass over
// the matrix. The same arithmetic as the unfused cycle (solve::amg::cycle)
// up to the order of contraction.

// The iterate a fused kernel reads at row j: s_j b_j, plus θ x_c[agg_j]
// once the coarse correction is made (xc non-null).
template <typename T, typename B>
struct FusedIterate {
    const T* __restrict__ s;
    const B* __restrict__ b;
    const unsigned* __restrict__ aggregate;
    const T* __restrict__ xc;
    T theta;
    __device__ __forceinline__ T operator()(unsigned j) const {
        const T x = s[j] * (T)b[j];
        return xc == nullptr ? x : x + theta * xc[aggregate[j]];
    }
};

// (A x)_row on a mod-SELL level with x_j = f(j) (modsell_row_t's order: the
// diagonal, then the slots); *x_row = f(row). One block per slice,
// blockDim = H, H values of T in dynamic shared memory.
template <typename T, typename F>
__device__ T modsell_row_fused(int n, const u64* __restrict__ slice_ptr,
                               const int* __restrict__ codes, const T* __restrict__ vals,
                               const T* __restrict__ diag, const F& f, T* x_row) {
    T* x_slice = reinterpret_cast<T*>(modsell_shared);
    const int h = blockDim.x, t = threadIdx.x, row = blockIdx.x * h + t;
    const bool in = row < n;
    const T xr = in ? f(row) : T(0);
    x_slice[t] = xr;
    T acc = in ? diag[row] * xr : T(0);
    __syncthreads();
    const u64 start = slice_ptr[blockIdx.x], end = slice_ptr[blockIdx.x + 1];
    for (u64 k = start + t; k < end; k += h) {
        const int c = codes[k];
        if (c > 0) acc += vals[k] * f(c - 1);
        else if (c < 0) acc += vals[k] * x_slice[-(c + 1)];
    }
    *x_row = xr;
    return acc;
}

// Fine level (mod-SELL), fused pre-smoothing and residual: r = b - A (s∘b).
template <typename T>
__device__ void amg_fine_residual_zero_t(int n, const u64* __restrict__ slice_ptr,
                                         const int* __restrict__ codes,
                                         const T* __restrict__ vals, const T* __restrict__ diag,
                                         const T* __restrict__ scale,
                                         const double* __restrict__ b, T* __restrict__ r) {
    const FusedIterate<T, double> f{scale, b, nullptr, nullptr, T(0)};
    T xr;
    const T ax = modsell_row_fused<T>(n, slice_ptr, codes, vals, diag, f, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r[row] = (T)b[row] - ax;
}

extern "C" __global__ void amg_fine_residual_zero(int n, const u64* __restrict__ slice_ptr,
                                                  const int* __restrict__ codes,
                                                  const double* __restrict__ vals,
                                                  const double* __restrict__ diag,
                                                  const double* __restrict__ scale,
                                                  const double* __restrict__ b,
                                                  double* __restrict__ r, const double* done) {
    if (gated_off(done)) return;
    amg_fine_residual_zero_t<double>(n, slice_ptr, codes, vals, diag, scale, b, r);
}

extern "C" __global__ void amg_fine_residual_zero_f32(int n, const u64* __restrict__ slice_ptr,
                                                      const int* __restrict__ codes,
                                                      const float* __restrict__ vals,
                                                      const float* __restrict__ diag,
                                                      const float* __restrict__ scale,
                                                      const double* __restrict__ b,
                                                      float* __restrict__ r, const double* done) {
    if (gated_off(done)) return;
    amg_fine_residual_zero_t<float>(n, slice_ptr, codes, vals, diag, scale, b, r);
}

// Fine level (mod-SELL), fused prolongation, correction and post-sweep:
// with x = s∘b + θ P x_c, z = x + s (b - A x), written in f64.
template <typename T>
__device__ void amg_fine_post_t(int n, const u64* __restrict__ slice_ptr,
                                const int* __restrict__ codes, const T* __restrict__ vals,
                                const T* __restrict__ diag, const T* __restrict__ scale,
                                const double* __restrict__ b,
                                const unsigned* __restrict__ aggregate,
                                const T* __restrict__ xc, double theta,
                                double* __restrict__ z) {
    const FusedIterate<T, double> f{scale, b, aggregate, xc, (T)theta};
    T xr;
    const T ax = modsell_row_fused<T>(n, slice_ptr, codes, vals, diag, f, &xr);
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) z[row] = (double)(xr + scale[row] * ((T)b[row] - ax));
}

extern "C" __global__ void amg_fine_post(int n, const u64* __restrict__ slice_ptr,
                                         const int* __restrict__ codes,
                                         const double* __restrict__ vals,
                                         const double* __restrict__ diag,
                                         const double* __restrict__ scale,
                                         const double* __restrict__ b,
                                         const unsigned* __restrict__ aggregate,
                                         const double* __restrict__ xc, double theta,
                                         double* __restrict__ z, const double* done) {
    if (gated_off(done)) return;
    amg_fine_post_t<double>(n, slice_ptr, codes, vals, diag, scale, b, aggregate, xc, theta, z);
}

extern "C" __global__ void amg_fine_post_f32(int n, const u64* __restrict__ slice_ptr,
                                             const int* __restrict__ codes,
                                             const float* __restrict__ vals,
                                             const float* __restrict__ diag,
                                             const float* __restrict__ scale,
                                             const double* __restrict__ b,
                                             const unsigned* __restrict__ aggregate,
                                             const float* __restrict__ xc, double theta,
                                             double* __restrict__ z, const double* done) {
    if (gated_off(done)) return;
    amg_fine_post_t<float>(n, slice_ptr, codes, vals, diag, scale, b, aggregate, xc, theta, z);
}

// Coarse level (CSR), fused pre-smoothing, residual and restriction:
// b_c[I] = sum over I's members i, ascending, of (b_i - sum_j a_ij s_j b_j).
template <typename T>
__device__ void amg_residual_restrict_zero_csr_t(
    int nc, const u64* __restrict__ member_ptr, const unsigned* __restrict__ members,
    const u64* __restrict__ row_ptr, const unsigned* __restrict__ cols,
    const T* __restrict__ vals, const T* __restrict__ scale, const T* __restrict__ b,
    T* __restrict__ bc) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    const FusedIterate<T, T> f{scale, b, nullptr, nullptr, T(0)};
    T sum = T(0);
    for (u64 m = member_ptr[I]; m < member_ptr[I + 1]; ++m) {
        const unsigned i = members[m];
        T ax = T(0);
        for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) ax += vals[k] * f(cols[k]);
        sum += b[i] - ax;
    }
    bc[I] = sum;
}

extern "C" __global__ void amg_residual_restrict_zero_csr(
    int nc, const u64* __restrict__ member_ptr, const unsigned* __restrict__ members,
    const u64* __restrict__ row_ptr, const unsigned* __restrict__ cols,
    const double* __restrict__ vals, const double* __restrict__ scale,
    const double* __restrict__ b, double* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    amg_residual_restrict_zero_csr_t<double>(nc, member_ptr, members, row_ptr, cols, vals, scale,
                                             b, bc);
}

extern "C" __global__ void amg_residual_restrict_zero_csr_f32(
    int nc, const u64* __restrict__ member_ptr, const unsigned* __restrict__ members,
    const u64* __restrict__ row_ptr, const unsigned* __restrict__ cols,
    const float* __restrict__ vals, const float* __restrict__ scale, const float* __restrict__ b,
    float* __restrict__ bc, const double* done) {
    if (gated_off(done)) return;
    amg_residual_restrict_zero_csr_t<float>(nc, member_ptr, members, row_ptr, cols, vals, scale, b,
                                            bc);
}

// Coarse level (CSR), fused prolongation, correction and post-sweep: with
// x = s∘b + θ P x_c, x_out = x + s (b - A x).
template <typename T>
__device__ void amg_post_csr_t(int n, const u64* __restrict__ row_ptr,
                               const unsigned* __restrict__ cols, const T* __restrict__ vals,
                               const T* __restrict__ scale, const T* __restrict__ b,
                               const unsigned* __restrict__ aggregate, const T* __restrict__ xc,
                               double theta, T* __restrict__ x_out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const FusedIterate<T, T> f{scale, b, aggregate, xc, (T)theta};
    T ax = T(0);
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k) ax += vals[k] * f(cols[k]);
    x_out[i] = f(i) + scale[i] * (b[i] - ax);
}

extern "C" __global__ void amg_post_csr(int n, const u64* __restrict__ row_ptr,
                                        const unsigned* __restrict__ cols,
                                        const double* __restrict__ vals,
                                        const double* __restrict__ scale,
                                        const double* __restrict__ b,
                                        const unsigned* __restrict__ aggregate,
                                        const double* __restrict__ xc, double theta,
                                        double* __restrict__ x_out, const double* done) {
    if (gated_off(done)) return;
    amg_post_csr_t<double>(n, row_ptr, cols, vals, scale, b, aggregate, xc, theta, x_out);
}

extern "C" __global__ void amg_post_csr_f32(int n, const u64* __restrict__ row_ptr,
                                            const unsigned* __restrict__ cols,
                                            const float* __restrict__ vals,
                                            const float* __restrict__ scale,
                                            const float* __restrict__ b,
                                            const unsigned* __restrict__ aggregate,
                                            const float* __restrict__ xc, double theta,
                                            float* __restrict__ x_out, const double* done) {
    if (gated_off(done)) return;
    amg_post_csr_t<float>(n, row_ptr, cols, vals, scale, b, aggregate, xc, theta, x_out);
}
