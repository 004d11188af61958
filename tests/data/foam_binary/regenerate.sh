#!/bin/sh
# Regenerates T: OpenFOAM v1912's laplacianFoam run of cases/laplacian_foam_steady
# with writeFormat binary, its field at time 10 (binary internalField and patch values).
# Needs OpenFOAM (WM_PROJECT_DIR=/usr/share/openfoam on Debian); the tests do not.
set -e
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cp -r "$here/../../../cases/laplacian_foam_steady/." "$work"
sed -i 's/^writeFormat .*/writeFormat     binary;/; s/^writeInterval .*/writeInterval   10;/; s/^endTime .*/endTime         10;/' "$work/system/controlDict"
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
(cd "$work" && laplacianFoam > log.laplacianFoam 2>&1)
cp "$work/10/T" "$here/T"
rm -rf "$work"
