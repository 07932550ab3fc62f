"""Programs started by ``mpiexec``: a failing rank ends the job, and the benchmark's report.

These start real MPI jobs (MPICH from the [mpi] extra) as subprocesses with 2
ranks; they are skipped where mpiexec or mpi4py is missing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

MPIEXEC = shutil.which(
    "mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (pip install 'pygrid[mpi]')")


def mpirun(n, args, timeout=300):
    env = dict(os.environ)
    env.pop("PYGRID_MPI", None)
    return subprocess.run(
        [MPIEXEC, "-n", str(n), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_exception_on_one_rank_aborts_the_job(tmp_path):
    prog = tmp_path / "fail.py"
    prog.write_text(textwrap.dedent("""
        import pygrid as pg
        g = pg.GridCartesian([4, 4, 4, 8])
        if g.comm.rank == 1:
            raise ValueError("rank one gives up")
        pg.norm2(pg.LatticeComplex(g))  # rank 0 would wait here forever without the abort
        print("not reached")
    """))
    r = mpirun(2, [sys.executable, str(prog)], timeout=120)
    assert r.returncode != 0
    assert "rank one gives up" in r.stderr and "rank 1 of 2" in r.stderr
    assert "not reached" not in r.stdout


def test_rank_count_mismatch_is_a_clear_error(tmp_path):
    r = mpirun(
        2,
        [
            sys.executable,
            "-m",
            "pygrid",
            "benchmark",
            "wilson",
            "--grid",
            "8.8.8.8",
            "--mpi",
            "1.1.1.4",
            "--iterations",
            "1",
        ],
        timeout=120,
    )
    assert r.returncode == 2
    assert "asks for 4 ranks" in r.stderr and "the job has 2 ranks" in r.stderr


@pytest.mark.parametrize("how", ["shared", "messages"])
def test_benchmark_under_mpiexec_reports_per_rank_and_halo(tmp_path, how):
    out = tmp_path / "w.json"
    flags = ["--no-shm-halo"] if how == "messages" else []
    r = mpirun(2, [sys.executable, "-m", "pygrid", "benchmark", "wilson", "--grid", "8.8.8.16",
                   "--mpi", "1.1.1.2", "--iterations", "5", "--warmup", "1", "--json", str(out), *flags])
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "mpi             1.1.1.2: 2 ranks, 8.8.8.8 sites per rank" in text
    assert text.count("wilson on 8.8.8.16") == 1  # rank 0 alone prints
    assert "verified against numpy reference" in text
    said = ("in 2 transfers through the node's shared memory" if how == "shared" else "in 2 messages")
    assert "MB sent per call and rank, " + said in text and "hidden by computation" in text
    assert "Dhop on all 2 ranks" in text
    import json

    m = json.loads(out.read_text())["runs"][0]["kernels"]["Dhop"]["_mpi"]
    assert m["ranks"] == 2 and m["halo_bytes_per_call"] > 0
    assert (m["shared_transfers_per_call"] > 0) == (how == "shared")


def test_benchmark_verifies_with_four_sites_a_rank(tmp_path):
    """``--mpi 1.1.1.4`` splits the 4^4 check lattice to one site a rank in t: the check runs on
    4.4.4.16 instead."""
    r = mpirun(4, [sys.executable, "-m", "pygrid", "benchmark", "dwf", "--grid", "4.4.4.16", "-Ls", "4",
                   "--mpi", "1.1.1.4", "--threads", "1", "--iterations", "2", "--warmup", "1"])
    assert r.returncode == 0, r.stderr
    assert "verified against numpy reference" in r.stdout and "4x4x4x16" in r.stdout
