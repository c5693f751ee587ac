"""Optional dependencies (pyproject extras): a missing one is one line naming the extra."""

from __future__ import annotations

from parrot.errors import InvalidRequestError


class MissingExtraError(InvalidRequestError):
    """A feature needs an optional dependency that is not installed."""


def missing_extra(extra: str, feature: str, exc: ImportError) -> MissingExtraError:
    """`raise missing_extra("engine", "the builtin engine", exc) from None`."""
    module = exc.name or str(exc)
    return MissingExtraError(f"{feature} needs the '{extra}' extra (no module {module!r}): "
                             f"pip install 'parrot-serve[{extra}]'")
