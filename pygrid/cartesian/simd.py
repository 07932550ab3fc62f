"""The SIMD virtual-node layout: how many lanes, and how they split the lattice.

Lanes hold reals (real and imaginary parts live in separate planes), so the
natural lane count is the register width in reals: 8 doubles or 16 floats on
AVX-512, 4 or 8 on AVX2.  Nsimd is a virtual vector length (seed 000): a
multiple of the hardware width is allowed and sometimes faster.
"""
from __future__ import annotations

import functools
import math

from ..errors import GridError


@functools.cache
def host_simd_bits() -> int:
    """Widest SIMD register the kernels are compiled for, in bits (128 when unknown).

    That is the host CPU's, unless numba is told to compile for other features
    (``NUMBA_CPU_FEATURES``, as on a cluster whose nodes share one cache): the kernels'
    structure and Nsimd then follow what numba emits, not the CPU it happens to run on."""
    flags = ""
    try:
        from numba.core import config

        flags = config.CPU_FEATURES or ""
    except Exception:  # numba absent: the host's features below
        pass
    if not flags:
        try:
            import llvmlite.binding as llvm  # numba's own view of the CPU

            flags = llvm.get_host_cpu_features().flatten()
        except Exception:  # llvmlite absent or too old: fall back on /proc
            try:
                with open("/proc/cpuinfo") as f:
                    flags = next((line for line in f if line.startswith("flags")), "")
            except OSError:
                pass
    if "+avx512f" in flags or " avx512f" in flags:
        return 512
    if "+avx2" in flags or " avx2" in flags:
        return 256
    return 128


def default_nsimd(precision: str) -> int:
    """Lanes per outer site for a precision: one register of reals."""
    bits = host_simd_bits()
    return bits // (64 if precision == "double" else 32)


def default_simd_layout(ldims, nsimd: int, skip=()) -> tuple[int, ...]:
    """Split nsimd lanes over the dimensions, factors of two, largest reduced dim first.

    Only dimensions whose reduced extent stays even receive a factor, so a
    shift by one never needs more than one lane rotation and red-black
    checkerboards stay lane-uniform.  If the lattice is too small for nsimd
    lanes, fewer lanes are used.
    """
    if nsimd < 1 or nsimd & (nsimd - 1):
        raise GridError(f"Nsimd must be a power of two, got {nsimd}")
    layout = [1] * len(ldims)
    remaining = nsimd
    while remaining > 1:
        best = None
        for d in reversed(range(len(ldims))):
            if d in skip:
                continue
            r = ldims[d] // layout[d]
            if ldims[d] % (layout[d] * 2) == 0 and (r // 2) % 2 == 0:
                if best is None or r > ldims[best] // layout[best]:
                    best = d
        if best is None:
            break
        layout[best] *= 2
        remaining //= 2
    return tuple(layout)


def check_layout(ldims, simd_layout) -> None:
    if len(simd_layout) != len(ldims):
        raise GridError(
            f"simd_layout {tuple(simd_layout)} has {len(simd_layout)} entries; "
            f"the grid has {len(ldims)} dimensions"
        )
    for d, (l, s) in enumerate(zip(ldims, simd_layout)):
        if not isinstance(s, int) or s < 1:
            raise GridError(f"simd_layout[{d}] = {s!r}: expected a positive integer")
        if l % s:
            raise GridError(
                f"local dimension {d} of extent {l} is not divisible by simd_layout[{d}] = {s}; "
                f"choose a simd_layout whose entries divide the local dimensions {tuple(ldims)}"
            )
    n = math.prod(simd_layout)
    if n & (n - 1):
        raise GridError(f"simd_layout {tuple(simd_layout)} gives Nsimd = {n}; it must be a power of two")
