#!/usr/bin/env python3
"""Reference solutions from OpenFOAM v1912 laplacianFoam for tests/fvm.rs.

Writes the same skewed box meshes as the test builder: `box_mesh([6; 3], [1; 3],
0.4, false)` and the 2-D `box_mesh([6, 5, 1], [1, 1, 0.1], 0.4, true)` (same
points, face order and orientation, so cell numbers agree), runs laplacianFoam
for several schemes and writes the final T cell values, one per line with 17
significant digits, to T_<variant>.txt.

Problem: -lap(T) = 6 (fvOptions scalarSemiImplicitSource), DT = 1, initial T = 0;
x0 fixedValue 1; x1 fixedValue nonuniform 2 + 0.01 i; y0 zeroGradient;
y1 fixedGradient 0.5; z0 mixed (refValue 2, refGradient -1, valueFraction 0.3);
z1 fixedValue 0 (2-D: z0 and z1 empty). Run: python3 make_reference.py (needs /usr/bin/laplacianFoam).
"""
import os, re, shutil, subprocess, tempfile

SKEW = 0.4
# Cells per direction, lengths, 2-D (empty z patches, points moved in x and y only).
NX, NY, NZ, LEN, TWO_D = 6, 6, 6, (1.0, 1.0, 1.0), False


def configure(n, length, two_d):
    global NX, NY, NZ, LEN, TWO_D
    (NX, NY, NZ), LEN, TWO_D = n, length, two_d


def pid(i, j, k):
    return i + (NX + 1) * (j + (NY + 1) * k)


def cid(i, j, k):
    return i + NX * (j + NY * k)


def points():
    h = (LEN[0] / NX, LEN[1] / NY, LEN[2] / NZ)
    out = []
    for k in range(NZ + 1):
        for j in range(NY + 1):
            for i in range(NX + 1):
                p = [i * h[0], j * h[1], k * h[2]]
                inside = 0 < i < NX and 0 < j < NY and (TWO_D or 0 < k < NZ)
                layer = 0 if TWO_D else k
                for a in range(2 if TWO_D else 3):
                    if inside:
                        hh = (i * 7919 + j * 104729 + layer * 1299709 + a * 15485863) % 1000
                        p[a] += SKEW * h[a] * (hh / 1000.0 - 0.5)
                out.append(p)
    return out


def xface(i, j, k):
    return [pid(i, j, k), pid(i, j + 1, k), pid(i, j + 1, k + 1), pid(i, j, k + 1)]


def yface(i, j, k):
    return [pid(i, j, k), pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j, k)]


def zface(i, j, k):
    return [pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i, j + 1, k)]


def mesh():
    faces, owner, neighbour = [], [], []
    for k in range(NZ):
        for j in range(NY):
            for i in range(NX):
                c = cid(i, j, k)
                for ok, f, n in ((i + 1 < NX, xface(i + 1, j, k), cid(i + 1, j, k)),
                                 (j + 1 < NY, yface(i, j + 1, k), cid(i, j + 1, k)),
                                 (k + 1 < NZ, zface(i, j, k + 1), cid(i, j, k + 1))):
                    if ok:
                        faces.append(f)
                        owner.append(c)
                        neighbour.append(n)
    rx, ry, rz = range(NX), range(NY), range(NZ)
    side = "empty" if TWO_D else "patch"
    sides = [
        ("x0", "patch", [(xface(0, j, k), cid(0, j, k)) for k in rz for j in ry], True),
        ("x1", "patch", [(xface(NX, j, k), cid(NX - 1, j, k)) for k in rz for j in ry], False),
        ("y0", "wall", [(yface(i, 0, k), cid(i, 0, k)) for k in rz for i in rx], True),
        ("y1", "wall", [(yface(i, NY, k), cid(i, NY - 1, k)) for k in rz for i in rx], False),
        ("z0", side, [(zface(i, j, 0), cid(i, j, 0)) for j in ry for i in rx], True),
        ("z1", side, [(zface(i, j, NZ), cid(i, j, NZ - 1)) for j in ry for i in rx], False),
    ]
    patches = []
    for name, kind, lst, flip in sides:
        start = len(faces)
        for f, c in lst:
            faces.append(f[::-1] if flip else f)
            owner.append(c)
        patches.append((name, kind, start, len(lst)))
    return faces, owner, neighbour, patches


def header(cls, obj, loc="constant/polyMesh", note=""):
    return ("FoamFile\n{\n    version 2.0;\n    format ascii;\n    class %s;\n"
            "    location \"%s\";\n    object %s;%s\n}\n" % (cls, loc, obj, note))


def write_mesh(case):
    d = os.path.join(case, "constant", "polyMesh")
    os.makedirs(d)
    pts = points()
    faces, owner, neighbour, patches = mesh()
    n_cells = NX * NY * NZ
    note = '\n    note "nPoints:%d nCells:%d nFaces:%d nInternalFaces:%d";' % (
        len(pts), n_cells, len(faces), len(neighbour))
    with open(os.path.join(d, "points"), "w") as f:
        f.write(header("vectorField", "points"))
        f.write("%d\n(\n" % len(pts))
        f.writelines("(%.17g %.17g %.17g)\n" % tuple(p) for p in pts)
        f.write(")\n")
    with open(os.path.join(d, "faces"), "w") as f:
        f.write(header("faceList", "faces"))
        f.write("%d\n(\n" % len(faces))
        f.writelines("4(%d %d %d %d)\n" % tuple(x) for x in faces)
        f.write(")\n")
    for name, vals in (("owner", owner), ("neighbour", neighbour)):
        with open(os.path.join(d, name), "w") as f:
            f.write(header("labelList", name, note=note))
            f.write("%d\n(\n" % len(vals))
            f.writelines("%d\n" % v for v in vals)
            f.write(")\n")
    with open(os.path.join(d, "boundary"), "w") as f:
        f.write(header("polyBoundaryMesh", "boundary"))
        f.write("%d\n(\n" % len(patches))
        for name, kind, start, size in patches:
            f.write("    %s\n    {\n        type %s;\n        nFaces %d;\n        startFace %d;\n    }\n"
                    % (name, kind, size, start))
        f.write(")\n")


