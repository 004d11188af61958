// Aggregation AMG on the device: the set-up (uses u64 and block_sum from
// spmv.cu) and the coarsest level's dense factor. The algorithm is
// the CPU reference's (src/solve/amg): pairwise matching
// in Jacobi-style rounds, leaders numbered by an exclusive scan, Galerkin
// products per coarse row in the CPU's summation order, so that the aggregates
// are the same and the coarse matrices the same bits. Host side: src/solve/amg/cuda.rs.
//
// Device CSR: u64 row pointers, unsigned columns ascending in each row, the
// diagonal stored. No atomics touch floating-point values; integer atomics
// only count (their totals do not depend on the order) or hand out slots that
// a sort then puts in a fixed order.
//
// The cycle is in amg_cycle.cu and the coarsest level's inverse in
// amg_inverse.cu: modules of their own, so that NVRTC compiles the three
// at once on threads of their own (the inverse's fully unrolled panel
// solve alone takes NVRTC longer than all of the set-up's kernels).

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
// per coarse row I (bounds, columns, sources: a thread; fill: a warp) with
// members members[member_ptr[I] .. member_ptr[I+1]) ascending
// (amg_count_members .. amg_sort_members below). Symbolic: the distinct
// coarse columns, sorted, the slot dest[k] of every fine entry k of the
// members' rows, and per coarse entry its sources (the k with that slot, in
// encounter order). Numeric: each coarse entry the sum of its sources from 0
// in that order, member by member, entry by entry in stored order: the CPU's
// order.

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
    const int I = grid_warp();
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

// The sources of each coarse entry (pattern only, once per set-up): the fine
// entries that add to it, in the members' entry order (the CPU's summation
// order), so that the value re-set-up is a gather that every thread of a
// coarse entry does alone. A thread per coarse row I: the fine entries of
// its members (bound_ptr[I] of them before it, amg_galerkin_bounds' room) are
// counted per coarse entry into source_end, turned into where each entry's
// sources begin, and placed, each advancing its entry's cursor: source_end[c]
// ends as the end of c's sources, whose begin is source_end[c - 1] (0 for c
// = 0; rows follow one another, so a row's first entry begins at bound_ptr[I]).
extern "C" __global__ void amg_galerkin_sources(int nc, const u64* __restrict__ member_ptr,
                                                const unsigned* __restrict__ members,
                                                const u64* __restrict__ row_ptr,
                                                const u64* __restrict__ bound_ptr,
                                                const u64* __restrict__ dest,
                                                const u64* __restrict__ coarse_row_ptr,
                                                unsigned* __restrict__ source_end,
                                                unsigned* __restrict__ sources) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    if (I >= nc) return;
    const u64 c0 = coarse_row_ptr[I], c1 = coarse_row_ptr[I + 1];
    const u64 m0 = member_ptr[I], m1 = member_ptr[I + 1];
    for (u64 c = c0; c < c1; ++c) source_end[c] = 0;
    for (u64 m = m0; m < m1; ++m) {
        const unsigned r = members[m];
        for (u64 k = row_ptr[r]; k < row_ptr[r + 1]; ++k) ++source_end[dest[k]];
    }
    unsigned at = (unsigned)bound_ptr[I];
    for (u64 c = c0; c < c1; ++c) {
        const unsigned count = source_end[c];
        source_end[c] = at;
        at += count;
    }
    for (u64 m = m0; m < m1; ++m) {
        const unsigned r = members[m];
        for (u64 k = row_ptr[r]; k < row_ptr[r + 1]; ++k) sources[source_end[dest[k]]++] = (unsigned)k;
    }
}

// Numeric: the coarse values from the fine ones (set-up and value-only
// re-set-up alike), a thread per coarse entry summing its sources from 0 in
// their order (amg_galerkin_sources: the members' entry order, the CPU's).
// coarse_vals_f32 (nullable): the values rounded to nearest f32 as well (a
// mixed cycle's copy, cast_f64_to_f32's rounding, in the same launch).
extern "C" __global__ void amg_galerkin_values(unsigned nnz, const unsigned* __restrict__ source_end,
                                               const unsigned* __restrict__ sources,
                                               const double* __restrict__ vals,
                                               double* __restrict__ coarse_vals,
                                               float* __restrict__ coarse_vals_f32) {
    const u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nnz) return;
    const unsigned j1 = source_end[c];
    double acc = 0.0;
    for (unsigned j = c == 0 ? 0u : source_end[c - 1]; j < j1; ++j)
        acc = __dadd_rn(acc, vals[sources[j]]);
    coarse_vals[c] = acc;
    if (coarse_vals_f32) coarse_vals_f32[c] = (float)acc;
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
    insertion_sort(members, nullptr, member_ptr[I], member_ptr[I + 1]);
}

// ---- Smoother set-up on a CSR level.

#define SCALE_JACOBI 0
#define SCALE_L1 1

// scale[i] = omega / a_ii (weighted Jacobi) or 1 / (a_ii + sum_{j != i}
// |a_ij|) in column order (L1-Jacobi, solve::smoother::l1_row_norm), and
// rounded to f32 into scale_f32 where given (nullable: a mixed cycle's copy).
// *bad = the smallest row whose a_ii is not positive and finite (kept when
// none).
extern "C" __global__ void amg_smoother_scale(int n, const u64* __restrict__ row_ptr,
                                              const unsigned* __restrict__ cols,
                                              const double* __restrict__ vals, int kind,
                                              double omega, double* __restrict__ scale,
                                              float* __restrict__ scale_f32,
                                              int* __restrict__ bad) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double d = 0.0;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if ((int)cols[k] == i) d = vals[k];
    double l1 = d;
    for (u64 k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
        if ((int)cols[k] != i) l1 += fabs(vals[k]);
    const double s = kind == SCALE_L1 ? 1.0 / l1 : omega / d;
    scale[i] = s;
    if (scale_f32) scale_f32[i] = (float)s;
    if (!(d > 0.0) || isinf(d)) atomicMin(bad, i);
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

// The lower triangle of the diagonal block at (p, p) of the row-major n x n
// `a` copied into s by the whole block (the caller synchronises before
// reading it); returns the block's rows, pb = min(DENSE_PANEL, n - p).
__device__ __forceinline__ int dense_load_diag_block(int n, int p, const double* a,
                                                     DenseTile* s) {
    const int pb = min(DENSE_PANEL, n - p);
    for (int e = threadIdx.x; e < pb * pb; e += blockDim.x) {
        const int i = e / pb, j = e % pb;
        if (j <= i) s[i][j] = a[(u64)(p + i) * n + p + j];
    }
    return pb;
}

// Entry (i, col) of the row-major n x n `a`, 0 for a row i >= n (a tile's
// rows past the matrix).
__device__ __forceinline__ double dense_entry_or_zero(int n, const double* a, int i, int col) {
    return i < n ? a[(u64)i * n + col] : 0.0;
}

// The diagonal block at (p, p) (pb = min(DENSE_PANEL, n - p) rows) factored
// in place by the whole block (unblocked right-looking Cholesky in the
// shared tile s; bad: a shared word); false (and *failed set) at a pivot
// that is not positive.
__device__ bool dense_factor_diag(int n, int p, double* a, int* failed, DenseTile* s, int* bad) {
    const int pb = dense_load_diag_block(n, p, a, s);
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
    const int pb = dense_load_diag_block(n, p, a, s);
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
        li[r][c] = dense_entry_or_zero(n, a, i0 + r, p + c);
        lj[r][c] = dense_entry_or_zero(n, a, j0 + r, p + c);
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
