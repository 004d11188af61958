# Checks by hand that ParaView reads fvpoisson's VTK output (not run by CI).
#   FVPOISSON_KEEP_VTK=/tmp/vtk cargo test --lib io::vtk::tests::series_round_trips_through_the_files
#   pvpython scripts/check_vtk_with_paraview.py /tmp/vtk/vtk_series [screenshot.png]
# (with a screenshot: xvfb-run -a -s "-screen 0 1280x1024x24" pvpython ...)
# Prints cell types, field ranges, ParaView's cell volumes against the OpenFOAM
# volumes written as field V, vtkCellValidator's verdict, and the time steps
# and blocks of the .pvd.
import sys
from paraview.simple import *
from paraview import servermanager as sm
from vtkmodules.util.numpy_support import vtk_to_numpy as np_of
import numpy as np
from vtkmodules.vtkFiltersGeneral import vtkCellValidator

d = sys.argv[1]
names = {10: "TETRA", 12: "HEXAHEDRON", 13: "WEDGE", 14: "PYRAMID", 42: "POLYHEDRON"}
r = XMLUnstructuredGridReader(FileName=[d + "/case_000001/internal.vtu"])
r.UpdatePipeline()
g = sm.Fetch(r)
print("internal.vtu: cells", g.GetNumberOfCells(), "points", g.GetNumberOfPoints())
print("cell types:", [names[g.GetCellType(i)] for i in range(g.GetNumberOfCells())])
cd = g.GetCellData()
for i in range(cd.GetNumberOfArrays()):
    a = cd.GetArray(i)
    print("  field %-8s comps %d range %s" % (a.GetName(), a.GetNumberOfComponents(),
          [a.GetRange(c) for c in range(a.GetNumberOfComponents())]))
for i in range(g.GetNumberOfCells()):
    c = g.GetCell(i)
    print("  cell", i, names[g.GetCellType(i)], "points", c.GetNumberOfPoints(), "faces", c.GetNumberOfFaces())
# Volumes by ParaView (CellSize) vs OpenFOAM-exact volumes written as field V.
cs = CellSize(Input=r, ComputeVolume=1)
cs.UpdatePipeline()
v = sm.Fetch(cs).GetCellData()
vol, V = np_of(v.GetArray("Volume")), np_of(v.GetArray("V"))
print("CellSize volume:", vol, "\nfield V        :", V, "\nmax |diff|", np.abs(vol - V).max())
mq = MeshQuality(Input=r, TetQualityMeasure="Volume", HexQualityMeasure="Volume",
                 WedgeQualityMeasure="Volume", PyramidQualityMeasure="Volume")
mq.UpdatePipeline()
print("MeshQuality signed volumes (linear cells):", np_of(sm.Fetch(mq).GetCellData().GetArray("Quality")))
cv = vtkCellValidator(); cv.SetInputData(g); cv.Update()
st = cv.GetOutput().GetCellData().GetArray("ValidityState")
print("vtkCellValidator state per cell (0 = valid):", [int(st.GetValue(i)) for i in range(st.GetNumberOfTuples())])
# The collection: time steps and blocks.
pvd = PVDReader(FileName=d + "/case.pvd")
pvd.UpdatePipelineInformation()
print("pvd timesteps:", pvd.TimestepValues)
for t in pvd.TimestepValues:
    pvd.UpdatePipeline(t)
    mb = sm.Fetch(pvd)
    it = mb.NewIterator(); it.InitTraversal()
    while not it.IsDoneWithTraversal():
        ds = it.GetCurrentDataObject()
        name = it.GetCurrentMetaData().Get(mb.NAME())
        arrs = {ds.GetCellData().GetArrayName(k): ds.GetCellData().GetArray(k).GetRange(0) for k in range(ds.GetCellData().GetNumberOfArrays())}
        print("  t=%g block %-8s %-22s cells %d points %d p-range %s" % (t, name, ds.GetClassName(), ds.GetNumberOfCells(), ds.GetNumberOfPoints(), arrs.get("p")))
        it.GoToNextItem()
if len(sys.argv) > 2:
    pvd.UpdatePipeline(pvd.TimestepValues[-1])
    view = GetActiveViewOrCreate("RenderView"); view.ViewSize = [900, 700]
    disp = Show(pvd, view); ColorBy(disp, ("CELLS", "p")); disp.SetRepresentationType("Surface With Edges")
    view.CameraPosition = [4, -5, 4]; view.CameraFocalPoint = [0.3, 0.3, 0.6]; view.CameraViewUp = [0, 0, 1]
    view.ResetCamera(); Render(view); SaveScreenshot(sys.argv[2], view)
    print("screenshot", sys.argv[2])
