"""Kernel tests: the Triton interpreter on CPU, compiled kernels on CUDA.

TRITON_INTERPRET must be set before a ``@triton.jit`` decorator runs; parrot_kernels imports
its kernels lazily (first launch), so setting it here is early enough even when the root
conftest does not. ``parrot_kernels`` imports from the repo root (the folder is named as it
imports, and pytest puts the root on sys.path for the ``tests`` package), installed or not.
"""
import importlib
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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
