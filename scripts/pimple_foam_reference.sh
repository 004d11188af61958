#!/usr/bin/env bash
# Regenerates tests/data/pimple_foam_cavity/ with OpenFOAM v1912: the shipped
# case cases/cavity_ico (the icoFoam cavity tutorial) turned into a laminar
# pimpleFoam case (the fvSolution, fvSchemes, transportModel and
# turbulenceProperties below, which tests/ico_foam.rs writes the same way), run
# by blockMesh and pimpleFoam
# for 10 steps of 0.005 s, written every 5 steps with 17 significant digits:
#   outer1/  nOuterCorrectors 1, no relaxation
#   outer2/  nOuterCorrectors 2, U 0.9 / UFinal 1, p 0.7 / pFinal 1
# keeps U and p of t = 0.025 and 0.05 and the log of each run.
# Needs OpenFOAM (blockMesh, pimpleFoam on the PATH); the tests themselves do not.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/tests/data/pimple_foam_cavity"
rm -rf "$out"

run_case() { # name nOuterCorrectors relaxationFactors
    local name=$1 outer=$2 relaxation=$3 work
    work=$(mktemp -d)
    cp -r "$root/cases/cavity_ico/." "$work/"
    rm -rf "$work/constant/polyMesh" "$work/results"
    sed -i -e 's/^application .*/application     pimpleFoam;/' \
        -e 's/^endTime .*/endTime         0.05;/' \
        -e 's/^writeInterval .*/writeInterval   5;/' \
        -e 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
    cat > "$work/system/fvSolution" <<DICT
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers
{
    p { solver PCG; preconditioner DIC; tolerance 1e-06; relTol 0.05; }
    pFinal { \$p; relTol 0; }
    "(U|UFinal)" { solver smoothSolver; smoother symGaussSeidel; tolerance 1e-05; relTol 0; }
}
PIMPLE
{
    nOuterCorrectors $outer;
    nCorrectors 2;
    nNonOrthogonalCorrectors 0;
    pRefCell 0;
    pRefValue 0;
}
$relaxation
DICT
    sed -i 's/^\( *div(phi,U) *Gauss linear;\)/\1\n    div((nuEff*dev2(T(grad(U))))) Gauss linear;/' \
        "$work/system/fvSchemes"
    sed -i 's/^nu .*/transportModel  Newtonian;\n&/' "$work/constant/transportProperties"
    printf 'FoamFile { version 2.0; format ascii; class dictionary; object turbulenceProperties; }\nsimulationType laminar;\n' \
        > "$work/constant/turbulenceProperties"
    (cd "$work" && blockMesh > log.blockMesh 2>&1 && pimpleFoam > log.pimpleFoam 2>&1) \
        || { tail -n 30 "$work"/log.*; exit 1; }
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
