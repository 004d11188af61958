#!/usr/bin/env bash
# OpenFOAM's laplacianFoam packed to run on a machine where OpenFOAM is not
# installed, for `benches/openfoam_cpu.sh --openfoam DIR`.
#
#   benches/openfoam_bundle.sh [--keep DIR] OUT.tar.xz
#
# Run it where OpenFOAM is installed (laplacianFoam and blockMesh on PATH;
# WM_PROJECT_DIR defaults to /usr/share/openfoam, as Debian's packages have
# it). The tarball holds one folder, openfoam-bundle/:
#
#   bin/laplacianFoam       launcher: runs bin/laplacianFoam.real through the
#                           bundled ELF interpreter with --library-path lib
#                           (so neither LD_LIBRARY_PATH nor ld.so.cache nor the
#                           host's glibc take part) and sets WM_PROJECT_DIR to
#                           the bundle; works under an older or newer glibc
#   bin/laplacianFoam.real  the binary
#   lib/                    every shared object the binary loads: its needed
#                           libraries (ldd), those it opens at run time
#                           (LD_DEBUG=libs on the runs below), glibc itself
#                           and ld-linux-x86-64.so.2; debug sections stripped
#   etc/                    $WM_PROJECT_DIR/etc (controlDict, cellModels, ...)
#
# The libraries loaded at run time are found by running laplacianFoam on a
# small blockMesh case with each fvSolution entry openfoam_cpu.sh uses (and
# maxIter 0, and a run that meets its tolerance at once). The bundle is then
# checked: unpacked into a fresh folder and run with a bare environment
# (env -i PATH=/usr/bin:/bin), every object the loader maps (LD_DEBUG=libs)
# must come from the bundle, no file under the system's OpenFOAM may be
# opened (strace -f, where strace is installed), and each log's residual
# line must be the system laplacianFoam's, character for character.
# `--keep DIR` leaves the checked, unpacked bundle in DIR.
set -euo pipefail
# shellcheck source=benches/laplacian_case.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/laplacian_case.sh"

