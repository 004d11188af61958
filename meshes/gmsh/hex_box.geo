// Box 2 x 1 x 0.5 of 6 x 4 x 3 hexahedra (transfinite + recombine); one wall patch
// named "walls" and inlet/outlet at x = 0 / x = 2.
Mesh.FirstNodeTag = 1001; // node tags start at 1001: the loader must map them
SetFactory("Built-in");
Point(1) = {0, 0, 0}; Point(2) = {2, 0, 0}; Point(3) = {2, 1, 0}; Point(4) = {0, 1, 0};
Line(1) = {1, 2}; Line(2) = {2, 3}; Line(3) = {3, 4}; Line(4) = {4, 1};
Curve Loop(1) = {1, 2, 3, 4};
Plane Surface(1) = {1};
Transfinite Curve{1, 3} = 7;
Transfinite Curve{2, 4} = 5;
Transfinite Surface{1};
Recombine Surface{1};
out[] = Extrude {0, 0, 0.5} { Surface{1}; Layers{3}; Recombine; };
// out[0] top, out[1] volume, out[2..5] sides from curves 1..4.
Physical Surface("inlet") = {out[5]};
Physical Surface("outlet") = {out[3]};
Physical Surface("walls") = {1, out[0], out[2], out[4]};
Physical Volume("box") = {out[1]};
