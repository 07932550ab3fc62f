"""Generated GPU C, compiled by the host C++ compiler under simt_emulation.h and run on the CPU.

Each check evaluates an expression on the ``cuda-emulated`` backend (the CUDA C
that CuPy would get, one emulated thread per (outer site, lane)) and on the
numpy evaluator, and compares to 1e-12 (double) / 1e-5 (single).  A few
kernels also go through ``opencl-emulated`` (the OpenCL C that dpctl would
get), and the CuPy launch code of the ``cuda`` backend runs against a stand-in
``cupy`` module whose RawKernel is the emulation.

Kernels are cached by source hash: a cshift in any dimension by any distance
is the same kernel (the shift tables are arguments), so the whole file
compiles a few dozen small libraries.
"""
import importlib
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import GAMMA, assert_close, backend, grid, grid5, pool_field, random_field
from cupy_standin import fake_cupy

import pygrid as pg
from pygrid.accelerator import (
    backends as _bk,
    codegen_c,
    cuda_backend,
    emulated_backend,
)
from pygrid.accelerator.device_tables import DeviceTables
from pygrid.errors import BackendError

pytestmark = pytest.mark.skipif(
    not emulated_backend.shutil.which("g++") and not emulated_backend.os.environ.get("CXX"),
    reason="no host C++ compiler (g++) to compile the generated kernels",
)


def on(name, make):
    """Evaluate the expression built by ``make()`` on backend ``name``: to_numpy() array."""
    with backend(name):
        return pg.eval(make()).to_numpy()


def check(make, precision="double", dialect="cuda"):
    got = on(f"{dialect}-emulated", make)
    want = on("numpy", make)
    assert_close(got, want, precision, what=f"{dialect}-emulated vs numpy")
    return got


def F(g, site, precision="double", i=0):
    return pool_field(g, site, precision, i)


PRECISIONS = ["double", "single"]


# ---- products of every site type, both precisions --------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_products_of_site_types(precision):
    g = grid()
    U = F(g, pg.ColourMatrix(), precision)
    V = F(g, pg.ColourMatrix(), precision, 1)
    v = F(g, pg.ColourVector(), precision)
    psi = F(g, pg.SpinColourVector(), precision)
    P = F(g, pg.SpinColourMatrix(), precision)
    S = F(g, pg.SpinMatrix(), precision)
    c = F(g, pg.Complex, precision)
    r = F(g, pg.Real, precision)
    check(lambda: U * V, precision)
    check(lambda: U * v, precision)
    check(lambda: U * psi, precision)
    check(lambda: P * psi, precision)
    check(lambda: S * psi, precision)
    check(lambda: P * P, precision)
    check(lambda: c * psi, precision)
    check(lambda: r * c + c * c, precision)


def test_adj_trace_peek_and_friends():
    g = grid()
    U = F(g, pg.ColourMatrix())
    psi = F(g, pg.SpinColourVector())
    chi = F(g, pg.SpinColourVector(), i=1)
    P = F(g, pg.SpinColourMatrix())
    Ug = F(g, pg.LorentzColourMatrix())
    check(lambda: pg.adj(U) * psi)
    check(lambda: pg.adj(U))
    check(lambda: pg.trace(U) + pg.trace(P))
    check(lambda: pg.trace_spin(P))
    check(lambda: pg.trace_colour(P))
    check(lambda: pg.conjugate(U) + pg.transpose(U))
    for mu in range(4):  # one kernel: mu lives in the tables
        check(lambda: pg.peek_lorentz(Ug, mu) * psi)
    check(lambda: pg.peek_index(P, "spin", 1, 3))
    check(lambda: pg.local_inner_product(psi, chi))
    check(lambda: pg.outer_product(psi, chi))


def test_gamma_matrices():
    g = grid()
    psi = F(g, pg.SpinColourVector())
    P = F(g, pg.SpinColourMatrix())
    for G in ("X", "Y", "Z", "T", "Five"):
        got = check(lambda: getattr(pg.Gamma, G) * psi)
        want = np.einsum("sr,xyztra->xyztsa", GAMMA[G], psi.to_numpy())
        assert_close(got, want, what=f"Gamma.{G} against its matrix")
    check(lambda: (1 - pg.Gamma.mu[3]) * psi)
    check(lambda: pg.Gamma.Five * P * pg.Gamma.X)


# ---- shifts: every dimension, both directions, wraps with lane permutes -----------

@pytest.mark.parametrize("precision,simd", [("double", (1, 1, 2, 2)), ("double", (2, 2, 1, 1)),
                                            ("single", (2, 2, 2, 1)), ("single", (1, 2, 2, 2))])
