// FSAI set-up on the device (src/solve/fsai/cuda_setup.rs): static and adaptive
// patterns, equal to the CPU reference (src/solve/fsai/cpu.rs)
// bit for bit in f64. u64 and rn_mul etc. (round-to-nearest operations) come
// from spmv.cu; amg_scan_* (amg.cu) compacts the active rows and sums the row
// counts.
//
// Rows are processed in batches of nb rows (local index l, global row
// r0 + l). Per-row state is interleaved ("matrix of arrays"): element e of
// row l lives at e * nb + l, so the threads of a warp (consecutive rows) read
// consecutive addresses:
//   cols[q]   pattern column q (insertion order), q < M
//   L[tri(q,t)] lower Cholesky factor of A[cols,cols], packed by rows
//   y[q]      first -a_{cols[q],i} (gathered), then L^-1(-r)
//   g[q]      the committed solution; gnew[q] the step's solution
// and per row m (committed size), npick (columns picked this step), psi.
//
// Every floating-point operation is an _rn intrinsic (never contracted into a
// fused multiply-add) in the spec's order; the kernels are kernel templates
// over double (Double) and float (Mixed), instantiated as _f64 / _f32 by
// their `// kernel:` lines.

#define FSAI_NONE 0xffffffffu
#define FSAI_FULL_MASK 0xffffffffu
// FsaiStop: src/solve/fsai/cuda_setup.rs STOP_*.
#define FSAI_STOP_STAGNATION 0
#define FSAI_STOP_REDUCTION 1

// Packed index of (q, t), t <= q, in a lower triangle stored by rows.
__device__ __forceinline__ u64 fsai_tri(int q, int t) {
    return (u64)q * (u64)(q + 1) / 2 + (u64)t;
}

// a_{row, c} from the sorted columns [b, e) of a row (0 when absent).
template <typename T>
__device__ T fsai_find(const unsigned* __restrict__ acols, const T* __restrict__ avals, u64 b,
                       u64 e, unsigned c) {
    while (b < e) {
        const u64 mid = b + (e - b) / 2;
        const unsigned x = acols[mid];
        if (x == c) return avals[mid];
        if (x < c) b = mid + 1;
        else e = mid;
    }
    return T(0);
}

// -a_{row, c}, or +0.0 (not -0.0) when absent: the forward solve's start.
template <typename T>
__device__ T fsai_find_negated(const unsigned* __restrict__ acols, const T* __restrict__ avals,
                               u64 b, u64 e, unsigned c) {
    while (b < e) {
        const u64 mid = b + (e - b) / 2;
        const unsigned x = acols[mid];
        if (x == c) return -avals[mid];
        if (x < c) b = mid + 1;
        else e = mid;
    }
    return T(0);
}

// The local row of thread/warp t: list[t], or t without a list.
__device__ __forceinline__ int fsai_local(const int* list, int t) { return list ? list[t] : t; }

// ---- Batch state: m = 0, npick = 0, active, psi = a_ii (> 0: checked on the host).
// kernel: fsai_init_f64 = fsai_init<double>, fsai_init_f32 = fsai_init<float>
template <typename T>
__global__ void fsai_init(int nb, int r0, const u64* __restrict__ row_ptr,
                          const unsigned* __restrict__ acols, const T* __restrict__ avals,
                          int* m, int* npick, unsigned* active, int* steps, int* status, T* psi0,
                          T* psi) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= nb) return;
    const int i = r0 + l;
    const T d = fsai_find(acols, avals, row_ptr[i], row_ptr[i + 1], (unsigned)i);
    m[l] = 0;
    npick[l] = 0;
    active[l] = 1u;
    steps[l] = 0;
    status[l] = 0;
    psi0[l] = d;
    psi[l] = d;
}

// ---- list[offsets[l]] = l for the flagged rows (offsets: exclusive scan of flags).
extern "C" __global__ void fsai_compact(int nb, const unsigned* __restrict__ flags,
                                        const u64* __restrict__ offsets, int* __restrict__ list) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < nb && flags[l]) list[offsets[l]] = l;
}