keep=
while [[ $# -gt 0 ]]; do
    case $1 in
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^set/!p}' "$0"; exit 0 ;;
    --*) echo "unknown option $1 (--help lists them)" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [[ $# -ne 1 || $1 != *.tar.xz ]]; then
    echo "usage: $0 [--keep DIR] OUT.tar.xz (--help)" >&2
    exit 2
fi
out=$(realpath -m "$1")
for tool in laplacianFoam blockMesh ldd readelf strip xz tar; do
    command -v "$tool" > /dev/null || { echo "$tool is not on PATH" >&2; exit 2; }
done
project=${WM_PROJECT_DIR:-/usr/share/openfoam}
[[ -f $project/etc/controlDict ]] || {
    echo "no OpenFOAM installation at WM_PROJECT_DIR=$project (etc/controlDict missing)" >&2
    exit 2
}
export WM_PROJECT_DIR=$project
exe=$(realpath "$(command -v laplacianFoam)")
file -L "$exe" 2> /dev/null | grep -q ELF || [[ $(head -c 4 "$exe" | od -An -c | tr -d ' ') == 177ELF ]] || {
    echo "$exe is not an ELF binary (a wrapper script? put the real laplacianFoam first on PATH)" >&2
    exit 2
}
interp=$(readelf -l "$exe" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[[ -n $interp && -e $interp ]] || { echo "$exe names no ELF interpreter that exists" >&2; exit 2; }
[[ $(basename "$interp") == ld-linux-x86-64.so.2 ]] ||
    echo "note: the interpreter is $interp (the launcher calls it lib/$(basename "$interp"))" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/openfoam_bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/pack/openfoam-bundle
mkdir -p "$root/bin" "$root/lib"

# A 10 x 10 x 10 cube, the patches of openfoam_cpu.sh's case.
case_dir=$work/case
mkdir -p "$case_dir/system" "$case_dir/constant" "$case_dir/0"
cat > "$case_dir/system/blockMeshDict" << 'EOF'
FoamFile { version 2.0; format ascii; class dictionary; object blockMeshDict; }
vertices ((0 0 0) (1 0 0) (1 1 0) (0 1 0) (0 0 1) (1 0 1) (1 1 1) (0 1 1));
blocks (hex (0 1 2 3 4 5 6 7) (10 10 10) simpleGrading (1 1 1));
boundary
(
    xmin { type patch; faces ((0 4 7 3)); }
    xmax { type patch; faces ((1 2 6 5)); }
    ymin { type wall; faces ((0 1 5 4)); }
    ymax { type wall; faces ((3 7 6 2)); }
    zmin { type wall; faces ((0 3 2 1)); }
    zmax { type wall; faces ((4 5 6 7)); }
);
EOF
write_laplacian_case "$case_dir"
blockMesh -case "$case_dir" > "$work/log.blockMesh" 2>&1 || {
    tail -n 5 "$work/log.blockMesh" >&2
    echo "blockMesh failed" >&2
    exit 1
}

# The fvSolution entries of openfoam_cpu.sh, each with its controls.
entries=(
    "solver PCG; preconditioner DIC; tolerance 1e-6; relTol 0;"
    "solver PCG; preconditioner FDIC; tolerance 1e-6; relTol 0;"
    "solver PBiCGStab; preconditioner DIC; tolerance 1e-6; relTol 0;"
    "solver smoothSolver; smoother GaussSeidel; nSweeps 1; tolerance 1e-30; relTol 0; maxIter 20;"
    "solver GAMG; smoother GaussSeidel; tolerance 1e-6; relTol 0;"
    "solver GAMG; smoother DICGaussSeidel; tolerance 1e-6; relTol 0;"
    "solver GAMG; smoother GaussSeidel; tolerance 1e-6; relTol 0; maxIter 0;"
    "solver PCG; preconditioner DIC; tolerance 10; relTol 0;"
)

# run_all COMMAND... : runs COMMAND -case CASE with each entry; entry k's log
# is $case_dir/log.k; LD_DEBUG output goes where the caller's environment says.
run_all() {
    local k
    for k in "${!entries[@]}"; do
        cat > "$case_dir/system/fvSolution" << EOF
FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }
solvers { T { ${entries[$k]} } }
SIMPLE { nNonOrthogonalCorrectors 0; }
EOF
        rm -rf "$case_dir/1"
        if ! "$@" -case "$case_dir" > "$case_dir/log.$k" 2>&1; then
            tail -n 5 "$case_dir/log.$k" >&2
            echo "failed: $* -case $case_dir (${entries[$k]})" >&2
            return 1
        fi
    done
}

# Residual lines of the logs of run_all, in order.
residuals() {
    local k
    for k in "${!entries[@]}"; do
        echo "$k: $(grep 'Solving for' "$case_dir/log.$k" || echo none)"
    done
}

# Objects the loader mapped, from LD_DEBUG=libs,files output files: glibc
# writes "calling init: PATH" for each object with initialisers (every
# OpenFOAM library, whose type registration runs at load) and "calling fini:
# PATH [n]" at exit. strace's account below catches the rest.
mapped() {
    sed -n 's/.*calling init: \(\/[^ ]*\).*/\1/p; s/.*calling fini: \(\/[^ ]*\).*/\1/p' "$@" | sort -u
}

# opened STRACE_LOG PROGRAM: the files opened (successfully) by the processes
# of an `strace -f` log after their execve of PROGRAM; the bash, cat and rm
# of run_all (and a launcher's bash before its exec) are left out.
opened() {
    awk -v prog="execve(\"$2\"" '
        index($0, prog) && $0 !~ / = -1 / { keep[$1] = 1; next }
        keep[$1] && $0 !~ / = -1 / && match($0, /"[^"]*"/) { print substr($0, RSTART + 1, RLENGTH - 2) }
    ' "$1" | sort -u
}
tracer=()
if command -v strace > /dev/null; then
    tracer=(strace -f -qq -e trace=open,openat,execve)
else
    echo "strace is not installed: the libraries laplacianFoam loads are those LD_DEBUG lists," \
        "and the check of opened files is left out" >&2
fi

echo "laplacianFoam: $exe; interpreter $interp; WM_PROJECT_DIR=$project"
mkdir -p "$work/debug"
if [[ ${#tracer[@]} -gt 0 ]]; then
    "${tracer[@]}" -o "$work/debug/strace.system" bash -c "$(declare -p entries case_dir)
$(declare -f run_all)
run_all env LD_DEBUG=libs,files LD_DEBUG_OUTPUT='$work/debug/system' '$exe'"
else
    run_all env LD_DEBUG=libs,files LD_DEBUG_OUTPUT="$work/debug/system" "$exe"
fi
residuals > "$work/residuals.system"

# Needed libraries as ldd resolves them, then whatever the runs mapped
# beyond them (dlopen), each under the name the loader asks for.
declare -A libs=()
while read -r name path; do
    libs[$name]=$path
done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
while read -r path; do
    [[ $path == "$exe" || $(basename "$path") == "$(basename "$interp")" ]] && continue
    name=$(basename "$path")
    [[ -n ${libs[$name]:-} ]] || libs[$name]=$path
done < <(
    mapped "$work"/debug/system.*
    [[ ${#tracer[@]} -eq 0 ]] || opened "$work/debug/strace.system" "$exe" | grep -E '\.so(\.[0-9.]+)?$'
)
(( ${#libs[@]} > 0 )) || { echo "ldd found no libraries of $exe" >&2; exit 1; }
missing=$(ldd "$exe" | grep 'not found' || true)
[[ -z $missing ]] || { echo "unresolved libraries: $missing" >&2; exit 1; }

cp -L "$exe" "$root/bin/laplacianFoam.real"
cp -L "$interp" "$root/lib/$(basename "$interp")"
for name in "${!libs[@]}"; do
    cp -L "${libs[$name]}" "$root/lib/$name"
done
# Debug sections, where a library has them (Debian's are stripped already).
for f in "$root/bin/laplacianFoam.real" "$root"/lib/*; do
    if readelf -S "$f" 2> /dev/null | grep -q '\.debug_'; then
        strip --strip-debug "$f"
    fi
done
chmod 755 "$root/bin/laplacianFoam.real" "$root/lib/$(basename "$interp")"
cp -r "$project/etc" "$root/etc"

cat > "$root/bin/laplacianFoam" << EOF
#!/usr/bin/env bash
# laplacianFoam of OpenFOAM (made by fvpoisson's benches/openfoam_bundle.sh):
# the real binary through the bundled loader and libraries, so the host's
# glibc, ld.so.cache and LD_LIBRARY_PATH play no part; WM_PROJECT_DIR is the
# bundle (its etc/ is OpenFOAM's); the C locale, as the host's locale files
# may not match the bundled glibc.
here=\$(cd "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/.." && pwd)
export WM_PROJECT_DIR=\$here
export LC_ALL=C
unset LD_PRELOAD
# BUNDLE_LD_DEBUG(_OUTPUT): LD_DEBUG(_OUTPUT) for OpenFOAM alone (the check).
if [[ -n \${BUNDLE_LD_DEBUG:-} ]]; then
    export LD_DEBUG=\$BUNDLE_LD_DEBUG
    [[ -z \${BUNDLE_LD_DEBUG_OUTPUT:-} ]] || export LD_DEBUG_OUTPUT=\$BUNDLE_LD_DEBUG_OUTPUT
fi
exec "\$here/lib/$(basename "$interp")" --inhibit-cache --library-path "\$here/lib" \\
    --argv0 laplacianFoam "\$here/bin/laplacianFoam.real" "\$@"
EOF
chmod 755 "$root/bin/laplacianFoam"
cat > "$root/README" << EOF
laplacianFoam of $(sed -n 's/^Build *: *//p' "$case_dir/log.0" | head -n 1) with every library it loads,
glibc and its loader included, packed by fvpoisson's benches/openfoam_bundle.sh from
$exe on $(. /etc/os-release 2> /dev/null && echo "${PRETTY_NAME:-}") ($(ldd --version | head -n 1)).
Run bin/laplacianFoam (or put bin/ first on PATH); it needs no installation.
EOF

echo "packing $(du -sh "$root" | cut -f1) ($(ls "$root/lib" | wc -l) objects in lib/)"
tar -C "$work/pack" --owner=0 --group=0 -cf - openfoam-bundle | xz -9 -T1 > "$work/bundle.tar.xz"

# The check: a fresh folder, a bare environment; first the loader's account
# (LD_DEBUG through the launcher's BUNDLE_LD_DEBUG, so that bash, cat and rm
# stay out of it), then the system calls of the same runs under strace.
check=$work/check
mkdir -p "$check" "$work/debug/bundle"
tar -C "$check" -xJf "$work/bundle.tar.xz"
bundle=$check/openfoam-bundle
loader=$bundle/lib/$(basename "$interp")
# The script that runs run_all with its arguments in a fresh bash.
bare_script() {
    printf '%s\n%s\nrun_all %s\n' "$(declare -p entries case_dir)" "$(declare -f run_all)" \
        "$(printf '%q ' "$@")"
}
bare=(env -i PATH=/usr/bin:/bin HOME="$check" bash -c)
"${bare[@]}" "$(bare_script env BUNDLE_LD_DEBUG=libs,files \
    BUNDLE_LD_DEBUG_OUTPUT="$work/debug/bundle/run" "$bundle/bin/laplacianFoam")"
residuals > "$work/residuals.bundle"
if ! cmp -s "$work/residuals.system" "$work/residuals.bundle"; then
    diff "$work/residuals.system" "$work/residuals.bundle" >&2 || true
    echo "the bundle's residuals differ from the system laplacianFoam's" >&2
    exit 1
fi
n_mapped=$(mapped "$work"/debug/bundle/run.* | wc -l)
(( n_mapped > ${#libs[@]} / 2 )) || {
    echo "the loader reported $n_mapped objects: LD_DEBUG did not reach the bundled loader" >&2
    exit 1
}
foreign=$(mapped "$work"/debug/bundle/run.* | grep -v "^$bundle/" || true)
if [[ -n $foreign ]]; then
    echo "objects mapped from outside the bundle:" >&2
    echo "$foreign" >&2
    exit 1
fi
echo "check: ${#entries[@]} runs, residuals as the system's; $n_mapped objects mapped, all from the bundle"
if [[ ${#tracer[@]} -gt 0 ]]; then
    "${tracer[@]}" -o "$work/debug/strace" "${bare[@]}" "$(bare_script "$bundle/bin/laplacianFoam")"
    opened=$(opened "$work/debug/strace" "$loader")
    [[ -n $opened ]] || { echo "strace saw no run of $loader" >&2; exit 1; }
    outside=$(echo "$opened" | grep -E "^($project/|/usr/lib/openfoam/|$exe\$)|\.so(\.[0-9.]+)?\$" |
        grep -v "^$bundle/" || true)
    if [[ -n $outside ]]; then
        echo "files opened outside the bundle:" >&2
        echo "$outside" >&2
        exit 1
    fi
    others=$(echo "$opened" | grep -v -E "^($bundle/|$case_dir/|/dev/|/proc/)" || true)
    echo "check: strace: no library and nothing of $project or /usr/lib/openfoam opened" \
        "outside the bundle; other files opened: ${others//$'\n'/ }"
fi

mv "$work/bundle.tar.xz" "$out"
if [[ -n $keep ]]; then
    mkdir -p "$keep"
    rm -rf "${keep:?}/openfoam-bundle"
    mv "$bundle" "$keep/"
    echo "unpacked bundle: $(realpath "$keep/openfoam-bundle")"
fi
echo "$out: $(du -h "$out" | cut -f1) ($(stat -c %s "$out") bytes)"
