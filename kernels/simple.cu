// The SIMPLE loop's cell-wise steps on the device (src/gpu/simple.rs), after
// assembly.cu in the one module (asm_* arithmetic: round-to-nearest, never
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

// U = HbyA - rAU grad p for the components whose bit is set in `components`
// (bit c: component c); vectors are 3 consecutive doubles per cell.
extern "C" __global__ void simple_correct_velocity(int n, int components,
                                                   const double* __restrict__ hbya,
                                                   const double* __restrict__ r_au,
                                                   const double* __restrict__ grad,
                                                   double* __restrict__ u) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double r = r_au[i];
    for (int c = 0; c < 3; ++c) {
        if ((components >> c) & 1) {
            const unsigned long long at = 3ull * (unsigned long long)i + c;
            u[at] = asm_sub(hbya[at], asm_mul(r, grad[at]));
        }
    }
}
