// The SIMPLE loop's cell-wise steps on the device (src/gpu/simple.rs), compiled
// with spmv.cu and assembly.cu (asm_* arithmetic: round-to-nearest, never
// contracted into FMAs, in the order of src/flow/simple.rs, so the device
// values equal the CPU's bit for bit). Cells in the pressure system's row order.

// The pressure equation's source q = -div / V (div: the flux sum out of the cell).
extern "C" __global__ void simple_source(int n, const double* __restrict__ div,
                                         const double* __restrict__ volumes,
                                         double* __restrict__ source) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) source[i] = asm_div(-div[i], volumes[i]);
}

// Explicit relaxation x = old + alpha (x - old) (p by alpha_p).
extern "C" __global__ void simple_relax(int n, double alpha, const double* __restrict__ old,
                                        double* __restrict__ x) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = asm_add(old[i], asm_mul(alpha, asm_sub(x[i], old[i])));
}

// U_c = HbyA_c - rAU (grad p)_c for the three components in one launch (a
// null hbya_c / u_c: component c is not solved; grad: 3 doubles per cell),
// r_au and the gradient row read once.
extern "C" __global__ void simple_correct_velocities(int n, const double* __restrict__ hbya0,
                                                     const double* __restrict__ hbya1,
                                                     const double* __restrict__ hbya2,
                                                     const double* __restrict__ r_au,
                                                     const double* __restrict__ grad,
                                                     double* __restrict__ u0,
                                                     double* __restrict__ u1,
                                                     double* __restrict__ u2) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double r = r_au[i];
    const double* g = grad + 3 * (unsigned long long)i;
    if (u0 != nullptr) u0[i] = asm_sub(hbya0[i], asm_mul(r, g[0]));
    if (u1 != nullptr) u1[i] = asm_sub(hbya1[i], asm_mul(r, g[1]));
    if (u2 != nullptr) u2[i] = asm_sub(hbya2[i], asm_mul(r, g[2]));
}

// The deferred correction times the flux, per internal face (device order),
// as Convection::correction and the source terms of Simple::momentum_equation:
// k < 0: linearUpwind, F (grad_P . (x_f - x_P)) with P the upwind cell (the
// owner when F >= 0); k >= 0: limitedLinear k, F psi(r) (linear - upwind) with
// OpenFOAM's r (NVDTVD) from delta = x_N - x_P. to_owner / to_neighbour:
// x_f - x_P and x_f - x_N per face (linearUpwind); delta per face (limitedLinear).
extern "C" __global__ void simple_deferred_correction(
    int n_faces, double k, const unsigned* __restrict__ owner,
    const unsigned* __restrict__ neighbour, const double* __restrict__ weights,
    const double* __restrict__ phi, const double* __restrict__ u, const double* __restrict__ grad,
    const double* __restrict__ to_owner, const double* __restrict__ to_neighbour,
    const double* __restrict__ delta, double* __restrict__ fc) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const double f = phi[d];
    const bool upwind_owner = f >= 0.0;
    const unsigned long long at = 3ull * (unsigned long long)d;
    const unsigned o = owner[d], nb = neighbour[d];
    const double* g = grad + 3ull * (unsigned long long)(upwind_owner ? o : nb);
    double correction;
    if (k < 0.0) {
        const double* t = upwind_owner ? to_owner + at : to_neighbour + at;
        correction = asm_dot(g, t[0], t[1], t[2]);
    } else {
        const double uo = u[o], un = u[nb];
        const double jump = asm_sub(un, uo);
        const double* dl = delta + at;
        const double along = asm_dot(dl, g[0], g[1], g[2]);
        double r;
        if (fabs(along) >= asm_mul(1000.0, fabs(jump)))
            r = asm_sub(asm_mul(asm_mul(2000.0, copysign(1.0, along)), copysign(1.0, jump)), 1.0);
        else
            r = asm_sub(asm_div(asm_mul(2.0, along), jump), 1.0);
        const double limiter =
            fmin(fmax(asm_mul(asm_div(2.0, fmax(k, 2.220446049250313e-16)), r), 0.0), 1.0);
        const double w = weights[d];
        const double linear = asm_add(asm_mul(w, uo), asm_mul(asm_sub(1.0, w), un));
        correction = asm_mul(limiter, asm_sub(linear, upwind_owner ? uo : un));
    }
    fc[d] = asm_mul(f, correction);
}

