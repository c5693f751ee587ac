"""A builtin engine's start-up says what it is doing: each phase as it begins, with its time
as it ends (a cold start is minutes of loading, converting, compiling and capturing)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("torch")

from parrot.engines.builtin.build import build_engine  # noqa: E402
from parrot.engines.builtin.config import BuiltinEngineConfig  # noqa: E402


async def test_loading_is_logged_with_its_time(caplog):
    caplog.set_level(logging.INFO, logger="parrot.engines.builtin.build")
    engine = build_engine("e0", BuiltinEngineConfig(model="tiny", dtype="float32",
                                                    device="cpu", num_blocks=16))
    try:
        lines = [r.getMessage() for r in caplog.records]
        begin = lines.index("engine e0: loading tiny (converting its weights the first "
                            "time) ...")
        done = next(i for i, line in enumerate(lines)
                    if line.startswith("engine e0: loading tiny") and " done in " in line)
        assert begin < done
        assert lines[done].endswith(" s")
    finally:
        await engine.close()
