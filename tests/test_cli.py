"""The ``pygrid`` command line, run as a subprocess on the real entry point.

Only well-formedness is checked (figures positive, keys present): timings on
the shared CI machine are not trustworthy.  Grids are tiny and --iterations 2.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "pygrid"
CMD = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "pygrid"]
TINY = ["--grid", "4.4.4.8", "--iterations", "2", "--warmup", "1", "--quiet"]


def _env():
    env = dict(os.environ)
    cache = ROOT / ".pygrid-cache"
    env.setdefault("PYGRID_CACHE_DIR", str(cache))
    env.setdefault("NUMBA_CACHE_DIR", str(cache / "numba"))
    env.setdefault("PYGRID_THREADS", "2")
    return env


def run_cli(*args, timeout=120):
    return subprocess.run(CMD + list(args), capture_output=True, text=True, env=_env(), timeout=timeout,
                          cwd=ROOT)


def wilson_available():
    try:
        import pygrid.qcd as qcd
    except ImportError:
        return False
    return hasattr(qcd, "WilsonFermion")


# ---- bad flags: status 2, one line naming the flag --------------------------------

BAD = [
    (["benchmark", "wilson", "--grid", "8.8.8"], "--grid 8.8.8", "8.8.8.8"),
    (["benchmark", "axpy", "--device-mem", "-1"], "--device-mem -1", "megabytes"),
    (["benchmark", "axpy", "--accelerator", "foo"], "--accelerator foo", "openmp"),
    (["benchmark", "axpy", "--accelerator", "cuda"], "--accelerator cuda", "openmp"),
    (["benchmark", "axpy", "--grid", "8.8.8.8", "--simd", "1.1.3.1"], "--simd 1.1.3.1", "divisible"),
    (["benchmark", "axpy", "--grid", "8.8.8.8", "--mpi", "3.1.1.1"], "--mpi 3.1.1.1", "divisible"),
    (["benchmark", "foo"], "benchmark kind 'foo'", "wilson"),
    (["benchmark", "axpy", "--precision", "foo"], "--precision foo", "single, double or both"),
    (["benchmark", "axpy", "--iterations", "0"], "--iterations 0", "positive integer"),
    (["benchmark", "axpy", "--warmup", "x"], "--warmup x", "non-negative integer"),
    (["benchmark", "dwf", "--Ls", "0"], "--Ls 0", "positive integer"),
    (["benchmark", "axpy", "--sweep", "8.8.8.8,4.4"], "--sweep", "X.Y.Z.T"),
    (["benchmark", "axpy", "--threads", "0"], "--threads 0", "positive integer"),
    (["benchmark", "axpy", "--bogus"], "--bogus", "--help"),
    (["benchmark", "cache", "--grid", "16.16.16.16", "--device-mem", "1"], "--device-mem 1", "or more"),
    (["benchmark"], "KIND", "wilson"),
    (["frobnicate"], "frobnicate", "benchmark"),
    (["benchmark", "wilson", "--Ls", "4"], "--Ls 4", "no fifth dimension"),
    (["benchmark", "wilson", "--grid", "4.4.4.4", "--plot", "out.txt"], "--plot out.txt", ".png"),
]


# a few through the real entry point, the rest in-process (each subprocess costs ~2 s)
SUBPROCESS = {0, 2, 3, 7, 16}


@pytest.fixture
def in_process():
    """Run pygrid.cli.main in this process, restoring what pg.init changes."""
    import pygrid
    import pygrid.memory as memory

    cfg_mod = sys.modules["pygrid.config"]
    saved = (cfg_mod.current(), memory.get_manager(), pygrid.get_backend().name)
    yield
    cfg_mod.set_current(saved[0])
    memory._default = saved[1]
    pygrid.set_backend(saved[2])


@pytest.mark.parametrize("i", range(len(BAD)), ids=[" ".join(b[0]) for b in BAD])
def test_bad_flag_exits_2_with_one_line(i, in_process, capsys):
    argv, names, form = BAD[i]
    if i in SUBPROCESS:
        r = run_cli(*argv)
        status, stderr = r.returncode, r.stderr
    else:
        from pygrid.cli import main

        status = main(argv)
        stderr = capsys.readouterr().err
    assert status == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert names in lines[0] and form in lines[0], lines[0]
    assert lines[0].startswith("pygrid: error: ")


def test_wilson_bad_lattice_names_grid():
    if not wilson_available():
        pytest.skip("pygrid.qcd.WilsonFermion not available")
    r = run_cli("benchmark", "wilson", "--grid", "3.3.3.3")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--grid 3.3.3.3" in r.stderr


def test_dwf_unavailable_or_runs():
    import pygrid.qcd as qcd

    if hasattr(qcd, "DomainWallFermion"):
        r = run_cli("benchmark", "dwf", *TINY, "--Ls", "4")
        assert r.returncode == 0, r.stderr
        assert "verified against numpy reference" in r.stdout
    else:
        r = run_cli("benchmark", "dwf")
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [
            "pygrid: error: the domain-wall operator is not available: "
            "pygrid.qcd has no DomainWallFermion yet"]


# ---- help, version, info -------------------------------------------------------------

def test_help():
    r = run_cli("benchmark", "--help")
    assert r.returncode == 0, r.stderr
    for flag in ("--grid", "--mpi", "--threads", "--accelerator", "--accelerator-threads", "--device-mem",
                 "--debug-mem", "--emulate-device", "--Ls", "--precision", "--iterations", "--warmup",
                 "--json", "--sweep", "--plot"):
        assert flag in r.stdout, flag
    assert r.stdout.count("default") >= 15
    for kind in ("wilson", "dwf", "su3", "axpy", "memory", "cache"):
        assert kind in r.stdout
    r = run_cli("benchmark", "wilson", "--help")
    assert r.returncode == 0 and "1320" in r.stdout and "--Ls" in r.stdout
    r = run_cli("--help")
    assert r.returncode == 0 and "pygrid benchmark" in r.stdout


def test_version_and_info():
    import pygrid

    r = run_cli("--version")
    assert r.returncode == 0 and pygrid.__version__ in r.stdout
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    for word in ("pygrid " + pygrid.__version__, "openmp", "cuda", "sycl", "Nsimd", "threads",
                 "kernels", "MPI"):
        assert word in r.stdout, word
    r = run_cli("info", "--accelerator", "nope")
    assert r.returncode == 2 and "--accelerator nope" in r.stderr


def test_python_dash_m():
    r = subprocess.run([sys.executable, "-m", "pygrid", "--version"], capture_output=True, text=True,
                       env=_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 0 and "pygrid" in r.stdout


# ---- --json ----------------------------------------------------------------------------

TOP_KEYS = {"pygrid_version", "kind", "argv", "timestamp", "config", "host", "verification", "runs",
            "memory_manager", "elapsed_seconds"}
RUN_KEYS = {"kind", "grid", "volume", "precision", "simd_layout", "nsimd", "main_kernel", "baseline_kernel",
            "speedup_vs_numpy", "roofline", "kernels", "notes"}
KERNEL_KEYS = {"role", "description", "seconds_per_call", "seconds_min", "iterations", "sites",
               "flops_per_site", "bytes_per_site", "flops_per_call", "bytes_per_call", "gflops", "gbps",
               "roofline_gflops", "roofline_percent"}
MAIN = {"axpy": "axpy", "su3": "su3_mul", "memory": "triad", "cache": "read_sweep", "wilson": "Dhop"}
KINDS = ["axpy", "su3", "memory", "cache",
         pytest.param("wilson", marks=pytest.mark.skipif(not wilson_available(),
                                                          reason="pygrid.qcd.WilsonFermion not available"))]


@pytest.mark.parametrize("kind", KINDS)
def test_json(kind, tmp_path):
    out = tmp_path / f"{kind}.json"
    r = run_cli("benchmark", kind, *TINY, "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    doc = json.loads(out.read_text())
    assert TOP_KEYS <= set(doc), TOP_KEYS - set(doc)
    import pygrid

    assert doc["pygrid_version"] == pygrid.__version__ and doc["kind"] == kind
    assert doc["config"]["grids"] == [[4, 4, 4, 8]] and doc["config"]["iterations"] == 2
    probe = doc["config"]["thread_scaling"]
    assert set(probe) == {"before", "after", "short_before", "short_after"}
    assert all(v is None or v > 0 for v in probe.values())
    assert (" threads did " in r.stdout) == (probe["before"] is not None)
    assert len(doc["runs"]) == 1
    run = doc["runs"][0]
    assert RUN_KEYS <= set(run), RUN_KEYS - set(run)
    assert run["main_kernel"] == MAIN[kind]
    assert run["roofline"]["copy_gbps"] > 0
    for name, k in run["kernels"].items():
        assert KERNEL_KEYS <= set(k), (name, KERNEL_KEYS - set(k))
        assert k["seconds_per_call"] > 0 and k["iterations"] == 2, name
        if k["flops_per_site"]:
            assert k["gflops"] > 0 and k["roofline_gflops"] > 0, name
        if k["bytes_per_site"]:
            assert k["gbps"] > 0 and k["roofline_percent"] > 0, name
    if kind == "wilson":
        assert run["kernels"]["Dhop"]["flops_per_site"] == 1320
        assert run["speedup_vs_numpy"] > 0
        (v,) = doc["verification"]
        assert v["passed"] and v["max_rel_error"] < 1e-12
        assert "verified against numpy reference: max rel. error" in r.stdout
        d = run["dslash"]
        assert d["variant"] in ("unroll", "generic")
        assert ("Dirac kernel: " + ("hand-unrolled" if d["variant"] == "unroll" else "generic")) in r.stdout
    if kind == "su3":
        assert run["kernels"]["su3_mul"]["flops_per_site"] == 198
    if kind == "memory":  # both copies shown; the faster sets the roofline
        copies = [run["kernels"][k]["gbps"] for k in ("copy", "copy_stream")]
        assert run["roofline"]["copy_gbps"] == pytest.approx(max(copies))
    if kind == "cache":
        rs = run["kernels"]["read_sweep"]
        assert rs["h2d_per_call"] > 0 and rs["evictions_per_call"] > 0
        assert run["write_sweep_lost_fields"] == 0
        assert rs["sites_are"] == "view" and "(emulated device)" in r.stdout
        assert "overflow" not in r.stderr, r.stderr
    # the human-readable output states the counts, per site (per view opened for the cache)
    assert "flop/site" in r.stdout or kind == "cache"
    assert ("B/view" if kind == "cache" else "B/site") in r.stdout and "roofline" in r.stdout


@pytest.mark.skipif(not wilson_available(), reason="pygrid.qcd.WilsonFermion not available")
@pytest.mark.parametrize("structure", ["wide", "narrow"])
def test_the_benchmark_says_which_dirac_kernel_ran(structure, tmp_path):
    out = tmp_path / "w.json"
    r = run_cli("benchmark", "wilson", *TINY, "--accelerator", "openmp", "--dslash-structure", structure,
                "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["runs"][0]["dslash"] == {"variant": "unroll", "structure": structure}
    assert f"Dirac kernel: hand-unrolled, {structure} structure" in r.stdout


def test_debug_mem_and_both_precisions():
    r = run_cli("benchmark", "axpy", *TINY, "--precision", "both", "--debug-mem")
    assert r.returncode == 0, r.stderr
    assert "double precision" in r.stdout and "single precision" in r.stdout
    assert "MemoryManager:" in r.stdout


# ---- --sweep and --plot --------------------------------------------------------------------

def test_sweep_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png, js = tmp_path / "out.png", tmp_path / "out.json"
    r = run_cli("benchmark", "axpy", "--sweep", "4.4.4.4,4.4.4.8", "--iterations", "2", "--quiet",
               "--precision", "both", "--plot", str(png), "--json", str(js))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(js.read_text())
    assert [(x["grid"], x["precision"]) for x in doc["runs"]] == [
        ([4, 4, 4, 4], "double"),
        ([4, 4, 4, 4], "single"),
        ([4, 4, 4, 8], "double"),
        ([4, 4, 4, 8], "single"),
    ]


def test_plot_without_matplotlib(tmp_path):
    """A clear error (status 2) when matplotlib is missing: hide it with a stub that fails to import."""
    stub = tmp_path / "stub"
    (stub / "matplotlib").mkdir(parents=True)
    (stub / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = _env()
    env["PYTHONPATH"] = str(stub)
    r = subprocess.run(CMD + ["benchmark", "axpy", *TINY, "--plot", str(tmp_path / "x.png")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "pip install matplotlib" in r.stderr


def test_selftest_on_sycl_checks_every_operator_then_benchmarks():
    """`pygrid selftest` (the GPU check): operators against numpy on the device, then the benchmarks."""
    pytest.importorskip("dpctl")
    r = run_cli("selftest", "--accelerator", "sycl", "--grid", "4.4.4.8", "--precision", "double",
                "--iterations", "2", "--warmup", "1", "--quiet", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pygrid selftest on sycl" in r.stdout
    assert "13 passed, 0 failed" in r.stdout
    assert "FAIL" not in r.stdout
    assert r.stdout.count("Dhop") >= 2  # the wilson and dwf benchmark lines
    from pygrid.accelerator.sycl_backend import import_dpctl, make_queue

    device = make_queue(import_dpctl()).sycl_device.name  # the benchmark header names the device
    assert f"  backend         sycl ({device}" in r.stdout


def test_selftest_reports_a_wrong_operator(monkeypatch, capsys):
    """A check that disagrees with numpy is a FAIL line and exit status 1."""
    import pygrid.qcd.reference as ref
    from pygrid import selftest

    right = ref.dhop
    monkeypatch.setattr(ref, "dhop", lambda U, psi, *a, **k: 1.01 * right(U, psi, *a, **k))
    status = selftest.run(["--grid", "4.4.4.4", "--precision", "double", "--no-benchmark"])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL Wilson Dhop" in out and "ok   norm2" in out


def test_a_lattice_smaller_than_the_simd_width_is_one_warning_line(in_process, capsys):
    from pygrid.cli import main

    assert main(["benchmark", "axpy", "--grid", "2.2.2.4", "--iterations", "1", "--warmup", "0"]) == 0
    err = capsys.readouterr().err
    warned = [ln for ln in err.splitlines() if "SIMD lanes" in ln]
    assert len(warned) == 1 and warned[0].startswith("pygrid: warning: the local lattice 2.2.2.4"), err
    assert "PerformanceWarning" not in err


def test_compile_probe_reads_its_timings_past_the_compile_messages():
    """benchmarks/bench_core.py's compile probe: two fresh processes on an empty cache, whose
    stdout also carries pygrid's compile lines; the second loads from the disk cache."""
    from pygrid.bench.compile_probe import compile_times

    c = compile_times()
    assert set(c) == {"import_seconds", "first_compile_seconds", "disk_cache_load_seconds"}
    assert all(v > 0 for v in c.values())
    assert c["disk_cache_load_seconds"] < c["first_compile_seconds"]


def test_a_grid_command_line_runs():
    """Benchmark_dwf's flags as a Grid user types them: -Ls, Grid's --log list, and flags of Grid's
    without effect here, each named once on stderr."""
    r = run_cli("benchmark", "dwf", *TINY, "-Ls", "4", "--comms-overlap", "--shm", "1024",
                "--log", "Error,Warning,Message,Performance")
    assert r.returncode == 0, r.stderr
    assert "x Ls 4" in r.stdout and "verified against numpy reference" in r.stdout
    warned = [line for line in r.stderr.splitlines() if "a flag of Grid's" in line]
    assert [line.split(" (")[0] for line in warned] == ["pygrid: warning: --comms-overlap",
                                                        "pygrid: warning: --shm 1024"]