// The row of one thread of a row kernel (one block per mod-SELL slice of h =
// blockDim.x rows, one thread per row, n rows; `in_range` false past the last
// row) and the walk over its internal faces: the row's entries of the
// assembly map run from `first` to `end` in steps of h, in face order, until
// the first ASM_NO_SLOT.
struct SimpleRow {
    int row, h;
    u64 first, end;
    bool in_range;

    // visit(code, slot) per internal face of the row in face order: `code` the
    // face's map code (device face << 1, low bit set where the row is the
    // face's neighbour), `slot` where its coefficient is in the row's values.
    template <typename Visit>
    __device__ void faces(const unsigned char* __restrict__ face_slots,
                          const unsigned* __restrict__ face_codes, Visit visit) const {
        for (u64 k = first; k < end; k += h) {
            const unsigned j = face_slots[k];
            if (j == ASM_NO_SLOT) break;
            visit(face_codes[k], first + (u64)j * h);
        }
    }
};

// This thread's row of a row kernel over the n rows whose slices start at
// slice_ptr (read only for a row in range).
__device__ SimpleRow simple_row(int n, const u64* __restrict__ slice_ptr) {
    SimpleRow r;
    r.h = blockDim.x;
    r.row = blockIdx.x * r.h + threadIdx.x;
    r.in_range = r.row < n;
    r.first = r.in_range ? slice_ptr[blockIdx.x] + threadIdx.x : 0;
    r.end = r.in_range ? slice_ptr[blockIdx.x + 1] : 0;
    return r;
}

// fvMatrix::relax(alpha) of row `r` of a row kernel: the diagonal `a` made at
// least the sum of the off-diagonal magnitudes (the row's slots in face
// order), divided by alpha; the change times the current u added to *s.
// Returns the relaxed diagonal.
__device__ double simple_relax_row(const SimpleRow& r,
                                   const unsigned char* __restrict__ face_slots,
                                   const unsigned* __restrict__ face_codes,
                                   const double* __restrict__ vals, double a, double alpha,
                                   double u, double* s) {
    double off = 0.0;
    r.faces(face_slots, face_codes, [&](unsigned, u64 slot) { off = asm_add(off, fabs(vals[slot])); });
    const double relaxed = asm_div(fmax(fabs(a), off), alpha);
    *s = asm_add(*s, asm_mul(asm_sub(relaxed, a), u));
    return relaxed;
}

// Bounded upwind convection of the flux f (owner to neighbour) on one of a
// row's internal faces (simple_momentum_rows, piso_momentum_rows): *a, the
// row's diagonal, gains max(-f, 0) + f where the row is the face's neighbour,
// max(f, 0) - f where it is the owner; returns the face's off-diagonal, the
// viscous one `visc` plus min(-f, 0) or min(f, 0).
__device__ double simple_upwind_face(bool is_neighbour, double f, double visc, double* a) {
    if (is_neighbour) {
        *a = asm_add(*a, asm_add(fmax(-f, 0.0), f));
        return asm_add(visc, fmin(-f, 0.0));
    }
    *a = asm_add(*a, asm_sub(fmax(f, 0.0), f));
    return asm_add(visc, fmin(f, 0.0));
}

// The end of a momentum row (simple_momentum_rows, piso_momentum_rows): the
// explicit stress of component c (`stress`, 3 doubles per row; null: none)
// added to the right-hand side s; diag = a, source = s, b = s - vol (grad p)_c.
__device__ void simple_momentum_outputs(int row, int c, double a, double s, double vol,
                                        const double* __restrict__ stress,
                                        const double* __restrict__ grad_p,
                                        double* __restrict__ diag, double* __restrict__ source,
                                        double* __restrict__ b) {
    if (stress != nullptr) s = asm_add(s, stress[3 * (u64)row + c]);
    diag[row] = a;
    source[row] = s;
    b[row] = asm_sub(s, asm_mul(vol, grad_p[3 * (u64)row + c]));
}

