"""Ctrl-C anywhere in the cache's bookkeeping: a SIGINT at every line the manager runs.

A trace function delivers SIGINT at the n-th line executed in the manager, the views and the
interrupt deferral (``pygrid/memory/{manager,view,interrupts}.py``) during a workload of opens,
kernels, evictions, watermark changes and releases on the emulated device, for every n.  The
KeyboardInterrupt must come out of the operation it interrupted (at its end), the bookkeeping
must agree with the device, and every field must hold its contents: those of before the
interrupted operation, or after it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

import numpy as np
import pytest
from cache_checks import FaultyDevice, check_bookkeeping

import pygrid.memory.manager as manager_module
import pygrid.memory.view as view_module
from pygrid.memory import EmulatedDevice, MemoryManager, View, ViewMode, interrupts

CpuRead, CpuWrite = ViewMode.CpuRead, ViewMode.CpuWrite
AccRead, AccWrite = ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite
AccDiscard = ViewMode.AcceleratorWriteDiscard
TRACED = {manager_module.__file__, view_module.__file__, interrupts.__file__}


class Owner:
    pass


def workload(mgr, fields, model, done):
    """Operations a program does; ``done`` records each one that completed (its name)."""

    def kernel(dst, srcs, mode):
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(View(mgr, dst, mode))
            arrays = [stack.enter_context(View(mgr, k, AccRead)) for k in srcs if k != dst]
            out[...] = sum(arrays) + (out if mode is AccWrite else 0) + 1.0
        model[dst] = sum(model[k] for k in srcs if k != dst) + (model[dst] if mode is AccWrite else 0) + 1.0

    keys = list(fields)
    for step, (dst, srcs, mode) in enumerate([
            (keys[0], keys[1:3], AccDiscard), (keys[3], keys[:2], AccWrite),
            (keys[1], keys[2:4], AccDiscard), (keys[2], keys[0:1], AccWrite),
            (keys[0], keys[3:4], AccWrite)]):
        done.append(("kernel", dst))
        kernel(dst, srcs, mode)
        done[-1] = ("done", dst)
        if step == 1:
            done.append(("cpu write", keys[1]))
            with View(mgr, keys[1], CpuWrite) as a:
                a *= 2.0
            model[keys[1]] = model[keys[1]] * 2.0
            done[-1] = ("done", keys[1])
        if step == 2:
            done.append(("watermark", None))
            mgr.set_watermark(2 * 128)
            mgr.set_watermark(3 * 128)
            done[-1] = ("done", None)
    done.append(("release", keys[3]))
    mgr.release(keys[3])
    del model[keys[3]]
    done[-1] = ("done", None)


def fresh():
    device = FaultyDevice(EmulatedDevice())
    mgr = MemoryManager(device, 3 * 128)                  # four fields of 128 bytes: evictions
    rng = np.random.default_rng(5)
    fields, model = {}, {}
    for _ in range(4):
        data = rng.integers(-9, 9, 16).astype(np.float64)
        owner = Owner()
        key = mgr.register(owner, data.copy())
        fields[key], model[key] = owner, data
    return device, mgr, fields, model


def trace_lines():
    """``function:line`` of every line event of an uninterrupted run of the workload."""
    device, mgr, fields, model = fresh()
    lines = []

    def tracer(frame, event, arg):
        if event == "line":
            lines.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        return tracer

    sys.settrace(lambda f, e, a: tracer if f.f_code.co_filename in TRACED else None)
    try:
        workload(mgr, fields, model, [])
    finally:
        sys.settrace(None)
    return lines


@pytest.fixture(scope="module")
def deferral(ctrl_c_reaches_python):
    if signal.getsignal(signal.SIGINT) is not interrupts._on_sigint:
        pytest.skip("another SIGINT handler is installed in this process")


def test_sigint_at_every_line_of_the_manager(deferral):
    lines = trace_lines()
    total = len(lines)
    assert total > 500
    interrupted = delayed = 0
    for target in range(1, total + 1):
        device, mgr, fields, model = fresh()
        before = {k: v.copy() for k, v in model.items()}
        done = []
        n = [0]

        def tracer(frame, event, arg, target=target):
            if event == "line":
                n[0] += 1
                if n[0] == target:
                    # as CPython delivers a signal: the installed handler, called with the frame
                    # it interrupts (raise_signal would hand it this tracer's frame instead)
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
            return tracer

        sys.settrace(lambda f, e, a: tracer if f.f_code.co_filename in TRACED else None)
        try:
            workload(mgr, fields, model, done)
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            sys.settrace(None)
        if interrupts.deferred.pending:
            # it came as an operation returned: the next operation raises it
            with pytest.raises(KeyboardInterrupt):
                mgr.trim_pool()
            delayed += 1
        where = f"SIGINT at line event {target} of {total} ({lines[target - 1]}), after {done}"
        assert not interrupts.deferred.pending and interrupts.deferred.depth == 0, where
        try:
            check_bookkeeping(mgr, device, 0)
        except AssertionError as e:
            raise AssertionError(where) from e
        # the operation in flight either completed or left its destination as it was
        what, key = done[-1]
        for k in model:
            if what == "release" and k == key and k not in mgr:
                continue                              # released, interrupted as it returned
            want = model[k]
            with View(mgr, k, CpuRead) as a:
                if what != "done" and k == key and not np.array_equal(a, want):
                    assert what in ("kernel", "cpu write")
                    continue                          # interrupted before its model update
                np.testing.assert_array_equal(a, want, err_msg=f"line {target}, {done}")
        del before
    # every SIGINT came out as a KeyboardInterrupt: at the end of the operation it arrived in, or
    # of the next one when it came as an operation returned
    print(f"\n{total} SIGINTs: {interrupted} raised by the operation they arrived in, {delayed} by the next")
    assert interrupted + delayed == total and delayed < total // 20


class SignallingDevice(FaultyDevice):
    """Sends the process a real SIGINT in the middle of its next copy back to the host."""

    def __init__(self, inner):
        super().__init__(inner)
        self.signal_next = False

    def to_host(self, dev, host):
        if self.signal_next:
            self.signal_next = False
            os.kill(os.getpid(), signal.SIGINT)
        super().to_host(dev, host)


def test_real_sigint_during_an_eviction_is_raised_when_the_open_is_undone(deferral):
    device = SignallingDevice(EmulatedDevice())
    mgr = MemoryManager(device, 128)
    owners = [Owner(), Owner()]
    k1 = mgr.register(owners[0], np.full(16, 1.0))
    k2 = mgr.register(owners[1], np.full(16, 2.0))
    with View(mgr, k1, AccWrite) as d:
        d[...] = 5.0                                  # only on the device: evicting it copies back
    device.signal_next = True
    with pytest.raises(KeyboardInterrupt):
        with View(mgr, k2, AccRead):
            pytest.fail("the view was handed out after Ctrl-C")
    assert not interrupts.deferred.pending
    check_bookkeeping(mgr, device, 0)
    assert mgr.stats()["evictions"] == 1              # the eviction completed; the open was undone
    with View(mgr, k1, CpuRead) as a:
        np.testing.assert_array_equal(a, 5.0)
    with View(mgr, k2, CpuRead) as a:
        np.testing.assert_array_equal(a, 2.0)


def test_a_real_sigint_in_an_uninterrupted_block_is_raised_at_its_end(deferral):
    """``interrupts.uninterrupted()`` (a Dirac call exchanging its halo across ranks): Ctrl-C that
    arrives inside, in code of any file, lets the block finish, then comes out of it; nested blocks
    raise at the outermost end."""
    done = []

    def deep():  # a frame of another file's kind: the deferral does not depend on where it runs
        os.kill(os.getpid(), signal.SIGINT)
        done.append("after the signal")

    with pytest.raises(KeyboardInterrupt):
        with interrupts.uninterrupted():
            with interrupts.uninterrupted():
                deep()
                done.append("inner end")
            done.append("outer end")
    assert done == ["after the signal", "inner end", "outer end"]
    assert not interrupts.deferred.pending and interrupts.deferred.depth == 0
    with pytest.raises(KeyboardInterrupt):  # outside a block, Ctrl-C is raised at once
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        pytest.fail("Ctrl-C outside a block was deferred")
