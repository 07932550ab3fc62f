from .grid import GridCartesian, GridCartesian5D, GridRedBlackCartesian
from .shift import shift_table
from .simd import default_nsimd, default_simd_layout, host_simd_bits

__all__ = [
    "GridCartesian", "GridCartesian5D", "GridRedBlackCartesian", "shift_table",
    "default_nsimd", "default_simd_layout", "host_simd_bits",
]
