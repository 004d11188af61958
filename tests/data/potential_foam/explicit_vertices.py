"""Replaces the cylinder tutorial's `vertices #codeStream {...};` (C++ that
OpenFOAM compiles at run time) by the list of points it computes: the 19
points of its code and their copies with z negated."""
import re
import sys

path = sys.argv[1]
text = open(path).read()
start = text.index("vertices #codeStream")
end = text.index("};", text.index("#};", text.index("os  << points;")) + 3) + 2
points = [
    tuple(float(v) for v in m.groups())
    for m in re.finditer(r"points\[\d+\]\s*=\s*point\(([^,]+),([^,]+),([^)]+)\);", text[start:end])
]
assert len(points) == 19, points
points += [(x, y, -z) for x, y, z in points]
listing = "vertices\n(\n" + "".join(f"    ({x!r} {y!r} {z!r})\n" for x, y, z in points) + ");"
open(path, "w").write(text[:start] + listing + text[end:])