// ---- (K1) Kaporin gradient and top-s choice, a group of `lanes` lanes per
// active row (lanes a power of two from 4 to 32, at least m + 1 and s: the
// host picks the fewest for the step, so a warp serves 32 / lanes rows).
// Lane 0 of the group holds row i (coefficient 1), lane t in 1..m pattern
// row cols[t-1] (coefficient g[t-1]); the lanes merge their sorted rows
// (group minimum of the head columns), stopping at column i. For each merged
// column j the products coef * a_{row,j} (0 when the lane's row lacks j) are
// summed by the xor butterfly lanes/2, ..., 2, 1 (the spec's tree sum over
// 32 lanes, whose first steps add the zeros of the lanes past m: the same
// sum, lane 0's result broadcast). Columns of the pattern and zero sums are
// no candidates. The best s candidates are kept in lanes 0..s-1, sorted by
// |v| descending; the merge visits columns in ascending order, so inserting
// a candidate after those with |v| >= its own breaks ties toward the smaller
// column. The picks are appended to cols at m.. in that order; none: the row
// is exhausted. Every lane of a warp runs the loop until all its groups are
// done (the shuffles name the whole warp).
// kernel: fsai_gradient_f64 = fsai_gradient<double>, fsai_gradient_f32 = fsai_gradient<float>
template <typename T>
__global__ void fsai_gradient(int count, const int* __restrict__ list, int nb, int r0, int s,
                              int lanes, const u64* __restrict__ row_ptr,
                              const unsigned* __restrict__ acols, const T* __restrict__ avals,
                              const int* __restrict__ m, int* cols, const T* __restrict__ g,
                              int* __restrict__ npick, unsigned* __restrict__ active) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const int w = (int)(t / (unsigned)lanes);
    const int lane = (int)(t % (unsigned)lanes);
    const int first_lane = (int)(threadIdx.x & 31u) - lane;
    const unsigned group =
        lanes == 32 ? FSAI_FULL_MASK : ((1u << lanes) - 1u) << first_lane;
    const bool live = w < count;
    int l = 0, mm = 0, row = -1;
    unsigned i = 0;
    T coef = T(0);
    if (live) {
        l = list[w];
        i = (unsigned)(r0 + l);
        mm = m[l];
        if (lane == 0) {
            row = (int)i;
            coef = T(1);
        } else if (lane <= mm) {
            row = cols[(u64)(lane - 1) * nb + l];
            coef = g[(u64)(lane - 1) * nb + l];
        }
    }
    u64 ptr = 0, end = 0;
    unsigned head = FSAI_NONE;
    if (row >= 0) {
        ptr = row_ptr[row];
        end = row_ptr[row + 1];
        if (ptr < end) head = acols[ptr];
    }
    T best = T(0);  // lane q < held: candidate q's |v| and column
    unsigned best_col = FSAI_NONE;
    int held = 0;
    bool done = !live;
    for (;;) {
        unsigned j = head;
        for (int off = lanes >> 1; off > 0; off >>= 1)
            j = min(j, __shfl_xor_sync(FSAI_FULL_MASK, j, off, lanes));
        if (j >= i) done = true;  // also FSAI_NONE: every row ended
        if (__all_sync(FSAI_FULL_MASK, done)) break;
        const bool here = !done && head == j;
        T p = here ? rn_mul(coef, avals[ptr]) : T(0);
        for (int off = lanes >> 1; off > 0; off >>= 1)
            p = rn_add(p, __shfl_xor_sync(FSAI_FULL_MASK, p, off, lanes));
        p = __shfl_sync(FSAI_FULL_MASK, p, 0, lanes);
        const bool in_pattern =
            (__ballot_sync(FSAI_FULL_MASK, lane >= 1 && lane <= mm && row == (int)j) & group) != 0u;
        const T v = fabs(p);
        const int pos =
            __popc(__ballot_sync(FSAI_FULL_MASK, lane < held && best >= v) & group);
        const T up = __shfl_up_sync(FSAI_FULL_MASK, best, 1, lanes);
        const unsigned up_col = __shfl_up_sync(FSAI_FULL_MASK, best_col, 1, lanes);
        if (!done && !in_pattern && p != T(0) && pos < s) {  // uniform over the group
            if (lane == pos) {
                best = v;
                best_col = j;
            } else if (lane > pos && lane < s) {
                best = up;
                best_col = up_col;
            }
            held = min(held + 1, s);
        }
        if (here) {
            ++ptr;
            head = ptr < end ? acols[ptr] : FSAI_NONE;
        }
    }
    if (!live) return;
    if (lane < held) cols[(u64)(mm + lane) * nb + l] = (int)best_col;
    if (lane == 0) {
        npick[l] = held;
        if (held == 0) active[l] = 0u;
    }
}

