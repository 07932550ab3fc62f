"""Fields and other array libraries: construction from arrays, one site by coordinate, DLPack.

Two layouts meet here (docs/interop.md):

- natural coordinates, ``[x, y, z, t, *site]`` complex numbers: ``np.asarray(field)``,
  ``Lattice(grid, array)``, ``peek_site`` / ``poke_site``.  These copy.
- the SIMD layout the kernels use, ``real[osites][ncomp][2][nsimd]``: ``__dlpack__`` and
  ``from_dlpack`` share this memory without a copy.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import communicator
from ..errors import GridError, ShapeError, SiteTypeError
from ..memory import ViewMode
from ..tensors import sitetype as st

__all__ = ["site_type_for_shape", "peek_site", "poke_site", "from_dlpack", "DLPACK_CPU"]

#: DLPack's device type of host memory (kDLCPU)
DLPACK_CPU = 1

_SHAPES_TEXT = ("() complex, (4,) spin vector, (n,) colour vector, (4, 4) spin matrix, (n, n) colour "
                "matrix, (4, n) fermion, (4, 4, n, n) propagator, (4, n, n) gauge field")


def site_type_for_shape(shape: tuple[int, ...]) -> st.SiteType:
    """The site type whose tensor has ``shape`` (a 4 is read as spin, any other n as colour)."""
    shape = tuple(int(n) for n in shape)
    if shape == ():
        return st.Complex
    if len(shape) == 1:
        return st.SpinVector() if shape[0] == 4 else st.ColourVector(shape[0])
    if len(shape) == 2 and shape[0] == shape[1]:
        return st.SpinMatrix() if shape[0] == 4 else st.ColourMatrix(shape[0])
    if len(shape) == 2 and shape[0] == 4:
        return st.SpinColourVector(shape[1])
    if len(shape) == 4 and shape[:2] == (4, 4) and shape[2] == shape[3]:
        return st.SpinColourMatrix(shape[2])
    if len(shape) == 3 and shape[0] == 4 and shape[1] == shape[2]:
        return st.LorentzColourMatrix(shape[1])
    raise SiteTypeError(f"no site type has the tensor shape {shape}; the shapes are {_SHAPES_TEXT}. "
                        f"For another, name it: pg.Lattice(grid, site_type).from_numpy(array)")


def precision_of_dtype(dtype: np.dtype) -> str:
    return "single" if np.dtype(dtype) in (np.float32, np.complex64, np.float16) else "double"


def split_array(grid, array: Any, what: str) -> tuple[np.ndarray, st.SiteType]:
    """``array`` as numpy, and the site type its trailing axes (after the lattice's) name."""
    from .lattice import _as_array

    a = _as_array(array, what)
    lat = grid.gshape
    if a.shape[:len(lat)] != lat:
        raise ShapeError(f"{what}: the array's leading axes {a.shape[:len(lat)]} are not the lattice "
                         f"{lat} of {grid} (an array is indexed [x, y, z, t, *site], as to_numpy() gives)")
    if a.dtype.kind not in "biufc":
        raise ShapeError(f"{what}: expected a numeric array (bool, integer, float or complex), got dtype "
                         f"{a.dtype}")
    return a, site_type_for_shape(a.shape[len(lat):])


# ---- one site ------------------------------------------------------------------------------------

def _locate(field, coor, what: str):
    """(owner rank, outer site, lane) of global coordinate ``coor`` in ``field``."""
    g = field.grid
    try:
        c = tuple(int(x) for x in coor)
    except TypeError:
        raise GridError(f"{what}: coordinate must be {g.nd} integers, got {coor!r}") from None
    if len(c) != g.nd or any(not 0 <= x < n for x, n in zip(c, g.gdims)):
        raise GridError(f"{what}: coordinate {c} is not a site of the {'.'.join(map(str, g.gdims))} lattice "
                        f"({g.nd} integers, 0 <= x_mu < L_mu)")
    if g.checkerboarded:
        parity = sum(c[d] for d in g.parity_dims) % 2
        if parity != field.checkerboard:
            names = ("even", "odd")
            raise GridError(f"{what}: site {c} is {names[parity]}, and the field holds the "
                            f"{names[field.checkerboard]} checkerboard")
    owner_coor = tuple(x // n for x, n in zip(c, g.ldims))
    owner = communicator.rank_of(owner_coor, g.mpi_layout)
    local = [x - s for x, s in zip(c, g.lstart)]
    if g.checkerboarded:
        local[g.cb_dim] //= 2
    if owner != g.comm.rank:
        return owner, None, None
    o, lane = g.outer_lane_of(tuple(local))
    return owner, int(o), int(lane)


def peek_site(field, coor) -> Any:
    """The tensor at global coordinate ``coor`` (a copy: a number for a scalar field, else an array
    shaped ``field.site_shape``).  Grid's ``peekSite``.

    On a red-black field the site must be of its checkerboard.  Under MPI every rank calls it and
    every rank gets the value.
    """
    owner, o, lane = _locate(field, coor, "peek_site")
    value = None
    if o is not None:
        with field.view(ViewMode.CpuRead) as b:
            re, im = b[o, :, 0, lane], b[o, :, 1, lane]
            value = re.copy() if field.is_real else re + 1j * im
        value = value.reshape(field.site_shape).astype(field.dtype, copy=False)
    if field.grid.decomposed:
        value = field.grid.comm.bcast(value, root=owner)
    return value[()] if value.ndim == 0 else value


def poke_site(field, coor, value) -> Any:
    """Set the tensor at global coordinate ``coor`` to ``value`` (a number for a scalar field, else an
    array shaped ``field.site_shape``); returns ``field``.  Grid's ``pokeSite``.

    Under MPI every rank calls it with the same value; the rank that holds the site writes it.
    """
    from .lattice import _as_array

    v = _as_array(value, "poke_site")
    if v.shape != field.site_shape:
        raise ShapeError(f"poke_site: a site of {field} is shaped {field.site_shape}, the value is "
                         f"{v.shape}")
    if v.dtype.kind not in "biufc":
        raise ShapeError(f"poke_site: expected a number or numeric array, got dtype {v.dtype}")
    if field.is_real and v.dtype.kind == "c" and np.any(v.imag != 0):
        raise ShapeError("poke_site: a complex value for a Real field")
    _, o, lane = _locate(field, coor, "poke_site")
    if o is not None:
        flat = v.reshape(-1)
        with field.view(ViewMode.CpuWrite) as b:
            b[o, :, 0, lane] = flat.real
            b[o, :, 1, lane] = flat.imag if v.dtype.kind == "c" else 0
    return field


# ---- DLPack --------------------------------------------------------------------------------------

def from_dlpack(obj, grid, site_type: st.SiteType = st.Complex, checkerboard: int | None = None):
    """A field on ``grid`` whose memory is ``obj``'s (no copy): ``obj`` is a host array in the SIMD
    layout, shaped ``(grid.osites, site_type.ncomp, 2, grid.nsimd)``, float64 (double) or float32
    (single), C-contiguous and writable, such as ``np.from_dlpack(field)`` of another field or
    a torch CPU tensor.

    The field and ``obj``'s owner then share the memory: a write by either is seen by the other
    (on a GPU backend at the next kernel, see docs/interop.md).
    """
    from .lattice import _REAL, Lattice

    try:
        a = np.from_dlpack(obj)
    except (TypeError, AttributeError) as e:
        raise ShapeError(f"from_dlpack: {type(obj).__name__} does not export DLPack ({e})") from None
    except (BufferError, RuntimeError, ValueError) as e:
        raise ShapeError(f"from_dlpack: cannot share {type(obj).__name__}'s memory with the host ({e}); "
                         f"pg.from_dlpack takes host memory (a CPU array or tensor)") from None
    if not isinstance(site_type, st.SiteType):
        raise SiteTypeError(f"from_dlpack: site_type must be a pygrid site type such as pg.ColourMatrix(), "
                            f"got {site_type!r}")
    precision = {np.dtype(np.float64): "double", np.dtype(np.float32): "single"}.get(a.dtype)
    if precision is None:
        raise ShapeError(f"from_dlpack: the SIMD layout holds real numbers (float64 or float32), "
                         f"got {a.dtype}")
    want = (grid.osites, site_type.ncomp, 2, grid.nsimd)
    if a.shape != want:
        raise ShapeError(f"from_dlpack: a {site_type} field on {grid} is shaped {want} in the SIMD layout "
                         f"(osites, ncomp, 2, nsimd); got {a.shape}")
    if not a.flags.c_contiguous:
        raise ShapeError("from_dlpack: the array must be C-contiguous")
    if not a.flags.writeable:
        raise ShapeError("from_dlpack: the array is read-only; a field must be able to write its memory")
    assert a.dtype == _REAL[precision]
    field = Lattice.__new__(Lattice)
    field._adopt(grid, site_type, precision, checkerboard, a)
    field._manager.share_host(field._key)
    return field
