"""The host's last-level cache (pygrid.accelerator.caches) and the thresholds scaled to it."""
import contextlib
import dataclasses
import os

import numpy as np
import pytest
from numpy_refs import dhop_ref

import pygrid as pg
import pygrid.qcd  # noqa: F401  (pg.qcd)
from pygrid import config
from pygrid.accelerator import caches
from pygrid.errors import ConfigError
from pygrid.qcd import compressed_links, dslash, unrolled_launch as ul
from pygrid.qcd.kernels_wilson import field_bytes
from pygrid.stencil.stencil import Stencil, wilson_displacements


@contextlib.contextmanager
def llc(mb):
    before = config.set_current(dataclasses.replace(config.current(), llc_mb=mb))
    try:
        yield
    finally:
        config.set_current(before)


def _fake_cpu(root, cpu, entries):
    """sysfs cache entries of ``cpu``: (index, level, type, size, shared_cpu_list)."""
    for index, level, kind, size, shared in entries:
        d = root / f"cpu{cpu}" / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(f"{value}\n")


def test_sizes_as_sysfs_writes_them():
    assert caches._size("32768K") == 32 << 20
    assert caches._size("1M") == 1 << 20
    assert caches._size("512") == 512
    assert caches._size("") is None and caches._size("lots") is None


def test_host_groups_from_a_sysfs_tree(tmp_path):
    """The highest-level data or unified cache of each CPU this process may run on, grouped by
    the CPUs sharing it; instruction caches and unreadable entries are passed over."""
    cpus = sorted(os.sched_getaffinity(0))
    for k, cpu in enumerate(cpus):
        _fake_cpu(tmp_path, cpu, [(0, 1, "Data", "32K", str(cpu)), (1, 1, "Instruction", "32K", str(cpu)),
                                  (2, 2, "Unified", "1024K", str(cpu)),
                                  (3, 3, "Unified", "16384K" if k % 2 else "32768K", f"group{k % 2}"),
                                  (4, 4, "Instruction", "999M", "all")])
    size, groups = caches.host_groups.__wrapped__(str(tmp_path))
    assert groups == min(2, len(cpus))
    assert size == (16 << 20 if len(cpus) > 1 else 32 << 20)   # unlike groups count at the smallest
    assert caches.host_groups.__wrapped__(str(tmp_path / "nothing")) is None


def test_a_cache_without_its_cpu_list_is_one_group(tmp_path):
    for cpu in sorted(os.sched_getaffinity(0)):
        d = tmp_path / f"cpu{cpu}" / "cache" / "index3"
        d.mkdir(parents=True)
        for name, value in (("level", 3), ("type", "Unified"), ("size", "8192K")):
            (d / name).write_text(f"{value}\n")
    assert caches.host_groups.__wrapped__(str(tmp_path)) == (8 << 20, 1)


def test_this_host_reads_its_cache():
    found = caches.host_groups()
    if found is None:
        pytest.skip("this host's /sys gives no cache sizes")
    size, groups = found
    assert size >= 1 << 20 and 1 <= groups <= len(os.sched_getaffinity(0))


def test_threads_reach_one_group_each(monkeypatch):
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (16 << 20, 4))
    with llc(None):
        assert [caches.llc_bytes(t) for t in (1, 2, 4, 8)] == [16 << 20, 32 << 20, 64 << 20, 64 << 20]
        assert caches.scaled(12 << 20, 1) == 6 << 20            # measured with 32 MiB, here 16
        assert caches.scaled(12 << 20, 4) == 24 << 20
        assert caches.per_group(6 << 20) == 3 << 20
    with llc(64):                                               # --llc-mb: one group's cache
        assert caches.llc_bytes(1) == 64 << 20 and caches.llc_bytes(2) == 128 << 20
        assert "--llc-mb" in caches.describe()
    monkeypatch.setattr(caches, "host_groups", lambda root=None: None)
    with llc(None):                                             # nothing known: the reference
        assert caches.llc_bytes(8) == caches.REFERENCE_BYTES
        assert caches.scaled(12 << 20) == 12 << 20


