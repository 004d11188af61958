# Shared by the scripts that regenerate test data with OpenFOAM v1912; source
# it after `set -euo pipefail`. Sets WM_PROJECT_DIR (where unset) and `root`,
# the repository.
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Prints the path of a new temporary copy of the shipped case cases/cavity_ico
# (the icoFoam cavity tutorial) without its mesh and results.
cavity_copy() {
    local work
    work=$(mktemp -d)
    cp -r "$root/cases/cavity_ico/." "$work/"
    rm -rf "$work/constant/polyMesh" "$work/results"
    echo "$work"
}

# Runs blockMesh, then the solver $2, in the case directory $1 (logs
# log.blockMesh and log.$2 there); on a failure prints the logs' ends and exits.
run_foam() {
    local work=$1 solver=$2
    (cd "$work" && blockMesh > log.blockMesh 2>&1 && "$solver" > "log.$solver" 2>&1) \
        || { tail -n 30 "$work"/log.*; exit 1; }
}

# Turns the cavity copy $1 into a laminar pimpleFoam case (as tests/ico_foam.rs
# writes it): the application, an fvSolution with nOuterCorrectors $2, two
# correctors and the relaxationFactors block $3 (may be empty), the divergence
# scheme of nuEff's stress, a Newtonian transport model and laminar
# turbulenceProperties.
pimple_cavity() {
    local work=$1 outer=$2 relaxation=$3
    sed -i 's/^application .*/application     pimpleFoam;/' "$work/system/controlDict"
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
}

# Prints the path of a new temporary copy of the shipped case
# cases/cavity3d_validation (the lid-driven cube) without its results,
# coarsened to 16³ cells, run to t = $1 and written every $2.
cavity3d_coarse_copy() {
    local work
    work=$(mktemp -d)
    cp -r "$root/cases/cavity3d_validation/." "$work/"
    rm -rf "$work/constant/polyMesh" "$work/results" "$work/postProcessing"
    sed -i 's/(48 48 48)/(16 16 16)/' "$work/system/blockMeshDict"
    sed -i -e "s/^endTime .*/endTime         $1;/" \
        -e "s/^writeInterval .*/writeInterval   $2;/" "$work/system/controlDict"
    echo "$work"
}
