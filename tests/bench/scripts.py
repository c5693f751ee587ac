"""Import a script of bench/ in a test: the scripts are not a package."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.serve_process import ROOT


def load_script(name: str) -> ModuleType:
    """bench/NAME.py imported as the module NAME (registered in sys.modules, as its siblings
    import it), with bench/ on sys.path for the siblings it imports."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
