"""Fuzzed start-up flags, environment variables, keywords and command lines.

pygrid.config.parse_args, config_from_env and make_config, and the ``pygrid`` command
(pygrid.cli.main in this process, and a few runs of the real entry point), get random
values: text of any kind (unicode, control characters, lone surrogates), integers of any
size and sign, floats, empty values, other separators.  The contract:

* the parsers return a Config within the documented limits, or raise ConfigError with a
  one-line message that names the flag, variable or keyword (the value shown escaped
  and shortened when long); any other exception type fails;
* what they accept agrees with an independent statement of each flag's form (ACCEPTS);
* ``pygrid ...`` exits 0, or 2 with one line ``pygrid: error: ...`` on stderr, never a
  traceback, within fuzzing.TIME_LIMIT.

Example counts: fuzzing.examples (PYGRID_FUZZ_EXAMPLES for a longer run; docs/io.md).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import fuzz, time_limit
from hypothesis import strategies as st

import pygrid as pg
import pygrid.memory as memory
from pygrid.errors import ConfigError

config = importlib.import_module("pygrid.config")  # pg.config is a function

FLAGS = {spec.flag: spec for spec in config.FLAGS}
VALUE_FLAGS = [spec.flag for spec in config.FLAGS if spec.takes_value]
SWITCHES = [spec.flag for spec in config.FLAGS if not spec.takes_value]
ENV_VARS = ["PYGRID_THREADS", "OMP_NUM_THREADS", "PYGRID_ACCELERATOR", "PYGRID_DEVICE_MEM", "PYGRID_DSLASH",
            "PYGRID_DSLASH_STRUCTURE"]


# ---- random values ----------------------------------------------------------------------------

INTS = st.one_of(st.integers(-3, 2000), st.integers(-(10 ** 30), 10 ** 30), st.integers(0, 2 ** 64),
                 st.sampled_from([2 ** 31 - 1, 2 ** 31, 1024, 1025, 2 ** 40, 2 ** 40 + 1]))
NUMBERS = st.one_of(
    INTS.map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "-", "+4", "4_0", "0x10", "1e3", "4.0", "00004", "-0", " 8 ", "\u0663",
                     "\u00b2", "\uff18", "9" * 5000, "1" + "0" * 4400, "none", "NONE", " none "]),
)
SEPARATORS = st.sampled_from([".", ",", "x", ":", " ", "..", "\u2024", "", ".\n"])


@st.composite
def dotted(draw):
    """Lattice-like values: 0 to 6 numbers joined by separators."""
    parts = draw(st.lists(NUMBERS | INTS.map(str), min_size=0, max_size=6))
    return draw(SEPARATORS).join(parts) + draw(st.sampled_from(["", ".", " "]))


NAMES = st.sampled_from(list(config.ACCELERATORS) + list(config.LOG_LEVELS) + list(config.DSLASH_VARIANTS)
                        + ["OpenMP", " numpy ", "NUMPY\n", "debug\0", "gpu", "cpu", "openmp,numpy"])
TEXT = st.text(max_size=30) | st.text(st.characters(codec="utf-8") | st.sampled_from("\udcff\ud800\0\n\t"),
                                      max_size=12)
VALUES = st.one_of(NUMBERS, dotted(), NAMES, TEXT)


# ---- an independent statement of what each flag accepts ------------------------------------

def _int(text):
    """The integer of a value of plain ASCII decimal digits (optionally signed with '-'), else None."""
    t = text.strip()
    if not re.fullmatch(r"-?[0-9]+", t):
        return None
    digits = t.lstrip("-").lstrip("0") or "0"
    n = int(digits) if len(digits) < 200 else 10 ** 200
    return -n if t.startswith("-") else n


def _dims_ok(text):
    parts = text.strip().split(".")
    values = [_int(p) for p in parts]
    return len(values) == 4 and all(v is not None and 1 <= v <= 2 ** 31 - 1 for v in values)


def _log_ok(text):
    """One level, or Grid's comma-separated list: at least one level, every name a level or one of
    Grid's other channels."""
    names = [n.strip().lower() for n in text.split(",")]
    if len(names) == 1:
        return names[0] in config.LOG_LEVELS
    return (any(n in config.LOG_LEVELS for n in names)
            and all(n in config.LOG_LEVELS or n in config.GRID_LOG_CHANNELS for n in names))


