#!/usr/bin/env bash
# Regenerates tests/data/ico_foam_cavity/ with OpenFOAM v1912: the shipped case
# cases/cavity_ico (the icoFoam cavity tutorial) run by blockMesh and icoFoam,
# written with 17 significant digits; keeps the endTime fields U, p, phi and the log,
# and the solverInfo.dat of `#includeFunc residuals` over three steps.
# Needs OpenFOAM (blockMesh, icoFoam on the PATH); the tests themselves do not.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
out="$root/tests/data/ico_foam_cavity"
work=$(cavity_copy)
sed -i 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
run_foam "$work" icoFoam
rm -rf "$out"
mkdir -p "$out/0.5"
cp "$work"/0.5/{U,p,phi} "$out/0.5/"
cp "$work/log.icoFoam" "$out/"
rm -rf "$work"

# The residuals function object's file over the first three steps.
work=$(cavity_copy)
sed -i 's/^endTime .*/endTime         0.015;/' "$work/system/controlDict"
printf 'functions\n{\n    #includeFunc residuals\n}\n' >> "$work/system/controlDict"
run_foam "$work" icoFoam
cp "$work/postProcessing/residuals/0/solverInfo.dat" "$out/"
rm -rf "$work"
echo "wrote $out"