// The relaxed momentum matrix of one component, one thread per row, one block
// per slice (Simple::momentum_equation): the viscous matrix plus bounded
// upwind convection of the fluxes phi (device face layout) on the row's
// internal faces in face order, the deferred correction `fc` (null: upwind)
// on the right-hand side, the boundary faces' upwind terms, then
// fvMatrix::relax(alpha) with the current u, the explicit stress of component
// c (`stress`, 3 doubles per row; null: none); source = that right-hand side,
// b = source - V (grad p)_c.
extern "C" __global__ void simple_momentum_rows(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const unsigned* __restrict__ boundary_ptr,
    int n_faces, const double* __restrict__ phi, const double* __restrict__ fc,
    const double* __restrict__ visc_vals, const double* __restrict__ visc_diag,
    const double* __restrict__ visc_rhs, const double* __restrict__ b_value_internal,
    const double* __restrict__ b_value_boundary, const double* __restrict__ u, double alpha,
    const double* __restrict__ volumes, const double* __restrict__ stress,
    const double* __restrict__ grad_p, int c, double* __restrict__ vals, double* __restrict__ diag,
    double* __restrict__ source, double* __restrict__ b) {
    const SimpleRow r = simple_row(n, slice_ptr);
    if (!r.in_range) return;
    const int row = r.row;
    double a = visc_diag[row], s = visc_rhs[row];
    r.faces(face_slots, face_codes, [&](unsigned code, u64 slot) {
        const unsigned d = code >> 1;
        const bool is_neighbour = (code & 1u) != 0;
        vals[slot] = simple_upwind_face(is_neighbour, phi[d], visc_vals[slot], &a);
        if (fc != nullptr) s = is_neighbour ? asm_add(s, fc[d]) : asm_sub(s, fc[d]);
    });
    const double* b_phi = phi + n_faces;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double f = b_phi[i];
        a = asm_add(a, asm_mul(f, asm_sub(b_value_internal[i], 1.0)));
        s = asm_sub(s, asm_mul(f, b_value_boundary[i]));
    }
    const double relaxed =
        simple_relax_row(r, face_slots, face_codes, vals, a, alpha, u[row], &s);
    simple_momentum_outputs(row, c, relaxed, s, volumes[row], stress, grad_p, diag, source, b);
}

// a_P of `row`: the mean of the solved components' diagonals (d1, d2 null
// for fewer lanes).
__device__ __forceinline__ double simple_a_p(int row, const double* __restrict__ d0,
                                             const double* __restrict__ d1,
                                             const double* __restrict__ d2) {
    const bool has1 = d1 != nullptr, has2 = has1 && d2 != nullptr;
    double ap = d0[row], count = 1.0;
    if (has1) {
        ap = asm_add(ap, d1[row]);
        count = 2.0;
    }
    if (has2) {
        ap = asm_add(ap, d2[row]);
        count = 3.0;
    }
    return asm_div(ap, count);
}

// rAU = V / a_P alone, the bits simple_hbya_r_au writes: the pressure matrix
// of a PISO corrector depends on the momentum equation's diagonal only, so
// it is assembled from this (and its preconditioner re-set up) while the
// momentum equation is solved.
extern "C" __global__ void simple_r_au(int n, const double* __restrict__ volumes,
                                       const double* __restrict__ d0,
                                       const double* __restrict__ d1,
                                       const double* __restrict__ d2,
                                       double* __restrict__ r_au) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n) r_au[row] = asm_div(volumes[row], simple_a_p(row, d0, d1, d2));
}

