#!/bin/sh
# Two 2x2x1 blocks that share no face (two mesh regions), written by
# OpenFOAM v1912's blockMesh; check-mesh reports "*Number of regions: 2" for it.
set -e
cd "$(dirname "$0")"
export WM_PROJECT_DIR=${WM_PROJECT_DIR:-/usr/share/openfoam}
blockMesh -case . > /dev/null
