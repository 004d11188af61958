#!/usr/bin/env bash
# OpenFOAM's and fvpoisson's CPU solvers per iteration on one core, side by side.
#
#   benches/openfoam_cpu.sh [options] FVPOISSON [FVPOISSON_BEFORE]
#
# FVPOISSON is a release build of the fvpoisson binary (target/release/fvpoisson);
# FVPOISSON_BEFORE, when given, another build measured in the same runs (a
# "before" column). The case is the one of `cargo bench --bench cpu_solvers`: a
# mesh generator spec written by `fvpoisson convert-mesh --format binary`,
# T = 1 on xmin, 0 on xmax, zero gradient elsewhere, steady laplacianFoam.
#
# Each solver is run with a fixed number of iterations, N and 2N (tolerance
# 1e-30: no run converges), pinned to one core (`taskset -c CORE`, one rayon
# thread), by laplacianFoam (WM_PROJECT_DIR defaults to /usr/share/openfoam)
# and by each fvpoisson build, the tools in turn within each repetition (so a
# change of the machine's load reaches all columns alike). The time per
# iteration is the difference of the two runs' CPU times (user + system of
# the process, which other processes of a shared machine do not inflate) over
# the difference of their iterations: reading the mesh, assembling and the
# solver's set-up (DIC factor, GAMG agglomeration) cancel out. Each time is
# the least of the repetitions. `--threads T` adds the fvpoisson builds with
# T rayon threads, unpinned, by wall clock.
#
# Options:
#   --spec SPEC      mesh generator spec (default box:100x100x100, 1 M hex cells)
#   --core C         the core to pin to (default 1)
#   --repeat R       repetitions (default 3)
#   --threads T      also fvpoisson with T threads (wall clock)
#   --only LABEL     only the solvers whose label contains LABEL (e.g. "PCG DIC")
#   --dir DIR        where the case is written (default target/openfoam_cpu/SPEC)
set -euo pipefail

spec=box:100x100x100
core=1
repeat=3
threads=
only=
dir=
while [[ $# -gt 0 ]]; do
    case $1 in
    --spec) spec=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    --*) echo "unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 [options] FVPOISSON [FVPOISSON_BEFORE] (--help)" >&2
    exit 2
fi
builds=()
for b in "$@"; do
    [[ -x $b ]] || { echo "$b is not an executable fvpoisson build" >&2; exit 2; }
    builds+=("$(realpath "$b")")
done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat takes a positive count" >&2; exit 2; }
[[ $core =~ ^[0-9]+$ ]] || { echo "--core takes a core number" >&2; exit 2; }
[[ -z $threads || $threads =~ ^[1-9][0-9]*$ ]] || { echo "--threads takes a positive count" >&2; exit 2; }
command -v taskset > /dev/null || { echo "taskset (util-linux) is not on PATH" >&2; exit 2; }
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
openfoam=1
if ! laplacianFoam -help > /dev/null 2>&1; then
    echo "laplacianFoam is not on PATH (apt-get install openfoam): its column reads n/a" >&2
    openfoam=
fi

# label|fvSolution entry|N (the runs take N and 2N iterations)
solvers=(
    "PCG DIC|solver PCG; preconditioner DIC;|50"
    "PCG FDIC|solver PCG; preconditioner FDIC;|50"
    "PBiCGStab DIC|solver PBiCGStab; preconditioner DIC;|35"
    "smoothSolver GaussSeidel|solver smoothSolver; smoother GaussSeidel; nSweeps 1;|100"
    "GAMG GaussSeidel|solver GAMG; smoother GaussSeidel;|5"
    "GAMG DICGaussSeidel|solver GAMG; smoother DICGaussSeidel;|5"
)