// One launch for the solved components' lanes (lane k: diagonal d_k, source
// s_k, velocity component u_k, output h_k; a null d_k ends the lanes), one
// block per slice: a_P = the mean of the lanes' diagonals (fvVectorMatrix::A()),
// HbyA_k = (s_k - sum_off a u_k,j - (a_ii,k - a_P) u_k,i) / a_P (each lane's
// sum over the mod-SELL codes in slot order, the diagonal last; the codes and
// values read once for all lanes), rAU = V / a_P, and with `off_sum`
// (SIMPLEC; may be null) the row's signed off-diagonal sum and
// rAtU = V / (a_P + sum_off a).
extern "C" __global__ void simple_hbya_r_au(
    int n, const u64* __restrict__ slice_ptr, const int* __restrict__ codes,
    const double* __restrict__ vals, const double* __restrict__ volumes,
    const double* __restrict__ d0, const double* __restrict__ d1, const double* __restrict__ d2,
    const double* __restrict__ s0, const double* __restrict__ s1, const double* __restrict__ s2,
    const double* __restrict__ u0, const double* __restrict__ u1, const double* __restrict__ u2,
    double* __restrict__ h0, double* __restrict__ h1, double* __restrict__ h2,
    double* __restrict__ a_p, double* __restrict__ r_au, double* __restrict__ off_sum,
    double* __restrict__ r_atu) {
    const SimpleRow r = simple_row(n, slice_ptr);
    if (!r.in_range) return;
    const int row = r.row;
    const bool has1 = d1 != nullptr, has2 = has1 && d2 != nullptr;
    const double ap = simple_a_p(row, d0, d1, d2);
    double t0 = s0[row], t1 = has1 ? s1[row] : 0.0, t2 = has2 ? s2[row] : 0.0, off = 0.0;
    for (u64 k = r.first; k < r.end; k += r.h) {
        const int c = codes[k];
        if (c == 0) continue;
        const u64 col = c > 0 ? (u64)(c - 1) : (u64)blockIdx.x * r.h + (u64)(-(c + 1));
        const double v = vals[k];
        t0 = asm_sub(t0, asm_mul(v, u0[col]));
        if (has1) t1 = asm_sub(t1, asm_mul(v, u1[col]));
        if (has2) t2 = asm_sub(t2, asm_mul(v, u2[col]));
        off = asm_add(off, v);
    }
    t0 = asm_sub(t0, asm_mul(asm_sub(d0[row], ap), u0[row]));
    h0[row] = asm_div(t0, ap);
    if (has1) {
        t1 = asm_sub(t1, asm_mul(asm_sub(d1[row], ap), u1[row]));
        h1[row] = asm_div(t1, ap);
    }
    if (has2) {
        t2 = asm_sub(t2, asm_mul(asm_sub(d2[row], ap), u2[row]));
        h2[row] = asm_div(t2, ap);
    }
    a_p[row] = ap;
    const double volume = volumes[row];
    r_au[row] = asm_div(volume, ap);
    if (off_sum != nullptr) {
        off_sum[row] = off;
        r_atu[row] = asm_div(volume, asm_add(ap, off));
    }
}

// out = x - y.
extern "C" __global__ void simple_difference(int n, const double* __restrict__ x,
                                             const double* __restrict__ y,
                                             double* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = asm_sub(x[i], y[i]);
}

// SIMPLEC: HbyA_c -= (rAU - rAtU) (grad p)_c.
extern "C" __global__ void simple_simplec_hbya(int n, int c, const double* __restrict__ r_au,
                                               const double* __restrict__ r_atu,
                                               const double* __restrict__ grad,
                                               double* __restrict__ hbya) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        hbya[i] = asm_sub(hbya[i],
                          asm_mul(asm_sub(r_au[i], r_atu[i]), grad[3 * (unsigned long long)i + c]));
}

// phi_f = (w h_o + (1 - w) h_n) . S_f on internal faces (device order), h the
// three components (null: zero); Simple::face_flux.
extern "C" __global__ void simple_face_flux(int n_faces, const unsigned* __restrict__ owner,
                                            const unsigned* __restrict__ neighbour,
                                            const double* __restrict__ weights,
                                            const double* __restrict__ sf,
                                            const double* __restrict__ h0,
                                            const double* __restrict__ h1,
                                            const double* __restrict__ h2,
                                            double* __restrict__ phi) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const unsigned o = owner[d], nb = neighbour[d];
    const double w = weights[d], v = asm_sub(1.0, w);
    const double* hs[3] = {h0, h1, h2};
    double f[3];
    for (int c = 0; c < 3; ++c)
        f[c] = hs[c] == nullptr ? 0.0 : asm_add(asm_mul(w, hs[c][o]), asm_mul(v, hs[c][nb]));
    phi[d] = asm_dot(sf + 3 * (unsigned long long)d, f[0], f[1], f[2]);
}