// The rows [lo, hi) of the dense system a thread handles: the step's new
// ones (full = 0: m .. m + npick) or all (full = 1: 0 .. m).
__device__ __forceinline__ void fsai_span(int full, int l, const int* __restrict__ m,
                                          const int* __restrict__ npick, int* lo, int* hi) {
    if (full) {
        *lo = 0;
        *hi = m[l];
    } else {
        *lo = m[l];
        *hi = m[l] + npick[l];
    }
}

// ---- (K2) Gather, one thread per row: for each system row q in [lo, hi)
// with column c = cols[q]: L[q][t] = a_{c,cols[t]} (t < q), L[q][q] = a_cc,
// y[q] = -a_{c,i} (+0.0 when absent: the CPU's start of the forward solve),
// overwritten in place by (K3).
// kernel: fsai_gather_f64 = fsai_gather<double>, fsai_gather_f32 = fsai_gather<float>
template <typename T>
__global__ void fsai_gather(int count, const int* __restrict__ list, int nb, int r0, int full,
                            const u64* __restrict__ row_ptr, const unsigned* __restrict__ acols,
                            const T* __restrict__ avals, const int* __restrict__ m,
                            const int* __restrict__ npick, const int* __restrict__ cols,
                            T* __restrict__ L, T* __restrict__ y) {
    const int t0 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t0 >= count) return;
    const int l = fsai_local(list, t0);
    const unsigned i = (unsigned)(r0 + l);
    int lo, hi;
    fsai_span(full, l, m, npick, &lo, &hi);
    for (int q = lo; q < hi; ++q) {
        const unsigned c = (unsigned)cols[(u64)q * nb + l];
        const u64 b = row_ptr[c], e = row_ptr[c + 1];
        for (int t = 0; t < q; ++t)
            L[fsai_tri(q, t) * nb + l] =
                fsai_find(acols, avals, b, e, (unsigned)cols[(u64)t * nb + l]);
        L[fsai_tri(q, q) * nb + l] = fsai_find(acols, avals, b, e, c);
        y[(u64)q * nb + l] = fsai_find_negated(acols, avals, b, e, i);
    }
}

