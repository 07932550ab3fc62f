"""Fault injection: the device cache under failures at random points, against a numpy model.

Two hypothesis state machines.  Faults are armed at random: the n-th device call from now
(allocation, free, host->device or device->host copy, inside opens and evictions alike) raises
RuntimeError, MemoryError or KeyboardInterrupt, before or after doing its work; kernels fail
before writing, or after writing part of their output (a launch that ran and then failed).

``ManagerFaults`` drives the MemoryManager directly on the emulated device, with views opened
by ``with`` as the library opens them.  ``LatticeFaults`` drives whole fields: ``from_numpy``,
``x @= expr`` compiled and launched by the backend under test (compiles and launches fail too),
``to_numpy``, on the emulated device and on USM device memory of the sycl CPU device.

After every step every field holds what the model says (its previous contents after a failed
write, except a partial write into a field whose only current copy was on the device: the
documented exception), the footprint is under the watermark, and the statistics add up against
the transfers and allocations the device really did.

``PYGRID_FAULT_STEPS`` sets the number of random steps of each machine (default 10^4 in all,
in about a minute); docs/memory.md gives the figures of a longer run.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from cache_checks import (
    COUNT,
    FAULTS,
    FaultyDevice,
    InjectedError,
    InjectedInterrupt,
    check_bookkeeping,
    injected,
    injected_kinds,
)
from hypothesis import HealthCheck, Phase, event, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import pygrid as pg
import pygrid.accelerator.backends as _bk
from pygrid import memory as mem
from pygrid.errors import DeviceMemoryError
from pygrid.memory import (
    Advise,
    EmulatedDevice,
    MemoryManager,
    State,
    View,
    ViewConflictError,
    ViewMode,
)

CpuRead, CpuWrite = ViewMode.CpuRead, ViewMode.CpuWrite
AccRead, AccWrite = ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite
AccDiscard = ViewMode.AcceleratorWriteDiscard

STEPS = int(os.environ.get("PYGRID_FAULT_STEPS", "10000"))
STEPS_PER_RUN = 50
# shrinking a failure of a long random walk takes minutes: PYGRID_FAULT_SHRINK=1 asks for it
PHASES = tuple(Phase) if os.environ.get("PYGRID_FAULT_SHRINK") else (Phase.explicit, Phase.generate)
HAVE_DPCTL = importlib.util.find_spec("dpctl") is not None


# ---- the manager on the emulated device ---------------------------------------------------

class Owner:
    pass


class ManagerFaults(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.device = FaultyDevice(EmulatedDevice())
        self.mgr = MemoryManager(self.device, 256)
        self.data = {}               # key -> what the field holds
        self.owners = {}
        self.views = []              # (key, mode, View) kept open
        self.rng = np.random.default_rng(0)

    def keys(self):
        return sorted(self.data)

    def fresh(self, shape):
        return self.rng.integers(-50, 50, size=shape).astype(np.float64)

    def only_copy_on_device(self, key):
        return self.mgr.state(key) is State.AcceleratorDirty

    @rule(size=st.sampled_from((4, 8, 16)), advise=st.booleans())
    def create(self, size, advise):
        data = self.fresh(size)
        owner = Owner()
        key = self.mgr.register(owner, data.copy())
        self.owners[key], self.data[key] = owner, data
        if advise:
            self.mgr.advise(key, Advise.InfrequentUse)

    @rule(countdown=st.integers(1, 4), kind=injected_kinds, after=st.booleans())
    def arm_fault(self, countdown, kind, after):
        self.device.arm(countdown, kind, after)

    @precondition(lambda self: self.data)
    @rule(data=st.data(), mode=st.sampled_from(list(ViewMode)),
          fail=st.sampled_from(["no", "before", "partial"]), keep_open=st.booleans())
    def write_or_read(self, data, mode, fail, keep_open):
        """One view, as library code opens it: a write through it may fail part way."""
        key = data.draw(st.sampled_from(self.keys()))
        prior = self.mgr.state(key)
        view = View(self.mgr, key, mode)
        try:
            arr = view.__enter__()
        except (ViewConflictError, DeviceMemoryError) as e:
            if isinstance(e, DeviceMemoryError) and injected(e):
                event("open failed: injected")
            return
        except FAULTS:
            event("open failed: injected")
            return
        new = self.fresh(self.data[key].shape)
        try:
            if mode.write:
                if fail == "partial":
                    COUNT["faults"] += 1
                    arr[: arr.size // 2] = new[: arr.size // 2]
                    raise InjectedError("kernel failed after writing half")
                if fail == "before":
                    COUNT["faults"] += 1
                    raise InjectedInterrupt("interrupted before the kernel")
                arr[...] = new
            else:
                np.testing.assert_array_equal(arr, self.data[key])
        except FAULTS:
            view.__exit__(InjectedError, None, None)
            # what survives elsewhere is restored; a write into the only current copy stays
            keeps_partial = fail == "partial" and (
                prior is State.AcceleratorDirty if mode.accelerator
                else prior in (State.Empty, State.CpuDirty))
            if keeps_partial:
                event("documented partial write")
                half = self.data[key].copy()
                half[: half.size // 2] = new[: half.size // 2]
                self.data[key] = half
            else:
                event("failed write rolled back")
            return
        if mode.write:
            self.data[key] = new
        if keep_open:
            self.views.append((key, mode, view))
        else:
            view.__exit__(None, None, None)

    @precondition(lambda self: self.views)
    @rule(data=st.data())
    def close_view(self, data):
        key, mode, view = self.views.pop(data.draw(st.integers(0, len(self.views) - 1)))
        view.__exit__(None, None, None)

    @precondition(lambda self: self.data)
    @rule(data=st.data(), discard=st.booleans(), fail=st.sampled_from(["no", "no", "before", "partial"]))
    def kernel(self, data, discard, fail):
        """dst = sum of srcs: read views and a write view nested as evaluate opens them."""
        dst = data.draw(st.sampled_from(self.keys()))
        n = self.data[dst].size
        srcs = data.draw(st.lists(st.sampled_from([k for k in self.keys() if self.data[k].size == n]),
                                  min_size=1, max_size=3))
        want = sum(self.data[k] for k in srcs)
        opened = []
        only_on_device = False
        try:
            for k in srcs:
                v = View(self.mgr, k, AccRead)
                opened.append((v, v.__enter__()))
            only_on_device = self.only_copy_on_device(dst)    # opening the sources may evict dst
            w = View(self.mgr, dst, AccDiscard if discard else AccWrite)
            out = w.__enter__()
            try:
                total = sum(a for _, a in opened)
                if fail == "before":
                    raise InjectedInterrupt("launch interrupted")
                COUNT["faults"] += fail != "no"
                if fail == "partial":
                    out[: n // 2] = total[: n // 2]
                    raise InjectedError("launch failed half way")
                out[...] = total
            except BaseException as e:
                w.__exit__(type(e), e, None)
                raise
            w.__exit__(None, None, None)
            self.data[dst] = want
        except (ViewConflictError, DeviceMemoryError, *FAULTS) as e:
            if fail == "partial" and only_on_device and isinstance(e, InjectedError) \
                    and "half way" in str(e):
                half = self.data[dst].copy()
                half[: n // 2] = want[: n // 2]
                self.data[dst] = half
                event("documented partial write")
        finally:
            for v, _ in reversed(opened):
                v.__exit__(None, None, None)

    @precondition(lambda self: self.data)
    @rule(data=st.data())
    def free(self, data):
        key = data.draw(st.sampled_from(self.keys()))
        if any(k == key for k, _, _ in self.views):
            return                   # freeing with open views is the machine of test_memory_statemachine
        del self.data[key]
        if data.draw(st.booleans()):
            del self.owners[key]     # no cycle: its finalizer runs now, as a collection would
        else:
            self.mgr.release(key)
            self.owners.pop(key)

    @rule(wm=st.sampled_from([0, 64, 128, 200, 256, 400]))
    def set_watermark(self, wm):
        before = self.mgr.watermark_bytes
        try:
            self.mgr.set_watermark(wm)
        except DeviceMemoryError as e:
            if not injected(e):
                assert self.mgr.watermark_bytes == before
        except FAULTS:
            assert self.mgr.watermark_bytes == before

    @invariant()
    def agrees_with_model(self):
        COUNT["steps"] += 1
        self.device.countdown, countdown = 0, self.device.countdown   # checks inject nothing
        try:
            check_bookkeeping(self.mgr, self.device, len(self.views))
            for key, want in self.data.items():
                np.testing.assert_array_equal(self.mgr.peek(key), want)
        finally:
            self.device.countdown = countdown

    def teardown(self):
        self.device.countdown = 0
        for _, _, v in reversed(self.views):
            v.__exit__(None, None, None)
        for key, want in self.data.items():
            with View(self.mgr, key, CpuRead) as a:
                np.testing.assert_array_equal(a, want)


def run_campaign(machine, steps, label):
    """Run ``machine`` until it has taken ``steps`` random steps; print what was tried."""
    COUNT.clear()
    cfg = settings(max_examples=max(1, steps // (4 * STEPS_PER_RUN)), stateful_step_count=STEPS_PER_RUN,
                   deadline=None, phases=PHASES,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    while COUNT["steps"] < steps:
        run_state_machine_as_test(machine, settings=cfg)
    print(f"\n{label}: {COUNT['steps']} steps, {COUNT['faults']} faults injected")
    assert COUNT["faults"] > COUNT["steps"] // 50      # the faults really happened


def test_manager_under_faults():
    run_campaign(ManagerFaults, STEPS // 2, "manager on the emulated device")



# ---- whole fields: from_numpy, compiled kernels, to_numpy -------------------------------------

def lattice_machine(device_name, backend_name):
    class LatticeFaults(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.saved, self.saved_backend = mem.get_manager(), pg.get_backend().name
            _bk.set_backend(backend_name)
            self.backend = pg.get_backend()
            self.mgr = mem.configure(device=device_name, device_mem_mb=0.06)   # about 5 fields of 12 KB
            self.device = self.mgr.device = FaultyDevice(self.mgr.device)
            self.g = pg.GridCartesian([4, 4, 4, 4])
            self.fields, self.model = [], []
            self.rng = np.random.default_rng(3)
            self.fail_compile = self.fail_launch = None
            prepare, run = self.backend.prepare, self.backend.run

            def faulty_prepare(*args, **kwargs):
                if self.fail_compile:
                    kind, self.fail_compile = self.fail_compile, None
                    COUNT["faults"] += 1
                    event("fault in compile")
                    raise kind("injected in the compile")
                return prepare(*args, **kwargs)

            def faulty_run(*args, **kwargs):
                if self.fail_launch:
                    (kind, ran), self.fail_launch = self.fail_launch, None
                    if ran:
                        run(*args, **kwargs)
                    COUNT["faults"] += 1
                    event("fault in launch" + (" after the kernel ran" if ran else ""))
                    raise kind("injected in the launch")
                return run(*args, **kwargs)

            self.backend.prepare, self.backend.run = faulty_prepare, faulty_run

        def teardown(self):
            del self.backend.prepare, self.backend.run
            self.fields.clear()
            mem._default = self.saved
            _bk.set_backend(self.saved_backend)

        def _random(self):
            shape = self.g.gshape + (3,)
            return self.rng.normal(size=shape) + 1j * self.rng.normal(size=shape)

        @rule()
        def create(self):
            a = self._random()
            f = pg.Lattice(self.g, pg.ColourVector())
            try:
                f.from_numpy(a)
            except (DeviceMemoryError, *FAULTS):
                a = np.zeros_like(a)    # a new field is zero until a write completes
            self.fields.append(f)
            self.model.append(a)

        @precondition(lambda self: len(self.fields) >= 2)
        @rule(data=st.data(), shift=st.integers(-2, 2), c=st.floats(-2, 2),
              fault=st.sampled_from(["none", "device", "compile", "launch", "launch after it ran"]),
              kind=injected_kinds, countdown=st.integers(1, 3), after=st.booleans())
        def assign(self, data, shift, c, fault, kind, countdown, after):
            self.fail_compile = self.fail_launch = None
            if fault == "device":
                self.device.arm(countdown, kind, after)
            elif fault == "compile":
                self.fail_compile = kind
            elif fault.startswith("launch"):
                self.fail_launch = (kind, fault.endswith("ran"))
            n = len(self.fields)
            i, j, k = (data.draw(st.integers(0, n - 1)) for _ in range(3))
            want = c * self.model[i] + np.roll(self.model[j], -shift, axis=2)
            dst = self.fields[k]
            only_on_device = self.mgr.state(dst._key) is State.AcceleratorDirty
            ran = self.fail_launch is not None and self.fail_launch[1]
            try:
                dst @= c * self.fields[i] + pg.cshift(self.fields[j], 2, shift)
            except (DeviceMemoryError, *FAULTS):
                shifted_self = j == k and shift != 0
                if ran and only_on_device and not shifted_self and self.fail_launch is None:
                    # the documented exception: the kernel ran into the only current copy
                    if not np.array_equal(self.model[k], want):
                        event("documented partial write")
                    self.model[k] = self._read_back(dst, self.model[k], want)
                return
            self.model[k] = want

        def _read_back(self, f, old, new):
            got = f.to_numpy()
            assert np.allclose(got, old, rtol=1e-12, atol=1e-12) or np.allclose(got, new, rtol=1e-12,
                                                                               atol=1e-12)
            return got

        @precondition(lambda self: self.fields)
        @rule(data=st.data())
        def free(self, data):
            i = data.draw(st.integers(0, len(self.fields) - 1))
            del self.fields[i], self.model[i]

        @rule(mb=st.sampled_from([0.04, 0.06, 0.1, 0.5]))
        def watermark(self, mb):
            try:
                self.mgr.set_watermark(int(mb * mem.MB))
            except (DeviceMemoryError, *FAULTS):
                pass

        @invariant()
        def every_field_as_the_model_says(self):
            COUNT["steps"] += 1
            self.device.countdown, countdown = 0, self.device.countdown
            try:
                check_bookkeeping(self.mgr, self.device, 0)
                for f, a in zip(self.fields, self.model):
                    np.testing.assert_allclose(f.to_numpy(), a, rtol=1e-12, atol=1e-12)
            finally:
                self.device.countdown = countdown

    return LatticeFaults



def test_fields_under_faults_on_the_emulated_device():
    run_campaign(lattice_machine("emulated", "openmp"), STEPS // 4, "fields on the emulated device")


@pytest.mark.skipif(not HAVE_DPCTL, reason="dpctl is not installed: pip install '.[sycl]'")
def test_fields_under_faults_in_sycl_usm():
    run_campaign(lattice_machine("sycl", "sycl"), STEPS // 4, "fields in sycl USM device memory")