def test_ranks_not_bound_share_the_groups(monkeypatch):
    """Two ranks on a node, neither bound to its own CPUs, split the groups their threads reach;
    a rank bound to CPUs of its own keeps its groups."""
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (32 << 20, 1))
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    with llc(None):
        monkeypatch.setattr(caches, "_cpus", lambda: list(range(os.cpu_count() or 1)))
        assert caches.llc_bytes(1) == 16 << 20
        monkeypatch.setattr(caches, "host_groups", lambda root=None: (32 << 20, 4))
        assert caches.llc_bytes(1) == 32 << 20 and caches.llc_bytes(2) == 64 << 20   # 4 threads, 4 groups
        assert caches.llc_bytes(4) == 64 << 20                                       # 8 threads, 4 groups
        if (os.cpu_count() or 1) > 1:
            monkeypatch.setattr(caches, "_cpus", lambda: [0])
            monkeypatch.setattr(caches, "host_groups", lambda root=None: (32 << 20, 1))
            assert caches.llc_bytes(1) == 32 << 20


@pytest.mark.parametrize("text, want", [("32", 32), ("auto", None), (" AUTO ", None), ("1048576", 1 << 20)])
def test_llc_flag_and_environment(text, want):
    assert config.parse_args(["--llc-mb", text], env={})[0].llc_mb == want
    assert config.config_from_env({"PYGRID_LLC_MB": text}).llc_mb == want


@pytest.mark.parametrize("text", ["0", "-4", "32M", "1.5", "1048577", ""])
def test_bad_llc_values_are_refused_by_name(text):
    with pytest.raises(ConfigError, match="--llc-mb"):
        config.parse_args(["--llc-mb", text], env={})


def test_thresholds_follow_the_cache(monkeypatch):
    """The hop's choices scale with the cache: on 8^4 double (about 4 MB of fields) a 1 MB cache
    makes the fields far (prefetches, the result streamed), walks a 5D field's sites in columns (on
    8.4.8.8 outer sites) and reads the links compressed; 32 MiB (the development machines') does
    none of that."""
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (32 << 20, 1))
    g = pg.GridCartesian([8, 8, 8, 8], precision="double")
    st = Stencil(g, wilson_displacements())
    n4, nsimd = g.osites, g.nsimd
    assert field_bytes(n4, 1, nsimd, "float64") < 12 << 20
    with llc(1):
        assert ul._LaunchState(st, 1, nsimd, np.float64).far
        assert compressed_links.compression_pays(n4, nsimd, np.float64)
        # a plane wider than the narrowest columns (8^4's 4 x 4 is not)
        rdims, n = (8, 4, 8, 8), 8 * 4 * 8 * 8
        order = ul.site_order(rdims, 8, nsimd, np.float64)
        assert not np.array_equal(order, np.arange(n)) and np.array_equal(np.sort(order), np.arange(n))
    with llc(None):
        assert not ul._LaunchState(st, 1, nsimd, np.float64).far
        assert not compressed_links.compression_pays(n4, nsimd, np.float64)
        assert np.array_equal(ul.site_order(rdims, 8, nsimd, np.float64), np.arange(n))


def test_the_register_reach_scales_down_not_up(monkeypatch):
    """The wide 5D register order's reach follows a smaller cache than the reference's but not a
    larger one (on the 105 MiB Intel machine the crossing was where it is on 32 MiB), twice the
    bytes in single for the plain hop; past it the tiled order streams its result, on 8^4 Ls 16
    double (26 MB) under a 105 MiB cache as under 32 MiB."""
    from pygrid.qcd import kernels_wilson as kw

    monkeypatch.setattr(kw, "wide_default", lambda: True)
    f64, f32 = np.dtype("float64"), np.dtype("float32")
    reg, schur_reg = ul.REGISTER_BYTES, ul.SCHUR_REGISTER_BYTES
    for mb, plain, schur in ((105, reg, schur_reg), (32, reg, schur_reg), (8, reg // 4, schur_reg // 4)):
        monkeypatch.setattr(caches, "host_groups", lambda root=None, mb=mb: (mb << 20, 1))
        with llc(None):
            assert ul.register_reach("plain", f64, 1) == plain, mb
            assert ul.register_reach("plain", f32, 1) == 2 * plain, mb
            assert ul.register_reach("solve", f64, 1) == schur == ul.register_reach("solve", f32, 1), mb
    g = pg.GridCartesian([8, 8, 8, 8], precision="double")
    st = Stencil(g, wilson_displacements())
    assert field_bytes(g.osites, 16, g.nsimd, "float64") > reg > field_bytes(g.osites, 8, g.nsimd, "float64")
    for mb in (32, 105):
        monkeypatch.setattr(caches, "host_groups", lambda root=None, mb=mb: (mb << 20, 1))
        with llc(None):
            past = ul._LaunchState(st, 16, g.nsimd, f64)
            assert past.far and not past._register, mb
            within = ul._LaunchState(st, 8, g.nsimd, f64)
            assert "plain" in within._register and "solve" not in within._register, mb
            assert within.far, mb   # 13 MB: past 12 MiB of far bytes (a group counts up to 32 MiB)
            assert not ul._LaunchState(st, 1, g.nsimd, f64).far


def test_a_group_counts_up_to_the_reference(monkeypatch):
    """A group's cache read from the host counts up to the reference's 32 MiB (on a 480 MiB L3 the
    thresholds scaled up ran slower); --llc-mb is taken as given; several groups still add up."""
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (480 << 20, 1))
    with llc(None):
        assert caches.group_bytes() == caches.REFERENCE_BYTES == caches.llc_bytes(2)
        assert caches.scaled(12 << 20, 2) == 12 << 20 and caches.per_group(6 << 20) == 6 << 20
        assert "480 MiB, counted up to 32" in caches.describe()
    with llc(480):
        assert caches.group_bytes() == 480 << 20 and caches.scaled(12 << 20, 1) == 180 << 20
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (105 << 20, 4))
    with llc(None):
        assert caches.llc_bytes(1) == 32 << 20 and caches.llc_bytes(4) == 128 << 20


