#!/usr/bin/env bash
# Regenerates tests/data/block_mesh/*/polyMesh with OpenFOAM's blockMesh (v1912):
# each case directory holds a blockMeshDict; the mesh is written next to it with
# 17 significant digits, so that tests compare point positions to round-off.
# Needs OpenFOAM (blockMesh on the PATH); the tests themselves do not.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "$0")/.." && pwd)
for case in "$root"/tests/data/block_mesh/*/; do
    work=$(mktemp -d)
    mkdir -p "$work/system" "$work/constant"
    cp "$case/blockMeshDict" "$work/system/"
    cat > "$work/system/controlDict" <<'DICT'
FoamFile { version 2.0; format ascii; class dictionary; object controlDict; }
application blockMesh; startFrom startTime; startTime 0; stopAt endTime; endTime 1;
deltaT 1; writeControl timeStep; writeInterval 1; writeFormat ascii;
writePrecision 17; writeCompression off; timeFormat general; timePrecision 6;
DICT
    (cd "$work" && blockMesh > log.blockMesh 2>&1) || { cat "$work/log.blockMesh"; exit 1; }
    rm -rf "$case/polyMesh"
    cp -r "$work/constant/polyMesh" "$case/polyMesh"
    rm -rf "$work"
    echo "wrote ${case}polyMesh"
done
