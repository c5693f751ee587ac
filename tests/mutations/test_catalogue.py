"""The mutation catalogue (tests/mutations/catalogue.py) stays anchored: a refactor that changes a
mutated line or renames a catching test leaves a mutation that checks nothing, and the
mutation run (minutes, not part of CI) would be the first to say so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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
        assert (ROOT / m.path).read_text().count(m.old) == 1, m.name
        assert m.new != m.old and m.tests, m.name
        for node in m.tests:   # a file, or a file's test (parameters left out)
            path, _, test = node.partition("::")
            text = (ROOT / path).read_text()
            assert not test or f"def {test.split('[')[0]}(" in text, (m.name, node)
