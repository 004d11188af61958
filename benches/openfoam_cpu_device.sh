#!/usr/bin/env bash
# benches/openfoam_cpu.sh on a machine without OpenFOAM and without Rust.
#
#   benches/openfoam_cpu_device.sh [OPTION...]
#
# Reads, in the current folder, an OpenFOAM bundle made by
# benches/openfoam_bundle.sh (foam_bundle.tar.xz, or the file $BUNDLE names)
# and an xz-compressed fvpoisson release binary (fvpoisson.xz, or
# $FVPOISSON_XZ); unpacks both into a temporary folder and runs
#
#   benches/openfoam_cpu.sh --spec box:100x100x100 --repeat 3 --threads 8 --core 3 \
#       --openfoam BUNDLE OPTION... FVPOISSON
#
# (an OPTION given here overrides the default of the same name, e.g.
# `--table per-iteration`, `--only GAMG`, `--spec box:40x40x40`). The tables
# go to standard output and, when OUT is set, to $OUT/openfoam_cpu.txt.
# fvpoisson runs as it is where the host's glibc is new enough for it, and
# through the bundle's glibc and loader otherwise, or when BUNDLED_GLIBC=1 is
# set (the first line says which).
# xz is used to unpack where installed, Python's lzma module otherwise.
set -euo pipefail

[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set -euo pipefail/{/^set/!p}' "$0"; exit 0; }
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
bundle_xz=${BUNDLE:-foam_bundle.tar.xz}
fvpoisson_xz=${FVPOISSON_XZ:-fvpoisson.xz}
for f in "$bundle_xz" "$fvpoisson_xz"; do
    [[ -f $f ]] || { echo "$f not found in $(pwd) ($0 --help)" >&2; exit 2; }
done

# unxz FILE: FILE decompressed to standard output.
unxz() {
    if command -v xz > /dev/null; then
        xz -dc "$1"
    elif command -v python3 > /dev/null; then
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
    else
        echo "neither xz nor python3 is installed: cannot unpack $1" >&2
        return 1
    fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/openfoam_cpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unxz "$bundle_xz" | tar -C "$tmp" -xf -
bundle=$tmp/openfoam-bundle
[[ -x $bundle/bin/laplacianFoam ]] || { echo "$bundle_xz holds no openfoam-bundle/bin/laplacianFoam" >&2; exit 2; }
unxz "$fvpoisson_xz" > "$tmp/fvpoisson.bin"
chmod 755 "$tmp/fvpoisson.bin"
loader=$(ls "$bundle"/lib/ld-linux*.so.* | head -n 1)
if [[ ${BUNDLED_GLIBC:-} != 1 ]] && "$tmp/fvpoisson.bin" --help > /dev/null 2>&1; then
    ln -s fvpoisson.bin "$tmp/fvpoisson"
    how="as it is"
else
    cat > "$tmp/fvpoisson" << EOF
#!/usr/bin/env bash
exec "$loader" --inhibit-cache --library-path "$bundle/lib" --argv0 fvpoisson "$tmp/fvpoisson.bin" "\$@"
EOF
    chmod 755 "$tmp/fvpoisson"
    "$tmp/fvpoisson" --help > /dev/null || { echo "fvpoisson runs neither as it is nor with the bundle's glibc" >&2; exit 1; }
    how="through the bundle's glibc and loader"
    [[ ${BUNDLED_GLIBC:-} == 1 ]] || how+=" (as it is: $("$tmp/fvpoisson.bin" --help 2>&1 | head -n 1))"
fi

dest=/dev/null
if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT"
    dest=$OUT/openfoam_cpu.txt
fi
{
    echo "$(uname -srm); host glibc $(getconf GNU_LIBC_VERSION 2> /dev/null || echo unknown); fvpoisson runs $how"
    "$here/openfoam_cpu.sh" --spec box:100x100x100 --repeat 3 --threads 8 --core 3 \
        --openfoam "$bundle" --dir "$tmp/case" "$@" "$tmp/fvpoisson"
} 2>&1 | tee "$dest"
