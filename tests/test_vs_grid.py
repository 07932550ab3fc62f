"""benchmarks/vs_grid.py: reading Grid's benchmark output (the runs themselves need Grid built)."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import vs_grid  # noqa: E402

# lines as Grid's Benchmark_wilson / Benchmark_dwf print them (benchmarks/Benchmark_*.cc)
SAMPLE = """Grid : Message : 1.234567 s : Called Dw
Grid : Message : 1.234600 s : flops per site 1320
Grid : Message : 1.234700 s : mflop/s =   15823.4
Grid : Message : 1.234700 s : mflop/s per rank =  15823.4
Grid : Message : 2.000000 s : Deo mflop/s =   17000.1
"""


def test_the_first_mflops_line_is_the_hopping_term():
    assert vs_grid.grid_gflops(SAMPLE) == pytest.approx(15.8234)
    assert vs_grid.grid_gflops("x : mflop/s =   2.5e+04\n") == pytest.approx(25.0)


def test_output_without_a_figure_is_an_error():
    with pytest.raises(ValueError, match="no 'mflop/s =' line"):
        vs_grid.grid_gflops("Grid : Message : Nsimd 8\n")


def test_machine_names_the_simd_width():
    assert vs_grid.machine().endswith(("AVX-512", "AVX2", "-bit SIMD", "(compiled for)"))


def test_machine_names_the_cpu_family_and_model(tmp_path):
    info = tmp_path / "cpuinfo"
    block = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
             "model name\t: AMD EPYC\n\n")
    info.write_text(block.format(n=0) + block.format(n=1).replace("26", "25"))
    assert vs_grid.machine(str(info)).startswith("AMD EPYC (family 26 model 2), ")
    info.write_text("model name\t: Some CPU\n")
    assert vs_grid.machine(str(info)).startswith("Some CPU, ")


def test_a_missing_grid_build_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit, match="Benchmark_wilson not found"):
        vs_grid.main(["--grid-build", str(tmp_path), "--cases", "wilson-double", "--quick"])


def test_a_round_is_busy_where_a_probe_reads_under_the_threshold():
    quiet = ((1.97, 1.78), (1.95, 1.77), (1.99, 1.80))
    assert not vs_grid.busy(quiet, 2, 0.85)
    assert vs_grid.busy(((1.97, 1.78), (1.64, 1.44), (1.99, 1.80)), 2, 0.85)
    assert not vs_grid.busy(((None, None),) * 3, 1, 0.85)      # one thread: no probe
    assert not vs_grid.busy(((1.64, 1.44),), 2, 0.0)            # 0: never busy
    # the short-launch figure alone does not make a round busy
    assert not vs_grid.busy(((1.97, 1.20),), 2, 0.85)


def test_grids_share_of_the_roofline_counts_its_links_whole():
    assert vs_grid.whole_links_bytes("wilson", [], "double") == 960
    assert vs_grid.whole_links_bytes("wilson", [], "single") == 480
    assert vs_grid.whole_links_bytes("dwf", ["--Ls", "8"], "double") == (48 + 72 / 8) * 8
    # 1320 flops at 33 GFlop/s move 960 B a site at 24 GB/s: the whole of a 24 GB/s copy
    assert vs_grid.roofline_percent(33.0, 24.0, 960) == pytest.approx(100.0)


def test_the_medians_come_from_the_quiet_rounds():
    runs = [(57.0, 46.0, True), (61.0, 64.0, False), (62.0, 65.0, False), (55.0, 45.0, True)]
    assert vs_grid.quiet_rounds(runs) == [(61.0, 64.0), (62.0, 65.0)]
    assert vs_grid.quiet_rounds([(61.0, 64.0, False, 30.0, 40.0)]) == [(61.0, 64.0, 30.0, 40.0)]
    every = [(57.0, 46.0, True), (55.0, 45.0, True)]
    assert vs_grid.quiet_rounds(every) == [(57.0, 46.0), (55.0, 45.0)]


def test_the_grid_builds_simd_is_read_and_a_mismatch_refused(tmp_path, capsys):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "grid.configure.summary").write_text(
        "----- BUILD OPTIONS -----\nNc                          : 3\nSIMD                        : GEN\n")
    assert vs_grid.grid_simd(str(tmp_path)) == "GEN"
    assert vs_grid.grid_simd(str(tmp_path / "nowhere")) is None
    with pytest.raises(SystemExit):
        vs_grid.main(["--grid-build", str(tmp_path), "--quick"])
    assert "is for GEN, pygrid compiles for" in capsys.readouterr().err


def test_avx2_features_turn_every_avx512_one_off():
    feats = vs_grid.avx2_features().split(",")
    assert feats and not any(f.startswith("+avx512") for f in feats)
    assert all(f[0] in "+-" for f in feats)


def test_an_interrupted_run_prints_the_rows_it_reached(tmp_path, monkeypatch, capsys):
    """Ctrl-C or a time limit's SIGTERM mid-run: the table of the rows finished (here the first
    lattice's), and an exit status that says so.  Grid's and pygrid's runs are stood in for: what
    is tested is the script's bookkeeping, not a figure."""
    bench = tmp_path / "build" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "Benchmark_wilson").write_text("")
    calls = []

    def pygrid_run(*a):
        calls.append(a)
        if len(calls) > 1:  # a time limit's signal, as `timeout` sends it
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            pytest.fail("SIGTERM did not stop the run")
        return 12.0, ((1.95, 1.8), (1.97, 1.8)), 40.0, 30.0

    monkeypatch.setattr(vs_grid, "probe", lambda threads: (1.96, 1.8))
    monkeypatch.setattr(vs_grid, "run_grid", lambda *a: 10.0)
    monkeypatch.setattr(vs_grid, "run_pygrid", pygrid_run)
    before = signal.getsignal(signal.SIGTERM)
    rc = vs_grid.main(["--grid-build", str(tmp_path), "--cases", "wilson-double", "--threads", "2",
                       "--lattices", "8.8.8.8,16.16.16.16", "--rounds", "1"])
    out = capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is before
    assert rc == 130
    # Grid's 10 GFlop/s against a copy of 40 GB/s at 960 B and 1320 flops a site: 18.2%
    assert "| wilson-double | 8.8.8.8 | 10.0 | 12.0 | 1.20 | 1.20 | 18.2% | 30.0% | 1 of 1 |" in out
    assert "16.16.16.16 |" not in out and "interrupted" in out


