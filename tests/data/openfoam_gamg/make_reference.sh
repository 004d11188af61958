#!/bin/sh
# Regenerates the OpenFOAM v1912 GAMG reference of tests/gamg_openfoam.rs:
# laplacianFoam, steady, `solver GAMG` with OpenFOAM's defaults but the smoother,
# tolerance 1e-8, relTol 0, on the cases under cases/:
#  - box32: `fvpoisson convert-mesh box:32x32x32` (T = 1, 0, 0.25 on xmin, xmax,
#    ymin; zero gradient elsewhere), one solve;
#  - tet: `fvpoisson convert-mesh box:16x16x16:tet:perturb=0.2` (24576 perturbed
#    tets; T = 1 on xmin, 0 on xmax), nNonOrthogonalCorrectors 2: 3 solves;
#  - flange: the laplacianFoam/flange tutorial's mesh (ansysToFoam flange.ans
#    -scale 0.001, rewritten by `fvpoisson convert-mesh --format binary --compress`,
#    committed) and boundary conditions, nNonOrthogonalCorrectors 2: 3 solves;
# for each smoother GaussSeidel, symGaussSeidel, DIC, DICGaussSeidel. Writes
# log.<case>.<smoother>: OpenFOAM's "Solving for T" lines.
# FVPOISSON: the fvpoisson binary (default target/release/fvpoisson).
# REMESH_FLANGE=1 also regenerates the committed flange mesh from the tutorial.
set -e
export WM_PROJECT_DIR=/usr/share/openfoam
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
fvpoisson=${FVPOISSON:-$root/target/release/fvpoisson}
smoothers=${SMOOTHERS:-GaussSeidel symGaussSeidel DIC DICGaussSeidel}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -n "$REMESH_FLANGE" ]; then
    tutorial=/usr/share/doc/openfoam-examples/examples/basic/laplacianFoam/flange
    mkdir -p "$work/ansys"
    cp -r "$tutorial/." "$work/ansys"
    chmod -R u+w "$work/ansys"
    (cd "$work/ansys" && gunzip -f flange.ans.gz && ansysToFoam flange.ans -scale 0.001 > log 2>&1)
    "$fvpoisson" convert-mesh "$work/ansys" "$work/flange_mesh" --format binary --compress > /dev/null
    rm -f "$here/cases/flange/constant/polyMesh/"*
    cp "$work/flange_mesh/constant/polyMesh/"* "$here/cases/flange/constant/polyMesh/"
fi

for case in box32 tet flange; do
    case $case in
        box32) spec=box:32x32x32; nonorth=0 ;;
        tet) spec=box:16x16x16:tet:perturb=0.2; nonorth=2 ;;
        flange) spec=; nonorth=2 ;;
    esac
    mkdir -p "$work/$case"
    [ -z "$spec" ] || "$fvpoisson" convert-mesh "$spec" "$work/$case" > /dev/null 2>&1
    cp -r "$here/cases/$case/." "$work/$case"
    for smoother in $smoothers; do
        cat > "$work/$case/system/fvSolution" <<EOD
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers { T { solver GAMG; smoother $smoother; tolerance 1e-8; relTol 0; } }
SIMPLE { nNonOrthogonalCorrectors $nonorth; }
EOD
        (cd "$work/$case" && rm -rf 1 && laplacianFoam > log 2>&1)
        grep "Solving for T" "$work/$case/log" > "$here/log.$case.$smoother"
    done
done
