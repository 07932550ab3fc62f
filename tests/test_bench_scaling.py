"""pygrid.bench.scaling: the benchmarks' probe of whether the threads have a core each."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pygrid.accelerator.backends import get_backend
from pygrid.bench.scaling import SITES_PER_BLOCK, probe_kernel, probe_output, scaling_line, thread_scaling

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os, sys
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
from pygrid.accelerator.backends import get_backend
from pygrid.bench.scaling import probe
b = get_backend("openmp")
b.set_threads(2)
print(*probe(b))
"""


def _probe(cpus, wait="passive"):
    """The probe of two threads in a process confined to ``cpus``, in long blocks and in short
    launches, OpenMP's idle threads asleep (``passive``: one block on one CPU runs alone) or
    spinning (``active``)."""
    env = dict(os.environ, PYGRID_THREADS="2", NUMBA_NUM_THREADS="2", OMP_WAIT_POLICY=wait)
    r = subprocess.run([sys.executable, "-c", PROBE, ",".join(map(str, cpus))], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    long, short = r.stdout.split()[-2:]
    return float(long), float(short)


def test_the_probe_kernel_gives_the_same_numbers_on_one_thread_and_on_all():
    spin = probe_kernel()
    n, be = 2 * SITES_PER_BLOCK, get_backend("openmp")
    one, all_ = np.zeros(n), probe_output(be, n)
    assert be.blocks(all_.nbytes) == be.blocks(be.min_parallel_bytes)   # the probe's split
    spin(0, n, one, 50)
    be.accelerator_for(n, spin, all_, 50)
    assert np.array_equal(one, all_[:n]) and len(np.unique(one)) > 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0) & {0, 1}) < 2,
                    reason="needs CPUs 0 and 1 and sched_setaffinity")
def test_two_threads_on_one_core_show_in_the_probe():
    # what a virtual machine does when its two CPUs are one core's hardware threads, or the host
    # takes one: two threads confined to one CPU do one thread's work; on two CPUs about two (the
    # machine's own phases can lower that figure too, hence the margin)
    one, _ = _probe([0])
    two, _ = _probe([0, 1])
    if two <= one:      # the host took CPU 1 for that moment: once more, as a benchmark would
        two, _ = _probe([0, 1])
    assert 0.5 < one < 1.3, (one, two)
    assert two > one, (one, two)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0) & {0, 1}) < 2,
                    reason="needs CPUs 0 and 1 and sched_setaffinity")
def test_short_launches_pay_the_start_of_their_threads():
    # a launch's start costs a share of a 40 us block that it does not of a 4 ms one: short launches
    # never scale better than long blocks (how much worse depends on how fast the machine wakes a
    # thread: with OpenMP's worker asleep between launches, 0.8-0.9x on the project's VM in one
    # hour and 1.7x in another, so only the order is asserted).  The two figures are taken one after
    # the other, and another tenant taking part of a core during the long blocks alone inverts them
    # (long 1.55, short 1.79 on the AVX2 machine, 2026-11-29): up to three probes, as a benchmark
    # would run a busy round again.  The same tenant during the one-thread half of the long blocks
    # shows as more than two threads' work (2.22 on the AVX2 machine, 2026-11-29): such a probe
    # is taken again too.  Every one of three probes inverted or beyond two threads fails
    for wait in ("passive", "active"):
        seen = []
        for _ in range(3):
            long, short = _probe([0, 1], wait)
            seen.append((long, short))
            assert short > 0 and long > 0, (wait, seen)
            if long <= 2.2 and short <= 1.05 * long:
                break
        else:
            pytest.fail(f"short launches scaled better than long blocks, or long blocks beyond two "
                        f"threads' work, in every probe ({wait}): {seen}")


def test_nothing_to_measure_on_one_thread_or_off_the_host():
    assert thread_scaling(get_backend("numpy")) is None
    b = get_backend("openmp")
    n = b.threads()
    try:
        b.set_threads(1)
        assert thread_scaling(b) is None
    finally:
        b.set_threads(n)


def test_the_line_flags_threads_that_shared_cores_or_started_late():
    assert scaling_line("threads", 2, None) is None
    ok = scaling_line("threads", 2, 1.96, 1.84)
    assert "2 threads did 1.96x one thread's work" in ok and "1.84x in launches of" in ok
    assert "note" not in ok
    low = scaling_line("threads", 2, 1.1, 1.0)
    assert "1.10x" in low and "figures taken now run low" in low
    late = scaling_line("threads", 2, 1.95, 0.7)
    assert "slow to start short launches" in late


def test_the_probe_runs_on_the_blocks_a_launch_splits_into():
    import numba

    from pygrid.bench.scaling import probe_threads

    assert probe_threads(get_backend("numpy")) == 0
    b = get_backend("openmp")
    # every thread the backend was given, up to those numba started with
    assert probe_threads(b) == min(b.threads(), numba.config.NUMBA_NUM_THREADS) >= 1
