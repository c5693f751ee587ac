"""Import the repo's packages from a checkout that is not pip-installed (the GPU machine).

Every script in bench/ that may run there calls `import_parrot()` before importing parrot
or parrot_kernels.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def import_parrot() -> None:
    """Put the repo root on sys.path when `parrot` is not installed: both `parrot` and
    `parrot_kernels` (the folder is named as it imports) then resolve from the checkout."""
    if importlib.util.find_spec("parrot") is None and str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
