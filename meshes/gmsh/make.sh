#!/bin/sh
# Regenerates the .msh files from the .geo scripts with gmsh 4.8, and the reference
# numbers (OpenFOAM gmshToFoam + checkMesh of each MSH 2.2 file) in *.foam.txt.
# Run from this directory: sh make.sh
set -e
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
msh() { # geo, suffix, gmsh format options
    gmsh -3 "$1.geo" -o "$1$2.msh" $3 > /dev/null
}
msh tet_cube .v41 "-format msh41"
msh tet_cube .v41bin "-format msh41 -bin"
msh tet_cube .v22 "-format msh22"
msh hex_box .v41 "-format msh41"
msh hex_box .v22 "-format msh22"
msh prism_wedge .v41bin "-format msh41 -bin"
msh prism_wedge .v22 "-format msh22"
msh pyramid_hybrid .v41 "-format msh41"
msh pyramid_hybrid .v22 "-format msh22"
for m in tet_cube hex_box prism_wedge pyramid_hybrid; do
    case=$(mktemp -d)
    mkdir -p "$case/system" "$case/constant"
    cat > "$case/system/controlDict" <<'DICT'
FoamFile { version 2.0; format ascii; class dictionary; object controlDict; }
application none; startFrom startTime; startTime 0; stopAt endTime; endTime 1;
deltaT 1; writeControl timeStep; writeInterval 1; writeFormat ascii;
writePrecision 17; writeCompression off; timeFormat general; timePrecision 6;
DICT
    echo "FoamFile { version 2.0; format ascii; class dictionary; object fvSchemes; }
ddtSchemes {} gradSchemes {} divSchemes {} laplacianSchemes {} interpolationSchemes {} snGradSchemes {}" \
        > "$case/system/fvSchemes"
    echo "FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }" > "$case/system/fvSolution"
    gmshToFoam -case "$case" "$m.v22.msh" > "$case/gmshToFoam.log" 2>&1
    checkMesh -case "$case" > "$case/checkMesh.log" 2>&1 || true
    # Keep the numbers the tests compare: cell/face counts, cell shapes, patch sizes.
    {
        echo "# gmshToFoam $m.v22.msh; checkMesh (OpenFOAM v1912), numbers kept by make.sh"
        grep -E '^ +(points|faces|internal faces|cells|boundary patches): ' "$case/checkMesh.log"
        grep -E '^ +(hexahedra|prisms|wedges|pyramids|tet wedges|tetrahedra|polyhedra): ' "$case/checkMesh.log"
        sed -n '/Checking patch topology/,/^$/p' "$case/checkMesh.log" | grep -E '^ +[A-Za-z]+ +[0-9]+ +[0-9]+'
        grep -E 'Total volume' "$case/checkMesh.log"
    } > "$m.foam.txt"
    rm -rf "$case"
done
