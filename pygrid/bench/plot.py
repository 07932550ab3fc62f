"""``--plot out.png``: GFlop/s (or GB/s) against lattice volume, one line per precision, roofline drawn."""
from __future__ import annotations

from collections import defaultdict


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def _metric(run_dict):
    k = run_dict["kernels"][run_dict["main_kernel"]]
    if k["flops_per_site"]:
        return k["gflops"], k["roofline_gflops"], "GFlop/s"
    roof = run_dict["roofline"]["copy_gbps"] if run_dict.get("roofline") else None
    return k["gbps"], roof, "GB/s"


def write_plot(path, kind, runs, title_extra=""):
    """Write a PNG of the headline kernel of every run against the lattice volume."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib "
                              "(or pip install 'pygrid[plot]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = defaultdict(list)
    unit = "GFlop/s"
    main = None
    for r in runs:
        value, roof, unit = _metric(r)
        main = r["main_kernel"]
        base = r.get("baseline_kernel")
        bval = None
        if base:
            bk = r["kernels"][base]
            bval = bk["gflops"] if unit == "GFlop/s" else bk["gbps"]
        series[r["precision"]].append((r["volume"], value, roof, bval))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {"double": "tab:blue", "single": "tab:orange"}
    for prec, pts in series.items():
        pts.sort()
        vols = [p[0] for p in pts]
        c = colours.get(prec)
        ax.plot(vols, [p[1] for p in pts], "o-", color=c, label=f"{main} {prec}")
        if all(p[3] is not None for p in pts):
            ax.plot(vols, [p[3] for p in pts], "x:", color=c, alpha=0.7, label=f"numpy baseline {prec}")
        if all(p[2] is not None for p in pts):
            ax.plot(vols, [p[2] for p in pts], "--", color=c, alpha=0.7,
                    label=f"bandwidth roofline {prec}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lattice volume (sites)")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.set_title(f"pygrid benchmark {kind}{title_extra}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
