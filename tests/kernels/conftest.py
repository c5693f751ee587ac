"""Kernel tests: the Triton interpreter on CPU, compiled kernels on CUDA.

TRITON_INTERPRET must be set before a ``@triton.jit`` decorator runs; parrot_kernels imports
its kernels lazily (first launch), so setting it here is early enough even when the root
conftest does not. Where the repo is not pip-installed (the GPU box), ``kernels/`` is loaded
under its import name ``parrot_kernels``.
"""
import importlib
import importlib.util
import os
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import parrot_kernels  # noqa: F401
except ImportError:
    _pkg = pathlib.Path(__file__).resolve().parents[2] / "parrot_kernels"
    _spec = importlib.util.spec_from_file_location(
        "parrot_kernels", _pkg / "__init__.py", submodule_search_locations=[str(_pkg)])
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["parrot_kernels"] = _mod
    _spec.loader.exec_module(_mod)

if "parrot_kernels._jit_decode" in sys.modules:  # built before the variable was set
    importlib.reload(sys.modules["parrot_kernels._jit_decode"])


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