def test_cshift_every_dim_with_wraps(precision, simd):
    g = pg.GridCartesian([4, 4, 4, 8], simd_layout=list(simd), precision=precision)
    psi = random_field(g, pg.SpinColourVector(), precision)
    U = random_field(g, pg.ColourMatrix(), precision)
    pa = psi.to_numpy()
    for mu in range(4):
        for disp in (1, -1, 2, 3, 5):
            got = check(lambda: pg.cshift(psi, mu, disp), precision)
            assert_close(got, np.roll(pa, -disp, axis=mu), precision, what=f"cshift {mu} {disp}")
        check(lambda: U * pg.cshift(psi, mu, 1) + pg.cshift(pg.adj(U) * psi, mu, -1), precision)


def test_cshift_5d_and_checkerboards():
    g5 = grid5(4)
    psi5 = random_field(g5, pg.SpinColourVector())
    for mu in range(5):
        check(lambda: pg.cshift(psi5, mu, 1) - 0.5 * pg.cshift(psi5, mu, -1))
    g = grid()
    full = F(g, pg.ColourVector())
    for cb in (0, 1):
        half = pg.pick_checkerboard(cb, full)
        for mu in range(4):
            check(lambda: pg.cshift(half, mu, 1))


# ---- where, compare, linear combinations -------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dialect", ["cuda", "opencl-simd"])
def test_where_compare_lincomb(precision, dialect):
    g = grid(precision=precision)
    psi = F(g, pg.SpinColourVector(), precision)
    chi = F(g, pg.SpinColourVector(), precision, 1)
    a = F(g, pg.Real, precision)
    b = F(g, pg.Real, precision, 1)
    def coord(mu):
        c = pg.coordinate(g, mu)
        return c if precision == "double" else pg.convert(c, "single")

    check(lambda: pg.where(coord(3) < 2, psi, chi), precision, dialect)
    check(lambda: pg.where(coord(0) >= coord(1), psi, 2 * chi), precision, dialect)
    for op in ("<", "<=", ">", ">="):
        check(lambda: {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op], precision, dialect)
    check(lambda: 2 * psi - chi / 4 + (0.5 - 1.5j) * chi - psi * 3j, precision, dialect)
    check(lambda: -psi + chi, precision, dialect)
    check(lambda: 2.0 + F(g, pg.ColourMatrix(), precision) - 1j, precision, dialect)


# ---- in-place evaluation (aliasing) -------------------------------------------------

def test_in_place_aliasing():
    g = grid()
    U = F(g, pg.ColourMatrix())
    psi = F(g, pg.SpinColourVector())
    start = F(g, pg.SpinColourVector(), i=3)
    results = {}
    for name in ("numpy", "cuda-emulated"):
        with backend(name):
            chi = start.copy()
            chi @= pg.adj(U) * chi  # unshifted alias: the kernel itself handles it
            chi @= 2 * chi + U * psi
            chi @= pg.cshift(chi, 0, 1) + chi  # shifted alias: evaluated aside, then copied
            results[name] = chi.to_numpy()
    assert_close(results["cuda-emulated"], results["numpy"])


# ---- a Wilson-like kernel (many ops, common subexpressions) -----------------------

def hopping(U, psi):
    terms = None
    for mu in range(4):
        Umu = pg.peek_lorentz(U, mu)
        t = (1 - pg.Gamma.mu[mu]) * (Umu * pg.cshift(psi, mu, 1)) + \
            (1 + pg.Gamma.mu[mu]) * pg.cshift(pg.adj(Umu) * psi, mu, -1)
        terms = t if terms is None else terms + t
    return -0.5 * terms


@pytest.mark.parametrize("precision,dialect", [(p, d) for p in PRECISIONS for d in ("cuda", "opencl")]
                         + [("double", "opencl-simd")])
def test_wilson_like_hopping_term(precision, dialect):
    g = grid((4, 4, 4, 8), precision=precision)
    U = F(g, pg.LorentzColourMatrix(), precision)
    psi = F(g, pg.SpinColourVector(), precision)
    check(lambda: hopping(U, psi), precision, dialect)


# ---- threads per block (--accelerator-threads) -------------------------------------

