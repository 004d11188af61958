#!/usr/bin/env bash
# OpenFOAM's and fvpoisson's CPU solvers side by side: per iteration on one
# core, and the time to a tolerance.
#
#   benches/openfoam_cpu.sh [options] FVPOISSON [FVPOISSON_BEFORE]
#
# FVPOISSON is a release build of the fvpoisson binary (target/release/fvpoisson);
# FVPOISSON_BEFORE, when given, another build measured in the same runs (a
# "before" column). The case is the one of `cargo bench --bench cpu_solvers`: a
# mesh generator spec written by `fvpoisson convert-mesh --format binary`,
# T = 1 on xmin, 0 on xmax, zero gradient elsewhere, steady laplacianFoam.
# laplacianFoam is the one on PATH (WM_PROJECT_DIR defaults to
# /usr/share/openfoam), or, with `--openfoam DIR`, that of a bundle made by
# benches/openfoam_bundle.sh where OpenFOAM is installed, which runs where it
# is not. OpenFOAM runs on one core (it is serial without MPI); each fvpoisson
# build on one core and, with `--threads T`, on T rayon threads (unpinned,
# wall clock). Within each repetition the tools run in turn, so a change of
# the machine's load reaches all columns alike. The output starts with the
# core count (nproc), the CPU model and the load average.
#
# Per iteration: each solver is run with a fixed number of iterations, N and
# 2N (tolerance 1e-30: no run converges), pinned to one core (`taskset -c
# CORE`, one rayon thread). The time per iteration is the difference of the
# two runs' CPU times (user + system of the process, which other processes of
# a shared machine do not inflate) over the difference of their iterations:
# reading the mesh, assembling and the solver's set-up (DIC factor, GAMG
# agglomeration) cancel out. Each time is the least of the repetitions.
#
# Time to a tolerance: each solver is run to `tolerance 1e-6; relTol 0`
# (maxIter 1000, OpenFOAM's default; GAMG with OpenFOAM's defaults but the
# smoother, which fvpoisson's CPU runs as OpenFOAM's GAMG, solve::gamg),
# giving its iterations (GAMG: cycles) and the solve's wall time: the wall
# time of that run less that of a run of `solver PCG; preconditioner DIC;
# tolerance 10`, which computes the initial residual and stops, with neither
# set-up nor iteration, in both tools. The difference leaves out reading the
# mesh, assembling and writing, and holds the set-up (DIC factor, GAMG
# agglomeration and coarse matrices) and the iterations. (A `maxIter 0` run
# is no such baseline: OpenFOAM v1912 then skips the solve, initial residual
# included, where fvpoisson computes the residual and sets GAMG up.) Each
# time, the baseline's too, is the least of the repetitions. The
# smoothSolver is left out of this table: Gauss-Seidel alone takes far more
# than maxIter sweeps to 1e-6 on these meshes.
#
# Options:
#   --spec SPEC      mesh generator spec (default box:100x100x100, 1 M hex cells)
#   --core C         the core to pin to (default 1)
#   --repeat R       repetitions (default 3)
#   --threads T      also fvpoisson with T threads (wall clock)
#   --only LABEL     only the solvers whose label contains LABEL (e.g. "PCG DIC")
#   --table WHICH    per-iteration, tolerance or both (default)
#   --openfoam DIR   an unpacked bundle of benches/openfoam_bundle.sh: its bin/
#                    comes first on PATH for the OpenFOAM column
#   --dir DIR        where the case is written (default target/openfoam_cpu/SPEC)
set -euo pipefail
# shellcheck source=benches/laplacian_case.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/laplacian_case.sh"

spec=box:100x100x100
core=1
repeat=3
threads=
only=
dir=
table=both
bundle=
while [[ $# -gt 0 ]]; do
    case $1 in
    --spec) spec=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --table) table=$2; shift 2 ;;
    --openfoam) bundle=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^set/!p}' "$0"; exit 0 ;;
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
[[ $table == both || $table == per-iteration || $table == tolerance ]] ||
    { echo "--table takes per-iteration, tolerance or both" >&2; exit 2; }
command -v taskset > /dev/null || { echo "taskset (util-linux) is not on PATH" >&2; exit 2; }
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
# The PATH of the OpenFOAM runs.
foam_path=$PATH
if [[ -n $bundle ]]; then
    [[ -x $bundle/bin/laplacianFoam ]] || {
        echo "--openfoam $bundle: no bin/laplacianFoam there (unpack a bundle of benches/openfoam_bundle.sh)" >&2
        exit 2
    }
    foam_path=$(realpath "$bundle")/bin:$PATH
