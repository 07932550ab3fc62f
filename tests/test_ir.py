"""The kernel IR: named, immutable operations, and a structural key that names the compile caches."""
import dataclasses
import subprocess
import sys

import pytest

import pygrid as pg
from pygrid.accelerator import ir as IR
from pygrid.expr import nodes
from pygrid.expr.lower import lower

KEY_SCRIPT = """
import pygrid as pg
from pygrid.expr import nodes
from pygrid.expr.lower import lower
g = pg.GridCartesian([4, 4, 4, 8])
U, psi = pg.LatticeColourMatrix(g), pg.LatticeFermion(g)
e = nodes.as_expr(pg.adj(U) * pg.cshift(psi, 1, -1) + 0.5 * psi)
print(lower(e, e.site_type.ncomp).ir.key())
"""


@pytest.fixture(scope="module")
def fields():
    g = pg.GridCartesian([4, 4, 4, 8])
    return g, pg.LatticeColourMatrix(g), pg.LatticeFermion(g)


def _ir(expr):
    e = nodes.as_expr(expr)
    return lower(e, e.site_type.ncomp).ir


def test_ops_are_named_and_frozen(fields):
    g, U, psi = fields
    ir = _ir(pg.adj(U) * pg.cshift(psi, 1, -1) + 0.5 * psi)
    kinds = [type(op) for op in ir.ops]
    assert kinds.count(IR.Load) == 3 and IR.Contract in kinds and IR.LinComb in kinds
    for op in ir.ops:
        assert dataclasses.is_dataclass(op)
        with pytest.raises(dataclasses.FrozenInstanceError):
            op.ncomp = 0
    c = next(op for op in ir.ops if isinstance(op, IR.Contract))
    assert c.conj_a and not c.conj_b and c.ncomp == 12
    start, ia, ib = ir.contract_tables(c)
    assert len(start) == 13 and len(ia) == len(ib) == start[-1] == 12 * 3
    shifted = [op for op in ir.ops if isinstance(op, IR.Load) and op.shift >= 0]
    assert len(shifted) == 1 and ir.nshifts == 1
    assert ir.ops[ir.result].ncomp == ir.out_ncomp == 12


def test_common_subexpressions_are_emitted_once(fields):
    g, U, psi = fields
    ir = _ir(U * psi + U * psi)
    assert sum(isinstance(op, IR.Contract) for op in ir.ops) == 1


def test_key_depends_on_structure_not_numbers(fields):
    g, U, psi = fields
    k = _ir(U * psi + 0.5 * psi).key()
    assert _ir(U * psi + 7.0 * psi).key() == k  # the numbers live in the coefficient vector
    assert _ir(pg.adj(U) * psi + 0.5 * psi).key() != k
    assert _ir(U * pg.cshift(psi, 0, 1) + 0.5 * psi).key() != k


def test_key_is_the_same_in_every_process():
    keys = {subprocess.run([sys.executable, "-c", KEY_SCRIPT], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    assert len(keys) == 1 and len(keys.pop()) == 40
