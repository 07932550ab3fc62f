"""The Lattice container: a field of site tensors on a grid.

A Lattice owns one host buffer laid out as ``real[osites][ncomp][2][nsimd]``
(docs/design.md, Data layout), registered with the MemoryManager, which caches
device copies.  All access goes through views opened by intent.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import memory
from ..accelerator import get_backend
from ..cartesian import GridCartesian
from ..errors import GridError, ShapeError, SiteTypeError
from ..expr.nodes import ExprOps, FieldBase
from ..memory import ViewMode
from ..memory.aligned import aligned_zeros
from ..tensors import sitetype as st

_REAL = {"double": np.float64, "single": np.float32}
_CPLX = {"double": np.complex128, "single": np.complex64}
#: the host view a host backend's kernel opens in place of an accelerator view (Lattice._kernel_view)
_HOST_INTENT = {ViewMode.AcceleratorRead: ViewMode.CpuRead, ViewMode.AcceleratorWrite: ViewMode.CpuWrite,
                ViewMode.AcceleratorWriteDiscard: ViewMode.CpuWrite}


class Lattice(FieldBase, ExprOps):
    """A field on ``grid`` with one ``site_type`` tensor per site.

    ``precision`` is 'double' (the default) or 'single'.  On a red-black grid the field
    holds one checkerboard (``checkerboard`` 0 = even, 1 = odd; default 0).  Fields start
    zeroed.  ``Lattice(grid, array)`` copies an array indexed ``[x, y, z, t, *site]`` (as
    ``to_numpy()`` gives): the site type comes from the trailing axes, the precision from
    the dtype (complex64 / float32: single).
    """

    def __init__(self, grid: GridCartesian, site_type: Any = st.Complex, precision: str | None = None,
                 checkerboard: int | None = None, manager: memory.MemoryManager | None = None) -> None:
        array = None
        if not isinstance(site_type, st.SiteType) and _array_like(site_type):
            from .interop import precision_of_dtype, split_array

            array, site_type = split_array(grid, site_type, "Lattice(grid, array)") \
                if isinstance(grid, GridCartesian) else (None, site_type)
            if array is not None and precision is None:
                precision = precision_of_dtype(array.dtype)
        if precision is None:
            precision = "double"
        if not isinstance(grid, GridCartesian):
            raise GridError(f"a Lattice needs a grid (pg.GridCartesian), got {type(grid).__name__}")
        if not isinstance(site_type, st.SiteType):
            raise SiteTypeError(
                f"site_type must be a pygrid site type such as pg.ColourMatrix(), or an array to copy, "
                f"got {site_type!r}"
            )
        if precision not in _REAL:
            raise ShapeError(f"precision must be 'double' or 'single', got {precision!r}")
        buf = aligned_zeros((grid.osites, site_type.ncomp, 2, grid.nsimd), _REAL[precision])
        self._adopt(grid, site_type, precision, checkerboard, buf, manager)
        if array is not None:
            self.from_numpy(array)

    def _adopt(self, grid, site_type, precision, checkerboard, buf, manager=None) -> None:
        """Make this field the owner of ``buf`` (the SIMD-layout array) and register it."""
        self.grid = grid
        self.site_type = site_type
        self.precision = precision
        self._cb = None
        if grid.checkerboarded:
            self.checkerboard = 0 if checkerboard is None else checkerboard
        elif checkerboard is not None:
            raise GridError("checkerboard is only meaningful for fields on a red-black grid")
        self._buf = buf
        self._manager = manager if manager is not None else memory.get_manager()
        self._key = self._manager.register(self, self._buf)

    # ---- properties -----------------------------------------------------------
    @property
    def checkerboard(self) -> int | None:
        return self._cb

    @checkerboard.setter
    def checkerboard(self, cb: int) -> None:
        if not self.grid.checkerboarded:
            raise GridError("checkerboard is only meaningful for fields on a red-black grid")
        if cb not in (0, 1):
            raise GridError(f"checkerboard must be 0 (even) or 1 (odd), got {cb!r}")
        self._cb = cb

    @property
    def site_shape(self) -> tuple[int, ...]:
        return self.site_type.shape

    @property
    def is_real(self) -> bool:
        return self.site_type.is_real

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_REAL[self.precision] if self.is_real else _CPLX[self.precision])

    @property
    def real_dtype(self) -> np.dtype:
        return np.dtype(_REAL[self.precision])

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes

    def __repr__(self) -> str:
        cb = "" if self._cb is None else f", cb={'even' if self._cb == 0 else 'odd'}"
        return f"Lattice({self.site_type}, {self.precision}, {self.grid}{cb})"

    # ---- memory ---------------------------------------------------------------
    def view(self, mode: ViewMode) -> memory.View:
        """A view of the buffer for ``mode`` (a pg.ViewMode): ``with f.view(pg.CpuRead) as a:``.

        The array is shaped (osites, ncomp, 2, nsimd) in the layout of docs/design.md.  A read
        view (CpuRead, AcceleratorRead) is read-only where the array type allows it (numpy,
        the sycl backend's USM arrays; not CuPy's).
        """
        return memory.View(self._manager, self._key, mode)

    def _kernel_view(self, mode: ViewMode) -> memory.View:
        """``view(mode)`` for pygrid's own kernels: a read view gives the array itself, writable, so
        that numba compiles one variant of a kernel whether or not an input aliases its output.

        A backend whose kernels run on the host (numpy, openmp, the emulations) while the fields
        live in a GPU's or a SYCL device's memory gets host views: the manager brings the data
        to the host, as for any CPU access, and the kernel never sees a device array."""
        return memory.View(*self._kernel_intent(mode), read_only=False)

    def _kernel_intent(self, mode: ViewMode) -> tuple:
        """``(manager, key, mode)`` of :meth:`_kernel_view`, for a :class:`pygrid.memory.Views` of
        several fields."""
        if mode.accelerator and not self._manager.device.host_memory and get_backend().device == "unified":
            mode = _HOST_INTENT[mode]
        return self._manager, self._key, mode

    def advise(self, advice: memory.Advise) -> None:
        self._manager.advise(self._key, advice)

    # ---- numpy interop --------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """The whole lattice as a numpy array (a copy), indexed [x, y, z, t, *site]
        ([s, x, y, z, t, *site] on 5D grids).

        On a red-black grid the first parity dimension is halved: stored site
        (xh, y, z, t) is the full site x = 2 xh + (cb + y + z + t) % 2.  Under
        MPI this is collective: every rank calls it and every rank gets the
        whole array (``to_local_numpy`` gives this rank's part alone).
        """
        local = self.to_local_numpy()
        g = self.grid
        if not g.decomposed:
            return local
        parts = g.comm.allgather_array(local)
        out = np.empty(g.gshape + self.site_shape, dtype=local.dtype)
        for r in range(g.comm.size):
            out[g.block_of(r)] = parts[r]
        return out

    def from_numpy(self, array: np.ndarray) -> Lattice:
        """Set the field from an array shaped like ``to_numpy()`` (the whole lattice); returns self.

        Under MPI every rank passes the whole array and keeps its own part.
        """
        g = self.grid
        if not g.decomposed:
            return self.from_local_numpy(array)
        a = _as_array(array, "from_numpy")
        want = g.gshape + self.site_shape
        if a.shape != want:
            raise ShapeError(f"from_numpy: expected an array of shape {want} (the whole lattice) for {self}, "
                             f"got {a.shape}")
        return self.from_local_numpy(a[g.block_of(g.comm.rank)])

    def to_local_numpy(self) -> np.ndarray:
        """This rank's part of the field (a copy), indexed by local coordinates.

        Local coordinate x is global coordinate ``x + grid.lstart`` (with the
        checkerboarded dimension halved on red-black grids); on one rank this is ``to_numpy()``.
        """
        with self.view(ViewMode.CpuRead) as b:
            sites = self.grid.buffer_to_sites(b)
        if self.is_real:
            out = sites[..., 0].copy()
        else:
            out = np.empty(sites.shape[:-1], dtype=self.dtype)
            out.real = sites[..., 0]
            out.imag = sites[..., 1]
        return out.reshape(self.grid.lshape + self.site_shape)

    def from_local_numpy(self, array: np.ndarray) -> Lattice:
        """Set this rank's part of the field from an array shaped like ``to_local_numpy()``; returns self.

        Any numeric dtype (bool, integers, floats, complex) is converted to the field's; NaN and
        inf are data.  Anything else raises ShapeError and leaves the field unchanged.
        """
        what = "from_local_numpy" if self.grid.decomposed else "from_numpy"
        a = _as_array(array, what)
        want = self.grid.lshape + self.site_shape
        if a.shape != want:
            raise ShapeError(f"{what}: expected an array of shape {want} for {self}, got {a.shape}")
        if a.dtype.kind not in "biufc":
            raise ShapeError(f"{what}: expected a numeric array (bool, integer, float or complex), got dtype "
                             f"{a.dtype}")
        if self.is_real and a.dtype.kind == "c" and np.any(a.imag != 0):
            raise ShapeError(f"{what}: complex values for a Real field")
        sites = np.empty(self.grid.lshape + (self.site_type.ncomp, 2), dtype=self.real_dtype)
        flat = a.reshape(self.grid.lshape + (self.site_type.ncomp,))
        sites[..., 0] = flat.real
        sites[..., 1] = flat.imag if a.dtype.kind == "c" else 0
        with self.view(ViewMode.CpuWrite) as b:
            self.grid.sites_to_buffer(sites, b)
        return self

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(field)``: ``to_numpy()``, a copy in natural coordinates."""
        if copy is False:
            raise ValueError(f"np.asarray({self}, copy=False): a field is stored in the SIMD layout, so "
                             f"an array in lattice coordinates is always a copy; for shared memory use "
                             f"np.from_dlpack(field) (the SIMD layout, docs/interop.md)")
        if self.grid.decomposed:
            raise GridError(f"np.asarray({self}): the lattice is split over {self.grid.comm.size} ranks; "
                            f"call field.to_numpy() on every rank (collective, the whole lattice) or "
                            f"field.to_local_numpy() (this rank's part)")
        a = self.to_numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __dlpack_device__(self) -> tuple[int, int]:
        from .interop import DLPACK_CPU

        return (DLPACK_CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Share the field's memory (the host buffer, in the SIMD layout, shaped
        ``(osites, ncomp, 2, nsimd)``) with another library: ``np.from_dlpack(field)``,
        ``torch.from_dlpack(field)``.  From then on the memory manager keeps that buffer
        current between kernels (docs/interop.md)."""
        from .interop import DLPACK_CPU

        if dl_device is not None and tuple(dl_device) != (DLPACK_CPU, 0):
            raise BufferError(f"{self}: DLPack export is of host memory (device {(DLPACK_CPU, 0)}), "
                              f"{tuple(dl_device)} was asked for")
        if copy:
            with self.view(ViewMode.CpuRead) as b:
                buf = np.array(b)
        else:
            buf = self._manager.share_host(self._key)
        kw = {} if max_version is None else {"max_version": max_version}
        return buf.__dlpack__(stream=stream, **kw)

    # ---- assignment -----------------------------------------------------------
    def assign(self, expr: Any) -> Lattice:
        """Evaluate ``expr`` into this field as one fused kernel; returns self."""
        from ..expr.evaluate import evaluate

        evaluate(expr, self)
        return self

    def __imatmul__(self, expr: Any) -> Lattice:
        return self.assign(expr)

    def copy(self) -> Lattice:
        from ..expr.evaluate import evaluate

        out = self.new_like()
        # a new field: no later evaluation into it can find a kept one (as pg.eval)
        return evaluate(self, out, keep=False)

    def new_like(self, site_type: st.SiteType | None = None, precision: str | None = None) -> Lattice:
        return Lattice(self.grid, site_type or self.site_type, precision or self.precision,
                       checkerboard=self._cb)

    def fill(self, value: Any) -> Lattice:
        """Set every site to a number (times the unit tensor) or a constant tensor."""
        return self.assign(value + 0 * self)

    def __iadd__(self, other: Any) -> Lattice:
        return self.assign(self + other)

    def __isub__(self, other: Any) -> Lattice:
        return self.assign(self - other)

    def __imul__(self, other: Any) -> Lattice:
        return self.assign(self * other)


def _array_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, list, tuple)) or hasattr(x, "__array__") or \
        hasattr(x, "__array_interface__")


def _as_array(array: Any, what: str) -> np.ndarray:
    """``np.asarray(array)``; ShapeError for what numpy cannot make an array of (ragged nested lists, ...)."""
    try:
        return np.asarray(array)
    except (ValueError, TypeError) as e:
        raise ShapeError(f"{what}: expected a numpy array shaped like to_numpy(), got a "
                         f"{type(array).__name__} that numpy cannot turn into an array ({e})") from None


def _named(site_factory, doc):
    def make(grid: GridCartesian, precision: str | None = None, checkerboard: int | None = None,
             **kw: Any) -> Lattice:
        return Lattice(grid, site_factory(**kw), precision, checkerboard)

    make.__doc__ = doc
    return make


LatticeComplex = _named(lambda: st.Complex, "A field of complex numbers.")
LatticeReal = _named(lambda: st.Real, "A field of real numbers.")
LatticeColourVector = _named(lambda nc=3: st.ColourVector(nc), "A field of colour vectors (nc=3).")
LatticeColourMatrix = _named(lambda nc=3: st.ColourMatrix(nc), "A field of colour matrices (nc=3).")
LatticeSpinVector = _named(lambda: st.SpinVector(), "A field of spin vectors.")
LatticeSpinMatrix = _named(lambda: st.SpinMatrix(), "A field of spin matrices.")
LatticeFermion = _named(lambda nc=3: st.SpinColourVector(nc), "A field of spin-colour vectors (a fermion).")
LatticeSpinColourVector = LatticeFermion
LatticePropagator = _named(
    lambda nc=3: st.SpinColourMatrix(nc), "A field of spin-colour matrices (a propagator)."
)
LatticeSpinColourMatrix = LatticePropagator
LatticeGaugeField = _named(
    lambda nc=3: st.LorentzColourMatrix(nc), "A gauge field: 4 colour matrices per site."
)
LatticeLorentzColourMatrix = LatticeGaugeField


def kernel_views(*fields: tuple[Lattice, ViewMode]) -> memory.Views:
    """:meth:`Lattice._kernel_view` of several fields opened as one step (:class:`pygrid.memory.Views`):
    ``with kernel_views((psi, AcceleratorRead), (out, AcceleratorWriteDiscard)) as (p, o):``."""
    return memory.Views([f._kernel_intent(m) for f, m in fields])
