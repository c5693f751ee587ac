"""The builtin engine's start-up speed probe (startup_probe.py): a profile in its info, no
context or block left behind, and a failure that never stops the engine."""

from __future__ import annotations

import asyncio
import logging

import pytest

from parrot.engines.builtin.config import BuiltinConfigError, BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams


def test_auto_probes_on_cuda_only():
    assert BuiltinEngineConfig().speed_probe_mode("cuda") == "full"
    assert BuiltinEngineConfig().speed_probe_mode("cpu") is None
    assert BuiltinEngineConfig(speed_probe="quick").speed_probe_mode("cpu") == "quick"
    assert BuiltinEngineConfig(speed_probe="full").speed_probe_mode("cpu") == "full"
    assert BuiltinEngineConfig(speed_probe="off").speed_probe_mode("cuda") is None
    with pytest.raises(BuiltinConfigError, match="speed_probe"):
        BuiltinEngineConfig.from_mapping({"speed_probe": "fast"})


async def test_a_probed_engine_reports_its_profile_and_leaves_nothing_behind(tiny_bundle,
                                                                             make_engine):
    engine = make_engine(tiny_bundle, speed_probe="quick")
    assert (await engine.info()).speed_profile is None      # measured by start()
    await engine.start()
    profile = (await engine.info()).speed_profile
    assert profile is not None and profile.prefill_ms_per_token > 0
    # the empty batch's step, then one point per batch size of the quick plan (1, 2, 4)
    tokens = [x for x, _ in profile.decode_points]
    assert len(tokens) == 4 and tokens[0] == 0 and tokens == sorted(tokens)
    # measured steps take time; the extrapolated empty one is within 0 and the first
    ms = [m for _, m in profile.decode_points]
    assert ms[0] >= 0 and all(m > 0 for m in ms[1:]) and ms == sorted(ms)
    stats = await engine.stats()
    assert stats.num_contexts == 0 and stats.num_blocks_free == stats.num_blocks_total
    engine.check_invariants()
    # measured once: a second start() does not probe again, and the engine serves
    await engine.start()
    assert (await engine.info()).speed_profile is profile
    await engine.fill(FillRequest("c", token_ids=(5, 6, 7)))
    result = await engine.generate_all(GenerateRequest(
        "c", sampling=SamplingParams(max_tokens=3, ignore_eos=True)))
    assert len(result.token_ids) == 3


async def test_a_failed_probe_leaves_the_engine_serving_without_a_profile(tiny_bundle,
                                                                          make_engine, caplog):
    # 4 blocks of 16 tokens: too small for four probe sequences
    engine = make_engine(tiny_bundle, speed_probe="quick", num_blocks=4)
    with caplog.at_level(logging.ERROR):
        await engine.start()
    assert "speed probe failed" in caplog.text
    assert (await engine.info()).speed_profile is None
    assert await engine.healthz()
    await engine.fill(FillRequest("c", token_ids=(5, 6, 7)))


async def test_deferred_graph_captures_wait_for_the_probe_and_then_run_while_idle(
        tiny_bundle, make_engine, caplog):
    """A capture while idle between the probe's requests would land inside its timing: the
    engine starts them once the probe is done (and the step budget is priced by then)."""
    from parrot.engines.builtin.runner import ModelRunner

    events: list[str] = []

    class DeferringRunner(ModelRunner):
        """Reports three deferred graph captures (graphs.py `deferred`) and records them."""

        pending = 3

        @property
        def has_deferred_captures(self) -> bool:
            return self.pending > 0

        def capture_deferred(self) -> None:
            self.pending -= 1
            events.append("capture")

    engine = make_engine(tiny_bundle, speed_probe="quick", runner_type=DeferringRunner)
    with caplog.at_level(logging.INFO):
        await engine.start()                 # returns after the probe
        events.append("probe done")
        for _ in range(200):
            if len(events) == 4:
                break
            await asyncio.sleep(0.01)
    assert events == ["probe done", "capture", "capture", "capture"]
    assert "step token budget: auto, ITL target 50 ms" in caplog.text
    assert (await engine.info()).serving.step_token_budget.startswith(
        "step token budget: auto, ITL target 50 ms")


async def test_a_measured_profile_is_kept_and_read_by_the_next_start(tiny_bundle, make_engine,
                                                                     tmp_path, monkeypatch):
    from parrot.engines.builtin.observe import startup_probe
    from parrot.engines.builtin.observe.startup_probe import StartupProbe

    probes: list[object] = []
    measure = startup_probe.probe_speed

    async def counted(engine, plan):
        probes.append(plan)
        return await measure(engine, plan)

    monkeypatch.setattr(startup_probe, "probe_speed", counted)
    path = tmp_path / "speed_profile" / "key.json"
    probe = StartupProbe("quick", 4, "cpu", path)
    engine = make_engine(tiny_bundle)
    await engine.start()
    first = await probe.run(engine, "e")
    assert first is not None and len(probes) == 1 and path.is_file()
    again = await StartupProbe("quick", 4, "cpu", path).run(make_engine(tiny_bundle), "e")
    assert again == first and len(probes) == 1                 # read, not measured
    path.write_text('{"prefill_per_token_ms": 0.1}')            # not a measured profile
    assert await probe.run(engine, "e") is not None and len(probes) == 2
    assert (await StartupProbe("quick", 4, "cpu", None).run(engine, "e")) is not None
    assert len(probes) == 3                                     # no path: always measured


def test_only_a_gpu_engines_profile_is_kept(tiny_bundle):
    from parrot.engines.builtin.build import serving_size, speed_profile_path

    config = BuiltinEngineConfig(model="tiny", device="cpu", num_blocks=64, speed_probe="quick")
    assert speed_profile_path(config, tiny_bundle, serving_size(config, tiny_bundle),
                              "quick") is None


def test_a_gpu_engines_kept_profile_is_keyed_by_the_probes_version(tiny_bundle, monkeypatch,
                                                                    tmp_path):
    """A probe that measured wrongly (PROBE_VERSION 1 timed Fills the prefix cache served)
    must not be read back by a fixed one: its version is part of the key."""
    import dataclasses

    import torch

    from parrot.engines.builtin import build

    monkeypatch.setattr(build, "software", lambda device, kernels: ["a GPU", "torch"])
    model = dataclasses.replace(tiny_bundle, model=type(
        "OnCuda", (), {"device": torch.device("cuda"), "dtype": torch.bfloat16})())
    config = BuiltinEngineConfig(model="tiny", device="cpu", num_blocks=64,
                                 cache_dir=str(tmp_path))
    size = build.serving_size(config, tiny_bundle)
    first = build.speed_profile_path(config, model, size, "full")
    assert first is not None and first.parent == tmp_path / "speed_profile"
    assert build.speed_profile_path(config, model, size, "full") == first
    monkeypatch.setattr(build, "PROBE_VERSION", build.PROBE_VERSION + 1)
    assert build.speed_profile_path(config, model, size, "full") != first
