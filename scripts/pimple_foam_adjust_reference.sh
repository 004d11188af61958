#!/usr/bin/env bash
# Regenerates tests/data/pimple_foam_adjust/ with OpenFOAM v1912: the shipped
# case cases/cavity_ico (the icoFoam cavity tutorial) as a laminar pimpleFoam
# case (as scripts/pimple_foam_reference.sh makes it, one outer corrector)
# with `adjustTimeStep yes; maxCo 0.5; maxDeltaT 0.004;` and `writeControl
# adjustableRunTime; writeInterval 0.05;` to t = 0.1, 17 significant digits,
# run by blockMesh and pimpleFoam; keeps U and p of t = 0.05 and 0.1 and the
# log (its `deltaT =` lines are the time steps pimpleFoam chose).
# Needs OpenFOAM (blockMesh, pimpleFoam on the PATH); the tests themselves do not.
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/tests/data/pimple_foam_adjust"
rm -rf "$out"
work=$(mktemp -d)
cp -r "$root/cases/cavity_ico/." "$work/"
rm -rf "$work/constant/polyMesh" "$work/results"
sed -i -e 's/^application .*/application     pimpleFoam;/' \
    -e 's/^endTime .*/endTime         0.1;/' \
    -e 's/^writeControl .*/writeControl    adjustableRunTime;/' \
    -e 's/^writeInterval .*/writeInterval   0.05;/' \
    -e 's/^writePrecision .*/writePrecision  17;/' "$work/system/controlDict"
printf 'adjustTimeStep  yes;\nmaxCo           0.5;\nmaxDeltaT       0.004;\n' \
    >> "$work/system/controlDict"
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
    nOuterCorrectors 1;
    nCorrectors 2;
    nNonOrthogonalCorrectors 0;
    pRefCell 0;
    pRefValue 0;
}
DICT
sed -i 's/^\( *div(phi,U) *Gauss linear;\)/\1\n    div((nuEff*dev2(T(grad(U))))) Gauss linear;/' \
    "$work/system/fvSchemes"
sed -i 's/^nu .*/transportModel  Newtonian;\n&/' "$work/constant/transportProperties"
printf 'FoamFile { version 2.0; format ascii; class dictionary; object turbulenceProperties; }\nsimulationType laminar;\n' \
    > "$work/constant/turbulenceProperties"
(cd "$work" && blockMesh > log.blockMesh 2>&1 && pimpleFoam > log.pimpleFoam 2>&1) \
    || { tail -n 30 "$work"/log.*; exit 1; }
for t in 0.05 0.1; do
    mkdir -p "$out/$t"
    cp "$work/$t/U" "$work/$t/p" "$out/$t/"
done
cp "$work/log.pimpleFoam" "$out/"
rm -rf "$work"
echo "wrote $out"
