#!/usr/bin/env bash
# Regenerates tests/data/cavity3d_validation/coarse16.csv: the steady
# centreline profiles of cases/cavity3d_validation coarsened to 16³ cells
# (Re = 1000, pimpleFoam as shipped), run by fvpoisson to t = 200, far past
# its steady state (the change of the sampled profiles over the last 100 time
# units is printed; it must be round-off-small), sampled by `fvpoisson
# cavity-profiles --csv`. tests/cavity3d_validation.rs runs the same case to
# a shorter time and compares. Needs the fvpoisson binary (FVPOISSON, default
# target/release/fvpoisson); a minute or two.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
fvpoisson=${FVPOISSON:-$root/target/release/fvpoisson}
out="$root/tests/data/cavity3d_validation"
work=$(cavity3d_coarse_copy 200 100)
trap 'rm -rf "$work"' EXIT
"$fvpoisson" run "$work" --device cpu --vtk none > "$work/log.run"
mkdir -p "$out"
"$fvpoisson" cavity-profiles "$work" --csv "$out/coarse16.csv"
echo "wrote $out/coarse16.csv"