fi
openfoam=1
if ! env PATH="$foam_path" laplacianFoam -help > /dev/null 2>&1; then
    if [[ -n $bundle ]]; then
        echo "the bundle's laplacianFoam does not run:" >&2
        env PATH="$foam_path" laplacianFoam -help 2>&1 | tail -n 5 >&2
        exit 1
    fi
    echo "laplacianFoam is not on PATH (apt-get install openfoam, or --openfoam BUNDLE): its column reads n/a" >&2
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
# label|fvSolution entry, run to tolerance 1e-6 (see the header).
to_tolerance=(
    "PCG DIC|solver PCG; preconditioner DIC;"
    "PCG FDIC|solver PCG; preconditioner FDIC;"
    "PBiCGStab DIC|solver PBiCGStab; preconditioner DIC;"
    "GAMG GaussSeidel|solver GAMG; smoother GaussSeidel;"
    "GAMG DICGaussSeidel|solver GAMG; smoother DICGaussSeidel;"
)
tolerance_max_iter=1000

dir=${dir:-target/openfoam_cpu/${spec//[^A-Za-z0-9]/_}}
if [[ ! -d $dir/constant/polyMesh ]]; then
    "${builds[0]}" convert-mesh "$spec" "$dir" --format binary > /dev/null
fi
write_laplacian_case "$dir"

# run TOOL ENTRY MAXITER [TOLERANCE] -> "iterations cpu_s wall_s" ("0 0 0"
# when the run fails); TOOL is "openfoam" or "B:T" (build B, T threads; T = 1
# pins to the core); TOLERANCE defaults to 1e-30.
run() {
    local tool=$1 entry=$2 max_iter=$3 tolerance=${4:-1e-30} cmd
    cat > "$dir/system/fvSolution" << EOF
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers { T { $entry tolerance $tolerance; relTol 0; maxIter $max_iter; } }
SIMPLE { nNonOrthogonalCorrectors 0; }
EOF
    rm -rf "$dir/1"
    if [[ $tool == openfoam ]]; then
        cmd=(env PATH="$foam_path" taskset -c "$core" laplacianFoam -case "$dir")
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

model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
echo "$spec; $(nproc) cores (nproc), ${model:-CPU model unknown}; load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
if [[ -n $openfoam ]]; then
    echo "laplacianFoam: $(env PATH="$foam_path" bash -c 'command -v laplacianFoam')${bundle:+ (launcher of the bundle)}"
fi

per_iteration() {
echo
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
}

tolerance() {
    echo
    echo "time to tolerance 1e-6 (relTol 0, maxIter $tolerance_max_iter): iterations (GAMG: cycles), solve s ="
    echo "the run's wall time less that of a run that stops at the initial residual, least of $repeat"
    local header="| solver |" rule="|---|" tool line label entry k it cpu wall row
    for tool in "${tools[@]}"; do
        header+=" $(name "$tool" | sed 's/, CPU)/)/; s/, wall)/)/') |"
        rule+="---|"
    done
    echo "$header"
    echo "$rule"
    # Each tool's baseline: the initial residual, no set-up, no iteration.
    local -A base=()
    for ((k = 0; k < repeat; k++)); do
        for tool in "${tools[@]}"; do
            read -r it cpu wall <<< "$(run "$tool" "solver PCG; preconditioner DIC;" "$tolerance_max_iter" 10)"
            if [[ -z ${base[$tool]:-} ]] || awk "BEGIN { exit !($wall < ${base[$tool]}) }"; then
                base[$tool]=$wall
            fi
        done
    done
    for line in "${to_tolerance[@]}"; do
        IFS='|' read -r label entry <<< "$line"
        [[ -n $only && $label != *"$only"* ]] && continue
        local -A best=() its=()
        for ((k = 0; k < repeat; k++)); do
            for tool in "${tools[@]}"; do
                read -r it cpu wall <<< "$(run "$tool" "$entry" "$tolerance_max_iter" 1e-6)"
                if [[ -z ${best[$tool]:-} ]] || awk "BEGIN { exit !($wall < ${best[$tool]}) }"; then
                    best[$tool]=$wall
                fi
                its[$tool]=$it
            done
        done
        row="| $label |"
        for tool in "${tools[@]}"; do
            row+=" $(awk -v it="${its[$tool]}" -v t="${best[$tool]}" -v t0="${base[$tool]}" \
                -v m="$tolerance_max_iter" 'BEGIN {
                    if (it == 0) printf "failed"
                    else printf "%d%s, %.2f s", it, (it >= m ? " (not converged)" : ""), t - t0 }') |"
        done
        echo "$row"
        unset best its
    done
}

[[ $table == tolerance ]] || per_iteration
[[ $table == per-iteration ]] || tolerance
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
