// Unit cube of tetrahedra for polyDualMesh (gmsh 4.8, MSH 2.2).
SetFactory("OpenCASCADE");
Box(1) = {0, 0, 0, 1, 1, 1};
Mesh.CharacteristicLengthMax = 0.3;
Mesh.MshFileVersion = 2.2;
Physical Surface("walls") = {1, 2, 3, 4, 5};
Physical Surface("top") = {6};
Physical Volume("cube") = {1};
