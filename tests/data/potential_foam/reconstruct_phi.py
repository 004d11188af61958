"""fvc::reconstruct(phi) of an OpenFOAM case, computed independently of
OpenFOAM: per cell (Σ_f Ŝ_f S_fᵀ)⁻¹ Σ_f Ŝ_f φ_f over its internal and
non-empty boundary faces, with OpenFOAM's face area vectors (triangle fan
about the point average) and its inverse of a 2-D tensor (a unit added on a
vanishing diagonal component, then taken off again). Reads
CASE/constant/polyMesh and CASE/0/phi(.gz); prints one `x y z` per cell."""
import gzip
import os
import re
import sys

import numpy as np


def read_text(path):
    if os.path.exists(path):
        return open(path).read()
    return gzip.open(path + ".gz", "rt").read()


def strip_header(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return text[text.index("}", text.index("FoamFile")) + 1 :]


def read_list(path):
    body = strip_header(read_text(path))
    m = re.search(r"(\d+)\s*\(", body)
    return int(m.group(1)), body[m.end() :]


def read_points(path):
    n, body = read_list(path)
    values = re.findall(r"\(([^()]*)\)", body)[:n]
    return np.array([[float(v) for v in p.split()] for p in values])


def read_faces(path):
    n, body = read_list(path)
    return [[int(v) for v in f.split()] for f in re.findall(r"\d+\(([^()]*)\)", body)[:n]]


def read_labels(path):
    n, body = read_list(path)
    return np.array([int(v) for v in body[: body.index(")")].split()][:n])


def read_boundary(path):
    body = strip_header(read_text(path))
    patches = []
    for m in re.finditer(r"(\w+)\s*\{([^}]*)\}", body):
        entries = dict(re.findall(r"(\w+)\s+([^;]+);", m.group(2)))
        patches.append((m.group(1), entries["type"], int(entries["nFaces"]), int(entries["startFace"])))
    return patches


def read_phi(path, n_internal, patches):
    body = strip_header(read_text(path))
    internal = re.search(r"internalField\s+nonuniform\s+List<scalar>\s*(\d+)\s*\(([^)]*)\)", body)
    phi = np.zeros(n_internal + sum(p[2] for p in patches))
    phi[:n_internal] = [float(v) for v in internal.group(2).split()]
    boundary = body[body.index("boundaryField") :]
    for name, kind, size, start in patches:
        if kind == "empty" or size == 0:
            continue
        entry = re.search(name + r"\s*\{(.*?)\}", boundary, flags=re.S).group(1)
        values = re.search(r"value\s+(uniform\s+(\S+);|nonuniform\s+List<scalar>\s*\d+\s*\(([^)]*)\))", entry)
        if values.group(2) is not None:
            phi[start : start + size] = float(values.group(2))
        else:
            phi[start : start + size] = [float(v) for v in values.group(3).split()]
    return phi


def face_area_vectors(points, faces):
    areas = np.zeros((len(faces), 3))
    for f, face in enumerate(faces):
        p = points[face]
        if len(face) == 3:
            areas[f] = 0.5 * np.cross(p[1] - p[0], p[2] - p[0])
            continue
        centre = p.sum(axis=0) / len(face)
        total = np.zeros(3)
        for i in range(len(face)):
            this, nxt = p[i], p[(i + 1) % len(face)]
            total += np.cross(nxt - this, centre - this)
        areas[f] = 0.5 * total
    return areas


def main():
    case = sys.argv[1]
    mesh = os.path.join(case, "constant/polyMesh")
    points = read_points(os.path.join(mesh, "points"))
    faces = read_faces(os.path.join(mesh, "faces"))
    owner = read_labels(os.path.join(mesh, "owner"))
    neighbour = read_labels(os.path.join(mesh, "neighbour"))
    patches = read_boundary(os.path.join(mesh, "boundary"))
    n_internal = len(neighbour)
    phi = read_phi(os.path.join(case, "0/phi"), n_internal, patches)
    sf = face_area_vectors(points, faces)
    n_cells = owner.max() + 1
    tensor = np.zeros((n_cells, 3, 3))
    vector = np.zeros((n_cells, 3))
    active = np.ones(len(faces), dtype=bool)
    for name, kind, size, start in patches:
        if kind == "empty":
            active[start : start + size] = False
    for f in range(len(faces)):
        if not active[f]:
            continue
        mag = np.linalg.norm(sf[f])
        t = np.outer(sf[f], sf[f]) / mag
        v = sf[f] * phi[f] / mag
        tensor[owner[f]] += t
        vector[owner[f]] += v
        if f < n_internal:
            tensor[neighbour[f]] += t
            vector[neighbour[f]] += v
    scale = np.sum(tensor[0] ** 2)
    removed = [c for c in range(3) if tensor[0, c, c] ** 2 / scale < 1e-15]
    for c in removed:
        tensor[:, c, c] += 1.0
    inverse = np.linalg.inv(tensor)
    for c in removed:
        inverse[:, c, c] -= 1.0
    u = np.einsum("cij,cj->ci", inverse, vector)
    for x, y, z in u:
        print(f"{float(x)!r} {float(y)!r} {float(z)!r}")


main()
