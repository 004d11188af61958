#!/usr/bin/env bash
# Regenerates the simpleFoam (OpenFOAM v1912) reference fields that
# tests/simple_foam_parity.rs compares every SIMPLE iteration with.
#
# Each case is cases/cavity_foam with its block resized (N x N cells) or, for
# `skew20`, a trapezoidal cavity (horizontal lid, slanted side walls: a
# non-orthogonal mesh, one non-orthogonal corrector). blockMesh makes the
# mesh, simpleFoam runs ITER iterations writing every one with 17 digits;
# the mesh, the case files and the written U and p (gzipped) are kept.
#
# Usage: tests/data/simple_foam_parity/make_reference.sh   (from the repository root)
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name cells iterations vertices(x0 x1 x2 x3 of the bottom-left, bottom-right,
# top-right, top-left corners) nNonOrthogonalCorrectors
cases=(
  "cavity20 20 12 0 1 1 0 0"
  "cavity40 40 6 0 1 1 0 0"
  "cavity80 80 4 0 1 1 0 0"
  "skew20 20 12 0 1 1.3 0.2 1"
)

for spec in "${cases[@]}"; do
  read -r name n iterations x0 x1 x2 x3 nonorth <<<"$spec"
  dir="$work/$name"
  cp -r "$root/cases/cavity_foam" "$dir"
  rm -rf "$dir/constant/polyMesh" "$dir/README.md"
  sed -i \
    -e "s/^ *(0 0 0)$/    ($x0 0 0)/" -e "s/^ *(1 0 0)$/    ($x1 0 0)/" \
    -e "s/^ *(1 1 0)$/    ($x2 1 0)/" -e "s/^ *(0 1 0)$/    ($x3 1 0)/" \
    -e "s/^ *(0 0 1)$/    ($x0 0 1)/" -e "s/^ *(1 0 1)$/    ($x1 0 1)/" \
    -e "s/^ *(1 1 1)$/    ($x2 1 1)/" -e "s/^ *(0 1 1)$/    ($x3 1 1)/" \
    -e "s/(20 20 1)/($n $n 1)/" "$dir/system/blockMeshDict"
  sed -i \
    -e "s/^endTime .*/endTime         $iterations;/" \
    -e "s/^writeInterval .*/writeInterval   1;/" \
    -e "s/^writePrecision .*/writePrecision  17;/" \
    -e "s/^writeCompression .*/writeCompression on;/" "$dir/system/controlDict"
  sed -i -e "s/nNonOrthogonalCorrectors 0;/nNonOrthogonalCorrectors $nonorth;/" \
    "$dir/system/fvSolution"
  # v1912 reads the laminar model from turbulenceProperties.
  sed -e 's/object *momentumTransport;/object      turbulenceProperties;/' \
    "$dir/constant/momentumTransport" > "$dir/constant/turbulenceProperties"
  (cd "$dir" && blockMesh > log.blockMesh && simpleFoam > log.simpleFoam)
  out="$here/$name"
  rm -rf "$out"
  mkdir -p "$out/constant"
  cp -r "$dir/system" "$dir/0" "$out/"
  cp "$dir/constant/transportProperties" "$dir/constant/momentumTransport" "$out/constant/"
  cp -r "$dir/constant/polyMesh" "$out/constant/"
  # blockMesh wrote the mesh compressed (writeCompression on), at 17 digits.
  for t in $(seq 1 "$iterations"); do
    mkdir -p "$out/reference/$t"
    cp "$dir/$t/U.gz" "$dir/$t/p.gz" "$out/reference/$t/"
  done
  grep -E '^(Time|smoothSolver|DICPCG|time step)' "$dir/log.simpleFoam" > "$out/reference/log.simpleFoam"
done
