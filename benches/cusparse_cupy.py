#!/usr/bin/env python3
"""cuSPARSE CSR SpMV through CuPy, for a device where `fvpoisson bench` cannot
load libcusparse through cudarc (its output then says "cuSPARSE not measured").

Input: the Matrix Market files of `fvpoisson bench --write-mtx DIR`
(`DIR/<case>.<ordering>.mtx`, coordinate real general, rows in order), or any
such files. Timed as the bench times its kernels: CUDA events around each
SpMV, 5 warm-up calls, the median of --reps calls, x/y pairs rotated so that
they are not in L2 from the previous call. GB/s are on the byte count of our
CSR kernel (kernels/NOTES.md): 12 nnz + 8 (n + 1) + 16 n, so that times and
rates compare with the bench's "SpMV CSR" row of the same case and ordering
(CuPy's CSR has 32-bit row offsets: 4 (n + 1) bytes fewer than counted).
"of copy" is the fraction of the device-to-device copy bandwidth, measured
here as the bench measures it (1 GiB, read + write, median of 20).

Each SpMV result is checked against the host product (max |y - y_host| /
max |y_host|).

Usage: python3 benches/cusparse_cupy.py DIR_OR_FILE... [--reps 50]
"""

import argparse
import pathlib
import sys
import time

import numpy as np

try:
    import cupy as cp
    import cupyx.scipy.sparse as cpsparse
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"error: CuPy is needed ({e}); install cupy-cuda13x")


def read_mtx(path):
    """(n_rows, n_cols, row, col, value) of a coordinate Matrix Market file,
    0-based; symmetric files are expanded."""
    with open(path, "rb") as f:
        header = f.readline().decode().lower().split()
        if header[:3] != ["%%matrixmarket", "matrix", "coordinate"] or header[3] not in (
            "real",
            "integer",
        ):
            sys.exit(f"error: {path}: not a coordinate real Matrix Market file: {' '.join(header)}")
        symmetry = header[4]
        if symmetry not in ("general", "symmetric"):
            sys.exit(f"error: {path}: {symmetry} matrices are not supported")
        line = f.readline()
        while line.startswith(b"%"):
            line = f.readline()
        n_rows, n_cols, nnz = (int(v) for v in line.split())
        body = f.read()
    try:
        # One C-level pass over the text (newlines count as separators).
        data = np.fromstring(body.decode(), dtype=np.float64, sep=" ")
    except (AttributeError, ValueError):
        data = np.loadtxt(body.decode().splitlines(), dtype=np.float64).ravel()
    if data.size != 3 * nnz:
        sys.exit(f"error: {path}: expected {nnz} entries of 3 numbers, read {data.size} numbers")
    data = data.reshape(nnz, 3)
    row = data[:, 0].astype(np.int64) - 1
    col = data[:, 1].astype(np.int64) - 1
    val = data[:, 2].copy()
    if symmetry == "symmetric":
        off = row != col
        row, col, val = (
            np.concatenate([row, col[off]]),
            np.concatenate([col, row[off]]),
            np.concatenate([val, val[off]]),
        )
    return n_rows, n_cols, row, col, val


def csr_arrays(n_rows, row, col, val):
    """CSR (indptr, indices, data) with rows in order and columns sorted."""
    order = np.lexsort((col, row))
    row, col, val = row[order], col[order], val[order]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
    return indptr, col, val


def median_ms(work, count, reps, warmup=5):
    """Median device time (ms) of work(i) between two CUDA events."""
    for i in range(warmup):
        work(i % count)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(reps):
        start.record()
        work(i % count)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def copy_bandwidth():
    """Device-to-device copy bandwidth, GB/s (bytes read + written), as the bench."""
    n = (1 << 30) // 8
    src = cp.ones(n, dtype=cp.float64)
    dst = cp.zeros(n, dtype=cp.float64)
    # cudaMemcpyAsync device to device, as the bench's cuMemcpyDtoD.
    ms = median_ms(lambda _: dst.data.copy_from_device(src.data, n * 8), 1, 20, warmup=3)
    return 2.0 * n * 8 / (ms * 1e-3) / 1e9