ACCEPTS = {
    "grid": _dims_ok,
    "mpi": _dims_ok,
    "threads": lambda v: _int(v) is not None and 1 <= _int(v) <= 1024,
    "accelerator_threads": lambda v: _int(v) is not None and 1 <= _int(v) <= 1024,
    "device_mem": lambda v: v.strip().lower() == "none" or (_int(v) is not None and 0 <= _int(v) <= 2 ** 40),
    "accelerator": lambda v: v.strip().lower() in config.ACCELERATORS,
    "log": lambda v: _log_ok(v),
    "dslash": lambda v: v.strip().lower() in config.DSLASH_VARIANTS,
    "dslash_structure": lambda v: v.strip().lower() in config.DSLASH_STRUCTURES,
    "llc_mb": lambda v: v.strip().lower() == "auto" or (_int(v) is not None and 1 <= _int(v) <= 2 ** 20),
}


def check_message(e, *names):
    text = str(e)
    assert isinstance(e, ConfigError), repr(e)
    assert "\n" not in text and text.strip() == text and text, repr(text)
    assert any(text.startswith(n) for n in names), (names, text)
    assert len(text) < 600, f"{len(text)} characters: {text[:200]}"


def check_config(cfg):
    """The limits every Config keeps, whatever it was made from."""
    assert cfg.grid is None or (len(cfg.grid) == 4 and all(1 <= d <= config.MAX_EXTENT for d in cfg.grid))
    assert cfg.mpi is None or (len(cfg.mpi) == 4 and all(1 <= d <= config.MAX_EXTENT for d in cfg.mpi))
    assert cfg.threads is None or 1 <= cfg.threads <= config.MAX_THREADS
    assert 1 <= cfg.accelerator_threads <= config.MAX_ACCELERATOR_THREADS
    assert cfg.device_mem is None or 0 <= cfg.device_mem <= config.MAX_DEVICE_MEM_MB
    assert cfg.accelerator in config.ACCELERATORS and cfg.log in config.LOG_LEVELS
    assert cfg.dslash in config.DSLASH_VARIANTS and cfg.dslash_structure in config.DSLASH_STRUCTURES
    assert config.parse_args(cfg.to_argv(), env={})[0] == cfg


# ---- the parsers ----------------------------------------------------------------------------------

def _known(arg):
    return arg.split("=", 1)[0] in FLAGS or arg == "--"


def test_one_flag_any_value():
    """``--flag VALUE`` and ``--flag=VALUE``: accepted exactly when the value has the flag's form."""
    def body(x):
        flag, value, joined = x
        spec = FLAGS[flag]
        argv = [f"{flag}={value}"] if joined else [flag, value]
        try:
            cfg, rest = config.parse_args(argv, env={})
        except ConfigError as e:
            check_message(e, flag)
            assert not ACCEPTS[spec.field](value) or (not joined and _known(value)), (argv, str(e))
            return
        assert ACCEPTS[spec.field](value), f"{argv} accepted as {getattr(cfg, spec.field)!r}"
        assert rest == []
        check_config(cfg)

    strategy = st.tuples(st.sampled_from(VALUE_FLAGS), VALUES, st.booleans()).filter(
        lambda x: x[2] or not _known(x[1]))
    fuzz(body, strategy, 800, "one start-up flag, any value")


STRANGERS = ["--", "-", "--gri", "-grid", "--threads=", "--help", "-h"]
ARGV = st.lists(st.one_of(st.sampled_from(VALUE_FLAGS + SWITCHES + STRANGERS),
                          st.tuples(st.sampled_from(VALUE_FLAGS + SWITCHES), VALUES).map("=".join), VALUES),
                max_size=8)
ENV = st.dictionaries(st.sampled_from(ENV_VARS), VALUES.filter(lambda v: "\0" not in v), max_size=5)


