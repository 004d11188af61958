#!/bin/bash
# Regenerates the OpenFOAM reference meshes and geometry in this directory.
# Needs OpenFOAM v1912 (Debian package `openfoam`) and gmsh 4.8; see docs/src/getting-started.md.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
cd "$(dirname "$0")"
rm -rf ./*/0  # polyDualMesh would try to map old fields

# Cell centres (0/C, boundary values = face centres) and volumes (0/V) at 17 digits,
# plus checkMesh's report.
reference() {
    local case=$1
    rm -rf "$case/0" "$case"/constant/{C,Cx,Cy,Cz,V}*
    mkdir "$case/0"
    postProcess -case "$case" -func writeCellCentres > /dev/null
    postProcess -case "$case" -func writeCellVolumes > /dev/null
    rm -f "$case"/0/Cx* "$case"/0/Cy* "$case"/0/Cz*
    checkMesh -case "$case" > "$case/checkMesh.log" || true
}

# (a) cavity: icoFoam tutorial, 2-D, 20x20x1 hexes, empty front and back.
blockMesh -case cavity > /dev/null
reference cavity

# (b) warped: 8 blocks with moved vertices (non-planar faces, non-orthogonal).
blockMesh -case warped > /dev/null
reference warped

# (c) polydual: gmsh tets of a unit cube, then polyDualMesh -> general polyhedra.
rm -rf polydual/constant/polyMesh
gmsh -3 -format msh22 -o polydual/cube.msh polydual/cube.geo > /dev/null
gmshToFoam -case polydual polydual/cube.msh > /dev/null
rm -f polydual/cube.msh
polyDualMesh -case polydual 60 -overwrite > /dev/null
rm -f ./*.obj  # feature edges it writes into the working directory
rm -rf polydual/constant/polyMesh/{sets,cellZones,faceZones,pointZones,pointProcAddressing,faceProcAddressing,cellProcAddressing,cellZones.gz}
reference polydual

# (d) (b)'s mesh converted by foamFormatConvert: warped_binary with writeFormat binary
# (v1912 refuses to compress binary files: "Disabled binary format compression"), and
# warped_gz with writeFormat ascii and writeCompression on (every file gets .gz).
for case in warped_binary warped_gz; do
    rm -rf $case/constant/polyMesh
    mkdir -p $case/constant
    cp -r warped/constant/polyMesh $case/constant/
    foamFormatConvert -case $case -constant > /dev/null
    reference $case
done
rm -f warped_gz/constant/polyMesh/{points,faces,owner,neighbour}
