"""Hypothesis state machine: ``Views.run_on`` on a unified device against the general path.

On a unified device ``run_on`` does the views' bookkeeping inline
(``MemoryManager.run_unified``), and a kept Dirac call's compiled launch takes only the opens'
checks, and those only after a step that can change them (``memory.KeptLaunch``, kept from step
to step here as a Dirac call keeps it).  Two managers on unified devices receive the same steps;
one runs its views through those paths, the other through the general one (opens and closes one
by one).  After every step both agree on what each step returned or raised, on every
entry's view counts and write count, and on every statistic.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pygrid.memory import MemoryManager, ViewConflictError, ViewMode, Views

ACC = [ViewMode.AcceleratorRead, ViewMode.AcceleratorWrite, ViewMode.AcceleratorWriteDiscard]
CPU = [ViewMode.CpuRead, ViewMode.CpuWrite]
COUNTS = ("cpu_refs", "acc_refs", "cpu_writers", "acc_writers", "writes", "released", "shared")


class Owner:
    """A field's owner (weak-referenceable)."""


def outcome(fn):
    try:
        return ("returned", fn())
    except (ViewConflictError, KeyError, RuntimeError) as e:
        return ("raised", type(e))


def views_and_buffers(mgr, keys, modes, moved, general):
    """The Views of ``keys`` (the general path where ``general``) and the buffers a kept launch was
    bound to: the host arrays, one of them another array where ``moved``."""
    views = Views([(mgr, k, m) for k, m in zip(keys, modes)])
    if general:
        views._unified = None
    buffers = [None if e is None else e.host for e in (mgr._entries.get(k) for k in keys)]
    if moved:
        buffers[-1] = np.zeros(1)
    return views, buffers


class UnifiedViews(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.fast, self.general = MemoryManager("unified"), MemoryManager("unified")
        self.keys = []          # (fast key, general key, owner pair)
        self.cpu_open = []      # (index, mode) of CPU views held open in both
        self.kept = {}          # (indices, modes, moved) -> the fast side's KeptLaunch

    def pair(self, i):
        return self.keys[i][0], self.keys[i][1]

    @rule(n=st.sampled_from([4, 8]))
    def create(self, n):
        owners = (Owner(), Owner())
        kf = self.fast.register(owners[0], np.zeros(n))
        kg = self.general.register(owners[1], np.zeros(n))
        self.keys.append((kf, kg, owners))

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), mode=st.sampled_from(CPU))
    def open_cpu(self, data, mode):
        i = data.draw(st.integers(0, len(self.keys) - 1))
        kf, kg = self.pair(i)
        a = outcome(lambda: self.fast.open(kf, mode) is not None)
        b = outcome(lambda: self.general.open(kg, mode) is not None)
        assert a == b
        if a[0] == "returned":
            self.cpu_open.append((i, mode))

    @precondition(lambda self: self.cpu_open)
    @rule(data=st.data())
    def close_cpu(self, data):
        i, mode = self.cpu_open.pop(data.draw(st.integers(0, len(self.cpu_open) - 1)))
        kf, kg = self.pair(i)
        self.fast.close(kf, mode)
        self.general.close(kg, mode)

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def release(self, data):
        kf, kg = self.pair(data.draw(st.integers(0, len(self.keys) - 1)))
        self.fast.release(kf)
        self.general.release(kg)

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def share(self, data):
        kf, kg = self.pair(data.draw(st.integers(0, len(self.keys) - 1)))
        a = outcome(lambda: self.fast.share_host(kf) is not None)
        b = outcome(lambda: self.general.share_host(kg) is not None)
        assert a == b

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), fail=st.booleans(), moved=st.booleans(), release=st.booleans())
    def run(self, data, fail, moved, release):
        """A kept launch: the views opened, the block run (or raising), the views closed; with
        ``moved`` one buffer given is not the one the view hands out (run_on returns False), with
        ``release`` the block releases its first field (the release completes at the close)."""
        idx = data.draw(st.lists(st.integers(0, len(self.keys) - 1), min_size=1, max_size=4))
        modes = [data.draw(st.sampled_from(ACC)) for _ in idx]
        results = []
        for mgr, side in ((self.fast, 0), (self.general, 1)):
            keys = [self.keys[i][side] for i in idx]
            views, buffers = views_and_buffers(mgr, keys, modes, moved, general=side == 1)

            def block(arrays, mgr=mgr, views=views, keys=keys):
                assert views.is_open
                seen.append(mgr.stats()["open_views"])
                if release:
                    mgr.release(keys[0])
                if fail:
                    raise RuntimeError("the block failed")

            seen = []
            run = lambda views=views, buffers=buffers, block=block: views.run_on(buffers, block)  # noqa: E731
            results.append((outcome(run), seen, views.is_open))
        assert results[0] == results[1]

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), fail=st.booleans(), moved=st.booleans())
    def launch(self, data, fail, moved):
        """A compiled launch (no Python inside, so nothing looks at the counts while it runs) as a kept
        Dirac call takes it: its ``KeptLaunch`` (made at the first launch on these views), or the
        general path where that refuses."""
        idx = tuple(data.draw(st.lists(st.integers(0, len(self.keys) - 1), min_size=1, max_size=4)))
        self.run_kept((idx, tuple(data.draw(st.sampled_from(ACC)) for _ in idx), moved), fail)

    @precondition(lambda self: self.kept)
    @rule(data=st.data(), fail=st.booleans())
    def launch_again(self, data, fail):
        """A kept launch run again, whatever steps came since the last time."""
        self.run_kept(data.draw(st.sampled_from(sorted(self.kept, key=repr))), fail)

    def run_kept(self, what, fail):
        idx, modes, moved = what
        self.ran, self.launch_fails = [], fail
        results = []
        for mgr, side in ((self.fast, 0), (self.general, 1)):
            keys = [self.keys[i][side] for i in idx]
            views, buffers = views_and_buffers(mgr, keys, modes, moved, general=False)
            del self.ran[:]

            def call(mgr=mgr, views=views, buffers=buffers, side=side):
                if side == 0:
                    kept = self.kept.get(what)
                    if kept is None:
                        kept = self.kept[what] = mgr.kept_launch(views.unified[1], buffers, self.go)
                    done = kept.run()
                    if done is not None:
                        return done
                    buffers = kept.buffers
                return views.run_on(buffers, lambda arrays: self.go())

            results.append((outcome(call), list(self.ran)))
        assert results[0] == results[1]

    def go(self):
        """The launch: it reads the step's settings, as a kept one runs in later steps."""
        self.ran.append(1)
        if self.launch_fails:
            raise RuntimeError("the launch failed")

    @invariant()
    def agree(self):
        for kf, kg, _ in self.keys:
            ef, eg = self.fast._entries.get(kf), self.general._entries.get(kg)
            assert (ef is None) == (eg is None)
            if ef is not None:
                assert [getattr(ef, c) for c in COUNTS] == [getattr(eg, c) for c in COUNTS]
        sf, sg = self.fast.stats(), self.general.stats()
        assert sf == sg

    def teardown(self):
        for i, mode in self.cpu_open:
            kf, kg = self.pair(i)
            self.fast.close(kf, mode)
            self.general.close(kg, mode)


