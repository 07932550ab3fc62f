"""Exceptions raised by pygrid.

Every error a user can trigger derives from PyGridError, and also from the
builtin exception a Python programmer would expect (ValueError, TypeError,
MemoryError), so both ``except pg.PyGridError`` and ``except ValueError`` work.
"""


class PyGridError(Exception):
    """Base class of every error pygrid raises on purpose."""


class ConfigError(PyGridError, ValueError):
    """A bad command-line flag, environment variable or init() argument."""


class GridError(PyGridError, ValueError):
    """Bad lattice dimensions, SIMD layout or MPI layout."""


class ConformabilityError(PyGridError, ValueError):
    """Fields or expressions that cannot be combined: other grid, checkerboard or precision."""


class SiteTypeError(PyGridError, TypeError):
    """An operation the site types do not allow (matrix times the wrong vector, ...)."""


class ShapeError(PyGridError, ValueError):
    """An array of the wrong shape or dtype handed to pygrid (from_numpy, ...)."""


class BackendError(PyGridError, RuntimeError):
    """A backend that cannot be used here: package missing, no device, compile failure."""


class DeviceMemoryError(PyGridError, MemoryError):
    """The device cache cannot make room under the --device-mem watermark."""


class PerformanceWarning(UserWarning):
    """Something runs correctly but slower than it could (fewer SIMD lanes than the machine has)."""


class GridFlagWarning(UserWarning):
    """A flag of Grid's that has no effect in pygrid, and why (it is consumed, not an error)."""
