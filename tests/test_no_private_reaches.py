"""Tests reach the code through its public interfaces: no test reads or sets a private
attribute (`obj._name`) of an object it did not define, so a refactor that keeps the
interfaces keeps the tests. A test's own classes may use their own privates (`self._x`)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, `owner._attr`) of every private attribute reached through something other than
    `self` or `cls`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        found.append((node.lineno, f"{ast.unparse(owner)}.{attr}"))
    return found


def test_the_check_finds_a_reach():
    assert private_reaches("engine._runner.graphs = g\nself._x = 1\nx.__class__\n") == [
        (1, "engine._runner")]


def test_no_test_touches_a_private_attribute():
    offences = [f"{path.relative_to(TESTS)}:{line}: {text}"
                for path in sorted(TESTS.rglob("*.py"))
                for line, text in private_reaches(path.read_text(encoding="utf-8"))]
    assert not offences, "\n".join(offences)
