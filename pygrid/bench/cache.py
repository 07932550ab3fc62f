"""``pygrid benchmark cache``: the MemoryManager on the emulated device under a watermark.

More LatticeFermion fields than fit under ``--device-mem`` are opened in turn
on the emulated device (a separate copy in host memory; transfers are real
copies), so every open misses: host->device copy, and an eviction of the least
recently used field.  Reported per sweep (one open/close of every field):
transfers, evictions and bytes moved, the cost of one open/close, and the
host->device rate against the copy roofline.  A resident field's open/close
(no transfer) measures the bookkeeping cost of a view.

The write sweep also checks that data written through accelerator views
survives eviction (an evicted AcceleratorDirty field must be copied back).
"""
from __future__ import annotations

import numpy as np

from .common import make_grid, new_run
from .kinds import Kind
from .report import Kernel
from .roofline import measure_copy
from .units import real_bytes

#: Most host memory the fields of this benchmark may use.
HOST_BUDGET = 256 * 1024 * 1024
#: Most fields: enough to overflow the cache twice, few enough to sweep quickly.
MAX_FIELDS = 48


def plan(field_bytes, device_mem_mb):
    """(number of fields, watermark bytes, note) so that the fields overflow the watermark."""
    from pygrid.errors import ConfigError

    MB = 1024 * 1024
    note = None
    if device_mem_mb is None:
        wm = 4 * field_bytes
        note = f"--device-mem none: using a watermark of 4 fields ({wm / MB:.2f} MB)"
    else:
        wm = int(device_mem_mb * MB)
    nfit = wm // field_bytes
    if nfit < 1:
        need = -(-field_bytes // MB)
        raise ConfigError(f"--device-mem {device_mem_mb}: one field of {field_bytes / MB:.2f} MB does not "
                          f"fit; use --device-mem {need} or more, or a smaller --grid")
    max_fields = max(4, min(MAX_FIELDS, HOST_BUDGET // field_bytes))
    nfields = min(2 * nfit + 2, max_fields)
    if nfields <= nfit + 1:
        nfit = max(1, nfields // 2)
        wm = nfit * field_bytes + field_bytes // 2
        note = (f"--device-mem {device_mem_mb} holds more than the "
                f"{nfields} fields this benchmark sweeps (at most {MAX_FIELDS}, "
                f"{HOST_BUDGET // MB} MB); watermark lowered to {wm / MB:.2f} MB ({nfit} fields)")
    return nfields, wm, note


def run(dims, precision, ctx):
    import pygrid as pg
    from pygrid.memory import EmulatedDevice, MemoryManager, ViewMode

    grid = make_grid(dims, precision, ctx.simd_layout)
    cfg = pg.current_config()
    rb = real_bytes(precision)
    field_bytes = grid.gsites * 24 * rb
    nfields, wm, note = plan(field_bytes, cfg.device_mem)
    mgr = MemoryManager(EmulatedDevice(), wm)
    fields = [pg.Lattice(grid, pg.SpinColourVector(), precision, manager=mgr) for _ in range(nfields)]
    for i, f in enumerate(fields):
        with f.view(ViewMode.CpuWrite) as h:
            h[...] = i + 1.0  # written, not zero pages
    r = new_run("cache", grid, precision)
    if note:
        r.notes.append(note)
    r.extra["fields"] = nfields
    r.extra["field_bytes"] = field_bytes
    r.extra["watermark_bytes"] = wm
    r.extra["fields_fitting"] = wm // field_bytes

    def sweep_kernel(name, mode, desc, write, fn=None, opens=None):
        calls = [0]
        opens = nfields if opens is None else opens

        def sweep():
            calls[0] += 1
            if fn is not None:
                fn()
                return
            for i, f in enumerate(fields):
                with f.view(mode) as d:
                    if write:
                        d.flat[0] = 1000.0 + i
        mgr.reset_stats()
        ctx.progress.step(f"cache {precision}: {name} over {nfields} fields")
        t, tmin, it = ctx.timer(sweep, f"cache {precision} {name}")
        s = mgr.stats()
        n = calls[0]
        moved = (s["h2d_bytes"] + s["d2h_bytes"]) / n
        k = Kernel(name, "cache", t, tmin, it, opens, 0, moved / opens, desc, per="view")
        k.extra = {
            "opens_per_call": opens,
            "seconds_per_open": t / opens,
            "h2d_per_call": s["h2d_count"] / n,
            "d2h_per_call": s["d2h_count"] / n,
            "evictions_per_call": s["evictions"] / n,
            "h2d_bytes_per_call": s["h2d_bytes"] / n,
            "d2h_bytes_per_call": s["d2h_bytes"] / n,
        }
        return k

    r.kernels.append(sweep_kernel("read_sweep", ViewMode.AcceleratorRead,
                                  "AcceleratorRead open/close of every field in turn (LRU misses)", False))
    r.kernels.append(sweep_kernel("write_sweep", ViewMode.AcceleratorWrite,
                                  "AcceleratorWrite open/close of every field in turn, one element written",
                                  True))
    # a kernel per step: dst = min(src0, src1) on the device (two reads and a write, as an axpy, with
    # values that stay bounded however often the sweep repeats)
    nf = len(fields)

    def kernel_step():
        for i in range(nf):
            a, b, c = fields[i], fields[(i + 1) % nf], fields[(i + 2) % nf]
            with a.view(ViewMode.AcceleratorRead) as x, b.view(ViewMode.AcceleratorRead) as y, \
                    c.view(ViewMode.AcceleratorWrite) as z:
                np.minimum(x, y, out=z)
    if nf >= 3 and r.extra["fields_fitting"] >= 3:
        k = sweep_kernel("kernel_sweep", None, "z = min(x, y) on the device for consecutive field triples "
                         "(2 AcceleratorRead + 1 AcceleratorWrite views per step)", False, fn=kernel_step,
                         opens=3 * nf)
        r.kernels.append(k)
        # the kernel overwrote the fields: re-mark them for the write check below
        for i, f in enumerate(fields):
            with f.view(ViewMode.AcceleratorWrite) as d:
                d.flat[0] = 1000.0 + i

    # did the writes survive eviction?
    lost = 0
    for i, f in enumerate(fields):
        with f.view(ViewMode.CpuRead) as h:
            if h.flat[0] != 1000.0 + i:
                lost += 1
    r.extra["write_sweep_lost_fields"] = lost
    if lost:
        r.notes.append(f"MemoryManager BUG: {lost} of {nfields} fields lost the data written through an "
                       f"AcceleratorWrite view when evicted (no device->host copy on eviction)")

    # a resident field: view bookkeeping only
    f0 = fields[0]
    with f0.view(ViewMode.AcceleratorRead):
        pass
    mgr.reset_stats()

    def resident():
        with f0.view(ViewMode.AcceleratorRead):
            pass
    ctx.progress.step(f"cache {precision}: resident view open/close")
    t, tmin, it = ctx.timer(resident, f"cache {precision} resident")
    s = mgr.stats()
    k = Kernel("resident_open_close", "cache", t, tmin, it, 1, 0, 0,
               "AcceleratorRead open/close of a field already on the device (no transfer)")
    k.extra = {"h2d_total": s["h2d_count"], "evictions_total": s["evictions"]}
    r.kernels.append(k)

    ctx.progress.step(f"cache {precision}: copy roofline")
    r.roofline = measure_copy(field_bytes, precision, ctx.timer, f"cache {precision} copy")
    r.extra["manager_report"] = mgr.report()
    r.main = "read_sweep"
    fields.clear()  # the host and device memory go back before the next run
    return r


def preflight(dims, precision, simd_layout, cfg, label):
    """The watermark and field count fit the host before anything runs."""
    plan(make_grid(dims, precision, simd_layout).gsites * 24 * real_bytes(precision), cfg.device_mem)


KIND = Kind("cache", "MemoryManager on the emulated device under --device-mem: transfers, evictions, "
            "view cost", run, preflight=preflight, device="emulated")