class PrebuiltSpmv:
    """cusparseSpMV with descriptors and workspace made once (CuPy's internal
    API, as in CuPy's own iterative solvers), so that a call costs what the
    bench's cuSPARSE call costs: the SpMV alone."""

    def __init__(self, a, xs, ys, algorithm):
        from cupy._core import _dtype
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cusparse as libcusparse
        from cupyx import cusparse

        self.lib = libcusparse
        self.handle = device.get_cusparse_handle()
        self.op = libcusparse.CUSPARSE_OPERATION_NON_TRANSPOSE
        self.alpha = np.array(1.0, dtype=np.float64)
        self.beta = np.array(0.0, dtype=np.float64)
        self.dtype = _dtype.to_cuda_dtype(np.dtype(np.float64))
        self.alg = getattr(libcusparse, algorithm)
        self.mat = cusparse.SpMatDescriptor.create(a)
        self.xs = [cusparse.DnVecDescriptor.create(x) for x in xs]
        self.ys = [cusparse.DnVecDescriptor.create(y) for y in ys]
        size = libcusparse.spMV_bufferSize(
            self.handle, self.op, self.alpha.ctypes.data, self.mat.desc, self.xs[0].desc,
            self.beta.ctypes.data, self.ys[0].desc, self.dtype, self.alg)
        self.buffer = cp.empty(max(size, 1), dtype=cp.int8)

    def __call__(self, i):
        self.lib.spMV(
            self.handle, self.op, self.alpha.ctypes.data, self.mat.desc, self.xs[i].desc,
            self.beta.ctypes.data, self.ys[i].desc, self.dtype, self.alg, self.buffer.data.ptr)


def cusparse_version():
    """The loaded cuSPARSE's version, or '?' where CuPy does not say."""
    try:
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cusparse as libcusparse

        v = libcusparse.getVersion(device.get_cusparse_handle())
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    except Exception:
        return "?"


def spmv_variants(a, xs, ys):
    """(name, work(i) writing ys[i] = A xs[i]) for each way CuPy offers."""
    variants = []
    for algorithm in ("CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_CSR_ALG2"):
        try:
            variants.append((f"CuPy cusparseSpMV {algorithm[-4:]}", PrebuiltSpmv(a, xs, ys, algorithm)))
        except Exception as e:  # internal API: absent or changed in this CuPy
            print(f"note: CuPy prebuilt cusparseSpMV {algorithm} unavailable: {e!r}", file=sys.stderr)
    if not variants:
        from cupyx import cusparse

        def public(i):
            cusparse.spmv(a, xs[i], y=ys[i])

        variants.append(("CuPy cupyx.cusparse.spmv (descriptors per call)", public))
    return variants


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=pathlib.Path, help="Matrix Market files or directories of them")
    parser.add_argument("--reps", type=int, default=50, help="timed repetitions (median reported)")
    args = parser.parse_args()
    files = []
    for p in args.paths:
        files.extend(sorted(p.glob("*.mtx")) if p.is_dir() else [p])
    if not files:
        sys.exit("error: no .mtx files given")

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    copy = copy_bandwidth()
    print(
        f"device {name}, CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, "
        f"cuSPARSE {cusparse_version()}; copy bandwidth {copy:.0f} GB/s"
    )
    print(f"{'matrix':<48} {'what':<44} {'n':>10} {'MB counted':>11} {'ms':>11} {'GB/s':>9} {'of copy':>7}  note")
    for path in files:
        t = time.time()
        n_rows, n_cols, row, col, val = read_mtx(path)
        if n_rows != n_cols:
            print(f"{path.name}: {n_rows} x {n_cols} is not square; skipped", file=sys.stderr)
            continue
        n = n_rows
        indptr, indices, data = csr_arrays(n, row, col, val)
        nnz = data.size
        print(f"{path.name}: n = {n}, nnz = {nnz}, read in {time.time() - t:.1f} s", file=sys.stderr)
        a = cpsparse.csr_matrix(
            (cp.asarray(data), cp.asarray(indices.astype(np.int32)), cp.asarray(indptr.astype(np.int32))),
            shape=(n, n),
        )
        # The bench's x vectors and its rule for how many pairs to rotate.
        sets = min(max(200_000_000 // (16 * max(n, 1)), 2), 16)
        i = np.arange(n)
        xs = [cp.asarray(1.0 + ((i * 31 + k * 7) % 97) / 97.0) for k in range(sets)]
        ys = [cp.zeros(n) for _ in range(sets)]
        x0 = cp.asnumpy(xs[0])
        rows = np.repeat(np.arange(n), np.diff(indptr))
        reference = np.bincount(rows, weights=data * x0[indices], minlength=n)
        scale = np.abs(reference).max() or 1.0
        counted = 12.0 * nnz + 8.0 * (n + 1) + 16.0 * n
        for what, work in spmv_variants(a, xs, ys):
            ms = median_ms(work, sets, args.reps)
            ys[0].fill(np.nan)
            work(0)
            y = cp.asnumpy(ys[0])
            diff = np.abs(y - reference).max() / scale if np.isfinite(y).all() else np.inf
            gb_s = counted / (ms * 1e-3) / 1e9
            print(
                f"{path.name:<48} {what:<44} {n:>10} {counted / 1e6:>11.1f} {ms:>11.4f} {gb_s:>9.0f} "
                f"{gb_s / copy:>7.2f}  max diff to host {diff:.1e}; 32-bit row offsets"
            )


if __name__ == "__main__":
    main()
