"""Process limits a server raises for itself at start, and its garbage collector's settings."""

from __future__ import annotations

import gc
import logging


def raise_file_limit(log: logging.Logger) -> int | None:
    """Raise the soft limit on open files to the hard limit, and log it. Every connection is a
    file descriptor: with the common soft limit of 1,024, a thousand idle connections to a
    port made the process fail every accept (and every engine request) while the hard limit
    allowed far more. Returns the new soft limit (None where there are no such limits)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        log.debug("open-file limit: %d (already the hard limit)", soft)
        return soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open-file limit stays %d: raising it to %d failed (%s)", soft, target, exc)
        return soft
    log.info("open-file limit raised from %d to %d (the hard limit)", soft, target)
    return target


# Younger collections between two full ones (Python's default: 10). A full collection walks
# every live object (about 0.1 s per 200,000 on a 2-core VM: 4,096 running calls and their
# engine requests), holding the loop; the manager's graph frees itself by reference counting
# (no cycles: tests/manager/test_no_cycles.py), so full collections only find the rarer
# cycles (a failure's traceback) and can run ten times less often.
YOUNGER_PER_FULL_COLLECTION = 100


def settle_heap(log: logging.Logger) -> int:
    """Once the server is up: freeze what start-up allocated (modules, classes, the app, the
    engines' clients), so that no later collection walks it again, and make full collections
    rarer (YOUNGER_PER_FULL_COLLECTION). Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, YOUNGER_PER_FULL_COLLECTION)
    frozen = gc.get_freeze_count()
    log.debug("garbage collector: %d start-up objects frozen; a full collection after %d "
              "younger ones", frozen, YOUNGER_PER_FULL_COLLECTION)
    return frozen
