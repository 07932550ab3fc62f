"""The Wilson hopping kernel called directly, variants interleaved in one process.

    python benchmarks/bench_dhop_kernels.py --grid 16.16.16.16 --precision double --Ls 8 \
        [--threads 1,2] [--modules kernels_wilson,kernels_wilson_old] [--reps 9]

Each variant (a kernel module from pygrid.qcd, times a thread count; launched as the operators
launch it, bound once, on several threads run by the thread team in balanced pieces) runs for
0.3 s in turn, ``--reps`` rounds, so that the machine's slow and fast phases
hit every variant alike; prints the median and best GFlop/s (1320 flops per 4D
or 5D site) of each.  To compare against an older kernel, put its module next
to the current one, e.g.

    git show dc3f77a:pygrid/qcd/kernels_wilson.py > pygrid/qcd/kernels_wilson_old.py

(a module that generates the kernels, launched through ``pygrid.qcd.unrolled_launch`` with
each its own launch state; a copy from before the launch moved out of ``kernels_wilson``, which
has ``kernel_args`` of its own, is launched its own way).

``--last banded|solve|mul|mul_solve`` (5D fields) times that variant of the kernel's last step
(see ``kernels_wilson.LAST``) with the s matrices of a Möbius operator (b = 1.5, c = 0.5, M5 =
1.8, mass 0.1): the diagonal term ``Mooee``, the solve ``MooeeInv``, the multiply ``b + c S``.

``--checkerboard`` times the even-odd hop a Schur solve runs (``DhopEO``: an odd source, the
even links forward and the odd links backward, on half the sites) in place of the full-grid one.

``--compressed`` (4D fields) adds each module's kernel on links compressed to two rows of
each SU(3) matrix (``compressed_links.compress_links``; the third rebuilt in the kernel, times the
phase of an antiperiodic time direction on the edge links),
as the Wilson operator reads them on fields larger than the caches.  The gauge field carries that
boundary phase in every variant.

``--data`` (4D fields) adds two passes that move the data without the kernel's arithmetic (one add
per vector loaded, into four accumulators), in the kernel's site order and with its stores: "loads
and stores" reads what the kernel reads (each point's neighbour spinor and its link, forward at the
site, backward at the neighbour) and writes the result; "compulsory stream" reads each input once
(the site's spinor and its four links) and writes the result, the traffic a perfect kernel moves,
as streams; "copy of N B a site" is the roofline's parallel copy (``pygrid.bench.roofline``) moving
the same bytes, read + write, with cached and with streaming stores (the roofline is the faster).
Their GFlop/s are the kernel's flop count over their time: the kernel's pace if it were bound by
its access pattern, by the compulsory traffic alone, and by the roofline.  With ``--compressed`` as
well, "loads and stores, compressed" reads the links as the kernel on compressed links does (12
vectors a link), "compulsory stream, compressed" each site's spinor and two rows of its four links
once, and a second copy moves those 768 B a site (double).

Every variant's result is checked against the first one's.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import time

import numpy as np

import pygrid as pg
from pygrid.accelerator.backends import get_backend
from pygrid.accelerator.parallel_numba import Bound
from pygrid.bench.roofline import copy_kernel, stream_copy_kernel, touched
from pygrid.memory.aligned import aligned_empty
from pygrid.qcd import unrolled_launch
from pygrid.qcd.compressed_links import CompressedLinks


def aligned_copy(a):
    c = aligned_empty(a.shape, a.dtype)
    c[...] = a
    return c


def _fold(t, n):
    """Source adding the ``n`` vectors of the tuple ``t`` into the four accumulators s0..s3: one add
    per vector loaded, few registers live (so that the pass measures the loads, not spills)."""
    return [f"        s{k % 4} = s{k % 4} + {t}[{k}]" for k in range(n)]


def _data_source(nsimd, link=18):
    """numba source of the two passes of ``--data`` for ``nsimd`` lanes, reading ``link`` vectors a
    link (18, a site's four links together; 12 for links compressed to two rows, stored direction by
    direction)."""
    head = ["from numba import njit",
            "from pygrid.accelerator.simd_numba import vloadt, vstoret, vstoret_nt, vsplat, store_fence",
            f"W = {int(nsimd)}", "U = np.uint64", "FS = U(24 * W)", f"GS = U({4 * link} * W)",
            f"LK = U({link} * W)", ""]
    sig = "(lo, hi, out, psi, uf, ub, nbr, n4, sites, nt, zero):"
    start = ["    N4 = U(n4)", "    DL = U(uf.size) // U(4)", "    s0 = vsplat(zero, W)", "    s1 = s0",
             "    s2 = s0", "    s3 = s0", "    for i in range(lo, hi):", "        uo = U(sites[i])"]
    end = ["        r = (" + ", ".join(f"s{k % 4}" for k in range(24)) + ",)",
           "        if nt:", "            vstoret_nt(out, uo * FS, r)",
           "        else:", "            vstoret(out, uo * FS, r)",
           "    if nt:", "        store_fence()", ""]
    loads = []
    for p in range(8):
        loads += [f"        n = U(nbr[U({p}) * N4 + uo])", "        a = vloadt(psi, n * FS, 24, W)"]
        loads += _fold("a", 24)
        if link == 18:  # whole links: a site's four together
            at = f"uo * GS + U({p}) * LK" if p < 4 else f"n * GS + U({p - 4}) * LK"
        else:  # compressed links: direction by direction (compressed_links.compress_links)
            at = f"uo * LK + U({p}) * DL" if p < 4 else f"n * LK + U({p - 4}) * DL"
        loads += [f"        c = vloadt({'uf' if p < 4 else 'ub'}, {at}, {link}, W)"]
        loads += _fold("c", link)
    stream = ["        a = vloadt(psi, uo * FS, 24, W)"] + _fold("a", 24)
    if link == 18:  # the site's four links, one stream
        for k in range(3):
            stream += [f"        a = vloadt(uf, uo * GS + U({k}) * FS, 24, W)"] + _fold("a", 24)
    else:  # the site's link of each direction, four streams
        for mu in range(4):
            stream += [f"        c = vloadt(uf, uo * LK + U({mu}) * DL, {link}, W)"] + _fold("c", link)
    deco = '@njit(fastmath=True, nogil=True, boundscheck=False, error_model="numpy")'
    return "\n".join(head + [deco, "def loads_and_stores" + sig] + start + loads + end
                     + [deco, "def compulsory_stream" + sig] + start + stream + end)


def data_kernels(nsimd, link=18):
    """The two data-only passes of ``--data`` for ``nsimd`` lanes and ``link`` vectors a link (the
    lane count is a constant of the SIMD operations, so each count compiles its own)."""
    scope = {"np": np}
    exec(compile(_data_source(nsimd, link), f"<data passes, Nsimd {nsimd}, links of {link}>", "exec"), scope)
    return scope["loads_and_stores"], scope["compulsory_stream"]


def last_tables(last, Ls, U, dt):
    """kernel_args' tables for the variant ``last`` of the kernel's last step: the s matrices of a
    Möbius operator on the gauge field U."""
    if last == "plain":
        return {}
    if Ls < 2:
        raise SystemExit(f"--last {last} needs a 5D field (--Ls > 1)")
    from pygrid.qcd import dslash

    D = pg.qcd.MobiusFermion(U, Ls, 0.1, 1.8, 1.5, 0.5)
    out = {}
    if last == "banded":
        out["dterm"] = dslash._diagonal_term(1.0, D._banded["Mooee"], Ls, dt)
    if last in ("solve", "mul_solve"):
        out["solve"] = dslash._solve_in_s(D._sweeps["MooeeInv"], Ls, dt)
    if last in ("mul", "mul_solve"):
        out["mul"] = dslash._diagonal_term(1.0, D._banded["bcS"], Ls, dt)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="16.16.16.16")
    ap.add_argument("--precision", choices=("double", "single"), default="double")
    ap.add_argument("--Ls", type=int, default=1)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--modules", default="kernels_wilson")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--last", default="plain", choices=("plain", "banded", "solve", "mul", "mul_solve"))
    ap.add_argument("--checkerboard", action="store_true", help="the even-odd hop DhopEO")
    ap.add_argument("--compressed", action="store_true",
                    help="add the kernel on compressed links (4D fields)")
    ap.add_argument("--data", action="store_true",
                    help="add the passes that move the kernel's data without its arithmetic (4D fields)")
    args = ap.parse_args()
    dims = tuple(int(x) for x in args.grid.split("."))
    prec, Ls = args.precision, args.Ls
    dt = np.float64 if prec == "double" else np.float32
    grid = pg.GridCartesian(dims, precision=prec)
    U = pg.qcd.random_gauge(grid, pg.ParallelRNG(grid, [1, 2, 3, 4]), precision=prec)
    D = pg.qcd.WilsonFermion(U, 0.1, boundary_phases=[1, 1, 1, -1])
    U = D.links
    g5 = pg.GridCartesian5D(grid, Ls) if Ls > 1 else grid
    psi = pg.LatticeFermion(g5, prec)
    pg.ParallelRNG(g5, [5, 6, 7, 8]).gaussian(psi)
    st, ue = D.stencil, U
    if args.checkerboard:
        if Ls > 1:
            raise SystemExit("--checkerboard times the 4D Wilson hop (--Ls 1)")
        psi, ue, U = pg.pick_checkerboard(1, psi), D.U_cb[0], D.U_cb[1]
        st = D.stencil_cb[1]
    # writable copies, aligned to cache lines as fields are (the kernel copies a read-only input);
    # on a full grid one array of links, as the operators pass (a link read forward at its site is
    # read backward at the next one, from the caches)
    with psi.view(pg.CpuRead) as p, U.view(pg.CpuRead) as u, ue.view(pg.CpuRead) as uf:
        p, u = aligned_copy(p), aligned_copy(u)
        uf = u if ue is U else aligned_copy(uf)
    n4, ns = st.neighbours.shape[1], p.shape[3]
    pool = get_backend("openmp")
    tables = last_tables(args.last, Ls, U, dt)
    if (args.data or args.compressed) and (Ls > 1 or args.last != "plain"):
        raise SystemExit("--data and --compressed time the 4D hop (--Ls 1, --last plain)")
    variants, copies = [], []
    for name in args.modules.split(","):
        mod = importlib.import_module("pygrid.qcd." + name)
        # each module's own launch state: its site order, tile and table layout
        if hasattr(mod, "kernel_args"):  # a module that launches its kernels itself
            lm, ls = mod, mod._launch_state(st, Ls, ns, dt)
        else:
            lm, ls = unrolled_launch, unrolled_launch._launch_state(st, Ls, ns, dt, kernels=mod)
        lc_of = getattr(mod, "CompressedLinks", CompressedLinks).of
        o = aligned_copy(np.zeros_like(p))
        coef = np.array([-0.5, 0, -1, 1], dt)
        use_diag = args.last in ("banded", "mul")
        if use_diag:
            coef[1] = 1.0
        a = lm.kernel_args(ls, o, p, uf, u, coef, p if use_diag else o, use_diag, **tables)
        a += (ls.sites, ls.none, ls.none)
        if inspect.ismethod(ls.kernel):  # this library's launch state
            k, kc = ls.kernel(args.last), (lambda ls=ls: ls.kernel(compressed=True))
        else:  # an older module's own: a kernel per last step, or one kernel
            k = ls.kernel[args.last] if isinstance(ls.kernel, dict) else ls.kernel
            kc = getattr(ls, "kernel_c", None)
        for t in (int(x) for x in args.threads.split(",")):
            variants.append((f"{name}, {t} thread{'s' if t > 1 else ''}", k, a, o, t))
        if args.compressed:
            lc = lc_of(uf, u)
            if lc is None:
                raise SystemExit("the gauge field's links do not compress (not SU(3) times a phase)")
            oc = aligned_copy(np.zeros_like(p))
            ac = lm._compressed_args(lm.kernel_args(ls, oc, p, uf, u, coef, p if use_diag else oc, use_diag,
                                                      **tables), lc, ls)
            for t in (int(x) for x in args.threads.split(",")):
                label = f"{name} compressed, {t} thread{'s' if t > 1 else ''}"
                variants.append((label, kc(), ac, oc, t))
        if args.data and name == args.modules.split(",")[0]:
            nbr = np.ascontiguousarray(st.neighbours.reshape(-1)).astype(np.int64)
            do = aligned_copy(np.zeros_like(p))  # the kernel's result stays for the checks
            da = (do.reshape(-1), p.reshape(-1), uf.reshape(-1), u.reshape(-1), nbr, n4, ls.sites,
                  bool(ls.far and do.ctypes.data % 64 == 0), dt(0))
            for label, dk in zip(("loads and stores", "compulsory stream"), data_kernels(ns)):
                for t in (int(x) for x in args.threads.split(",")):
                    variants.append((f"{label}, {t} thread{'s' if t > 1 else ''}", dk, da, None, t))
            if args.compressed:  # the kernel's loads and stores and the compulsory bytes, links compressed
                lk = lc_of(uf, u)
                dc = (da[0], da[1], lk.uf.reshape(-1), lk.ub.reshape(-1)) + da[4:]
                for label, dk in zip(("loads and stores, compressed", "compulsory stream, compressed"),
                                     data_kernels(ns, 12)):
                    for t in (int(x) for x in args.threads.split(",")):
                        variants.append((f"{label}, {t} thread{'s' if t > 1 else ''}", dk, dc, None, t))
            # the roofline's copy, moving the compulsory bytes of the hop (read + write)
            for reals in ((24 + 4 * 18 + 24,) + ((24 + 4 * 12 + 24,) if args.compressed else ())):
                n = int(np.prod(dims)) // (2 if args.checkerboard else 1) * reals // 2
                src, dst = touched(n, dt, 1), touched(n, dt, 2)
                copies.append((f"copy of {reals * dt().itemsize} B a site", src, dst))

    launches = {}

    def run(v):
        _, k, a, _, t = v
        if k is None:  # a roofline's copy (pygrid.bench.roofline): (copy, dst, src)
            a[0](*a[1:])
            return
        # the operators' launch: bound once, run by the thread team in balanced pieces, or on the
        # calling thread on its packed arguments (parallel_numba.Bound)
        go = launches.get(id(v))
        if go is None:
            go = launches[id(v)] = (Bound(k, a).again if t == 1 else
                                    pool.bind_kernel(k, *a, balance=True).prepared(n4))
        go(1, n4) if t == 1 else go()

    for label, src, dst in copies:
        # a copy moves the hop's bytes, so its calls a second are the hop's at the copy's pace
        variants.append((label + " (copy)", None, (copy_kernel, dst, src), None, 0))
        variants.append((label + " (copy, streaming stores)", None, (stream_copy_kernel, dst, src), None, 0))
    for v in variants:
        run(v)
        run(v)
    ref = variants[0][3]
    if Ls == 1 and args.last == "plain":  # the operator's own hop, through its checked path
        hop = D.DhopEO(psi) if args.checkerboard else D.Dhop(psi)
        with hop.view(pg.CpuRead) as want:
            err = np.abs(want - ref).max() / np.abs(want).max()
        if err > (1e-12 if prec == "double" else 1e-5):
            raise SystemExit(f"{variants[0][0]} disagrees with the operator's hop: "
                             f"max rel. difference {err:.2e}")
    for v in variants[1:]:
        if v[3] is None:  # a data pass: no result to compare
            continue
        err = np.abs(v[3] - ref).max() / np.abs(ref).max()
        if err > (1e-12 if prec == "double" else 1e-5):
            raise SystemExit(f"{v[0]} disagrees with {variants[0][0]}: max rel. difference {err:.2e}")
    flops = pg.qcd.FLOPS_PER_SITE * np.prod(dims) * Ls // (2 if args.checkerboard else 1)
    res = [[] for _ in variants]
    for _ in range(args.reps):
        for i, v in enumerate(variants):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.3:
                run(v)
                n += 1
            res[i].append(flops * n / (time.perf_counter() - t0) / 1e9)

    what = "DhopEO" if args.checkerboard else "Dhop"
    print(f"{what} kernel on {args.grid}, {prec}, Ls {Ls}, {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    for v, r in zip(variants, res):
        r = sorted(r)
        print(f"  {v[0]:40s} median {r[len(r) // 2]:7.2f}  best {r[-1]:7.2f} GFlop/s")


if __name__ == "__main__":
    main()
