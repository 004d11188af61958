#!/usr/bin/env bash
# Regenerates tests/data/pimple_foam_cavity/ with OpenFOAM v1912: the shipped
# case cases/cavity_ico (the icoFoam cavity tutorial) turned into a laminar
# pimpleFoam case (`pimple_cavity` of scripts/lib_openfoam.sh, which
# tests/ico_foam.rs writes the same way), run by blockMesh and pimpleFoam
# for 10 steps of 0.005 s, written every 5 steps with 17 significant digits:
#   outer1/  nOuterCorrectors 1, no relaxation
#   outer2/  nOuterCorrectors 2, U 0.9 / UFinal 1, p 0.7 / pFinal 1
# keeps U and p of t = 0.025 and 0.05 and the log of each run.
# Needs OpenFOAM (blockMesh, pimpleFoam on the PATH); the tests themselves do not.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
out="$root/tests/data/pimple_foam_cavity"
rm -rf "$out"

run_case() { # name nOuterCorrectors relaxationFactors
    local name=$1 work
    work=$(cavity_copy)
    pimple_cavity "$work" "$2" "$3"
    sed -i -e 's/^endTime .*/endTime         0.05;/' \
        -e 's/^writeInterval .*/writeInterval   5;/' \
        -e 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
    run_foam "$work" pimpleFoam
    for t in 0.025 0.05; do
        mkdir -p "$out/$name/$t"
        cp "$work/$t/U" "$work/$t/p" "$out/$name/$t/"
    done
    cp "$work/log.pimpleFoam" "$out/$name/"
    rm -rf "$work"
}

run_case outer1 1 ""
run_case outer2 2 "relaxationFactors
{
    equations { U 0.9; UFinal 1; }
    fields { p 0.7; pFinal 1; }
}"
echo "wrote $out"