def test_random_argv_and_environment():
    """Any mix of flags, values, switches, strangers and environment variables: a Config within its
    limits and the unconsumed arguments in order, or one ConfigError naming what is wrong."""
    names = tuple(FLAGS) + tuple(ENV_VARS) + ("grid ", "pygrid start-up flags")

    def body(x):
        argv, env = x
        try:
            cfg, rest = config.parse_args(argv, env=env)
        except ConfigError as e:
            check_message(e, *names)
            return
        check_config(cfg)
        it = iter(argv)
        assert all(any(a == b for b in it) for a in rest), (argv, rest)  # rest: a subsequence of argv

    fuzz(body, st.tuples(ARGV, ENV), 600, "random argv and environment")


def test_environment_variables():
    def body(env):
        try:
            cfg = config.config_from_env(env)
        except ConfigError as e:
            check_message(e, *(f"{v}=" for v in env))
            var = str(e).split("=", 1)[0]
            field = {"PYGRID_THREADS": "threads", "OMP_NUM_THREADS": "threads",
                     "PYGRID_ACCELERATOR": "accelerator", "PYGRID_DEVICE_MEM": "device_mem",
                     "PYGRID_DSLASH": "dslash", "PYGRID_DSLASH_STRUCTURE": "dslash_structure",
                     "PYGRID_LLC_MB": "llc_mb"}[var]
            value = env[var].split(",", 1)[0] if var == "OMP_NUM_THREADS" else env[var]
            assert not ACCEPTS[field](value), (var, env[var], str(e))
            return
        check_config(cfg)

    fuzz(body, ENV, 500, "environment variables")


KEYWORD_VALUES = st.one_of(VALUES, INTS, st.floats(), st.none(), st.booleans(),
                           st.lists(INTS | NUMBERS, max_size=5), st.tuples(INTS, INTS, INTS, INTS),
                           st.binary(max_size=8))


def test_make_config_keywords():
    fields = [f for f in config._FIELD_PARSERS]

    def body(x):
        name, value = x
        try:
            cfg = config.make_config(config.Config(), **{name: value})
        except ConfigError as e:
            check_message(e, f"{name}=")
            return
        check_config(cfg)

    names = st.sampled_from(fields) | st.text(min_size=1, max_size=12).filter(str.isidentifier)
    fuzz(body, st.tuples(names, KEYWORD_VALUES), 500, "make_config keywords")


# ---- the command line -------------------------------------------------------------------------

@contextlib.contextmanager
def restored():
    """pygrid.cli.main in this process: put back what pg.init changes (config, memory manager,
    backend and its threads)."""
    saved = (config.current(), memory.get_manager(), pg.get_backend().name)
    threads = {name: pg.get_backend(name).threads() for name in ("openmp", "numpy")}
    try:
        yield
    finally:
        config.set_current(saved[0])
        memory._default = saved[1]
        for name, n in threads.items():
            pg.get_backend(name).set_threads(n)
        pg.set_backend(saved[2])


