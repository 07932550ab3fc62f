"""The 'sycl' backend: selection errors and the OpenCL ICD set-up here; real runs where dpctl is installed.

The OpenCL C that this backend hands dpctl is also compiled and run on the CPU
under the SIMT emulation header in tests/test_codegen_c.py (``opencl-emulated``).
"""
import importlib.util
import os
import sys

import numpy as np
import pytest

import pygrid as pg
from pygrid.accelerator import backends as _bk
from pygrid.accelerator import sycl_backend
from pygrid.errors import BackendError

from conftest import assert_close, backend, grid, pool_field

HAVE_DPCTL = importlib.util.find_spec("dpctl") is not None
NO_DPCTL = ("dpctl/dpnp/intel-opencl-rt are not installed: about 2.7 GB installed (0.9 GB download), "
            "over the size allowed for a test dependency on these machines; pip install pygrid[sycl] "
            "to run these tests (see docs/backends.md)")


def test_sycl_without_dpctl_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dpctl", None)  # import dpctl -> ImportError
    monkeypatch.setattr(_bk, "_backends", {})
    with pytest.raises(BackendError, match=r"dpctl is not installed: pip install pygrid\[sycl\]"):
        pg.set_backend("sycl")


def test_icd_setup_writes_one_file_with_the_runtime_path(tmp_path, monkeypatch):
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    lib = prefix / "lib" / "libintelocl.so"
    lib.write_bytes(b"")  # not a real library: the preload fails quietly
    for var in ("OCL_ICD_VENDORS", "PYGRID_OWN_ICD", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    icd = tmp_path / "icd"
    got = sycl_backend.setup_opencl_icd(str(prefix), str(icd))
    assert got == str(icd)
    files = os.listdir(icd)
    assert files == ["pygrid-intel-cpu.icd"]
    assert (icd / files[0]).read_text().strip() == str(lib.resolve())
    assert os.environ["OCL_ICD_VENDORS"] == str(icd)
    assert os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(prefix / "lib")
    # idempotent, and a user's own OCL_ICD_VENDORS wins
    assert sycl_backend.setup_opencl_icd(str(prefix), str(icd)) == str(icd)
    monkeypatch.delenv("PYGRID_OWN_ICD")
    monkeypatch.setenv("OCL_ICD_VENDORS", "/mine")
    assert sycl_backend.setup_opencl_icd(str(prefix), str(icd)) == "/mine"


def test_icd_setup_without_runtime_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    assert sycl_backend.setup_opencl_icd(str(tmp_path)) is None
    assert "OCL_ICD_VENDORS" not in os.environ


@pytest.mark.skipif(not HAVE_DPCTL, reason=NO_DPCTL)
@pytest.mark.parametrize("precision", ["double", "single"])
def test_sycl_expressions_against_numpy(precision):
    g = grid(precision=precision)
    U = pool_field(g, pg.ColourMatrix(), precision)
    psi = pool_field(g, pg.SpinColourVector(), precision)

    def make():
        return U * pg.cshift(psi, 3, -1) + 0.5 * pg.adj(U) * pg.cshift(psi, 0, 1) - psi

    with backend("numpy"):
        want = pg.eval(make()).to_numpy()
    with backend("sycl"):
        got = pg.eval(make()).to_numpy()
        n2 = pg.norm2(psi)
    assert_close(got, want, precision)
    assert abs(n2 - float(np.vdot(psi.to_numpy(), psi.to_numpy()).real)) < 1e-5 * n2
