"""The start-up log (startup_clock.py): each phase as it begins and ends, progress in long
loops, and one summary line with every phase's time."""

from __future__ import annotations

import logging

import pytest

from parrot.engines.builtin.observe.startup_clock import PROGRESS_EVERY_S, StartupClock


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("startup_clock")]


def test_phases_progress_and_summary(caplog):
    caplog.set_level(logging.INFO)
    now = FakeTime()
    clock = StartupClock("e0", now=now)
    with clock.phase("load", "loading weights"):
        now.t += 2.0
    with clock.phase("capture", "capturing decode graphs", total=4) as progress:
        for _ in range(4):
            now.t += PROGRESS_EVERY_S / 2          # a progress line every second item
            progress.step()
    clock.add("load", 0.5)                          # a recurring phase is summed
    assert lines(caplog) == [
        "engine e0 start-up: loading weights ...",
        "engine e0 start-up: loading weights done in 2.0 s",
        "engine e0 start-up: capturing decode graphs (4) ...",
        "engine e0 start-up: capturing decode graphs: 2/4, 5.0 s",
        "engine e0 start-up: capturing decode graphs done in 10.0 s",   # not at 4/4: the end
    ]
    assert clock.seconds("load") == 2.5
    assert clock.summary() == "engine e0 start-up 12.0 s: load 2.5 s, capture 10.0 s"


def test_a_quiet_clock_times_without_logging(caplog):
    caplog.set_level(logging.INFO)
    clock = StartupClock("w", quiet=True)
    with clock.phase("compile", "compiling", total=1) as progress:
        progress.step()
    assert lines(caplog) == [] and [name for name, _ in clock.phases] == ["compile"]


def test_building_an_engine_logs_its_phases(caplog):
    torch = pytest.importorskip("torch")
    del torch
    from parrot.engines.builtin.build import build_engine, load_bundle
    from parrot.engines.builtin.config import BuiltinEngineConfig

    caplog.set_level(logging.INFO)
    config = BuiltinEngineConfig(model="tiny", dtype="float32", device="cpu", num_blocks=16)
    clock = StartupClock("e1")
    bundle = load_bundle(config, clock=clock)
    build_engine("e1", config, bundle, clock=clock)
    assert [name for name, _ in clock.phases] == ["load", "convert", "kv cache"]
    said = lines(caplog)
    assert said[0] == "engine e1 start-up: loading 'tiny' onto cpu ..."
    assert ("engine e1 start-up: allocating 16 KV blocks of 16 (256 tokens, num_blocks), "
            "max_num_seqs 64 (auto: 256 KV tokens / 512 per sequence) ...") in said
    [summary] = [r.getMessage() for r in caplog.records
                 if r.getMessage().startswith("engine e1 start-up ") and "s: load" in
                 r.getMessage()]
    assert summary.split(": ", 1)[1].split(", ")[0].startswith("load ")


def test_process_age_counts_from_the_process_start():
    import subprocess
    import sys
    import time

    from parrot.engines.builtin.observe.startup_clock import process_age_s

    age = process_age_s()
    if age is None:
        pytest.skip("no /proc here")
    time.sleep(0.05)
    later = process_age_s()
    assert later is not None and later >= age + 0.04
    # a fresh interpreter that slept 0.5 s before asking is about 0.5 s old, not this one's age
    out = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5); from parrot."
                          "engines.builtin.observe.startup_clock import process_age_s; "
                          "print(process_age_s())"], capture_output=True, text=True, check=True)
    assert 0.5 <= float(out.stdout) < 20.0