def write_fields(case):
    n_x1 = NY * NZ
    x1 = " ".join("%.17g" % (2.0 + 0.01 * i) for i in range(n_x1))
    z0 = ("type mixed; refValue uniform 2; refGradient uniform -1; valueFraction uniform 0.3;"
          " value uniform 2;")
    z1 = "type fixedValue; value uniform 0;"
    if TWO_D:
        z0 = z1 = "type empty;"
    os.makedirs(os.path.join(case, "0"))
    with open(os.path.join(case, "0", "T"), "w") as f:
        f.write(header("volScalarField", "T", loc="0"))
        f.write("dimensions [0 0 0 0 0 0 0];\ninternalField uniform 0;\nboundaryField\n{\n"
                "    x0 { type fixedValue; value uniform 1; }\n"
                "    x1 { type fixedValue; value nonuniform List<scalar> %d (%s); }\n"
                "    y0 { type zeroGradient; }\n"
                "    y1 { type fixedGradient; gradient uniform 0.5; }\n"
                "    z0 { %s }\n"
                "    z1 { %s }\n}\n" % (n_x1, x1, z0, z1))
    with open(os.path.join(case, "constant", "transportProperties"), "w") as f:
        f.write(header("dictionary", "transportProperties", loc="constant"))
        f.write("DT DT [0 2 -1 0 0 0 0] 1;\n")
    with open(os.path.join(case, "system", "fvOptions"), "w") as f:
        f.write(header("dictionary", "fvOptions", loc="system"))
        f.write("source\n{\n    type scalarSemiImplicitSource;\n    active yes;\n"
                "    scalarSemiImplicitSourceCoeffs\n    {\n        selectionMode all;\n"
                "        volumeMode specific;\n        injectionRateSuSp { T (6 0); }\n    }\n}\n")


def write_system(case, ddt, dt, end, grad, sngrad, correctors):
    s = os.path.join(case, "system")
    os.makedirs(s)
    with open(os.path.join(s, "controlDict"), "w") as f:
        f.write(header("dictionary", "controlDict", loc="system"))
        f.write("application laplacianFoam;\nstartFrom startTime;\nstartTime 0;\nstopAt endTime;\n"
                "endTime %s;\ndeltaT %s;\nwriteControl timeStep;\nwriteInterval 1;\n"
                "purgeWrite 0;\nwriteFormat ascii;\nwritePrecision 17;\nwriteCompression off;\n"
                "timeFormat general;\ntimePrecision 6;\nrunTimeModifiable false;\n" % (end, dt))
    with open(os.path.join(s, "fvSchemes"), "w") as f:
        f.write(header("dictionary", "fvSchemes", loc="system"))
        f.write("ddtSchemes { default %s; }\ngradSchemes { default %s; }\n"
                "divSchemes { default none; }\nlaplacianSchemes { default Gauss linear %s; }\n"
                "interpolationSchemes { default linear; }\nsnGradSchemes { default %s; }\n"
                % (ddt, grad, sngrad, sngrad))
    with open(os.path.join(s, "fvSolution"), "w") as f:
        f.write(header("dictionary", "fvSolution", loc="system"))
        f.write("solvers\n{\n    T\n    {\n        solver PCG;\n        preconditioner DIC;\n"
                "        tolerance 1e-18;\n        relTol 0;\n        maxIter 3000;\n    }\n}\n"
                "SIMPLE\n{\n    nNonOrthogonalCorrectors %d;\n}\n" % correctors)


def run(variant, ddt, dt, end, grad, sngrad, correctors):
    case = tempfile.mkdtemp(prefix="fvm_ref_")
    write_system(case, ddt, dt, end, grad, sngrad, correctors)
    write_mesh(case)
    write_fields(case)
    env = dict(os.environ, WM_PROJECT_DIR="/usr/share/openfoam")
    subprocess.run(["laplacianFoam", "-case", case], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    text = open(os.path.join(case, str(end), "T")).read()
    m = re.search(r"internalField\s+nonuniform\s+List<scalar>\s*(\d+)\s*\((.*?)\)\s*;", text, re.S)
    values = m.group(2).split()
    assert len(values) == int(m.group(1)) == NX * NY * NZ
    with open("T_%s.txt" % variant, "w") as f:
        f.writelines(v + "\n" for v in values)
    shutil.rmtree(case)


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    run("corrected_gauss", "steadyState", 1, 1, "Gauss linear", "corrected", 3)
    run("corrected_least_squares", "steadyState", 1, 1, "leastSquares", "corrected", 3)
    run("limited_half_gauss", "steadyState", 1, 1, "Gauss linear", "limited corrected 0.5", 3)
    run("uncorrected", "steadyState", 1, 1, "Gauss linear", "uncorrected", 0)
    run("orthogonal", "steadyState", 1, 1, "Gauss linear", "orthogonal", 0)
    run("euler_corrected_gauss", "Euler", 0.01, 0.02, "Gauss linear", "corrected", 1)
    configure((6, 5, 1), (1.0, 1.0, 0.1), True)
    run("two_d_corrected_least_squares", "steadyState", 1, 1, "leastSquares", "corrected", 3)
    run("two_d_corrected_gauss", "steadyState", 1, 1, "Gauss linear", "corrected", 3)