def test_the_best_rounds_ratio_takes_every_round(tmp_path, monkeypatch, capsys):
    """The medians come from the quiet rounds; the ratio of the best rounds from all of them, busy
    ones too (stand-ins for Grid's and pygrid's runs: the script's bookkeeping is what is tested)."""
    bench = tmp_path / "build" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "Benchmark_wilson").write_text("")
    grid = iter([20.0, 18.0, 12.0, 11.0])           # generic, unrolled; round 1 then round 2
    pygrid = iter([(15.0, ((1.20, 1.1), (1.95, 1.8)), 40.0, 30.0),   # busy: a probe at 1.2x
                   (14.0, ((1.95, 1.8), (1.97, 1.8)), 40.0, 30.0)])
    monkeypatch.setattr(vs_grid, "probe", lambda threads: (1.96, 1.8))
    monkeypatch.setattr(vs_grid, "run_grid", lambda *a: next(grid))
    monkeypatch.setattr(vs_grid, "run_pygrid", lambda *a: next(pygrid))
    assert vs_grid.main(["--grid-build", str(tmp_path), "--cases", "wilson-double", "--threads", "2",
                         "--lattices", "8.8.8.8", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    # medians of the quiet round 2: 14 / 12; best rounds: pygrid's 15 (busy) / Grid's 20 (busy)
    assert "| wilson-double | 8.8.8.8 | 12.0 | 14.0 | 1.17 | 0.75 |" in out
    assert "| 1 of 2 |" in out
