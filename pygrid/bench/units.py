"""Sizes of reals and lattices as the benchmarks count and print them."""
from __future__ import annotations

import numpy as np


def real_bytes(precision: str) -> int:
    """Bytes of one real number in ``precision``."""
    return 8 if precision == "double" else 4


def real_dtype(precision: str):
    return np.float64 if precision == "double" else np.float32


def dotted(dims) -> str:
    return ".".join(str(int(d)) for d in dims)


#: Arrays smaller than this are copied on one thread: starting the other threads
#: costs more than it saves (the openmp backend does the same for small fields).
PARALLEL_MIN_BYTES = 1 << 20