UnifiedViews.TestCase.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestUnifiedViews = UnifiedViews.TestCase


def test_run_on_takes_the_inline_path_on_a_unified_device():
    mgr = MemoryManager("unified")
    owner = Owner()
    key = mgr.register(owner, np.zeros(8))
    views = Views([(mgr, key, ViewMode.AcceleratorWrite)])
    assert views.unified is not None
    calls = []
    orig = mgr.run_unified

    def spy(*a):
        calls.append(1)
        return orig(*a)

    mgr.run_unified = spy
    assert views.run_on([mgr._entries[key].host], lambda arrays: None)
    assert calls == [1]
    assert mgr.write_count(key) == 1 and mgr.stats()["open_views"] == 0


def test_run_on_a_cpu_writer_open_raises_the_conflict():
    mgr = MemoryManager("unified")
    owner = Owner()
    key = mgr.register(owner, np.zeros(8))
    host = mgr.open(key, ViewMode.CpuWrite)
    views = Views([(mgr, key, ViewMode.AcceleratorRead)])
    with pytest.raises(ViewConflictError):
        views.run_on([host], lambda arrays: None)
    mgr.close(key, ViewMode.CpuWrite)
    assert views.run_on([host], lambda arrays: None)
    assert mgr.stats()["open_views"] == 0


def test_run_on_a_field_released_while_a_view_is_open_raises():
    """The release waits for the open CPU view; meanwhile a kept launch on the field is refused
    (KeyError, as every open of a released field), on the inline path as on the general one."""
    mgr = MemoryManager("unified")
    owner = Owner()
    key = mgr.register(owner, np.zeros(8))
    host = mgr.open(key, ViewMode.CpuRead)
    mgr.release(key)
    views = Views([(mgr, key, ViewMode.AcceleratorRead)])
    with pytest.raises(KeyError):
        views.run_on([host], lambda arrays: None)
    mgr.close(key, ViewMode.CpuRead)
    assert mgr.stats()["entries"] == 0 and mgr.stats()["open_views"] == 0