// The boundary faces' part of simple_face_flux, one thread per row: the
// components' face values valueInternal h_P + valueBoundary (zero where h_c is
// null) dotted with S_b; vi_c / vb_c per device boundary face.
extern "C" __global__ void simple_boundary_face_flux(
    int n, const unsigned* __restrict__ boundary_ptr, int n_faces,
    const double* __restrict__ b_sf, const double* __restrict__ h0,
    const double* __restrict__ vi0, const double* __restrict__ vb0,
    const double* __restrict__ h1, const double* __restrict__ vi1,
    const double* __restrict__ vb1, const double* __restrict__ h2,
    const double* __restrict__ vi2, const double* __restrict__ vb2, double* __restrict__ phi) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        const double f0 = h0 == nullptr ? 0.0 : asm_add(asm_mul(vi0[i], h0[row]), vb0[i]);
        const double f1 = h1 == nullptr ? 0.0 : asm_add(asm_mul(vi1[i], h1[row]), vb1[i]);
        const double f2 = h2 == nullptr ? 0.0 : asm_add(asm_mul(vi2[i], h2[row]), vb2[i]);
        phi[(u64)n_faces + i] = asm_dot(b_sf + 3 * (u64)i, f0, f1, f2);
    }
}

// The explicit laminar stress -div(nu dev2((grad U)^T)) (Simple::explicit_stress),
// in two passes. G is the velocity gradient with G(i, j) = d_i U_j: column j
// is the cell gradient of component j (`g_j`, 3 doubles per row; null: an
// unsolved component, zero). The face stress S . X with X = nu dev2(G^T) is
// nu (G S - (2/3) tr(G) S), in nalgebra's order of Simple::explicit_stress.
__device__ void stress_face(const double G[3][3], const double* __restrict__ s, double nu,
                            double* __restrict__ out) {
    const double trace = asm_add(asm_add(asm_add(0.0, G[0][0]), G[1][1]), G[2][2]);
    const double t = asm_mul(asm_div(2.0, 3.0), trace);
    for (int i = 0; i < 3; ++i) {
        const double gs =
            asm_add(asm_add(asm_mul(G[i][0], s[0]), asm_mul(G[i][1], s[1])), asm_mul(G[i][2], s[2]));
        out[i] = asm_mul(nu, asm_sub(gs, asm_mul(t, s[i])));
    }
}

// Pass 1, per internal face (device order): S_f . X_f with G linearly
// interpolated, w G_o + (1 - w) G_n, into `flux` (3 doubles per face).
extern "C" __global__ void simple_stress_faces(int n_faces, const unsigned* __restrict__ owner,
                                               const unsigned* __restrict__ neighbour,
                                               const double* __restrict__ weights,
                                               const double* __restrict__ sf, double nu,
                                               const double* __restrict__ g0,
                                               const double* __restrict__ g1,
                                               const double* __restrict__ g2,
                                               double* __restrict__ flux) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const u64 o = 3ull * owner[d], nb = 3ull * neighbour[d];
    const double w = weights[d], v = asm_sub(1.0, w);
    const double* gs[3] = {g0, g1, g2};
    double G[3][3];
    for (int j = 0; j < 3; ++j)
        for (int i = 0; i < 3; ++i)
            G[i][j] = gs[j] == nullptr
                          ? 0.0
                          : asm_add(asm_mul(w, gs[j][o + i]), asm_mul(v, gs[j][nb + i]));
    stress_face(G, sf + 3ull * (u64)d, nu, flux + 3ull * (u64)d);
}

