"""Krylov solvers written against pygrid's operator protocol.

    from pygrid.algorithms import ConjugateGradient, MdagMOperator
    x, rec = ConjugateGradient(tol=1e-10, maxiter=2000)(MdagMOperator(wilson), b)
    print(rec)   # ConjugateGradient converged in 57 iterations, true residual 8.1e-11, ...

Operators: see :mod:`pygrid.algorithms.operators` for the protocol (``M``,
``Mdag``, optional ``MdagM``, ``converted(precision)``, ``flops_per_apply``).
Logging: logger ``'pygrid.solver'``, Grid levels; see :mod:`pygrid.algorithms.log`.

A solve only reads ``b`` and ``x0``: it iterates on fields of its own and returns
the solution as a new field, so one that fails or is interrupted (an error in the
operator, KeyboardInterrupt) leaves the source and the initial guess as they were.
"""
from .base import SolverError, SolverRecord
from .bicgstab import BiCGStab
from .cg import ConjugateGradient
from .log import ITERATIVE, LOGGER_NAME
from .mixed_cg import MixedPrecisionConjugateGradient
from .operators import (
    HermitianOperator,
    LinearOperator,
    MdagMOperator,
    apply_M,
    as_hermitian,
    as_operator,
    converted_operator,
    operand_grid,
)
from .reliable_cg import ReliableUpdateConjugateGradient

__all__ = [
    "BiCGStab", "ConjugateGradient", "HermitianOperator", "ITERATIVE", "LOGGER_NAME", "LinearOperator",
    "MdagMOperator", "MixedPrecisionConjugateGradient", "ReliableUpdateConjugateGradient", "SolverError",
    "SolverRecord", "apply_M", "as_hermitian", "as_operator", "converted_operator", "operand_grid",
]
