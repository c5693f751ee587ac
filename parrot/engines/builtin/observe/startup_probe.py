"""The builtin engine's start-up speed probe: what the engine reports as its speed profile.

Run once by `BuiltinEngine.start` (after the warm-up, so no graph capture or compilation is
timed) through the engine's own protocol (parrot/engines/speed_probe.py), under the GPU's lock
(device_lock.py): engines sharing a GPU start together, and one measuring while another
captures its graphs would time the other's work. A probe that fails is logged and the engine
reports no profile (the manager then falls back to its default): a measurement never stops an
engine from serving.

A measured profile is kept under the engine's cache directory (`speed_profile/`,
start_cache.py), keyed by everything its speed depends on that a start knows (the GPU, torch,
Triton and the kernels' source, the model's shape and dtype, the engine's config and its
batch limits, the probe's mode): a later start with the same key reads it instead of
measuring again (1.8 s of an H200 engine's warm start). Delete that folder to measure again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from parrot.engines.builtin.cuda.device_lock import exclusive_device_async
from parrot.engines.builtin.start_cache import keep, read_kept
from parrot.engines.protocol import Engine
from parrot.engines.speed_probe import ProbePlan, probe_speed
from parrot.speed_profile import SpeedProfile, calibrated_latency_capacity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupProbe:
    mode: str                 # "full" or "quick" (BuiltinEngineConfig.speed_probe_mode)
    max_num_seqs: int         # the largest batch the probe may ask of the engine
    device_key: str           # the lock's name (device_lock.device_key)
    cache_path: Path | None = None   # where a measured profile is kept (None: never kept)

    async def run(self, engine: Engine, name: str) -> SpeedProfile | None:
        """Measure `engine` (started, serving nothing yet), or read the profile a start with
        the same key measured; None when the probe fails."""
        kept = read_kept(self.cache_path, _profile_from_json, "speed profile")
        if kept is not None:
            log.info("engine %s speed profile measured before by a start like this one, read "
                     "from %s", name, self.cache_path)
            return kept
        try:
            plan = ProbePlan.for_engine(await engine.info(), self.max_num_seqs,
                                        quick=self.mode == "quick")
            async with exclusive_device_async(self.device_key) as waited:
                result = await probe_speed(engine, plan)
        except Exception:  # noqa: BLE001 - see the module docstring
            log.exception("engine %s: the start-up speed probe failed; reporting no speed "
                          "profile", name)
            return None
        profile = result.profile()
        decode = ", ".join(f"{tokens} tokens {ms:.2f} ms" for tokens, ms in profile.decode_points)
        log.info("engine %s speed profile (%s probe, %.1f s waiting for the GPU's lock): "
                 "prefill %.4f ms/token (+%.2f ms a step); decode %s; latency capacity by the "
                 "paper's rule %d tokens", name, self.mode, waited,
                 profile.prefill_ms_per_token, result.prefill_base_ms, decode,
                 calibrated_latency_capacity(profile))
        keep(self.cache_path, profile, lambda p: json.dumps(p.to_latency_profile()),
             "speed profile")
        return profile


def _profile_from_json(text: str) -> SpeedProfile:
    data = json.loads(text)
    if not isinstance(data, dict) or "decode_table" not in data:
        raise ValueError("not a measured speed profile")
    return SpeedProfile.from_latency_profile(data)
