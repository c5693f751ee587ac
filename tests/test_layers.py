"""The package's layers, checked from the source: no module imports a layer above its own, the
engines and the policies never import each other, and no import circle spans files.

Layers, lowest first (a module may import its own layer and those below):

    parrot_kernels
    the vocabulary: parrot.{types,errors,validation,speed_profile,extras,template,sampling,
                    regex_guard,transforms,chat,serve_config}, parrot.wire_types
    parrot.engines | parrot.policies          (peers: neither imports the other)
    parrot.manager
    parrot.server
    parrot.frontend and the package root `parrot` (its public face)
    parrot.sim
    parrot.cli

Imports under `if TYPE_CHECKING:` count for the layers (a type named across a layer is a
dependency) but not for circles: two modules whose types name each other (a session and its
variables) import each other at run time only in one direction.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("parrot_kernels",),
    ("parrot.types", "parrot.errors", "parrot.validation", "parrot.speed_profile",
     "parrot.extras", "parrot.constraints", "parrot.template", "parrot.sampling",
     "parrot.regex_guard", "parrot.transforms", "parrot.chat",
     "parrot.serve_config", "parrot.wire_types"),
    ("parrot.engines", "parrot.policies"),
    ("parrot.manager",),
    ("parrot.server",),
    ("parrot.frontend", "parrot"),
    ("parrot.sim",),
    ("parrot.cli",),
)
PEERS_APART = (("parrot.engines", "parrot.policies"),)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for top in ("parrot", "parrot_kernels"):
        for path in (ROOT / top).rglob("*.py"):
            found[module_name(path)] = path
    return found


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def imported(path: Path, name: str, known: dict[str, Path], *,
             runtime_only: bool = False) -> set[str]:
    """The project modules `path` imports (a `from pkg import mod` names the module);
    `runtime_only` leaves out the imports under `if TYPE_CHECKING:`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_only(tree) if runtime_only else set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {m for m in out if m in known}


def layer_of(name: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    assert best >= 0, f"{name} is in no layer: add it to LAYERS"
    return best


def graph(*, runtime_only: bool = False) -> nx.DiGraph:
    known = modules()
    g = nx.DiGraph()
    for name, path in known.items():
        g.add_node(name)
        for target in imported(path, name, known, runtime_only=runtime_only):
            if target != name and not name.startswith(target + "."):   # a package's own init
                g.add_edge(name, target)
    return g


def test_no_module_imports_a_layer_above_its_own():
    upward = sorted(f"{a} -> {b}" for a, b in graph().edges if layer_of(b) > layer_of(a))
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_engines_and_policies_never_import_each_other():
    g = graph()
    crossing = sorted(f"{a} -> {b}" for a, b in g.edges for x, y in PEERS_APART
                      if (a.startswith(x) and b.startswith(y)) or (a.startswith(y)
                                                                    and b.startswith(x)))
    assert not crossing, "\n".join(crossing)


def test_no_import_circle_spans_files():
    circles = [sorted(c) for c in nx.strongly_connected_components(graph(runtime_only=True))
               if len(c) > 1]
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_checker_sees_a_planted_upward_import(tmp_path):
    """The checker itself: a manager module importing the server is reported."""
    assert layer_of("parrot.manager.manager") < layer_of("parrot.server.service")
    assert layer_of("parrot.engines.builtin.llama.model") == layer_of("parrot.policies.base")
    assert layer_of("parrot") == layer_of("parrot.frontend.session")
    source = tmp_path / "parrot" / "manager" / "planted.py"
    source.parent.mkdir(parents=True)
    source.write_text("from typing import TYPE_CHECKING\nfrom parrot.server import service\n"
                      "from . import dag\n"
                      "if TYPE_CHECKING:\n    from parrot.manager import nodes\n")
    known = {"parrot.server.service": source, "parrot.server": source,
             "parrot.manager.dag": source, "parrot.manager": source,
             "parrot.manager.nodes": source}
    found = imported(source, "parrot.manager.planted", known)
    assert found == {"parrot.server", "parrot.server.service", "parrot.manager",
                     "parrot.manager.dag", "parrot.manager.nodes"}
    assert any(layer_of(t) > layer_of("parrot.manager.planted") for t in found)
    assert imported(source, "parrot.manager.planted", known,
                    runtime_only=True) == found - {"parrot.manager.nodes"}