def run_main(argv):
    from pygrid.cli import main

    out, err = io.StringIO(), io.StringIO()
    with restored(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def check_status(status, err, argv):
    assert status in (0, 2), (argv, status, err)
    assert "Traceback" not in err
    if status == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pygrid: error: "), (argv, err)


# start-up flags a run in this process may take (--debug-mem would print a report at the suite's exit;
# sycl starts an OpenCL runtime: both have their own tests)
CLI_STARTUP = st.lists(st.one_of(
    st.tuples(st.sampled_from([f for f in VALUE_FLAGS if f != "--accelerator"]), VALUES).map(list),
    st.tuples(st.just("--accelerator"), st.sampled_from(["openmp", "numpy", "cuda", "hip", "foo", ""]))
    .map(list),
    st.sampled_from([["--emulate-device"], ["--dslash-generic"], ["--dslash-unroll"]]),
), max_size=4).map(lambda xs: [a for x in xs for a in x])
BENCH_FLAGS = ["--Ls", "--precision", "--iterations", "--warmup", "--json", "--sweep", "--plot", "--simd"]
CLI_BENCH = st.lists(st.tuples(st.sampled_from(BENCH_FLAGS), VALUES).map(list), max_size=3).map(
    lambda xs: [a for x in xs for a in x])


def test_cli_benchmark_flags():
    """``pygrid benchmark KIND ...`` with random start-up and benchmark flags and an unknown KIND: every
    flag is checked before anything runs, so the status is 2 with one line, whatever fails first."""
    def body(x):
        startup, bench = x
        argv = ["benchmark", "nokind", *startup, *bench]
        status, _, err = run_main(argv)
        check_status(status, err, argv)
        assert status == 2, (argv, err)

    fuzz(body, st.tuples(CLI_STARTUP, CLI_BENCH), 400, "pygrid benchmark flags")


def test_cli_info_and_convert():
    """``pygrid info`` with random start-up flags (0 or 2), ``pygrid convert`` with random names (2)."""
    def body(x):
        which, startup, names = x
        argv = ["info", *startup] if which == "info" else ["convert", *names]
        status, _, err = run_main(argv)
        check_status(status, err, argv)
        if which == "convert":
            assert status == 2, (argv, err)

    names = st.lists(TEXT | st.sampled_from(["/", "/nonexistent/x.lime", "a\0b", "--to", "--precision", "-"]),
                     max_size=3)
    fuzz(body, st.tuples(st.sampled_from(["info", "convert"]), CLI_STARTUP, names), 120,
         "pygrid info and convert")


HUGE = ["99999999999999999999999", "9" * 5000]


@pytest.mark.parametrize("argv,names", [
    (["benchmark", "axpy", "--grid", "1000000.1000000.1000000.1000000"], "GiB of memory"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--json", "/nonexistent/dir/out.json"], "no directory"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--json", "a\0b"], "NUL"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--iterations", HUGE[0]], "more than 1000000"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--Ls", HUGE[1]], "characters)"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--sweep", ",".join(["4.4.4.4"] * 101)], "more than 100"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--threads", HUGE[0]], "more than 1024"),
    (["benchmark", "axpy", "--grid", "4.4.4.4", "--grid", "-8.8.8.8"], "--grid -8.8.8.8: expected"),
    (["info", "--device-mem", HUGE[1]], "--device-mem 999"),
    (["info", "--grid", HUGE[1] + ".1.1.1"], "--grid 999"),
    (["selftest", "--grid", "1000000.1000000.1000000.1000000"], "GiB of memory"),
    (["convert", "a\0b", "c"], "NUL"),
])
def test_cli_values_found_by_fuzzing(argv, names):
    """Inputs that crashed, hung or allocated without limit before, each now one line and status 2."""
    with time_limit(60, " ".join(argv)[:80]):
        status, _, err = run_main(argv)
    check_status(status, err, argv)
    assert status == 2 and names in err, err


ROOT = Path(__file__).resolve().parent.parent
CMD = [sys.executable, "-m", "pygrid"]  # from ROOT: this checkout's pygrid, whatever is installed


@pytest.mark.parametrize("argv,names", [
    (["info", "--threads", HUGE[0]], "--threads 99999999999999999999999: more than 1024"),
    (["benchmark", "axpy", "--grid", "99999999.99999999.1.1", "--debug-mem"], "GiB of memory"),
    (["info", "--log", "\udcff"], "--log \\udcff: unknown log level"),
    (["benchmark", "--grid", "-8.8.8.8", "axpy"], "--grid -8.8.8.8: expected 4 positive integers"),
], ids=["huge-threads", "huge-grid", "surrogate-log", "dash-value"])
def test_cli_subprocess(argv, names):
    """The real entry point: status 2, one line, for a few inputs found by fuzzing."""
    env = dict(os.environ)
    env.setdefault("PYGRID_CACHE_DIR", str(ROOT / ".pygrid-cache"))
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".pygrid-cache" / "numba"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    args = [os.fsencode(a) if "\udcff" not in a else a.encode("utf-8", "surrogateescape") for a in argv]
    r = subprocess.run(CMD + args, capture_output=True, env=env, timeout=120, cwd=ROOT)
    err = r.stderr.decode("utf-8", "replace")
    check_status(r.returncode, err, argv)
    assert r.returncode == 2 and names in err, err