def test_4d_fields_past_the_register_reach_take_the_tiled_order(monkeypatch):
    """In the wide structure, 4D fields past the plain hop's register reach (scaled to the cache)
    run their compressed links in the tiled order, the narrow structure's kernel; within it, and on
    whole links stored direction by direction, the wide structure's own."""
    from pygrid.qcd import kernels_wilson as kw

    monkeypatch.setattr(kw, "wide_default", lambda: True)
    monkeypatch.setattr(caches, "host_groups", lambda root=None: (32 << 20, 1))
    g = pg.GridCartesian([8, 8, 8, 8], precision="double")
    st = Stencil(g, wilson_displacements())
    f64 = np.dtype("float64")
    assert field_bytes(g.osites, 1, g.nsimd, f64) < ul.REGISTER_BYTES
    with llc(None):
        assert not ul._LaunchState(st, 1, g.nsimd, f64).tiled_4d
    with llc(1):
        state = ul._LaunchState(st, 1, g.nsimd, f64)
        assert state.tiled_4d and state.far
        assert not ul._LaunchState(st, 8, g.nsimd, f64).tiled_4d   # 5D fields: the register reach
        narrow = kw.kernel_for(g.nsimd, f64, compressed=True, wide=False)
        assert state.kernel(compressed=True) is narrow
        by_direction = kw.kernel_for(g.nsimd, f64, compressed=kw.BY_DIRECTION)
        assert state.kernel(compressed=kw.BY_DIRECTION) is by_direction
        monkeypatch.setattr(ul, "TILED_4D", False)
        assert not ul._LaunchState(st, 1, g.nsimd, f64).tiled_4d


@pytest.mark.parametrize("wide", [True, False])
def test_dhop_on_a_small_cache_against_numpy(monkeypatch, wide):
    """The paths a 1 MB cache picks on 8^4 (far, links compressed, in the wide structure the tiled
    order) against numpy, the hop and its adjoint: the operator made and applied under that cache,
    its launch states and bound calls fresh."""
    from pygrid.qcd import kernels_wilson as kw

    if dslash.variant() != "unroll":
        pytest.skip("the thresholds steer the unrolled kernel, which runs on the CPU backends only")
    monkeypatch.setattr(ul, "_states", {})
    monkeypatch.setattr(dslash, "_BOUND", {})
    monkeypatch.setattr(kw, "wide_default", lambda: wide)
    grid = pg.GridCartesian([8, 8, 8, 8], precision="double")
    rng = pg.ParallelRNG(grid, [1, 2, 3, 4])
    U = pg.qcd.random_gauge(grid, rng, precision="double")
    psi = pg.LatticeFermion(grid, "double")
    rng.gaussian(psi)
    with llc(1):
        D = pg.qcd.WilsonFermion(U, 0.1)
        got = D.Dhop(psi).to_numpy()
        got_dag = D.Dhop(psi, dag=True).to_numpy()
        assert all(st.far and st.tiled_4d is wide for st in ul._states.values()) and ul._states
    for dag, value in ((False, got), (True, got_dag)):
        want = dhop_ref(U.to_numpy(), psi.to_numpy(), dag=dag)
        assert np.max(np.abs(value - want)) <= 1e-12 * np.max(np.abs(want)), dag