// ---- (K3) Cholesky extension, forward solve, psi and back solve, one thread
// per system, in place on the gathered rows [lo, hi) (spec steps 3-4):
//   L[q][p] = (L[q][p] - sum_{t<p} L[q][t] L[p][t]) / L[p][p]   (p < q)
//   L[q][q] = sqrt(a_cc - sum_{t<q} L[q][t]^2)   (breakdown if not > 0 or infinite)
//   y[q]    = (-a_{c,i} - sum_{t<q} L[q][t] y[t]) / L[q][q];  psi -= y[q]^2
//             (-a_{c,i} as gathered: +0.0 when a_{c,i} is not stored)
// then gnew = L^-T y over the rows factored. psi starts at psi[l] (the
// committed one; full = 1 passes psi0 = a_ii). Out: psi_new, bad.
// A breakdown at row q: a step (full = 0) is abandoned (K4 keeps the state
// before it); a from-scratch solve (full = 1) keeps rows 0 .. q - 1, also
// when psi would not stay > 0 after row q (the CPU's factor_all), and m
// becomes q.
// kernel: fsai_cholesky_f64 = fsai_cholesky<double>, fsai_cholesky_f32 = fsai_cholesky<float>
template <typename T>
__global__ void fsai_cholesky(int count, const int* __restrict__ list, int nb, int full,
                              int* __restrict__ m, const int* __restrict__ npick,
                              const T* __restrict__ psi, T* __restrict__ L, T* __restrict__ y,
                              T* __restrict__ gnew, T* __restrict__ psi_new,
                              int* __restrict__ bad) {
    const int t0 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t0 >= count) return;
    const int l = fsai_local(list, t0);
    int lo, hi;
    fsai_span(full, l, m, npick, &lo, &hi);
    T ps = psi[l];
    int broke = 0;
    for (int q = lo; q < hi; ++q) {
        for (int p = 0; p < q; ++p) {
            T s = L[fsai_tri(q, p) * nb + l];
            for (int t = 0; t < p; ++t)
                s = rn_sub(s, rn_mul(L[fsai_tri(q, t) * nb + l], L[fsai_tri(p, t) * nb + l]));
            L[fsai_tri(q, p) * nb + l] = rn_div(s, L[fsai_tri(p, p) * nb + l]);
        }
        T s = L[fsai_tri(q, q) * nb + l];
        for (int t = 0; t < q; ++t) {
            const T lq = L[fsai_tri(q, t) * nb + l];
            s = rn_sub(s, rn_mul(lq, lq));
        }
        if (!(s > T(0)) || !isfinite(s)) {
            broke = 1;
            hi = q;
            break;
        }
        const T d = rn_sqrt(s);
        L[fsai_tri(q, q) * nb + l] = d;
        T rr = y[(u64)q * nb + l];
        for (int t = 0; t < q; ++t)
            rr = rn_sub(rr, rn_mul(L[fsai_tri(q, t) * nb + l], y[(u64)t * nb + l]));
        const T yq = rn_div(rr, d);
        y[(u64)q * nb + l] = yq;
        const T next = rn_sub(ps, rn_mul(yq, yq));
        if (full && (!(next > T(0)) || !isfinite(next))) {
            broke = 1;
            hi = q;
            break;
        }
        ps = next;
    }
    bad[l] = broke;
    psi_new[l] = ps;
    if (broke && !full) return;
    for (int q = hi - 1; q >= 0; --q) {
        T s = y[(u64)q * nb + l];
        for (int t = q + 1; t < hi; ++t)
            s = rn_sub(s, rn_mul(L[fsai_tri(t, q) * nb + l], gnew[(u64)t * nb + l]));
        gnew[(u64)q * nb + l] = rn_div(s, L[fsai_tri(q, q) * nb + l]);
    }
    if (full) m[l] = hi;
}

// ---- (K4) Stop test and commit, one thread per active row with picks:
// a breakdown (factor, or psi_new not > 0 or infinite) keeps the state
// before the step and ends the row (status 1); otherwise g = gnew,
// m += npick, steps += 1, then the stop rule on (psi, psi_new):
// Stagnation (psi - psi_new) < eps psi, Reduction psi_new <= eps psi0.
// kernel: fsai_stop_f64 = fsai_stop<double>, fsai_stop_f32 = fsai_stop<float>
template <typename T>
__global__ void fsai_stop(int count, const int* __restrict__ list, int nb, int rule, T eps,
                          int* __restrict__ m, const int* __restrict__ npick,
                          const T* __restrict__ psi0, T* __restrict__ psi,
                          const T* __restrict__ psi_new, const int* __restrict__ bad,
                          T* __restrict__ g, const T* __restrict__ gnew,
                          unsigned* __restrict__ active, int* __restrict__ steps,
                          int* __restrict__ status) {
    const int t0 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t0 >= count) return;
    const int l = list[t0];
    const int np = npick[l];
    if (np == 0) return;  // exhausted in (K1)
    const T pn = psi_new[l];
    if (bad[l] || !(pn > T(0)) || !isfinite(pn)) {
        status[l] = 1;
        active[l] = 0u;
        return;
    }
    const int hi = m[l] + np;
    for (int q = 0; q < hi; ++q) g[(u64)q * nb + l] = gnew[(u64)q * nb + l];
    m[l] = hi;
    steps[l] += 1;
    const T ps = psi[l];
    const bool stop = rule == FSAI_STOP_STAGNATION ? rn_sub(ps, pn) < rn_mul(eps, ps)
                                                   : pn <= rn_mul(eps, psi0[l]);
    psi[l] = pn;
    if (stop) active[l] = 0u;
}

