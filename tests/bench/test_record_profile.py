"""bench/record_profile.py: it loads, and measures as the engines' speed probe does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def record_profile():
    import sys
    sys.path.insert(0, str(SCRIPTS))      # the script imports its sibling repo_imports
    try:
        spec = importlib.util.spec_from_file_location("record_profile",
                                                      SCRIPTS / "record_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def test_the_script_measures_with_the_engines_probe(record_profile):
    """The recorded profiles and the engines' start-up probe measure the same way (the fit
    and the points are tested in tests/engines/test_speed_probe.py)."""
    from parrot.engines import speed_probe

    assert record_profile.measure_prefill is speed_probe.measure_prefill
    assert record_profile.measure_decode is speed_probe.measure_decode
    assert record_profile.FULL.batch_sizes == (1, 2, 4, 8, 16, 32, 64)
    assert record_profile.QUICK.batch_sizes == (1, 2, 4)
