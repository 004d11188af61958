// The assembly map of kernels/assembly.cu built on the device, from the mesh's
// owner-neighbour addressing and the row ordering (compiled with spmv.cu: u64).
// The definition and the host's reference construction: AssemblyMap::new in
// src/gpu/assembly.rs; the host side of these kernels: src/gpu/assembly/device_map.rs.
//
// Integer atomics only count, or hand out places in a list that
// amap_sort_lists then puts in face order, so the map is the same every run
// and equal, array for array, to the host's.
//
// Row r's internal faces in face order sit at the mod-SELL positions of its
// slots (base of its slice + i + k*h for step k, i = r mod h); at each: the
// face code (device face << 1 | 1 where the row's cell is the face's
// neighbour), the slot j of the row that the face's coefficient fills
// (AMAP_NO_SLOT past the row's last face), and in the pattern the column code
// of slot j (columns ascending). Device faces are numbered in the order the
// rows, in row order, first meet them (a row meets a face first when its
// column across the face is the larger).

#define AMAP_NO_SLOT 0xFFu
#define AMAP_FIRST_MET 0x80000000u
// The most faces a row may have: a slot code below AMAP_NO_SLOT.
#define AMAP_MAX_ROW 255

// Row `row`'s place in the mod-SELL layout of slices of h rows: its slice s,
// the slice's first row, and base, where the row's step-k slot sits at
// base + k h.
struct AmapSlot {
    int s, first;
    u64 base;
};
__device__ __forceinline__ AmapSlot amap_slot(int row, int h, const u64* __restrict__ slice_ptr) {
    const int s = row / h, i = row - s * h, first = s * h;
    return {s, first, slice_ptr[s] + i};
}

// The faces of row `row` (< n): `each(face_codes, visit)` calls
// visit(at, code) for each in step order, `at` its slot's mod-SELL position,
// `code` its face code there.
struct AmapRowFaces {
    u64 base;
    int len, h;
    template <typename Visit>
    __device__ __forceinline__ void each(const unsigned* face_codes, Visit visit) const {
        for (int k = 0; k < len; ++k) {
            const u64 at = base + (u64)k * h;
            visit(at, face_codes[at]);
        }
    }
};
__device__ __forceinline__ AmapRowFaces amap_row_faces(int row, int h,
                                                       const u64* __restrict__ slice_ptr,
                                                       const u64* __restrict__ ptr) {
    const u64 base = amap_slot(row, h, slice_ptr).base;
    return {base, (int)(ptr[row + 1] - ptr[row]), h};
}

// Each internal face counted in the rows of its owner and its neighbour.
extern "C" __global__ void amap_count_faces(int n_faces, const unsigned* __restrict__ owner,
                                            const unsigned* __restrict__ neighbour,
                                            const unsigned* __restrict__ old_to_new,
                                            unsigned* __restrict__ count) {
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n_faces) return;
    atomicAdd(&count[old_to_new[owner[f]]], 1u);
    atomicAdd(&count[old_to_new[neighbour[f]]], 1u);
}

// Each internal face put in the lists of its two rows (list r at
// ptr[r]..ptr[r + 1]; `fill` zeroed, the places handed out in any order).
extern "C" __global__ void amap_place_faces(int n_faces, const unsigned* __restrict__ owner,
                                            const unsigned* __restrict__ neighbour,
                                            const unsigned* __restrict__ old_to_new,
                                            const u64* __restrict__ ptr,
                                            unsigned* __restrict__ fill,
                                            unsigned* __restrict__ items) {
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n_faces) return;
    const unsigned r_owner = old_to_new[owner[f]];
    items[ptr[r_owner] + atomicAdd(&fill[r_owner], 1u)] = f;
    const unsigned r_neighbour = old_to_new[neighbour[f]];
    items[ptr[r_neighbour] + atomicAdd(&fill[r_neighbour], 1u)] = f;
}

// Each active boundary face counted in its row (`rows[b]` the row of boundary
// face b's owner, 0xFFFFFFFF for a face of an empty patch).
extern "C" __global__ void amap_count_boundary(int n_boundary, const unsigned* __restrict__ rows,
                                               unsigned* __restrict__ count) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_boundary || rows[b] == 0xFFFFFFFFu) return;
    atomicAdd(&count[rows[b]], 1u);
}

