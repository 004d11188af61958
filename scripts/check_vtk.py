#!/usr/bin/env python3
"""Opens a .pvd series with VTK's own XML readers (pip install vtk) and checks it.

    python3 scripts/check_vtk.py CASE.pvd [--cells N] [--field NAME]... [--sum S]

For every step listed in the .pvd, the step's .vtm is read by
vtkXMLMultiBlockDataReader; the "internal" block (one unstructured grid, or
the pieces of a parallel run) must hold N cells (--cells), every --field as
cell data, and the first field's values must add up to S (--sum, relative
1e-12); every boundary block must read as polygons. Prints one line per step;
exits 1 on the first mismatch. Used by the tests where `import vtk` works.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET

import vtk


def leaves(data):
    """The data sets under a composite data set (or the data set itself)."""
    if data is None:
        return []
    if data.IsA("vtkCompositeDataSet"):
        out = []
        it = data.NewIterator()
        it.SkipEmptyNodesOn()
        it.InitTraversal()
        while not it.IsDoneWithTraversal():
            out.append(it.GetCurrentDataObject())
            it.GoToNextItem()
        return out
    return [data]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pvd")
    ap.add_argument("--cells", type=int)
    ap.add_argument("--field", action="append", default=[])
    ap.add_argument("--sum", type=float)
    args = ap.parse_args()

    base = os.path.dirname(os.path.abspath(args.pvd))
    steps = [(float(d.get("timestep")), d.get("file")) for d in ET.parse(args.pvd).iter("DataSet")]
    if not steps:
        fail(f"{args.pvd}: no steps")
    for time, file in steps:
        reader = vtk.vtkXMLMultiBlockDataReader()
        reader.SetFileName(os.path.join(base, file))
        reader.Update()
        root = reader.GetOutput()
        names = [root.GetMetaData(i).Get(vtk.vtkCompositeDataSet.NAME()) for i in range(root.GetNumberOfBlocks())]
        if "internal" not in names or "boundary" not in names:
            fail(f"{file}: top-level blocks {names}")
        internal = leaves(root.GetBlock(names.index("internal")))
        cells = sum(d.GetNumberOfCells() for d in internal)
        if args.cells is not None and cells != args.cells:
            fail(f"{file}: internal has {cells} cells in {len(internal)} pieces, expected {args.cells}")
        for name in args.field:
            for d in internal:
                if d.GetNumberOfCells() and d.GetCellData().GetArray(name) is None:
                    fail(f"{file}: a piece of internal has no cell field {name}")
        if args.sum is not None and args.field:
            total = 0.0
            for d in internal:
                a = d.GetCellData().GetArray(args.field[0])
                total += sum(a.GetValue(i) for i in range(a.GetNumberOfValues()))
            if abs(total - args.sum) > 1e-12 * max(1.0, abs(args.sum)):
                fail(f"{file}: sum of {args.field[0]} is {total!r}, expected {args.sum!r}")
        boundary = leaves(root.GetBlock(names.index("boundary")))
        for d in boundary:
            if not d.IsA("vtkPolyData") or d.GetNumberOfCells() == 0:
                fail(f"{file}: a boundary block is {d.GetClassName()} with {d.GetNumberOfCells()} cells")
        print(f"t={time:g} {file}: internal {cells} cells in {len(internal)} piece(s), "
              f"{len(boundary)} boundary patches")
    print("OK")


if __name__ == "__main__":
    main()
