"""Fuzzed Lattice.from_numpy: arrays of any shape and dtype, and things that are not arrays.

Fields of several site types and precisions (on a full and on a red-black grid) are set
from hypothesis-drawn inputs: every numeric dtype (bool, integers, float16 to longdouble,
complex64/128/256), object, unicode and bytes strings, datetimes, structured dtypes;
the right shape, a wrong one, 0-d, empty, huge (broadcast views), non-contiguous
(transposed, strided, broadcast); NaN and inf values; ragged nested lists.  The contract:

* a numeric array of the right shape sets the field to exactly its values cast to the
  field's dtype (NaN is data), unless it holds non-zero imaginary parts for a Real field;
* anything else raises pygrid.ShapeError naming from_numpy, and the field is unchanged
  bit for bit; no other exception type.

Example counts: fuzzing.examples (PYGRID_FUZZ_EXAMPLES for a longer run; docs/io.md).
"""
from __future__ import annotations

import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
from fuzzing import fuzz
from hypothesis import strategies as st

import pygrid as pg
from pygrid.errors import ShapeError

GRID = pg.GridCartesian([2, 2, 2, 4])
RB = pg.GridRedBlackCartesian(GRID)
FIELDS = {
    "complex-double": lambda: pg.LatticeComplex(GRID),
    "real-single": lambda: pg.LatticeReal(GRID, "single"),
    "colour-matrix-single": lambda: pg.LatticeColourMatrix(GRID, "single"),
    "gauge-double": lambda: pg.LatticeGaugeField(GRID),
    "fermion-double-odd": lambda: pg.LatticeFermion(RB, checkerboard=1),
    "real-double-even": lambda: pg.LatticeReal(RB),
}
_made = {}


def field(name):
    """One field per kind, reused (a from_numpy that fails must leave it as it was)."""
    if name not in _made:
        f = FIELDS[name]()
        f.from_numpy(np.arange(np.prod(f.to_numpy().shape)).reshape(f.to_numpy().shape) * 0.5)
        _made[name] = f
    return _made[name]


def buffer_bytes(f):
    with f.view(pg.CpuRead) as b:
        return b.tobytes()


NUMERIC = st.one_of(hnp.boolean_dtypes(), hnp.integer_dtypes(), hnp.unsigned_integer_dtypes(),
                    hnp.floating_dtypes(sizes=(16, 32, 64)), hnp.complex_number_dtypes(),
                    st.sampled_from([np.dtype(np.longdouble), np.dtype(np.clongdouble)]))
OTHER = st.one_of(st.just(np.dtype(object)), hnp.unicode_string_dtypes(), hnp.byte_string_dtypes(),
                  hnp.datetime64_dtypes(), hnp.timedelta64_dtypes(), hnp.array_dtypes(max_size=3))


def _elements(dtype):
    if dtype.kind in "fc":
        return None  # every value, NaN, inf and signed zeros included
    if dtype.kind == "O":
        return st.one_of(st.integers(), st.floats(), st.complex_numbers(), st.none(), st.text(max_size=3))
    return None


@st.composite
def inputs(draw):
    """(field name, input, whether it is a numeric array of the field's shape)."""
    name = draw(st.sampled_from(sorted(FIELDS)))
    shape = field(name).to_numpy().shape
    how = draw(st.sampled_from(["right", "right", "right", "wrong", "0-d", "empty", "huge", "transposed",
                                "strided", "broadcast", "list", "ragged", "scalar"]))
    numeric = draw(st.booleans()) or how in ("transposed", "strided", "broadcast")
    dtype = draw(NUMERIC if numeric else OTHER)
    if how in ("right", "transposed", "strided", "broadcast"):
        if how == "transposed":  # the right shape as a non-contiguous view
            a = draw(hnp.arrays(dtype, shape[::-1], elements=_elements(dtype))).T
        elif how == "strided":
            a = draw(hnp.arrays(dtype, (2 * shape[0],) + shape[1:], elements=_elements(dtype)))[::2]
        elif how == "broadcast":
            a = np.broadcast_to(draw(hnp.arrays(dtype, shape[-1:], elements=_elements(dtype))), shape)
        else:
            a = draw(hnp.arrays(dtype, shape, elements=_elements(dtype)))
        return name, a, a.dtype.kind in "biufc"
    if how == "wrong":
        wrong = list(shape)
        op = draw(st.sampled_from(["grow", "shrink", "drop", "add"]))
        k = draw(st.integers(0, len(wrong) - 1))
        if op == "grow":
            wrong[k] += draw(st.integers(1, 3))
        elif op == "shrink":
            wrong[k] -= draw(st.integers(1, wrong[k]))
        elif op == "drop":
            del wrong[k]
        else:
            wrong.insert(k, draw(st.integers(1, 3)))
        if np.prod(wrong) > 4096:
            wrong = wrong[:3]
        return name, draw(hnp.arrays(dtype, tuple(wrong), elements=_elements(dtype))), False
    if how == "0-d":
        return name, draw(hnp.arrays(dtype, (), elements=_elements(dtype))), False
    if how == "empty":
        return name, np.empty(shape[:-1] + (0,), dtype=dtype), False
    if how == "huge":  # up to 10**16 elements, as a view of one
        big = draw(st.lists(st.integers(10 ** 3, 10 ** 4), min_size=3, max_size=4))
        return name, np.broadcast_to(np.zeros(1, dtype=dtype), tuple(big)), False
    if how == "list":
        return name, draw(st.lists(st.floats() | st.integers(), max_size=5)), False
    if how == "ragged":
        return name, [[1.0, 2.0], [3.0]] * draw(st.integers(1, 4)), False
    return name, draw(st.none() | st.text(max_size=4) | st.complex_numbers() | st.integers()), False


def test_from_numpy_any_input():
    def body(x):
        name, a, fits = x
        f = field(name)
        before = buffer_bytes(f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow in casts to single precision
            try:
                out = f.from_numpy(a)
            except ShapeError as e:
                assert "from_numpy" in str(e), str(e)
                assert buffer_bytes(f) == before, "a failed from_numpy changed the field"
                assert not fits or (f.is_real and np.any(np.asarray(a).imag != 0)), (a.dtype, str(e))
                return
            assert fits, f"accepted {type(a).__name__} {getattr(a, 'dtype', '')} {np.shape(a)}"
            assert out is f
            want = np.asarray(a).astype(f.dtype)
        np.testing.assert_array_equal(f.to_numpy(), want)  # NaN equal to NaN

    fuzz(body, inputs(), 800, "from_numpy inputs")
