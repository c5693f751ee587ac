"""What identifies this build of the kernels, for caches of things measured or compiled from
them (the engine's linear choice, its precompile stamp): a digest of their source files."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path


@functools.cache
def source_digest() -> str:
    """SHA-256 of every .py file of the package, in name order (any edit changes it)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