// ---- Commit of a from-scratch solve (static rows, postfilter re-solves):
// g = gnew over the rows factored (m, cut at a breakdown by (K3)),
// psi = psi_new; a breakdown marks the row (status 1).
// kernel: fsai_commit_f64 = fsai_commit<double>, fsai_commit_f32 = fsai_commit<float>
template <typename T>
__global__ void fsai_commit(int count, const int* __restrict__ list, int nb,
                            const int* __restrict__ m, const T* __restrict__ psi_new,
                            const int* __restrict__ bad, T* __restrict__ psi,
                            T* __restrict__ g, const T* __restrict__ gnew,
                            int* __restrict__ status) {
    const int t0 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t0 >= count) return;
    const int l = fsai_local(list, t0);
    if (bad[l]) status[l] = 1;
    for (int q = 0; q < m[l]; ++q) g[(u64)q * nb + l] = gnew[(u64)q * nb + l];
    psi[l] = psi_new[l];
}

// ---- Postfilter, one thread per row: keep the columns with |g_q| >= delta (on
// the unscaled g) in insertion order; flags[l] = 1 when
// something was dropped (the row is solved again on the kept columns).
// kernel: fsai_postfilter_f64 = fsai_postfilter<double>,
//         fsai_postfilter_f32 = fsai_postfilter<float>
template <typename T>
__global__ void fsai_postfilter(int nb, T delta, int* __restrict__ m, int* __restrict__ cols,
                                T* __restrict__ g, unsigned* __restrict__ flags) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= nb) return;
    const int mm = m[l];
    int kept = 0;
    for (int q = 0; q < mm; ++q) {
        const T v = g[(u64)q * nb + l];
        if (!(fabs(v) >= delta)) continue;  // the CPU keeps |g| >= delta
        cols[(u64)kept * nb + l] = cols[(u64)q * nb + l];
        g[(u64)kept * nb + l] = v;
        ++kept;
    }
    m[l] = kept;
    flags[l] = kept < mm ? 1u : 0u;
}

// ---- counts[b] += the rows l < nb whose value (clamped to 0 .. bins - 1) is
// b: the set-up's statistics (steps per row, breakdowns)
// without reading the rows back. A block's histogram in shared memory, then
// one atomic per bin; bins <= FSAI_HISTOGRAM_BINS.
#define FSAI_HISTOGRAM_BINS 64
extern "C" __global__ void fsai_histogram(int nb, const int* __restrict__ values, int bins,
                                          u64* __restrict__ counts) {
    __shared__ unsigned block_counts[FSAI_HISTOGRAM_BINS];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) block_counts[b] = 0u;
    __syncthreads();
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < nb) atomicAdd(&block_counts[min(max(values[l], 0), bins - 1)], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        if (block_counts[b] != 0u) atomicAdd(&counts[b], (u64)block_counts[b]);
    }
}

// ---- (K5) Assembly. counts[l] = m + 1 (the row's entries with the diagonal).
extern "C" __global__ void fsai_row_counts(int nb, const int* __restrict__ m,
                                           unsigned* __restrict__ counts) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < nb) counts[l] = (unsigned)m[l] + 1u;
}

