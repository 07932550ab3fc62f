"""Benchmarks behind ``pygrid benchmark KIND`` (see docs/cli.md).

Each kind is a module ending with ``KIND = Kind(...)`` (``kinds.py``); the shared
machinery is in ``common.py`` (context, grids), ``timing.py``, ``roofline.py``,
``report.py`` and ``progress.py``.
"""
from .kinds import NAMES as KINDS, Kind, get_kind

__all__ = ["KINDS", "Kind", "get_kind"]
