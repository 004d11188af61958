#!/usr/bin/env bash
# Regenerates the potentialFoam (OpenFOAM v1912) reference of
# tests/potential_foam.rs: the cylinder and pitzDaily tutorials, meshed by
# blockMesh (the cylinder's #codeStream vertices written out as a list), run
# with `potentialFoam -writePhi -writephi -writep`. The Phi and p solvers are
# PCG/DIC to 1e-12 (the tutorials' GAMG is not reproduced iteration by iteration), the
# fields are written with 17 digits and gzipped.
#
# The Debian v1912 build writes a wrong U in odd-numbered cells, so the
# reference velocity is fvc::reconstruct(phi) of OpenFOAM's phi, computed
# here by reconstruct_phi.py (numpy), not the U potentialFoam wrote. The
# approximate pressure p of -writep is computed from the U potentialFoam
# holds, which is the U it wrote: that U (U_openfoam.gz) is kept with p so
# that the pressure step can be checked on OpenFOAM's own input.
#
# Usage: tests/data/potential_foam/make_reference.sh   (from the repository root)
set -euo pipefail
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
here=$(cd "$(dirname "$0")" && pwd)
tutorials=/usr/share/doc/openfoam-examples/examples/basic/potentialFoam
work=${KEEP_WORK:-$(mktemp -d)}
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$work"' EXIT

for name in cylinder pitzDaily; do
  dir="$work/$name"
  cp -r "$tutorials/$name" "$dir"
  find "$dir" -name '*.gz' -exec gunzip {} +
  mv "$dir/0.orig" "$dir/0"
  rm -f "$dir/Allrun" "$dir/Allclean"
  if [ "$name" = cylinder ]; then
    python3 "$here/explicit_vertices.py" "$dir/system/blockMeshDict"
    # The tutorial's `coded` error function object needs a compiler.
    python3 - "$dir/system/controlDict" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
start = text.index("functions")
open(path, "w").write(text[:start] + "functions\n{\n}\n")
PY
  fi
  sed -i -e "s/^writePrecision .*/writePrecision  17;/" \
    -e "s/^writeCompression .*/writeCompression on;/" "$dir/system/controlDict"
  python3 - "$dir/system/fvSolution" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text = re.sub(r"Phi\s*\{[^}]*\}",
              "Phi\n    {\n        solver          PCG;\n        preconditioner  DIC;\n"
              "        tolerance       1e-12;\n        relTol          0;\n    }", text, count=1)
open(path, "w").write(text)
PY
  if [ "$name" = cylinder ]; then
    # -writep with div(phi,U) Gauss upwind (not bounded), in a fresh copy:
    # potentialFoam reads back the Phi and p a run writes.
    cp -r "$dir" "$dir.upwind"
    sed -i -e "s/^\( *div(phi,U) *\).*;/\1Gauss upwind;/" "$dir.upwind/system/fvSchemes"
    (cd "$dir.upwind" && blockMesh > log.blockMesh && potentialFoam -writep > log.potentialFoam)
  fi
  (cd "$dir" && blockMesh > log.blockMesh && potentialFoam -writePhi -writephi -writep > log.potentialFoam)
  out="$here/$name"
  rm -rf "$out"
  mkdir -p "$out/0" "$out/constant" "$out/reference"
  cp -r "$dir/system" "$out/"
  cp "$tutorials/$name/0.orig/U" "$tutorials/$name/0.orig/p" "$out/0/"
  cp -r "$dir/constant/polyMesh" "$out/constant/"
  cp "$dir/0/Phi.gz" "$dir/0/phi.gz" "$dir/0/p.gz" "$out/reference/"
  cp "$dir/0/U.gz" "$out/reference/U_openfoam.gz"
  if [ "$name" = cylinder ]; then
    # The div(phi,U) scheme changes p only.
    cmp <(zcat "$dir/0/U.gz") <(zcat "$dir.upwind/0/U.gz")
    cp "$dir.upwind/0/p.gz" "$out/reference/p_upwind.gz"
  fi
  python3 "$here/reconstruct_phi.py" "$dir" | gzip -9 > "$out/reference/U_reconstructed.gz"
  grep -E '^(GAMG|DICPCG|Continuity|Interpolated|Calculating approximate)' "$dir/log.potentialFoam" > "$out/reference/log.potentialFoam"
done
