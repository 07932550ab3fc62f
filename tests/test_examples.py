"""The example scripts run as a user runs them, and print the right physics.

examples/pion.py on the free field is checked against the pion correlator of
the free Wilson propagator computed in momentum space with numpy
(tests/test_propagator.py), antiperiodic in time.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from test_propagator import _pion_numpy, free_dwf_propagator, free_wilson_propagator

ROOT = Path(__file__).resolve().parent.parent


def _run(*args):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "pion.py"), *args], capture_output=True,
                       text=True, timeout=900, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()[:1].isdigit()]
    return r.stdout, np.array([float(row[1]) for row in rows]), rows


def test_pion_example_on_the_free_field_matches_numpy():
    dims = (4, 4, 4, 8)
    out, C, rows = _run("--grid", "4.4.4.8", "--mass", "0.2", "--tol", "1e-12", "--log", "warning")
    want = _pion_numpy(free_wilson_propagator(dims, 0.2, theta=(0, 0, 0, np.pi))).real
    np.testing.assert_allclose(C, want, rtol=1e-8)
    m_eff = np.log(want[:-1] / want[1:])
    np.testing.assert_allclose([float(r[2]) for r in rows[:-1]], m_eff, rtol=1e-5)
    assert "pion correlator" in out


def test_pion_example_domain_wall_from_a_shifted_source():
    dims = (4, 4, 4, 8)
    out, C, _ = _run("--grid", "4.4.4.8", "--action", "dwf", "--Ls", "4", "--mass", "0.1",
                     "--source", "1.0.2.3", "--tol", "1e-11", "--log", "warning")
    S = free_dwf_propagator(dims, 4, 0.1, 1.8, 1.0, 0.0, theta=(0, 0, 0, np.pi))
    np.testing.assert_allclose(C, _pion_numpy(S).real, rtol=1e-7)
