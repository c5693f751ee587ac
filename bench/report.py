"""The last step of every benchmark script: record its table where --out says."""

from __future__ import annotations

from pathlib import Path


def record(text: str, out: Path | None) -> None:
    """Write `text` to `out` (its folder made if missing); nothing when `out` is None."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
