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
root=$(cd "$(dirname "$0")/.." && pwd)
fvpoisson=${FVPOISSON:-$root/target/release/fvpoisson}
out="$root/tests/data/cavity3d_validation"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/cases/cavity3d_validation/." "$work/"
rm -rf "$work/constant/polyMesh" "$work/results" "$work/postProcessing"
sed -i 's/(48 48 48)/(16 16 16)/' "$work/system/blockMeshDict"
sed -i -e 's/^endTime .*/endTime         200;/' \
    -e 's/^writeInterval .*/writeInterval   100;/' "$work/system/controlDict"
"$fvpoisson" run "$work" --device cpu --vtk none > "$work/log.run"
mkdir -p "$out"
"$fvpoisson" cavity-profiles "$work" --csv "$out/coarse16.csv"
echo "wrote $out/coarse16.csv"