// Each active boundary face b put in its row's list.
extern "C" __global__ void amap_place_boundary(int n_boundary, const unsigned* __restrict__ rows,
                                               const u64* __restrict__ ptr,
                                               unsigned* __restrict__ fill,
                                               unsigned* __restrict__ items) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_boundary || rows[b] == 0xFFFFFFFFu) return;
    const unsigned r = rows[b];
    items[ptr[r] + atomicAdd(&fill[r], 1u)] = b;
}

// Each list ascending (insertion sort: lists are a row's faces, short, and a
// list longer than a slot code holds is refused before it is read).
extern "C" __global__ void amap_sort_lists(int n, const u64* __restrict__ ptr,
                                           unsigned* __restrict__ items) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    insertion_sort(items, nullptr, ptr[r], ptr[r + 1]);
}

// Per slice of h rows, its width: the count of its row of most faces. A row
// of more than AMAP_MAX_ROW faces sets *first_long to the least such row.
extern "C" __global__ void amap_slice_widths(int n, int h, const unsigned* __restrict__ count,
                                             unsigned* __restrict__ widths,
                                             unsigned* __restrict__ first_long) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= (n + h - 1) / h) return;
    const int end = min(n, (s + 1) * h);
    unsigned width = 0;
    for (int r = s * h; r < end; ++r) {
        const unsigned c = count[r];
        if (c > AMAP_MAX_ROW) atomicMin(first_long, (unsigned)r);
        width = max(width, c);
    }
    widths[s] = width;
}

// Per row: at step k of its faces (ascending), the face code with
// AMAP_FIRST_MET where the row meets the face first, the slot of the face's
// column among the row's columns ascending, and the pattern's column code of
// each slot (-(c - first) - 1 for a column c inside the row's slice, c + 1
// outside); past the row's faces, up to the slice's width, code 0, no slot and
// pattern code 0 (rows past the last cell: padding only, n rounded up to a
// whole slice of threads). first_met[r]: the faces row r meets first. A row with two
// faces to one cell or a face to itself sets *bad_row to the least such row.
extern "C" __global__ void amap_rows(int n, int h, const u64* __restrict__ slice_ptr,
                                     const u64* __restrict__ ptr,
                                     const unsigned* __restrict__ faces,
                                     const unsigned* __restrict__ owner,
                                     const unsigned* __restrict__ neighbour,
                                     const unsigned* __restrict__ new_to_old,
                                     const unsigned* __restrict__ old_to_new,
                                     unsigned* __restrict__ face_codes,
                                     unsigned char* __restrict__ face_slots,
                                     int* __restrict__ pattern_codes,
                                     unsigned* __restrict__ first_met,
                                     unsigned* __restrict__ bad_row) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    // The last slice's rows past the last cell are padding only.
    if (row >= (n + h - 1) / h * h) return;
    const AmapSlot slot = amap_slot(row, h, slice_ptr);
    const int s = slot.s, first = slot.first;
    const u64 base = slot.base;
    const int width = (int)((slice_ptr[s + 1] - slice_ptr[s]) / h);
    const bool real = row < n;
    const unsigned* list = real ? faces + ptr[row] : faces;
    const int len = real ? (int)(ptr[row + 1] - ptr[row]) : 0;
    const unsigned cell = real ? new_to_old[row] : 0u;
    // (column << 8) | step: sorted, the columns ascending, equal ones in
    // step order (as the host's stable insertion sort).
    u64 columns[AMAP_MAX_ROW];
    unsigned met = 0;
    for (int k = 0; k < len; ++k) {
        const unsigned f = list[k];
        const unsigned nb = neighbour[f];
        const unsigned is_neighbour = nb == cell ? 1u : 0u;
        const unsigned column = old_to_new[is_neighbour ? owner[f] : nb];
        const bool first_here = (unsigned)row < column;
        face_codes[base + (u64)k * h] = (f << 1) | is_neighbour | (first_here ? AMAP_FIRST_MET : 0u);
        met += first_here ? 1u : 0u;
        unsigned long long key = ((unsigned long long)column << 8) | (unsigned)k;
        int at = k;
        while (at > 0 && columns[at - 1] > key) {
            columns[at] = columns[at - 1];
            --at;
        }
        columns[at] = key;
    }
    for (int j = 0; j < len; ++j) {
        const unsigned column = (unsigned)(columns[j] >> 8);
        const int step = (int)(columns[j] & 0xFFu);
        if (column == (unsigned)row || (j > 0 && (unsigned)(columns[j - 1] >> 8) == column)) {
            atomicMin(bad_row, (unsigned)row);
        }
        face_slots[base + (u64)step * h] = (unsigned char)j;
        const int c = (int)column;
        pattern_codes[base + (u64)j * h] = (c >= first && c < first + h) ? -(c - first) - 1 : c + 1;
    }
    for (int k = len; k < width; ++k) {
        face_codes[base + (u64)k * h] = 0u;
        face_slots[base + (u64)k * h] = (unsigned char)AMAP_NO_SLOT;
        pattern_codes[base + (u64)k * h] = 0;
    }
    if (real) first_met[row] = met;
}

