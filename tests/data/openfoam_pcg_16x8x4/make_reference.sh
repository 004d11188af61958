#!/bin/sh
# Regenerates the OpenFOAM v1912 reference for tests/solve_openfoam.rs: laplacianFoam
# (steady, one PCG solve of T, tolerance 1e-10, relTol 0) on a 16x8x4 blockMesh of the
# unit cube, with preconditioners DIC, diagonal and none. Writes log.<precond> (the
# solver line) and T.<precond> (the solution, writePrecision 17).
set -e
export WM_PROJECT_DIR=/usr/share/openfoam
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cp -r "$here/case/." "$work"
cd "$work"
blockMesh > log.blockMesh 2>&1
for precond in DIC diagonal none; do
    cat > system/fvSolution <<EOD
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers { T { solver PCG; preconditioner $precond; tolerance 1e-10; relTol 0; maxIter 1000; } }
SIMPLE { nNonOrthogonalCorrectors 0; }
EOD
    rm -rf 1
    laplacianFoam > log 2>&1
    grep "Solving for T" log > "$here/log.$precond"
    cp 1/T "$here/T.$precond"
done
rm -rf "$work"
