"""Benchmark results: one :class:`Kernel` per timed kernel, one :class:`Run` per (kind, grid,
precision), their JSON form and the lines the CLI prints."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .units import PARALLEL_MIN_BYTES


@dataclass
class Kernel:
    """One timed kernel: seconds per call and the counts its rates use."""

    name: str
    role: str                     # "pygrid", "numpy" (baseline), "roofline", "memory", "cache"
    seconds: float                # median per call
    seconds_min: float
    iterations: int
    sites: int                    # sites (or elements) per call
    flops_per_site: float
    bytes_per_site: float
    description: str = ""
    extra: dict = field(default_factory=dict)
    #: what ``sites`` counts, in the labels: "site", or e.g. "view" for the cache benchmark
    per: str = "site"
    #: the copy bandwidth of this kernel's own working set, when it differs from the run's roofline
    copy_gbps: float | None = None

    @property
    def flops(self):
        return self.flops_per_site * self.sites

    @property
    def nbytes(self):
        return self.bytes_per_site * self.sites

    @property
    def gflops(self):
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbps(self):
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def roofline_gflops(self, copy_gbps):
        if not self.bytes_per_site or not copy_gbps:
            return None
        return copy_gbps * self.flops_per_site / self.bytes_per_site

    def to_dict(self, copy_gbps=None):
        copy_gbps = self.copy_gbps or copy_gbps
        d = {
            "role": self.role,
            "description": self.description,
            "seconds_per_call": self.seconds,
            "seconds_min": self.seconds_min,
            "iterations": self.iterations,
            "sites": self.sites,
            "sites_are": self.per,
            "flops_per_site": self.flops_per_site,
            "bytes_per_site": self.bytes_per_site,
            "flops_per_call": self.flops,
            "bytes_per_call": self.nbytes,
            "gflops": self.gflops,
            "gbps": self.gbps,
        }
        roof = self.roofline_gflops(copy_gbps) if self.flops_per_site else None
        d["roofline_gflops"] = roof
        d["roofline_percent"] = (100.0 * self.gbps / copy_gbps) if copy_gbps else None
        if self.copy_gbps:
            d["copy_gbps"] = self.copy_gbps
        d.update(self.extra)
        return d


@dataclass
class Run:
    """Every kernel of one kind on one (grid, precision)."""

    kind: str
    grid: tuple
    precision: str
    simd_layout: tuple
    nsimd: int
    kernels: list = field(default_factory=list)
    roofline: Kernel | None = None
    main: str | None = None           # name of the headline kernel
    baseline: str | None = None       # name of the numpy baseline it is compared with
    notes: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def kernel(self, name):
        for k in self.kernels:
            if k.name == name:
                return k
        if self.roofline is not None and self.roofline.name == name:
            return self.roofline
        raise KeyError(name)

    @property
    def copy_gbps(self):
        return self.roofline.gbps if self.roofline is not None else None

    @property
    def speedup(self):
        if self.main and self.baseline:
            return self.kernel(self.baseline).seconds / self.kernel(self.main).seconds
        return None

    def to_dict(self):
        c = self.copy_gbps
        d = {
            "kind": self.kind,
            "grid": list(self.grid),
            "volume": int(np.prod(self.grid)),
            "precision": self.precision,
            "simd_layout": list(self.simd_layout),
            "nsimd": self.nsimd,
            "main_kernel": self.main,
            "baseline_kernel": self.baseline,
            "speedup_vs_numpy": self.speedup,
            "roofline": None if self.roofline is None else {
                "copy_gbps": self.roofline.gbps,
                "copy_bytes_per_call": self.roofline.nbytes,
                "seconds_per_call": self.roofline.seconds,
                "iterations": self.roofline.iterations,
            },
            "kernels": {k.name: k.to_dict(c) for k in self.kernels},
            "notes": list(self.notes),
        }
        d.update(self.extra)
        return d


def format_seconds(t):
    if t >= 1:
        return f"{t:8.3f} s "
    if t >= 1e-3:
        return f"{t * 1e3:8.3f} ms"
    return f"{t * 1e6:8.2f} us"


def _count(v):
    return f"{v:g}" if isinstance(v, float) and v != int(v) else f"{int(v)}"


def format_run(run: Run) -> str:
    """The per-kernel lines of one run, Grid-benchmark style with the counts stated."""
    c = run.copy_gbps
    lines = [f"{run.kind} on {'.'.join(map(str, run.grid))}, {run.precision} precision, "
             f"Nsimd {run.nsimd}, simd layout {'.'.join(map(str, run.simd_layout))}"]
    if run.roofline is not None:
        r = run.roofline
        how = r.description.split(" moving")[0]
        if r.description.startswith("numba"):
            how += " (" + ("parallel" if r.nbytes // 2 >= PARALLEL_MIN_BYTES else "one thread") + ")"
        lines.append(
            f"  bandwidth roofline: {how} of {r.nbytes // 2:.0f} B -> "
            f"{r.gbps:.2f} GB/s ({format_seconds(r.seconds).strip()} per call, {r.iterations} calls)"
        )
    name_w = max([len(k.name) for k in run.kernels] + [6])
    for k in run.kernels:
        parts = [f"  {k.name:<{name_w}}  {format_seconds(k.seconds)}/call"]
        if k.flops_per_site:
            parts.append(f"{k.gflops:9.3f} GFlop/s [{_count(k.flops_per_site)} flop/{k.per}]")
        if k.bytes_per_site:
            parts.append(f"{k.gbps:9.3f} GB/s [{_count(k.bytes_per_site)} B/{k.per}]")
        kc = k.copy_gbps or c
        if kc and k.bytes_per_site and k.role != "roofline":
            roof = k.roofline_gflops(kc)
            if k.flops_per_site and roof:
                parts.append(f"{100 * k.gflops / roof:5.1f}% of roofline {roof:.2f} GFlop/s")
            else:
                parts.append(f"{100 * k.gbps / kc:5.1f}% of copy bandwidth")
        parts.append(f"({k.iterations} calls)")
        lines.append("  ".join(parts))
        for key, val in k.extra.items():
            if key.startswith("_"):
                continue
            lines.append(f"  {'':<{name_w}}    {key}: {val}")
    if run.speedup is not None:
        lines.append(f"  {run.main} vs numpy ({run.baseline}): {run.speedup:.2f}x faster"
                     if run.speedup >= 1 else
                     f"  {run.main} vs numpy ({run.baseline}): {1 / run.speedup:.2f}x slower")
    for n in run.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