// Per row: the faces it meets first numbered from face_start[row] in step
// order (device_faces[d] = f, device_id[f] = d), their codes (d << 1) | s
// with AMAP_FIRST_MET kept as amap_other_sides's mark.
extern "C" __global__ void amap_number_faces(int n, int h, const u64* __restrict__ slice_ptr,
                                             const u64* __restrict__ ptr,
                                             const u64* __restrict__ face_start,
                                             unsigned* __restrict__ face_codes,
                                             unsigned* __restrict__ device_faces,
                                             unsigned* __restrict__ device_id) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const AmapRowFaces faces = amap_row_faces(row, h, slice_ptr, ptr);
    unsigned id = (unsigned)face_start[row];
    faces.each(face_codes, [&](u64 at, unsigned code) {
        if (code & AMAP_FIRST_MET) {
            const unsigned f = (code & ~AMAP_FIRST_MET) >> 1;
            device_faces[id] = f;
            device_id[f] = id;
            face_codes[at] = AMAP_FIRST_MET | (id << 1) | (code & 1u);
            ++id;
        }
    });
}

// Per row: each face it meets second takes the number its first row gave it;
// the mark comes off the others.
extern "C" __global__ void amap_other_sides(int n, int h, const u64* __restrict__ slice_ptr,
                                            const u64* __restrict__ ptr,
                                            const unsigned* __restrict__ device_id,
                                            unsigned* __restrict__ face_codes) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    amap_row_faces(row, h, slice_ptr, ptr).each(face_codes, [&](u64 at, unsigned code) {
        face_codes[at] = (code & AMAP_FIRST_MET) ? (code & ~AMAP_FIRST_MET)
                                                 : (device_id[code >> 1] << 1) | (code & 1u);
    });
}

// out[i] = in[i] for i < n (offsets known to fit 32 bits).
extern "C" __global__ void amap_narrow(int n, const u64* __restrict__ in,
                                       unsigned* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned)in[i];
}

// ---- The device set-up's arrays in device order, gathered on the device
// from arrays the host uploads in mesh order (sequential reads and copies on
// the host, the random reads here).

// dst[i·width + c] = src[index[i]·width + c] for c < width.
extern "C" __global__ void amap_gather_f64(int n, int width, const unsigned* __restrict__ index,
                                           const double* __restrict__ src,
                                           double* __restrict__ dst) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)n * width) return;
    const long long i = e / width;
    dst[e] = src[(long long)index[i] * width + (e - i * width)];
}

// rows[d] = old_to_new[cells[faces[d]]]: the row of each device face's owner
// (or neighbour).
extern "C" __global__ void amap_gather_rows(int n, const unsigned* __restrict__ faces,
                                            const unsigned* __restrict__ cells,
                                            const unsigned* __restrict__ old_to_new,
                                            unsigned* __restrict__ rows) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d < n) rows[d] = old_to_new[cells[faces[d]]];
}