// Pass 2, one thread per row (one block per slice): the sum of the row's
// face stresses, + on owned faces and - on the others in face order, then its
// boundary faces' S_b . X_b, where G_b is the cell's G with its normal part
// replaced by the face's snGrad: G + n (snGrad U - G^T n)^T, n = S_b / |S_b|,
// snGrad U_j = gi_j U_j,P + gb_j (the component's gradient coefficients per
// device boundary face). `stress`: 3 doubles per row.
extern "C" __global__ void simple_stress_rows(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const unsigned* __restrict__ boundary_ptr,
    const double* __restrict__ flux, const double* __restrict__ b_sf, double nu,
    const double* __restrict__ g0, const double* __restrict__ u0, const double* __restrict__ gi0,
    const double* __restrict__ gb0, const double* __restrict__ g1, const double* __restrict__ u1,
    const double* __restrict__ gi1, const double* __restrict__ gb1, const double* __restrict__ g2,
    const double* __restrict__ u2, const double* __restrict__ gi2, const double* __restrict__ gb2,
    double* __restrict__ stress) {
    const SimpleRow r = simple_row(n, slice_ptr);
    if (!r.in_range) return;
    const int row = r.row;
    double t[3] = {0.0, 0.0, 0.0};
    r.faces(face_slots, face_codes, [&](unsigned code, u64) {
        const double* f = flux + 3ull * (u64)(code >> 1);
        for (int i = 0; i < 3; ++i) t[i] = (code & 1u) != 0 ? asm_sub(t[i], f[i]) : asm_add(t[i], f[i]);
    });
    const unsigned b_first = boundary_ptr[row], b_end = boundary_ptr[row + 1];
    if (b_first < b_end) {
        const double* gs[3] = {g0, g1, g2};
        const double* us[3] = {u0, u1, u2};
        const double* gis[3] = {gi0, gi1, gi2};
        const double* gbs[3] = {gb0, gb1, gb2};
        double G[3][3];
        for (int j = 0; j < 3; ++j)
            for (int i = 0; i < 3; ++i) G[i][j] = gs[j] == nullptr ? 0.0 : gs[j][3ull * row + i];
        for (unsigned b = b_first; b < b_end; ++b) {
            const double* s = b_sf + 3ull * (u64)b;
            const double mag = __dsqrt_rn(asm_add(
                0.0, asm_add(asm_add(asm_mul(s[0], s[0]), asm_mul(s[1], s[1])), asm_mul(s[2], s[2]))));
            const double nrm[3] = {asm_div(s[0], mag), asm_div(s[1], mag), asm_div(s[2], mag)};
            double Gb[3][3];
            for (int j = 0; j < 3; ++j) {
                const double sn =
                    gs[j] == nullptr ? 0.0 : asm_add(asm_mul(gis[j][b], us[j][row]), gbs[j][b]);
                const double gtn = asm_add(asm_add(asm_mul(G[0][j], nrm[0]), asm_mul(G[1][j], nrm[1])),
                                           asm_mul(G[2][j], nrm[2]));
                const double v = asm_sub(sn, gtn);
                for (int i = 0; i < 3; ++i) Gb[i][j] = asm_add(G[i][j], asm_mul(nrm[i], v));
            }
            double f[3];
            stress_face(Gb, s, nu, f);
            for (int i = 0; i < 3; ++i) t[i] = asm_add(t[i], f[i]);
        }
    }
    for (int i = 0; i < 3; ++i) stress[3ull * row + i] = t[i];
}

