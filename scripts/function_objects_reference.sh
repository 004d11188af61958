#!/usr/bin/env bash
# Regenerates tests/data/function_objects/ with OpenFOAM v1912: the shipped case
# cases/cavity_ico (the icoFoam cavity tutorial) run by blockMesh and icoFoam for
# five steps with the `functions` of tests/data/function_objects/functions
# (two fieldMinMax objects, magnitude with locations every step and component
# without locations every second step, and probes at four locations, one
# outside the mesh); keeps their postProcessing files and the function
# objects' lines of the log.
# Needs OpenFOAM (blockMesh, icoFoam on the PATH); the tests themselves do not.
set -euo pipefail
source "$(dirname "$0")/lib_openfoam.sh"
out="$root/tests/data/function_objects"
work=$(cavity_copy)
sed -i 's/^endTime .*/endTime         0.025;/' "$work/system/controlDict"
cat "$out/functions" >> "$work/system/controlDict"
run_foam "$work" icoFoam
rm -rf "$out/postProcessing"
cp -r "$work/postProcessing" "$out/"
# The fieldMinMax blocks of the log and the probes warning.
awk '/^fieldMinMax /{on=1} on{print} /^$/{on=0} /Did not find location/{print}' \
    "$work/log.icoFoam" > "$out/log.functions"
rm -rf "$work"
echo "wrote $out"