@pytest.mark.parametrize("dialect", ["cuda", "opencl"])
@pytest.mark.parametrize("threads", [1, 7, 32, 128, 1000])
def test_threads_per_block(threads, dialect):
    """CUDA's 1D blocks of threads, or OpenCL's 2D work-groups of lanes by sites (the last group
    padded with sites past the end, which return), cover every (site, lane) once."""
    cfgmod = importlib.import_module("pygrid.config")  # pg.config is a function
    old = cfgmod.set_current(cfgmod.make_config(accelerator_threads=threads))
    try:
        assert codegen_c.threads_per_block() == threads
        g = grid()
        U = F(g, pg.ColourMatrix())
        psi = F(g, pg.SpinColourVector())
        check(lambda: U * pg.cshift(psi, 2, -1), dialect=dialect)
        osites, ns = g.osites, g.nsimd
        if dialect == "cuda":
            blocks, tpb = codegen_c.launch_dims(osites, ns, threads)
            assert tpb == threads and blocks * tpb >= osites * ns > (blocks - 1) * tpb
        else:
            groups, spg = codegen_c.launch_shape(dialect, osites, ns, threads)
            assert groups * spg >= osites > (groups - 1) * spg
            assert spg * ns <= max(threads, ns)
    finally:
        cfgmod.set_current(old)


def test_source_shape_and_cache():
    """Lane fastest (coalesced), shifted reads through nbr/perm/lanes, and one compile per source."""
    g = grid()
    psi = F(g, pg.SpinColourVector())
    from pygrid.expr.lower import lower
    from pygrid.expr.nodes import as_expr

    launch = lower(as_expr(pg.cshift(psi, 1, 1) + psi), psi.site_type.ncomp)
    src = codegen_c.kernel_source(launch.ir, g.nsimd, False, "float64", "cuda")
    assert f"const long o = idx / {g.nsimd};" in src and f"const long l = idx - o * {g.nsimd};" in src
    assert f"ln0[pm0[o] * {g.nsimd} + l]" in src and "nb0[o]" in src
    assert "blockIdx.x * (long)blockDim.x + (long)threadIdx.x" in src
    ocl = codegen_c.kernel_source(launch.ir, g.nsimd, False, "float64", "opencl")
    assert "__kernel void" in ocl and "get_global_id(0)" in ocl and "cl_khr_fp64" in ocl
    fsrc = codegen_c.kernel_source(launch.ir, 8, False, "float32", "opencl")
    assert "double" not in fsrc
    check(lambda: pg.cshift(psi, 1, 1) + psi)
    n = emulated_backend.compile_count()
    for mu in range(4):
        check(lambda: pg.cshift(psi, mu, -1) + psi)
    assert emulated_backend.compile_count() == n  # same kernel for every shift: no new compile


