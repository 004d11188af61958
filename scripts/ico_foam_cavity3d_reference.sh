#!/usr/bin/env bash
# Regenerates tests/data/ico_foam_cavity3d/ with OpenFOAM v1912: the shipped
# case cases/cavity3d_ico (3-D lid-driven cavity, PISO, 5 PBiCGStab/DILU
# iterations for U, PCG/DIC for p) coarsened to 8 x 8 x 8 cells, 4 steps, run by blockMesh and
# icoFoam with 17 significant digits; keeps U and p at t = 0.002 and the log.
# Needs OpenFOAM (blockMesh, icoFoam on the PATH); the tests themselves do not.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/tests/data/ico_foam_cavity3d"
work=$(mktemp -d)
cp -r "$root/cases/cavity3d_ico/." "$work/"
rm -rf "$work/constant/polyMesh"
sed -i 's/(100 100 100)/(8 8 8)/' "$work/system/blockMeshDict"
sed -i -e 's/^endTime .*/endTime         0.002;/' \
    -e 's/^writeInterval .*/writeInterval   4;/' \
    -e 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
(cd "$work" && blockMesh > log.blockMesh 2>&1 && icoFoam > log.icoFoam 2>&1) \
    || { tail -30 "$work"/log.*; exit 1; }
rm -rf "$out"
mkdir -p "$out/0.002"
cp "$work"/0.002/{U,p} "$out/0.002/"
cp "$work/log.icoFoam" "$out/"
rm -rf "$work"
echo "wrote $out"
