"""Logging set-up shared by the command-line tools: one format, a validated level."""

from __future__ import annotations

import logging
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(prog: str, level: str) -> bool:
    """Log to stderr at `level`; a bad level prints one line naming the allowed ones and
    returns False (the caller exits with status 2)."""
    name = level.upper() if isinstance(level, str) else ""
    if name not in LEVELS:
        print(f"{prog}: --log-level {level!r} is not one of {', '.join(LEVELS)}",
              file=sys.stderr)
        return False
    logging.basicConfig(level=name, stream=sys.stderr, format=FORMAT)
    return True