dir=${dir:-target/openfoam_cpu/${spec//[^A-Za-z0-9]/_}}
if [[ ! -d $dir/constant/polyMesh ]]; then
    "${builds[0]}" convert-mesh "$spec" "$dir" --format binary > /dev/null
fi
mkdir -p "$dir/0" "$dir/system" "$dir/constant"
cat > "$dir/0/T" << 'EOF'
FoamFile { version 2.0; format ascii; class volScalarField; object T; }
dimensions [0 0 0 1 0 0 0];
internalField uniform 0;
boundaryField
{
    xmin { type fixedValue; value uniform 1; }
    xmax { type fixedValue; value uniform 0; }
    "(ymin|ymax|zmin|zmax)" { type zeroGradient; }
}
EOF
cat > "$dir/constant/transportProperties" << 'EOF'
FoamFile { version 2.0; format ascii; class dictionary; object transportProperties; }
DT DT [0 2 -1 0 0 0 0] 1;
EOF
cat > "$dir/system/controlDict" << 'EOF'
FoamFile { version 2.0; format ascii; class dictionary; object controlDict; }
application laplacianFoam; startFrom startTime; startTime 0; stopAt endTime;
endTime 1; deltaT 1; writeControl timeStep; writeInterval 1; writeFormat binary;
writePrecision 17; writeCompression off; timeFormat general; timePrecision 6;
runTimeModifiable false;
EOF
cat > "$dir/system/fvSchemes" << 'EOF'
FoamFile { version 2.0; format ascii; class dictionary; object fvSchemes; }
ddtSchemes { default steadyState; }
gradSchemes { default Gauss linear; }
divSchemes { default none; }
laplacianSchemes { default Gauss linear corrected; }
interpolationSchemes { default linear; }
snGradSchemes { default corrected; }
EOF

# run TOOL ENTRY MAXITER -> "iterations cpu_s wall_s"; TOOL is "openfoam" or
# "B:T" (build B, T threads; T = 1 pins to the core).
run() {
    local tool=$1 entry=$2 max_iter=$3 cmd
    cat > "$dir/system/fvSolution" << EOF
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers { T { $entry tolerance 1e-30; relTol 0; maxIter $max_iter; } }
SIMPLE { nNonOrthogonalCorrectors 0; }
EOF
    rm -rf "$dir/1"
    if [[ $tool == openfoam ]]; then
        cmd=(taskset -c "$core" laplacianFoam -case "$dir")
    else
        local build=${builds[${tool%%:*}]} t=${tool##*:}
        if [[ $t == 1 ]]; then
            cmd=(env RAYON_NUM_THREADS=1 taskset -c "$core" "$build" run "$dir" --device cpu --vtk none)
        else
            cmd=(env RAYON_NUM_THREADS="$t" "$build" run "$dir" --device cpu --vtk none)
        fi
    fi
    local TIMEFORMAT='%U %S %R' times
    if ! times=$( { time "${cmd[@]}" > "$dir/log.run" 2>&1; } 2>&1 ); then
        echo "failed: ${cmd[*]}: $(tail -n 3 "$dir/log.run" | tr '\n' ' ')" >&2
        echo "0 0 0"
        return
    fi
    local iterations
    iterations=$(sed -n 's/.*Solving for T.*No Iterations \([0-9]*\).*/\1/p' "$dir/log.run" |
        awk '{ s += $1 } END { print s + 0 }')
    echo "$iterations $times" | awk '{ printf "%d %.3f %.3f\n", $1, $2 + $3, $4 }'
}

tools=()
[[ -n $openfoam ]] && tools+=(openfoam)
for b in "${!builds[@]}"; do tools+=("$b:1"); done
if [[ -n $threads ]]; then
    for b in "${!builds[@]}"; do tools+=("$b:$threads"); done
fi
labels=(fvpoisson)
[[ ${#builds[@]} == 2 ]] && labels=("fvpoisson after" "fvpoisson before")
name() {
    case $1 in
    openfoam) echo "OpenFOAM v1912 (1 core, CPU)" ;;
    *:1) echo "${labels[${1%%:*}]} (1 core, CPU)" ;;
    *) echo "${labels[${1%%:*}]} (${1##*:} threads, wall)" ;;
    esac
}

echo "$spec, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start;"
echo "ms per iteration = (time at 2N - time at N) / (iterations at 2N - at N), least of $repeat"
header="| solver | iterations N / 2N |"
rule="|---|---|"
for tool in "${tools[@]}"; do
    header+=" $(name "$tool") |"
    rule+="---|"
done
echo "$header"
echo "$rule"
for line in "${solvers[@]}"; do
    IFS='|' read -r label entry n <<< "$line"
    [[ -n $only && $label != *"$only"* ]] && continue
    declare -A best=() its=()
    for ((k = 0; k < repeat; k++)); do
        for tool in "${tools[@]}"; do
            for m in "$n" $((2 * n)); do
                read -r it cpu wall <<< "$(run "$tool" "$entry" "$m")"
                t=$cpu
                [[ $tool == *:* && ${tool##*:} != 1 ]] && t=$wall
                key="$tool/$m"
                if [[ -z ${best[$key]:-} ]] || awk "BEGIN { exit !($t < ${best[$key]}) }"; then
                    best[$key]=$t
                fi
                its[$key]=$it
            done
        done
    done
    row="| $label |"
    counts=""
    cells=""
    for tool in "${tools[@]}"; do
        a=${its[$tool/$n]} b=${its[$tool/$((2 * n))]}
        [[ $counts == *"$a / $b"* ]] || counts+="${counts:+, }$a / $b"
        cells+=" $(awk -v t1="${best[$tool/$n]}" -v t2="${best[$tool/$((2 * n))]}" -v a="$a" -v b="$b" \
            'BEGIN { if (b > a) printf "%.2f ms/it", 1e3 * (t2 - t1) / (b - a); else printf "n/a" }') |"
    done
    echo "$row $counts |$cells"
    unset best its
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
