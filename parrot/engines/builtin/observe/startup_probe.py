"""The builtin engine's start-up speed probe: what the engine reports as its speed profile.

Run once by `BuiltinEngine.start` (after the warm-up, so no graph capture or compilation is
timed) through the engine's own protocol (parrot/engines/speed_probe.py), under the GPU's lock
(device_lock.py): engines sharing a GPU start together, and one measuring while another
captures its graphs would time the other's work. A probe that fails is logged and the engine
reports no profile (the manager then falls back to its default): a measurement never stops an
engine from serving.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from parrot.engines.builtin.cuda.device_lock import exclusive_device_async
from parrot.engines.protocol import Engine
from parrot.engines.speed_probe import ProbePlan, probe_speed
from parrot.speed_profile import SpeedProfile, calibrated_latency_capacity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartupProbe:
    mode: str                 # "full" or "quick" (BuiltinEngineConfig.speed_probe_mode)
    max_num_seqs: int         # the largest batch the probe may ask of the engine
    device_key: str           # the lock's name (device_lock.device_key)

    async def run(self, engine: Engine, name: str) -> SpeedProfile | None:
        """Measure `engine` (started, serving nothing yet); None when the probe fails."""
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
        return profile
