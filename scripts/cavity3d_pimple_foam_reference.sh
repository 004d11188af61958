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
work=$(cavity3d_coarse_copy 50 10)
trap 'rm -rf "$work"' EXIT
run_foam "$work" pimpleFoam
mkdir -p "$out"
"$fvpoisson" cavity-profiles "$work" --csv "$out/pimple_foam16_t50.csv"
echo "wrote $out/pimple_foam16_t50.csv"