// The batch's rows of G into a chunk at offsets[l] (exclusive scan of the
// counts): columns ascending (insertion sort of the pattern), then the
// diagonal; G[i, cols] = g / sqrt(psi), G[i, i] = 1 / sqrt(psi), cast to f64.
// kernel: fsai_assemble_f64 = fsai_assemble<double>, fsai_assemble_f32 = fsai_assemble<float>
template <typename T>
__global__ void fsai_assemble(int nb, int r0, const u64* __restrict__ offsets,
                              const int* __restrict__ m, const int* __restrict__ cols,
                              const T* __restrict__ g, const T* __restrict__ psi,
                              unsigned* __restrict__ out_cols, double* __restrict__ out_vals) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= nb) return;
    const u64 o = offsets[l];
    const int mm = m[l];
    const T root = rn_sqrt(psi[l]);
    for (int q = 0; q < mm; ++q) {
        const unsigned c = (unsigned)cols[(u64)q * nb + l];
        const double v = (double)rn_div(g[(u64)q * nb + l], root);
        int k = q;
        while (k > 0 && out_cols[o + k - 1] > c) {
            out_cols[o + k] = out_cols[o + k - 1];
            out_vals[o + k] = out_vals[o + k - 1];
            --k;
        }
        out_cols[o + k] = c;
        out_vals[o + k] = v;
    }
    out_cols[o + mm] = (unsigned)(r0 + l);
    out_vals[o + mm] = (double)rn_div(T(1), root);
}

// counts[r0 + l] = chunk_counts[l]: the batch's row counts into the whole matrix's.
extern "C" __global__ void fsai_place_counts(int nb, int r0, const unsigned* __restrict__ chunk,
                                             unsigned* __restrict__ counts) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < nb) counts[r0 + l] = chunk[l];
}

// A chunk's entries into G from row_ptr[r0] on (the batches' rows are
// consecutive, so the chunk is one contiguous run of G).
extern "C" __global__ void fsai_place_chunk(long long len, int r0, const u64* __restrict__ row_ptr,
                                            const unsigned* __restrict__ chunk_cols,
                                            const double* __restrict__ chunk_vals,
                                            unsigned* __restrict__ cols,
                                            double* __restrict__ vals) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= len) return;
    const u64 at = row_ptr[r0] + (u64)k;
    cols[at] = chunk_cols[k];
    vals[at] = chunk_vals[k];
}

// ---- G^T: entries per column (integer atomics: the totals do not depend on
// the order), slots handed out per column, then each row of G^T sorted by
// column, so the result does not depend on the atomics' order.
extern "C" __global__ void fsai_transpose_count(int n, const u64* __restrict__ row_ptr,
                                                const unsigned* __restrict__ cols,
                                                unsigned* __restrict__ counts) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    for (u64 k = row_ptr[r]; k < row_ptr[r + 1]; ++k) atomicAdd(&counts[cols[k]], 1u);
}

extern "C" __global__ void fsai_transpose_fill(int n, const u64* __restrict__ row_ptr,
                                               const unsigned* __restrict__ cols,
                                               const double* __restrict__ vals,
                                               const u64* __restrict__ t_row_ptr,
                                               unsigned* __restrict__ fill,
                                               unsigned* __restrict__ t_cols,
                                               double* __restrict__ t_vals) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    for (u64 k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
        const unsigned c = cols[k];
        const u64 at = t_row_ptr[c] + atomicAdd(&fill[c], 1u);
        t_cols[at] = (unsigned)r;
        t_vals[at] = vals[k];
    }
}

// Insertion sort of each row by column (rows of G^T are short).
extern "C" __global__ void fsai_sort_rows(int n, const u64* __restrict__ row_ptr,
                                          unsigned* __restrict__ cols,
                                          double* __restrict__ vals) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    insertion_sort(cols, vals, row_ptr[r], row_ptr[r + 1]);
}

// ---- Static pattern rows into the interleaved layout: row l's columns
// (ascending, from the host's pattern CSR pat_ptr/pat_cols, batch-local)
// become cols[q * nb + l], m[l] their count.
extern "C" __global__ void fsai_static_pattern(int nb, const u64* __restrict__ pat_ptr,
                                               const unsigned* __restrict__ pat_cols,
                                               int* __restrict__ m, int* __restrict__ cols) {
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= nb) return;
    const u64 b = pat_ptr[l], e = pat_ptr[l + 1];
    for (u64 k = b; k < e; ++k) cols[(k - b) * nb + l] = (int)pat_cols[k];
    m[l] = (int)(e - b);
}
