"""Process limits a server raises for itself at start."""

from __future__ import annotations

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
