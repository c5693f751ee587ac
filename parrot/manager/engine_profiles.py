"""Which speed profile the manager costs an engine with: the one its YAML params configure (the
simulator's latency profile and keys), else the one the engine measured and reports, else the
paper's A100 (`DEFAULT_PROFILE`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from parrot.engines.latency_model import load_profile
from parrot.engines.protocol import EngineInfo
from parrot.errors import EngineConfigError
from parrot.serve_config import EngineSpec
from parrot.speed_profile import DEFAULT_PROFILE, ProfileError, SpeedProfile

log = logging.getLogger(__name__)

# The engine params that describe its speed (the simulated engine's latency keys).
PROFILE_KEYS = ("prefill_per_token_ms", "decode_table", "decode_base_ms",
                "decode_per_token_ms")


def configured_profile(params: Mapping[str, Any]) -> SpeedProfile | None:
    """The cost profile an engine's YAML params give: the simulator's latency `profile`
    (configs/profiles/) with the params' own latency keys on top; None when they give none
    (or one that is unusable: logged)."""
    data: dict[str, Any] = {}
    try:
        if params.get("profile") is not None:
            data.update(load_profile(params["profile"]))
        data.update({k: v for k, v in params.items() if k in PROFILE_KEYS})
        return SpeedProfile.from_latency_profile(data) if data else None
    except (EngineConfigError, ProfileError, TypeError, ValueError) as exc:
        log.warning("engine profile %r unusable for placement costs (%s); using the default",
                    params.get("profile"), exc)
        return None


def speed_profile(params: Mapping[str, Any]) -> SpeedProfile:
    """`configured_profile`, or DEFAULT_PROFILE when the params give none."""
    return configured_profile(params) or DEFAULT_PROFILE


def engine_profile(spec: EngineSpec, info: EngineInfo) -> tuple[SpeedProfile, str]:
    """The profile the manager costs an engine with, and where it came from: the one its
    params configure ("configured"), else the one the engine reports ("measured": a builtin
    engine's start-up probe), else DEFAULT_PROFILE, the paper's A100 ("default")."""
    configured = configured_profile(spec.params)
    if configured is not None:
        return configured, "configured"
    if info.speed_profile is not None:
        return info.speed_profile, "measured"
    return DEFAULT_PROFILE, "default"
