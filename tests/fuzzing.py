"""Shared settings of the fuzz tests (tests/test_fuzz_*.py): example counts, time limits, counting.

Each fuzz test runs ``fuzz(body, strategy, examples)``: hypothesis draws ``examples``
inputs (the CI count, derandomized so that CI is reproducible) and the test checks
that all of them ran.  ``PYGRID_FUZZ_EXAMPLES=N`` runs N inputs per test instead,
with fresh random seeds (a failure prints the blob that reproduces it)::

    PYGRID_FUZZ_EXAMPLES=5000 python -m pytest -p no:cacheprovider tests/test_fuzz_io.py \\
        tests/test_fuzz_flags.py tests/test_fuzz_from_numpy.py

The number of inputs each test tried is printed (``pytest -s``, or ``-rP`` for
passing tests) as ``fuzz: <test>: <n> inputs``.
"""
from __future__ import annotations

import contextlib
import os
import signal

from hypothesis import HealthCheck, example, given, settings

_ENV = os.environ.get("PYGRID_FUZZ_EXAMPLES", "").strip()
LONG_RUN = bool(_ENV)

#: Seconds one input may take before the test fails as a hang (a read of a 20 KB file takes milliseconds).
TIME_LIMIT = 30.0


def examples(ci_count: int) -> int:
    """Inputs per test: ``ci_count``, or PYGRID_FUZZ_EXAMPLES when it is set."""
    return int(_ENV) if LONG_RUN else ci_count


class Hang(AssertionError):
    """An input took longer than TIME_LIMIT."""


@contextlib.contextmanager
def time_limit(seconds: float = TIME_LIMIT, what: str = "input"):
    """Fail with Hang if the block runs longer than ``seconds`` (SIGALRM; main thread only)."""

    def alarm(signum, frame):
        raise Hang(f"{what} still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def fuzz(body, strategy, ci_count: int, name: str, explicit=()) -> int:
    """Run ``body(x)`` on ``examples(ci_count)`` inputs ``x`` drawn from ``strategy``, and on every
    input in ``explicit`` (cases found before, which random drawing would rarely hit); returns
    the count.

    The run fails if fewer inputs than asked for were tried (a strategy that
    generates nothing must not pass silently).  A long run may try fewer: hypothesis
    stops when it has tried every input a small strategy can make.
    """
    n = examples(ci_count)
    tried = [0]

    def run(x):
        tried[0] += 1
        with time_limit(what=f"{name}: one input"):
            body(x)

    test = given(strategy)(run)
    for x in explicit:
        test = example(x)(test)
    test = settings(max_examples=n, deadline=None, derandomize=not LONG_RUN, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.large_base_example])(test)
    test()
    print(f"fuzz: {name}: {tried[0]} inputs")
    want = n + len(explicit) if not LONG_RUN else 1
    assert tried[0] >= want, f"{name}: only {tried[0]} of {want} inputs were tried"
    return tried[0]
