# Sourced by openfoam_cpu.sh and openfoam_bundle.sh: the laplacianFoam case both run.
#
# write_laplacian_case DIR writes DIR's 0/T (T = 1 on xmin, 0 on xmax, zero
# gradient on the other patches), constant/transportProperties (DT = 1),
# system/controlDict (one steady step, binary fields) and system/fvSchemes
# (Gauss linear corrected); the mesh and system/fvSolution are the caller's.
write_laplacian_case() {
    local dir=$1
    mkdir -p "$dir/0" "$dir/system" "$dir/constant"
    cat > "$dir/0/T" << 'EOF_T'
FoamFile { version 2.0; format ascii; class volScalarField; object T; }
dimensions [0 0 0 1 0 0 0];
internalField uniform 0;
boundaryField
{
    xmin { type fixedValue; value uniform 1; }
    xmax { type fixedValue; value uniform 0; }
    "(ymin|ymax|zmin|zmax)" { type zeroGradient; }
}
EOF_T
    cat > "$dir/constant/transportProperties" << 'EOF_DT'
FoamFile { version 2.0; format ascii; class dictionary; object transportProperties; }
DT DT [0 2 -1 0 0 0 0] 1;
EOF_DT
    cat > "$dir/system/controlDict" << 'EOF_CD'
FoamFile { version 2.0; format ascii; class dictionary; object controlDict; }
application laplacianFoam; startFrom startTime; startTime 0; stopAt endTime;
endTime 1; deltaT 1; writeControl timeStep; writeInterval 1; writeFormat binary;
writePrecision 17; writeCompression off; timeFormat general; timePrecision 6;
runTimeModifiable false;
EOF_CD
    cat > "$dir/system/fvSchemes" << 'EOF_FS'
FoamFile { version 2.0; format ascii; class dictionary; object fvSchemes; }
ddtSchemes { default steadyState; }
gradSchemes { default Gauss linear; }
divSchemes { default none; }
laplacianSchemes { default Gauss linear corrected; }
interpolationSchemes { default linear; }
snGradSchemes { default corrected; }
EOF_FS
}
