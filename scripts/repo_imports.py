"""Import the repo's packages from a checkout that is not pip-installed (the GPU machine).

Every script in scripts/ that may run there calls these two functions before importing parrot.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def import_parrot() -> None:
    """Import the repo's `parrot` even when it is not installed, without leaving the repo root
    on sys.path (scripts run from anywhere and should not import whatever else it holds)."""
    if importlib.util.find_spec("parrot") is not None:
        return
    sys.path.insert(0, str(REPO))
    try:
        import parrot  # noqa: F401  (subpackages now resolve through parrot.__path__)
    finally:
        sys.path.remove(str(REPO))


def alias_kernels() -> None:
    if importlib.util.find_spec("parrot_kernels") is not None:
        return
    init = REPO / "parrot_kernels" / "__init__.py"
    if not init.is_file():
        return
    spec = importlib.util.spec_from_file_location("parrot_kernels", init,
                                                  submodule_search_locations=[str(init.parent)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["parrot_kernels"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the engine then runs its torch decode path
        del sys.modules["parrot_kernels"]
        print(f"warning: parrot_kernels/ does not import ({exc!r}); torch attention",
              file=sys.stderr)
