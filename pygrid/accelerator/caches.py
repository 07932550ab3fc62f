"""The host's last-level cache, and the byte thresholds measured against it scaled to it.

The CPU kernels change what they do where their fields outgrow the caches (prefetches, results
streamed past the caches, the order of sites, links read compressed, the register order's reach).
Those thresholds were measured on the two development machines, both with 32 MiB of L3 shared by
the cores a job ran on (:data:`REFERENCE_BYTES`); :func:`scaled` takes one to this host, in
proportion to the last-level cache the job's threads reach: one group of cores sharing a cache
(an L3 slice of a CCX, a socket's L3) per thread, up to the groups among the CPUs this process may
run on.  A group's cache counts at most the reference's (:data:`LARGEST_COUNTED`).  ``--llc-mb``
(``PYGRID_LLC_MB``) sets the size of one group's cache where the host's ``/sys`` does not say it or
says it wrong (some virtual machines).
"""
from __future__ import annotations

import functools
import os

#: the last-level cache the thresholds were measured with: 32 MiB of L3, shared by the cores of
#: both development machines (AMD EPYC, Zen 3 and Zen 4)
REFERENCE_BYTES = 32 << 20

#: the most of one group's cache, read from the host, that the thresholds count: a larger L3 is
#: shared with more cores (a whole server socket's, and in a virtual machine the host's other
#: tenants), and a job of a few threads did not keep more of its fields there.  Intel Xeon, 480 MiB
#: of L3 reported, 2 threads, 2026-12-02, alternating processes, Dhop GFlop/s with the thresholds
#: scaled to 480 MiB against 32: Wilson 16^4 double 34.4-36.1 against 38.8-40.0, single 81.7-85.4
#: against 86.9-96.3, 24^4 double 25.2-27.3 against 27.5-27.9; domain wall 16^4 Ls 8 double
#: 24.6-24.6 against 28.0-28.8, Ls 16 single 49.9-50.6 against 59.0-63.2.  With 105 MiB reported
#: (2026-12-01) 32 and 105 ran level.  ``--llc-mb`` is taken as given
LARGEST_COUNTED = REFERENCE_BYTES

_SYS_CPU = "/sys/devices/system/cpu"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _size(text):
    """Bytes of a sysfs cache size ("32768K", "1M", "512")."""
    if not text:
        return None
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1].upper(), 1)
    digits = text[:-1] if text[-1].upper() in units else text
    return int(digits) * scale if digits.isdigit() else None


def _last_level(cpu, root):
    """(size, CPUs sharing it) of the highest-level data or unified cache of ``cpu``, or None."""
    base = os.path.join(root, f"cpu{cpu}", "cache")
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        return None
    best = None
    for e in entries:
        d = os.path.join(base, e)
        if _read(os.path.join(d, "type")) == "Instruction":
            continue
        level, size = _read(os.path.join(d, "level")), _size(_read(os.path.join(d, "size")))
        if not (level and level.isdigit() and size):
            continue
        # without the list of the CPUs sharing it, one cache for all: the smaller reach
        shared = _read(os.path.join(d, "shared_cpu_list")) or "all"
        if best is None or int(level) > best[0]:
            best = (int(level), size, shared)
    return None if best is None else best[1:]


def _cpus():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


@functools.cache
def host_groups(root=_SYS_CPU):
    """(bytes of one group's last-level cache, groups among this process's CPUs), read from
    ``root`` (sysfs); None where it says nothing.  Groups of unlike sizes count at the smallest."""
    cpus = _cpus()
    groups = {}
    for cpu in cpus:
        found = _last_level(cpu, root)
        if found is not None:
            groups[found[1]] = found[0]
    if not groups:
        return None
    return min(groups.values()), len(groups)


def group_bytes():
    """Bytes of the last-level cache one group of cores shares: ``--llc-mb`` where given, else the
    host's up to :data:`REFERENCE_BYTES` (:data:`LARGEST_COUNTED`), else :data:`REFERENCE_BYTES`."""
    from ..config import current

    mb = current().llc_mb
    if mb is not None:
        return mb << 20
    found = host_groups()
    return REFERENCE_BYTES if found is None else min(found[0], LARGEST_COUNTED)


def compute_threads():
    """The threads numba's parallel regions run on now (1 where numba is not set up)."""
    try:
        import numba

        return numba.get_num_threads()
    except Exception:  # numba absent or not yet set up: one thread
        return 1


def _sharing_ranks():
    """The MPI ranks of this node whose threads share this process's cache groups: all of them
    where the process may run on every CPU (ranks not bound), else this one (a launcher that binds
    ranks gives each its own CPUs, taken here as its own groups)."""
    from ..communicator import ranks_on_this_node

    return ranks_on_this_node() if len(_cpus()) >= (os.cpu_count() or 1) else 1


def llc_bytes(threads=None):
    """The last-level cache ``threads`` threads reach (default: numba's, which the CPU kernels run
    on): a group's, times the groups they spread over (one a thread, at most the groups among this
    process's CPUs), shared with the threads of the other ranks on this node that are not bound
    apart (:func:`_sharing_ranks`)."""
    if threads is None:
        threads = compute_threads()
    threads = max(1, int(threads))
    found = host_groups()
    groups = 1 if found is None else found[1]
    node = threads * _sharing_ranks()
    return group_bytes() * min(node, groups) * threads // node


def scaled(nbytes, threads=None):
    """``nbytes``, a threshold measured with :data:`REFERENCE_BYTES` of last-level cache, for the
    cache ``threads`` threads reach on this host (:func:`llc_bytes`)."""
    return int(nbytes) * llc_bytes(threads) // REFERENCE_BYTES


def per_group(nbytes):
    """``nbytes``, a threshold measured against one group's cache (a window of sites one thread
    keeps), scaled to this host's group (:func:`group_bytes`)."""
    return int(nbytes) * group_bytes() // REFERENCE_BYTES


def describe():
    """One line on the host's last-level cache, as the thresholds see it."""
    from ..config import current

    found = host_groups()
    groups = 1 if found is None else found[1]
    source = ("--llc-mb" if current().llc_mb is not None else
              "not found: the reference" if found is None else
              "the host's /sys" if found[0] <= LARGEST_COUNTED else
              f"the host's /sys gives {found[0] / (1 << 20):g} MiB, counted up to {LARGEST_COUNTED >> 20}")
    ranks = _sharing_ranks()
    shared = f", shared with {ranks - 1} other rank{'s' if ranks > 2 else ''}" if ranks > 1 else ""
    threads = compute_threads()
    return (f"{group_bytes() / (1 << 20):g} MiB a group of cores, {groups} group"
            f"{'s' if groups != 1 else ''} among this process's CPUs ({source}){shared}; the kernels' "
            f"{threads} thread{'s' if threads != 1 else ''} reach {llc_bytes(threads) / (1 << 20):g} "
            f"MiB (thresholds measured with {REFERENCE_BYTES >> 20} MiB)")