def test_an_emulation_compile_is_not_spoiled_by_another_process(tmp_path, monkeypatch):
    """Ranks of an MPI job compile the same kernel at once into one cache: here another process
    rewrites the shared source file (truncating it first) while this one's compiler runs.  The
    library made still has its entry point, and the cached one serves a later load."""
    from pygrid.accelerator import compile_cache

    monkeypatch.setattr(compile_cache, "cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(emulated_backend, "_libs", {})
    source = ('extern "C" void pygrid_launch(void** a, int osites, int blocks, int threads)'
              " { ((double*)a[0])[0] = 42.0 + osites + blocks + threads; }\n")
    run = subprocess.run

    def racing(cmd, **kw):
        d = tmp_path / "simt"
        for shared in d.glob("*.cu"):
            shared.write_text("")  # the other rank's open(..., "w"), caught before its write
        r = run(cmd, **kw)
        for shared in d.glob("*.cu"):
            shared.write_text("")
        return r

    monkeypatch.setattr(emulated_backend.subprocess, "run", racing)
    (tmp_path / "simt").mkdir()
    key = codegen_c.source_hash(source, open(emulated_backend.HEADER).read() + " ".join(
        [emulated_backend.compiler()] + emulated_backend.CXXFLAGS))
    (tmp_path / "simt" / (key + ".cu")).write_text(source)  # as the other rank left it
    lib = emulated_backend.compile_emulated(source)
    out = np.zeros(1)
    import ctypes

    lib.pygrid_launch((ctypes.c_void_p * 1)(out.ctypes.data), 1, 2, 3)
    assert out[0] == 48.0
    monkeypatch.setattr(emulated_backend, "_libs", {})
    assert hasattr(emulated_backend.compile_emulated(source), "pygrid_launch")


@pytest.mark.parametrize("dialect", ["cuda", "opencl", "opencl-simd"])
def test_products_unrolled_into_scalar_registers(dialect):
    """The product tables are inlined at generation time: straight-line code over scalar registers,
    no loops, no table arguments, structure constants as literals of the kernel's precision."""

    g = grid()
    U = F(g, pg.ColourMatrix())
    v = F(g, pg.ColourVector())
    psi = F(g, pg.SpinColourVector())
    from pygrid.expr.lower import lower
    from pygrid.expr.nodes import as_expr

    ir = lower(as_expr(U * v), 3).ir
    assert ir.tables  # the lowering has CSR tables; the kernel must not need them
    src = codegen_c.kernel_source(ir, g.nsimd, False, "float64", dialect)
    assert "for" not in re.findall(r"\w+", src)
    assert "T0" not in src and not any(n.startswith("T") for n, _ in codegen_c.arg_kinds(ir))
    assert not re.search(r"v\d+_[ri]\[", src)  # no private arrays
    # out[c] = sum_j U[c][j] v[j]: one expression per real, 3 complex terms (6 real products) each
    vt = f"double{g.nsimd}" if dialect == "opencl-simd" else "double"  # the vector form: a site's lanes
    assert re.search(rf"const {vt} v2_0r = v0_0r \* v1_0r - v0_0i \* v1_0i \+ .* - v0_2i \* v1_2i;", src)
    assert len(re.findall(rf"const {vt} v2_\d[ri] =", src)) == 6
    check(lambda: U * v, dialect=dialect)
    check(lambda: pg.adj(U) * v, dialect=dialect)
    # a non-trivial structure constant is a literal, single precision ones with the f suffix
    e = pg.Gamma.Five * (0.5 * pg.Gamma.X + pg.Gamma.Y) * psi
    fsrc = codegen_c.kernel_source(lower(as_expr(e), 12).ir, 8, False, "float32", dialect)
    assert "0.5f * " in fsrc and "double" not in fsrc and "for" not in re.findall(r"\w+", fsrc)
    check(lambda: pg.Gamma.Five * (0.5 * pg.Gamma.X + pg.Gamma.Y) * psi, dialect=dialect)


def test_shift_tables_uploaded_once_per_host_array():
    """Device copies of the shift tables are cached by the identity of the (lru-cached, read-only)
    host arrays, bounded in number; a writable array is uploaded at every launch."""
    from pygrid.cartesian.shift import shift_table

    g = grid()
    tabs = [shift_table(g, None, tuple(int(d == mu) for d in range(4)))[:3] for mu in range(4)]
    assert shift_table(g, None, (1, 0, 0, 0))[0] is tabs[0][0]  # the same objects at every launch
    uploads = []

    def upload(a):
        uploads.append(a)
        return ("dev", len(uploads))

    tables = DeviceTables(upload, shift_limit=8)
    first = tables.shifts(tabs[:2])
    assert len(first) == 6 and len(uploads) == 6 and all(a.dtype == np.int32 and a.ndim == 1 for a in uploads)
    assert tables.shifts(tabs[:2]) == first and len(uploads) == 6
    tables.shifts(tabs)
    assert len(tables._shifts) == 8 and len(uploads) == 12
    assert all(tables._shifts.holds(x) for x in tabs[3])  # entries keep their host arrays alive
    mine = (np.zeros(4, np.int32), np.zeros(4, np.int32), np.arange(4, dtype=np.int32))
    tables.shifts([mine])
    tables.shifts([mine])
    assert len(uploads) == 18 and len(tables._shifts) == 8


def test_emulated_device_memory_with_evictions():
    """The emulated kernels on a separate (emulated) device memory, watermark small enough to evict."""
    import pygrid.memory as mem

    g = grid()
    m = mem.configure(device="emulated", device_mem_mb=0.2)  # four fields of a 4^4 grid fit
    try:
        U = random_field(g, pg.ColourMatrix())
        psi = random_field(g, pg.SpinColourVector())
        chi = random_field(g, pg.SpinColourVector())
        eta = random_field(g, pg.SpinColourVector())
        check(lambda: U * psi + pg.cshift(chi, 3, 1))
        check(lambda: pg.adj(U) * eta - psi)
        check(lambda: chi + eta)
        assert m.stats()["evictions"] > 0
    finally:
        mem.configure()


# ---- the CuPy launch code, against a stand-in cupy whose RawKernel is the emulation ---

def test_cupy_launch_code_through_emulation(monkeypatch):
    cp = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    be = cuda_backend.CudaBackend("cuda")
    g = grid()
    U = F(g, pg.ColourMatrix())
    psi = F(g, pg.SpinColourVector())
    with backend("numpy"):
        want = pg.eval(U * pg.cshift(psi, 3, -1) + 0.5 * psi).to_numpy()
    out = pg.LatticeFermion(g)
    from pygrid.expr import evaluate as ev

    ev.evaluate(U * pg.cshift(psi, 3, -1) + 0.5 * psi, out, backend=be)
    assert_close(out.to_numpy(), want)
    (grid_, block, osites), = cp.launches
    assert osites == g.osites and block == (codegen_c.threads_per_block(),)
    assert grid_[0] * block[0] >= g.osites * g.nsimd
    from pygrid.accelerator import NumpyBackend

    with psi.view(pg.CpuRead) as a, out.view(pg.CpuRead) as b:
        ref = NumpyBackend()
        assert abs(be.inner_product(a, b) - ref.inner_product(a, b)) < 1e-9 * abs(ref.inner_product(a, b))
        assert abs(be.norm2(a) - ref.norm2(a)) < 1e-12 * ref.norm2(a)
        assert np.allclose(be.site_sum(a), ref.site_sum(a), rtol=1e-12, atol=1e-12)
        da = cp.asarray(a)  # a field in (stand-in) device memory: its slice sums run on the device too
        table = np.arange(g.osites * g.nsimd, dtype=np.int32).reshape(8, -1)
        assert np.allclose(be.slice_sum(da, table), ref.slice_sum(a, table), rtol=1e-12, atol=1e-12)
    assert {"pg_norm2", "pg_inner", "pg_site_sum", "pg_slice_sum"} <= {x[2] for x in cp.launches}


# ---- CUDA and HIP selection errors here (no CuPy, no GPU) --------------------------

@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_cuda_hip_without_cupy_say_what_to_install(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    monkeypatch.setattr(_bk, "_backends", {})
    with pytest.raises(BackendError, match="cupy is not installed") as e:
        pg.set_backend(name)
    if name == "cuda":
        assert "pip install pygrid[cuda]" in str(e.value)
    else:
        assert "ROCm" in str(e.value)


def test_cuda_without_device(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices=0))
    monkeypatch.setattr(_bk, "_backends", {})
    with pytest.raises(BackendError, match="no CUDA device found"):
        pg.set_backend("cuda")

    def broken():
        raise RuntimeError("cudaErrorInsufficientDriver")

    cp = fake_cupy()
    cp.cuda.runtime.getDeviceCount = broken
    monkeypatch.setitem(sys.modules, "cupy", cp)
    with pytest.raises(BackendError, match="no CUDA device found.*InsufficientDriver"):
        pg.set_backend("cuda")


def test_unknown_backend_lists_choices():
    with pytest.raises(BackendError, match="cuda-emulated"):
        pg.set_backend("vulkan")


# ---- the core suites, every kernel they generate, through the generated GPU source ----

SUITES = [
    "tests/test_expr.py",
    "tests/test_cshift.py",
    "tests/test_reductions.py",
    "tests/test_expr_properties.py",
]


@pytest.mark.parametrize("dialect", ["cuda", pytest.param("opencl", marks=pytest.mark.slow)])
def test_core_suites_on_generated_source(dialect):
    """test_expr, test_cshift, test_reductions and test_expr_properties on the ``dialect``-emulated
    backend (PYGRID_TEST_BACKEND): every expression, covariant and layout kernel they run is the
    generated ``dialect`` source under the SIMT emulation, compared with the numpy evaluator,
    on the emulated device memory with evictions.  The OpenCL vector form (4 minutes here) runs
    these suites on the CPU OpenCL device in the sycl pass of ``make test``."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # on the emulated device under a small watermark (conftest's PYGRID_TEST_DEVICE), so the
    # generated kernels also run while the MemoryManager moves and evicts their buffers
    env = dict(os.environ, PYGRID_TEST_BACKEND=f"{dialect}-emulated", PYGRID_TEST_DEVICE="emulated",
               PYGRID_TEST_DEVICE_MEM="4")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + SUITES,
                       cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout


def test_the_emulations_launch_follows_the_kernels_dialect():
    """OpenCL kernels take 2D ranges (lanes by sites) under the emulation as on a device; CUDA and
    the OpenCL vector form 1D; a kernel without the generated first line is refused, not launched
    in a guessed shape."""
    g = grid()
    psi = F(g, pg.SpinColourVector())
    from pygrid.expr.lower import lower
    from pygrid.expr.nodes import as_expr

    ir = lower(as_expr(pg.cshift(psi, 0, 1) + psi), 12).ir
    for dialect, want in (("opencl", f"SIMT_LAUNCH_2D(blocks, threads, {g.nsimd}, k())"),
                          ("opencl-simd", "SIMT_LAUNCH(blocks, threads, k())"),
                          ("cuda", "SIMT_LAUNCH(blocks, threads, k())")):
        src = codegen_c.kernel_source(ir, g.nsimd, False, "float64", dialect)
        assert codegen_c.emulation_launch(src, "k()") == want
    with pytest.raises(ValueError, match="first line"):
        codegen_c.emulation_launch("__kernel void k() {}", "k()")
