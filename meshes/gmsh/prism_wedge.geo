// Quarter disc of radius 1 (area pi/4) meshed with triangles and extruded by 0.3 in
// 2 layers of prisms; volume 0.3 * pi / 4 up to the polygonal approximation of the arc.
SetFactory("Built-in");
lc = 0.2;
Point(1) = {0, 0, 0, lc}; Point(2) = {1, 0, 0, lc}; Point(3) = {0, 1, 0, lc};
Line(1) = {1, 2}; Circle(2) = {2, 1, 3}; Line(3) = {3, 1};
Curve Loop(1) = {1, 2, 3};
Plane Surface(1) = {1};
out[] = Extrude {0, 0, 0.3} { Surface{1}; Layers{2}; Recombine; };
Physical Surface("bottom") = {1};
Physical Surface("top") = {out[0]};
Physical Surface("symmetryX") = {out[2]};
Physical Surface("outerWall") = {out[3]};
Physical Surface("symmetryY") = {out[4]};
Physical Volume("fluid") = {out[1]};
