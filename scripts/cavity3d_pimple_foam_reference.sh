#!/usr/bin/env bash
# Regenerates tests/data/cavity3d_validation/pimple_foam16_t50.csv with
# OpenFOAM v1912: cases/cavity3d_validation coarsened to 16³ cells, run by
# blockMesh and pimpleFoam from rest to t = 50 (as tests/cavity3d_validation.rs
# runs it: writes every 10), its centreline profiles at t = 50 sampled by
# `fvpoisson cavity-profiles --csv` (FVPOISSON, default
# target/release/fvpoisson). Needs OpenFOAM and the fvpoisson binary; the
# tests need neither.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
fvpoisson=${FVPOISSON:-$root/target/release/fvpoisson}
out="$root/tests/data/cavity3d_validation"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/cases/cavity3d_validation/." "$work/"
rm -rf "$work/constant/polyMesh" "$work/results" "$work/postProcessing"
sed -i 's/(48 48 48)/(16 16 16)/' "$work/system/blockMeshDict"
sed -i -e 's/^endTime .*/endTime         50;/' \
    -e 's/^writeInterval .*/writeInterval   10;/' "$work/system/controlDict"
run_foam "$work" pimpleFoam
mkdir -p "$out"
"$fvpoisson" cavity-profiles "$work" --csv "$out/pimple_foam16_t50.csv"
echo "wrote $out/pimple_foam16_t50.csv"
