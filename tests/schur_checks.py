"""The Schur operator against the operator's own pieces: shared by the Schur and domain-wall suites."""
import numpy as np

import pygrid as pg


def schur_pieces_differ(op, odd, out_is_input=False):
    """The largest relative difference of ``SchurDiagMooeeOperator(op, 1)``'s M and Mdag on ``odd``
    from ``Mooee - Meooe MooeeInv Meooe`` (and its adjoint) composed from ``op``'s pieces; with
    ``out_is_input`` the operator also writes into its input."""
    S = pg.qcd.SchurDiagMooeeOperator(op, 1)
    worst = 0.0
    for apply, hop, inv, diag in ((S.M, op.Meooe, op.MooeeInv, op.Mooee),
                                  (S.Mdag, op.MeooeDag, op.MooeeInvDag, op.MooeeDag)):
        want = diag(odd)
        want @= want - hop(inv(hop(odd)))
        w = want.to_numpy()
        got = [apply(odd)]
        if out_is_input:
            x = odd.copy()
            got.append(apply(x, out=x))
        for g in got:
            worst = max(worst, float(np.max(np.abs(g.to_numpy() - w)) / np.max(np.abs(w))))
    return worst