// The transient momentum matrix of one component (Piso::momentum_equation),
// one thread per row, one block per slice: the viscous matrix plus the time
// term (diagonal + ddt_diag V, right-hand side + r_dt V (c0 U0 - c00 U00),
// `u_older` null: no U00 term), then convection of the fluxes `phi` on the
// row's internal faces in face order: `central` nonzero: Gauss linear
// (owner: diagonal + w F, upper + (1 - w) F; neighbour: diagonal - (1 - w) F,
// lower - w F), else bounded upwind; then the boundary faces (central: F vi on
// the diagonal; upwind: F (vi - 1); both - F vb on the right-hand side); then
// upwind's deferred correction `fc` (may be null) on the right-hand side; then
// the flux divergence: subtracted from the diagonal for `bounded` Gauss
// linear, added back for an upwind-based scheme that is not `bounded`.
// fvMatrix::relax(alpha) only for alpha < 1; then + the explicit stress of
// component c (`stress` may be null). source = that right-hand side, b =
// source - V (grad p)_c.
extern "C" __global__ void piso_momentum_rows(
    int n, const u64* __restrict__ slice_ptr, const unsigned* __restrict__ face_codes,
    const unsigned char* __restrict__ face_slots, const unsigned* __restrict__ boundary_ptr,
    int n_faces, const double* __restrict__ weights, const double* __restrict__ phi, int central,
    int bounded, const double* __restrict__ fc, const double* __restrict__ visc_vals,
    const double* __restrict__ visc_diag, const double* __restrict__ visc_rhs,
    const double* __restrict__ b_value_internal, const double* __restrict__ b_value_boundary,
    double ddt_diag, double r_dt, double c0, double c00, const double* __restrict__ u_old,
    const double* __restrict__ u_older, const double* __restrict__ u, double alpha,
    const double* __restrict__ volumes, const double* __restrict__ stress,
    const double* __restrict__ grad_p, int c, double* __restrict__ vals, double* __restrict__ diag,
    double* __restrict__ source, double* __restrict__ b) {
    const SimpleRow r = simple_row(n, slice_ptr);
    if (!r.in_range) return;
    const int row = r.row;
    const double vol = volumes[row];
    double a = asm_add(visc_diag[row], asm_mul(ddt_diag, vol));
    double old = asm_mul(c0, u_old[row]);
    if (u_older != nullptr) old = asm_sub(old, asm_mul(c00, u_older[row]));
    double s = asm_add(visc_rhs[row], asm_mul(asm_mul(r_dt, vol), old));
    r.faces(face_slots, face_codes, [&](unsigned code, u64 slot) {
        const unsigned d = code >> 1;
        const double f = phi[d];
        const bool is_neighbour = (code & 1u) != 0;
        if (central) {
            const double w = weights[d];
            if (is_neighbour) {
                a = asm_sub(a, asm_mul(asm_sub(1.0, w), f));
                vals[slot] = asm_sub(visc_vals[slot], asm_mul(w, f));
            } else {
                a = asm_add(a, asm_mul(w, f));
                vals[slot] = asm_add(visc_vals[slot], asm_mul(asm_sub(1.0, w), f));
            }
        } else {
            vals[slot] = simple_upwind_face(is_neighbour, f, visc_vals[slot], &a);
        }
    });
    const double* b_phi = phi + n_faces;
    const unsigned b_first = boundary_ptr[row], b_end = boundary_ptr[row + 1];
    for (unsigned i = b_first; i < b_end; ++i) {
        const double f = b_phi[i];
        a = asm_add(a, asm_mul(f, central ? b_value_internal[i] : asm_sub(b_value_internal[i], 1.0)));
        s = asm_sub(s, asm_mul(f, b_value_boundary[i]));
    }
    if (!central && fc != nullptr) {
        r.faces(face_slots, face_codes, [&](unsigned code, u64) {
            const double x = fc[code >> 1];
            s = (code & 1u) != 0 ? asm_add(s, x) : asm_sub(s, x);
        });
    }
    // The flux divergence with sign +1 (upwind-based, not bounded) or -1
    // (bounded Gauss linear): + sign F on owned faces, - sign F on the others.
    const int sign = central ? (bounded ? -1 : 0) : (bounded ? 0 : 1);
    if (sign != 0) {
        const double sg = (double)sign;
        r.faces(face_slots, face_codes, [&](unsigned code, u64) {
            const double x = asm_mul(sg, phi[code >> 1]);
            a = (code & 1u) != 0 ? asm_sub(a, x) : asm_add(a, x);
        });
        for (unsigned i = b_first; i < b_end; ++i) a = asm_add(a, asm_mul(sg, b_phi[i]));
    }
    if (alpha < 1.0) a = simple_relax_row(r, face_slots, face_codes, vals, a, alpha, u[row], &s);
    simple_momentum_outputs(row, c, a, s, vol, stress, grad_p, diag, source, b);
}

// fvc::ddtCorr's flux of one face (Piso::add_ddt_correction): r_au_f times
// the coupling 1 - min(|phi0 - flux0| / (|phi0| + SMALL), 1) times r_dt times
// the old-time flux difference phi0 - flux0 (backward, `phi00` set: c0 (phi0 -
// flux0) - c00 (phi00 - flux00)).
__device__ double piso_ddt_flux(double r_au_f, double phi0, double flux0,
                                const double* __restrict__ phi00,
                                const double* __restrict__ flux00, u64 at, double c0, double c00,
                                double r_dt) {
    const double corr = asm_sub(phi0, flux0);
    const double coupling =
        asm_sub(1.0, fmin(asm_div(fabs(corr), asm_add(fabs(phi0), ASM_SMALL)), 1.0));
    double combined = corr;
    if (phi00 != nullptr)
        combined = asm_sub(asm_mul(c0, corr), asm_mul(c00, asm_sub(phi00[at], flux00[at])));
    return asm_mul(asm_mul(asm_mul(r_au_f, coupling), r_dt), combined);
}

