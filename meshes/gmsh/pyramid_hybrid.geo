// Box [0,1] x [0,1] x [0,1]: a layer of 3 x 3 x 2 hexahedra (extruded, z < 0.4) under a
// tetrahedral region; Gmsh puts pyramids on the quad faces between the two regions.
SetFactory("Built-in");
lc = 0.3;
Point(1) = {0, 0, 0, lc}; Point(2) = {1, 0, 0, lc}; Point(3) = {1, 1, 0, lc}; Point(4) = {0, 1, 0, lc};
Line(1) = {1, 2}; Line(2) = {2, 3}; Line(3) = {3, 4}; Line(4) = {4, 1};
Curve Loop(1) = {1, 2, 3, 4};
Plane Surface(1) = {1};
Transfinite Curve{1, 2, 3, 4} = 4;
Transfinite Surface{1};
Recombine Surface{1};
hexes[] = Extrude {0, 0, 0.4} { Surface{1}; Layers{2}; Recombine; };
// hexes[0] = top of the hex layer (quads), hexes[1] = volume, hexes[2..5] = sides.
// Upper, tetrahedral region; the point, curve and surface tags of the extruded top
// (points 5, 6, 10, 14; curves 6..9; surface 26) are the ones Gmsh 4.8 gives.
Point(101) = {0, 0, 1, lc}; Point(102) = {1, 0, 1, lc}; Point(103) = {1, 1, 1, lc}; Point(104) = {0, 1, 1, lc};
Line(101) = {101, 102}; Line(102) = {102, 103}; Line(103) = {103, 104}; Line(104) = {104, 101};
Line(105) = {5, 101}; Line(106) = {6, 102}; Line(107) = {10, 103}; Line(108) = {14, 104};
Curve Loop(101) = {101, 102, 103, 104};  Plane Surface(101) = {101}; // z = 1
Curve Loop(102) = {6, 106, -101, -105};  Plane Surface(102) = {102}; // y = 0
Curve Loop(103) = {7, 107, -102, -106};  Plane Surface(103) = {103}; // x = 1
Curve Loop(104) = {8, 108, -103, -107};  Plane Surface(104) = {104}; // y = 1
Curve Loop(105) = {9, 105, -104, -108};  Plane Surface(105) = {105}; // x = 0
Surface Loop(101) = {hexes[0], 101, 102, 103, 104, 105};
Volume(101) = {101};
Physical Surface("bottom") = {1};
Physical Surface("top") = {101};
Physical Surface("sideWalls") = {hexes[{2:5}], 102, 103, 104, 105};
Physical Volume("hexLayer") = {hexes[1]};
Physical Volume("tetRegion") = {101};
