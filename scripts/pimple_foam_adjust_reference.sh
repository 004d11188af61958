#!/usr/bin/env bash
# Regenerates tests/data/pimple_foam_adjust/ with OpenFOAM v1912: the shipped
# case cases/cavity_ico (the icoFoam cavity tutorial) as a laminar pimpleFoam
# case (`pimple_cavity` of scripts/lib_openfoam.sh, one outer corrector)
# with `adjustTimeStep yes; maxCo 0.5; maxDeltaT 0.004;` and `writeControl
# adjustableRunTime; writeInterval 0.05;` to t = 0.1, 17 significant digits,
# run by blockMesh and pimpleFoam; keeps U and p of t = 0.05 and 0.1 and the
# log (its `deltaT =` lines are the time steps pimpleFoam chose).
# Needs OpenFOAM (blockMesh, pimpleFoam on the PATH); the tests themselves do not.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
out="$root/tests/data/pimple_foam_adjust"
rm -rf "$out"
work=$(cavity_copy)
pimple_cavity "$work" 1 ""
sed -i -e 's/^endTime .*/endTime         0.1;/' \
    -e 's/^writeControl .*/writeControl    adjustableRunTime;/' \
    -e 's/^writeInterval .*/writeInterval   0.05;/' \
    -e 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
printf 'adjustTimeStep  yes;\nmaxCo           0.5;\nmaxDeltaT       0.004;\n' \
    >> "$work/system/controlDict"
run_foam "$work" pimpleFoam
for t in 0.05 0.1; do
    mkdir -p "$out/$t"
    cp "$work/$t/U" "$work/$t/p" "$out/$t/"
done
cp "$work/log.pimpleFoam" "$out/"
rm -rf "$work"
echo "wrote $out"