// phi_hbya += the ddtCorr flux on internal faces (device order), rAU
// interpolated linearly. Face values in the device face layout.
extern "C" __global__ void piso_ddt_correction_faces(
    int n_faces, const unsigned* __restrict__ owner, const unsigned* __restrict__ neighbour,
    const double* __restrict__ weights, const double* __restrict__ r_au,
    const double* __restrict__ phi0, const double* __restrict__ flux0,
    const double* __restrict__ phi00, const double* __restrict__ flux00, double c0, double c00,
    double r_dt, double* __restrict__ phi_hbya) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_faces) return;
    const double w = weights[d];
    const double r_au_f =
        asm_add(asm_mul(w, r_au[owner[d]]), asm_mul(asm_sub(1.0, w), r_au[neighbour[d]]));
    phi_hbya[d] = asm_add(phi_hbya[d],
                          piso_ddt_flux(r_au_f, phi0[d], flux0[d], phi00, flux00, d, c0, c00, r_dt));
}

// The same on the boundary faces, one thread per row (rAU of the cell),
// skipped where the velocity is fixed (`fixes_value` per device boundary face).
extern "C" __global__ void piso_ddt_correction_boundary(
    int n, const unsigned* __restrict__ boundary_ptr, int n_faces,
    const unsigned char* __restrict__ fixes_value, const double* __restrict__ r_au,
    const double* __restrict__ phi0, const double* __restrict__ flux0,
    const double* __restrict__ phi00, const double* __restrict__ flux00, double c0, double c00,
    double r_dt, double* __restrict__ phi_hbya) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i) {
        if (fixes_value[i] != 0) continue;
        const u64 at = (u64)n_faces + i;
        phi_hbya[at] = asm_add(
            phi_hbya[at], piso_ddt_flux(r_au[row], phi0[at], flux0[at], phi00, flux00, at, c0, c00, r_dt));
    }
}

// CourantNo.H per row: abs_sum = sum of |phi| over the row's faces (internal
// in face order, then boundary, as Piso::courant adds them), ratio = abs_sum / V.
extern "C" __global__ void piso_courant_rows(int n, const u64* __restrict__ slice_ptr,
                                             const unsigned* __restrict__ face_codes,
                                             const unsigned char* __restrict__ face_slots,
                                             const unsigned* __restrict__ boundary_ptr,
                                             int n_faces, const double* __restrict__ phi,
                                             const double* __restrict__ volumes,
                                             double* __restrict__ abs_sum,
                                             double* __restrict__ ratio) {
    const SimpleRow r = simple_row(n, slice_ptr);
    if (!r.in_range) return;
    const int row = r.row;
    double s = 0.0;
    r.faces(face_slots, face_codes, [&](unsigned code, u64) { s = asm_add(s, fabs(phi[code >> 1])); });
    const double* b_phi = phi + n_faces;
    for (unsigned i = boundary_ptr[row]; i < boundary_ptr[row + 1]; ++i)
        s = asm_add(s, fabs(b_phi[i]));
    abs_sum[row] = s;
    ratio[row] = asm_div(s, volumes[row]);
}

// Per block the largest of x (x >= 0; 0 past n) into partials[block];
// blockDim.x a power of two, at most 1024.
extern "C" __global__ void piso_max_partials(int n, const double* __restrict__ x,
                                             double* __restrict__ partials) {
    __shared__ double m[1024];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    m[t] = i < n ? x[i] : 0.0;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) m[t] = fmax(m[t], m[t + s]);
        __syncthreads();
    }
    if (t == 0) partials[blockIdx.x] = m[0];
}

// out[0] = the largest of partials[0..count); one block, blockDim.x a power of
// two, at most 1024.
extern "C" __global__ void piso_max_reduce(int count, const double* __restrict__ partials,
                                           double* __restrict__ out) {
    __shared__ double m[1024];
    const int t = threadIdx.x;
    double v = 0.0;
    for (int i = t; i < count; i += blockDim.x) v = fmax(v, partials[i]);
    m[t] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) m[t] = fmax(m[t], m[t + s]);
        __syncthreads();
    }
    if (t == 0) out[0] = m[0];
}

// The transient continuity terms (div / V) V per row (continuityErrs.H sums
// |fvc::div(phi)| V), div the flux sum out of the row's cell.
extern "C" __global__ void piso_continuity_terms(int n, const double* __restrict__ div,
                                                 const double* __restrict__ volumes,
                                                 double* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = asm_mul(asm_div(div[i], volumes[i]), volumes[i]);
}
