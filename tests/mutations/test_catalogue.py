"""The mutation catalogue (tests/mutations/catalogue.py) stays anchored: a refactor that changes a
mutated line or renames a catching test leaves a mutation that checks nothing, and the
mutation run (minutes, not part of CI) would be the first to say so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.mutations.anchors import AnchorError, apply, enclosing, span

ROOT = Path(__file__).resolve().parents[2]


def _catalogue():
    spec = importlib.util.spec_from_file_location("catalogue",
                                                  ROOT / "tests/mutations/catalogue.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("catalogue", module)   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.MUTATIONS


def test_every_mutation_matches_exactly_one_snippet_and_names_existing_tests():
    mutations = _catalogue()
    assert len({m.name for m in mutations}) == len(mutations)
    for m in mutations:
        assert apply((ROOT / m.path).read_text(), m.where, m.old, m.new), m.name
        assert m.new != m.old and m.tests, m.name
        for node in m.tests:   # a file, or a file's test (parameters left out)
            path, _, test = node.partition("::")
            text = (ROOT / path).read_text()
            assert not test or f"def {test.split('[')[0]}(" in text, (m.name, node)


SOURCE = """import x

class Engine:
    def step(self):
        n = 1
        return n

    @property
    def size(self):
        n = 1
        return n


def helper():
    return 2
"""


def test_a_snippet_is_anchored_to_its_function_not_the_file():
    # `n = 1` occurs twice in the file, once in each method: each anchor picks its own
    assert "n = 2" in apply(SOURCE, "Engine.step", "n = 1", "n = 2").split("def size")[0]
    assert "n = 2" in apply(SOURCE, "Engine.size", "n = 1", "n = 2").split("def size")[1]
    with pytest.raises(AnchorError, match="occurs 2 times"):
        apply(SOURCE, "Engine", "n = 1", "n = 2")
    with pytest.raises(AnchorError, match="no definition 'Engine.stop'"):
        apply(SOURCE, "Engine.step".replace("step", "stop"), "n = 1", "n = 2")
    start, end = span(SOURCE, "Engine.size")
    assert SOURCE[start:end].lstrip().startswith("@property")
    assert enclosing(SOURCE, SOURCE.index("return 2")) == "helper"
    assert enclosing(SOURCE, 0) == "<module>"
