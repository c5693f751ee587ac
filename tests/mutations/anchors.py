"""Where a mutation applies: inside one named function or class of its file, not anywhere in
the file's text. A refactor elsewhere in the file leaves the mutation valid; a renamed or
rewritten function makes it fail loudly ("not found"), naming what to re-anchor."""

from __future__ import annotations

import ast


class AnchorError(LookupError):
    pass


def span(source: str, where: str) -> tuple[int, int]:
    """Character offsets [start, end) of the definition `where` ("Class.method", "function",
    or "<module>" for the whole file) in `source`."""
    if where == "<module>":
        return 0, len(source)
    node: ast.AST = ast.parse(source)
    for name in where.split("."):
        node = next((child for child in ast.iter_child_nodes(node)
                     if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and child.name == name), None)
        if node is None:
            raise AnchorError(f"no definition {where!r}")
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    lines = source.splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    start = sum(len(line) for line in lines[:first - 1])
    end = sum(len(line) for line in lines[:node.end_lineno])
    return start, end


def apply(source: str, where: str, old: str, new: str) -> str:
    """`source` with `old` replaced by `new` inside `where`; `old` must occur exactly once
    there."""
    start, end = span(source, where)
    body = source[start:end]
    count = body.count(old)
    if count != 1:
        raise AnchorError(f"the snippet occurs {count} times in {where!r}")
    return source[:start] + body.replace(old, new) + source[end:]


def enclosing(source: str, offset: int) -> str:
    """The innermost definition holding character `offset` ("<module>" when none)."""
    line = source.count("\n", 0, offset) + 1
    path: list[str] = []
    node: ast.AST = ast.parse(source)
    while True:
        inner = next((child for child in ast.iter_child_nodes(node)
                      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                            ast.ClassDef))
                      and child.lineno <= line <= (child.end_lineno or child.lineno)), None)
        if inner is None:
            return ".".join(path) or "<module>"
        path.append(inner.name)
        node = inner
