"""Solver logging, Grid-style, through the standard ``logging`` module.

Every solver writes to the logger ``'pygrid.solver'``.  Grid's log levels map
onto ``logging`` levels:

=============  ===================  ==========================================
Grid level     logging level        what a solver writes there
=============  ===================  ==========================================
``error``      ``ERROR`` (40)       nothing (failures raise :class:`SolverError`)
``warning``    ``WARNING`` (30)     non-convergence
``message``    ``INFO`` (20)        one summary line per solve
``iterative``  ``ITERATIVE`` (15)   progress every ``log_every`` iterations
``debug``      ``DEBUG`` (10)       inner solves of nested solvers, breakdowns
=============  ===================  ==========================================

A record is emitted when the solver's verbosity enables its Grid level (the
``verbose`` argument, or ``pygrid.current_config().log`` when ``verbose`` is None) and
``logging`` then decides, as usual, whether a handler prints it.  If nobody has
configured logging for ``pygrid.solver`` (no handler on it or its ancestors),
the first enabled record installs a plain stdout handler, so messages show up
the way Grid's do without any set-up; configure ``logging`` yourself to
redirect or silence them.
"""
from __future__ import annotations

import logging
import sys

__all__ = ["LOGGER_NAME", "ITERATIVE", "GRID_LEVELS", "logger", "resolve_verbosity", "SolverLog"]

LOGGER_NAME = "pygrid.solver"
ITERATIVE = 15
logging.addLevelName(ITERATIVE, "ITERATIVE")

#: Grid log level name -> logging level number, least verbose first.
GRID_LEVELS = {
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "message": logging.INFO,
    "iterative": ITERATIVE,
    "debug": logging.DEBUG,
}

logger = logging.getLogger(LOGGER_NAME)
_default_handler = None


def _root_rank_only(record):
    """Under MPI every rank runs the same solve: rank 0 speaks for them (PYGRID_LOG_ALL_RANKS=1: all do)."""
    import os

    from ..communicator import world

    comm = world()
    if comm.size == 1:
        return True
    if os.environ.get("PYGRID_LOG_ALL_RANKS", "") not in ("", "0"):
        record.msg = f"[rank {comm.rank}] {record.msg}"
        return True
    return comm.is_root


def _ensure_handler():
    global _default_handler
    if _default_handler is None and not logger.hasHandlers():
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("pygrid : %(levelname)-9s : %(message)s"))
        h.addFilter(_root_rank_only)
        logger.addHandler(h)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.DEBUG)
        _default_handler = h


def resolve_verbosity(verbose):
    """The Grid level (a key of GRID_LEVELS) a ``verbose`` argument stands for.

    None -> ``pygrid.current_config().log`` (``'message'`` if unavailable); a Grid level
    name; True -> ``'iterative'``; False -> ``'warning'``; an int 0/1/2/3 ->
    warning/message/iterative/debug.
    """
    if verbose is None:
        try:
            # (pygrid.config the attribute is the function pg.current_config(); import the module itself)
            from ..config import current

            return current().log
        except Exception:  # pragma: no cover - config is optional here
            return "message"
    if isinstance(verbose, bool):
        return "iterative" if verbose else "warning"
    if isinstance(verbose, int):
        order = ["warning", "message", "iterative", "debug"]
        return order[max(0, min(verbose, len(order) - 1))]
    if isinstance(verbose, str) and verbose.lower() in GRID_LEVELS:
        return verbose.lower()
    from ..errors import ConfigError

    raise ConfigError(
        f"verbose={verbose!r}: expected None, a bool, 0-3 or one of {', '.join(GRID_LEVELS)}"
    )


class SolverLog:
    """Emits a solver's records at Grid levels, gated by its verbosity."""

    def __init__(self, name, verbose=None):
        self.name = name
        self.threshold = GRID_LEVELS[resolve_verbosity(verbose)]

    def enabled(self, grid_level):
        return GRID_LEVELS[grid_level] >= self.threshold

    def log(self, grid_level, msg, *args):
        if not self.enabled(grid_level):
            return
        _ensure_handler()
        logger.log(GRID_LEVELS[grid_level], msg, *args)

    def message(self, msg, *args):
        self.log("message", msg, *args)

    def iterative(self, msg, *args):
        self.log("iterative", msg, *args)

    def warning(self, msg, *args):
        self.log("warning", msg, *args)

    def debug(self, msg, *args):
        self.log("debug", msg, *args)
