#!/usr/bin/env bash
# Regenerates the OpenFOAM v1912 reference of tests/parallel_openfoam.rs
# (Open MPI's mpirun, decomposePar and laplacianFoam on PATH):
#  - cellDist.<case>.<nx>x<ny>x<nz>: decomposePar -cellDist's cell → processor
#    map with `method simple; simpleCoeffs { n (nx ny nz); delta 0.001; }`,
#    one digit per cell, 64 cells a line, for box32 (32³ unit cube) with n
#    (2 1 1) and (4 1 1) and graded (30x17x11, simpleGrading (3 0.5 2)) with
#    (4 1 1), (3 1 1), (7 1 1), (2 2 1), (3 1 2), (2 2 2);
#  - graded_2x2x1/processorK/constant/polyMesh/cellProcAddressing: decomposePar's
#    own addressing files of graded with n (2 2 1);
#  - log.np<N>.<precond>: `mpirun -np N laplacianFoam -parallel` (steady, one PCG
#    solve of T, tolerance 1e-6, relTol 0) on box32 decomposed with n (N 1 1),
#    N = 2, 4, preconditioner DIC and FDIC: the "Solving for T" line;
#  - history.np<N>.<precond>: "k residual" for k = 1.. iterations − 1, the final
#    residual of the same run with maxIter k (PCG prints no per-iteration
#    residuals; its iterates do not depend on maxIter);
#  - log.np2.PBiCGStab.DIC, history.np2.PBiCGStab.DIC: the same with PBiCGStab and
#    DIC on 2 processors.
# PBICGSTAB_ONLY=1 skips the PCG runs (the decompositions are always rewritten).
# writePrecision 17 makes OpenFOAM print residuals with 17 digits.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib_openfoam.sh"
here=$root/tests/data/openfoam_parallel
mpirun_args=(--oversubscribe)
[ "$(id -u)" != 0 ] || mpirun_args+=(--allow-run-as-root)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# decompose CASE_DIR NX NY NZ [extra decomposePar options]
decompose() {
    local dir=$1 nx=$2 ny=$3 nz=$4
    shift 4
    cat > "$dir/system/decomposeParDict" <<EOD
FoamFile { version 2.0; format ascii; class dictionary; object decomposeParDict; }
numberOfSubdomains $((nx * ny * nz));
method simple;
simpleCoeffs { n ($nx $ny $nz); delta 0.001; }
EOD
    (cd "$dir" && rm -f 0/cellDist && decomposePar -force "$@" > log.decomposePar 2>&1) \
        || { tail -n 30 "$dir/log.decomposePar"; exit 1; }
}

# The internalField of CASE_DIR/0/cellDist as digits, 64 a line.
cell_dist() {
    awk '/^internalField/ {on = 1; next} on && /^\(/ {list = 1; next}
         list && /^\)/ {exit} list {printf "%d", $1}' "$1/0/cellDist" | fold -w 64
    echo
}

for case in box32 graded; do
    cp -r "$here/$case" "$work/$case"
    (cd "$work/$case" && blockMesh > log.blockMesh 2>&1) || { tail "$work/$case/log.blockMesh"; exit 1; }
done
for n in "2 1 1" "4 1 1"; do
    decompose "$work/box32" $n -cellDist
    cell_dist "$work/box32" > "$here/cellDist.box32.${n// /x}"
done
for n in "4 1 1" "3 1 1" "7 1 1" "2 2 1" "3 1 2" "2 2 2"; do
    decompose "$work/graded" $n -cellDist
    cell_dist "$work/graded" > "$here/cellDist.graded.${n// /x}"
done
decompose "$work/graded" 2 2 1
for k in 0 1 2 3; do
    mkdir -p "$here/graded_2x2x1/processor$k/constant/polyMesh"
    cp "$work/graded/processor$k/constant/polyMesh/cellProcAddressing" \
        "$here/graded_2x2x1/processor$k/constant/polyMesh/"
done

box=$work/box32
# reference SOLVER PRECOND RANKS NAME: log.np<RANKS>.<NAME> and history.np<RANKS>.<NAME>.
reference() {
    local solver=$1 precond=$2 ranks=$3 name=$4 line iterations residual k
    solve() { # maxIter
        sed -i "s/solver [A-Za-z]*;/solver $solver;/; s/preconditioner [A-Za-z]*;/preconditioner $precond;/; s/maxIter [0-9]*;/maxIter $1;/" \
            "$box/system/fvSolution"
        (cd "$box" && rm -rf processor*/1 \
            && mpirun "${mpirun_args[@]}" -np "$ranks" laplacianFoam -parallel > log 2>&1) \
            || { tail -n 30 "$box/log"; exit 1; }
        grep "Solving for T" "$box/log"
    }
    line=$(solve 1000)
    echo "$line" > "$here/log.np$ranks.$name"
    iterations=${line##*No Iterations }
    : > "$here/history.np$ranks.$name"
    for ((k = 1; k < iterations; k++)); do
        line=$(solve $k)
        residual=${line#*Final residual = }
        echo "$k ${residual%%,*}" >> "$here/history.np$ranks.$name"
    done
}
for ranks in 2 4; do
    decompose "$box" "$ranks" 1 1
    [ -n "${PBICGSTAB_ONLY:-}" ] || for precond in DIC FDIC; do
        reference PCG $precond $ranks $precond
    done
    [ "$ranks" != 2 ] || reference PBiCGStab DIC 2 PBiCGStab.DIC
done
