#!/usr/bin/env bash
# Regenerates tests/data/ico_foam_cavity_precision10/log.icoFoam with OpenFOAM
# v1912: the shipped cavity tutorial cases/cavity_ico, two steps (endTime 0.01)
# with writePrecision 10, whose log prints every number with 10 significant
# digits. Needs OpenFOAM (blockMesh, icoFoam on the PATH); the tests do not.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/tests/data/ico_foam_cavity_precision10"
work=$(mktemp -d)
cp -r "$root/cases/cavity_ico/." "$work/"
sed -i -e 's/^endTime .*/endTime         0.01;/' \
    -e 's/^writePrecision .*/writePrecision  10;/' "$work/system/controlDict"
(cd "$work" && blockMesh > log.blockMesh 2>&1 && icoFoam > log.icoFoam 2>&1) \
    || { tail -30 "$work"/log.*; exit 1; }
mkdir -p "$out"
# The header's host, process and temporary directory say nothing of the case.
sed -e 's|^Case   : .*|Case   : cavity_ico (endTime 0.01, writePrecision 10)|' \
    -e 's|^Host   : .*|Host   : -|' -e 's|^PID    : .*|PID    : -|' \
    "$work/log.icoFoam" > "$out/log.icoFoam"
rm -rf "$work"
echo "wrote $out"
