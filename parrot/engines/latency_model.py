"""The simulated engine's latency model: how long one continuous-batching iteration takes.

One iteration runs a decode step for every generating sequence plus a chunk of prefill:

    iteration_s = decode_s(num_decode_seqs, decode_kv_tokens)
                  + prefill_per_token_ms * prefill_tokens
                  + prefill_base_ms  (only when the iteration prefills and decodes nothing)

`decode_kv_tokens` is the total context length of the decoding sequences (the KV cache every
decode step reads). Decode time is either the formula

    decode_base_ms + decode_per_seq_ms * num_decode_seqs + decode_per_token_ms * decode_kv_tokens

(the base is the weight read, paid once per iteration) or, when `decode_table` is given, a
piecewise-linear interpolation of measured (batch tokens, ms) points, extrapolated past the last
point with the last segment's slope. An iteration without decodes pays no decode time; one
that only prefills pays `prefill_base_ms` once instead (0 by default): what a step costs
whatever its tokens (the weights read once, the launches), which a decode step's base or
table already holds. Recorded profiles fit it as the intercept of fill time vs. tokens.
`zero_latency` makes every iteration take no time (benchmarks of the manager).

This module also holds the simulated engine's whole configuration (`SimulatedEngineConfig`,
parsed once from YAML/JSON params, optionally on top of a profile in configs/profiles/).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import yaml

from parrot.errors import EngineConfigError
from parrot.speed_profile import SpeedProfile
from parrot.validation import Checks, is_int

# Where the simulated engine's parameters are named in errors.
_CHECK = Checks("simulated engine", EngineConfigError)


@dataclass(frozen=True)
class LatencyModel:
    prefill_per_token_ms: float = 0.15
    prefill_base_ms: float = 0.0   # a prefill-only iteration's fixed cost
    decode_base_ms: float = 22.0
    decode_per_seq_ms: float = 0.0
    decode_per_token_ms: float = 0.003
    # ((batch_tokens, decode_ms), ...) sorted by batch_tokens; replaces the decode formula.
    decode_table: tuple[tuple[int, float], ...] | None = None
    zero_latency: bool = False

    def __post_init__(self) -> None:
        for key in ("prefill_per_token_ms", "prefill_base_ms", "decode_base_ms",
                    "decode_per_seq_ms", "decode_per_token_ms"):
            _CHECK.number(key, getattr(self, key), minimum=0)
        _CHECK.boolean("zero_latency", self.zero_latency)
        if self.decode_table is not None:
            table = self.decode_table
            _CHECK.require(len(table) >= 2, "decode_table", table,
                           "at least two [batch_tokens, ms] points")
            xs = [x for x, _ in table]
            _CHECK.require(xs == sorted(set(xs)), "decode_table", table,
                           "points with strictly increasing batch_tokens")

    @classmethod
    def parse_table(cls, value: Any) -> tuple[tuple[int, float], ...]:
        """Wire/YAML form: a list of [batch_tokens, ms] pairs."""
        _CHECK.require(isinstance(value, (list, tuple)), "decode_table", value,
                       "a list of [batch_tokens, ms] points")
        points = []
        for i, point in enumerate(value):
            _CHECK.require(isinstance(point, (list, tuple)) and len(point) == 2
                           and is_int(point[0]) and point[0] >= 0, f"decode_table[{i}]", point,
                           "[batch_tokens >= 0, ms >= 0]")
            _CHECK.number(f"decode_table[{i}][1]", point[1], minimum=0)
            points.append((point[0], float(point[1])))
        return tuple(points)

    def decode_ms(self, num_decode_seqs: int, decode_kv_tokens: int) -> float:
        if num_decode_seqs == 0 or self.zero_latency:
            return 0.0
        if self.decode_table is None:
            return (self.decode_base_ms + self.decode_per_seq_ms * num_decode_seqs
                    + self.decode_per_token_ms * decode_kv_tokens)
        return _interpolate(self.decode_table, decode_kv_tokens)

    def speed_profile(self) -> SpeedProfile | None:
        """The profile the engine reports in its info, so that a manager that was given no
        `profile` for it (an engine process registered by URL) costs it as it runs. Its shape
        has no per-sequence decode term or fixed prefill cost: both are left out. None with
        `zero_latency` (no speed to rank by)."""
        if self.zero_latency:
            return None
        data: dict[str, Any] = {"prefill_per_token_ms": self.prefill_per_token_ms}
        if self.decode_table is not None:
            data["decode_table"] = self.decode_table
        else:
            data.update(decode_base_ms=self.decode_base_ms,
                        decode_per_token_ms=self.decode_per_token_ms)
        return SpeedProfile.from_latency_profile(data)

    def iteration_seconds(self, num_decode_seqs: int, decode_kv_tokens: int,
                          prefill_tokens: int) -> float:
        if self.zero_latency:
            return 0.0
        ms = (self.decode_ms(num_decode_seqs, decode_kv_tokens)
              + self.prefill_per_token_ms * prefill_tokens)
        if prefill_tokens and not num_decode_seqs:
            ms += self.prefill_base_ms
        return ms / 1000.0


def _interpolate(table: tuple[tuple[int, float], ...], x: int) -> float:
    xs = [p[0] for p in table]
    i = bisect.bisect_right(xs, x)
    if i == 0:
        return table[0][1]  # below the first point: flat
    # interpolate inside [i-1, i]; past the end extrapolate with the last segment
    lo, hi = (table[i - 1], table[i]) if i < len(table) else (table[-2], table[-1])
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
    return lo[1] + slope * (x - lo[0])


# configs/profiles/ of a source checkout, or parrot/configs/profiles/ of an installed package
# (pyproject.toml ships configs/ as package data there).
_INSTALLED_PROFILES = Path(__file__).resolve().parents[1] / "configs" / "profiles"
PROFILE_DIR = _INSTALLED_PROFILES if _INSTALLED_PROFILES.is_dir() \
    else Path(__file__).resolve().parents[2] / "configs" / "profiles"
_PROFILE_METADATA_KEYS = ("description", "hardware", "source")
_DECODE_FORMULA_KEYS = ("decode_base_ms", "decode_per_seq_ms", "decode_per_token_ms")


@dataclass(frozen=True)
class SimulatedEngineConfig:
    model: str = "simulated"
    max_context_len: int = 8192
    block_size: int = 16
    num_blocks: int = 4096
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    shared_prefix_decode: bool = True
    # Automatic prefix caching (vLLM's APC, SGLang's radix cache): a context filled from
    # scratch forks the longest run of leading full blocks a finished context left cached
    # (sim_prefix_cache.py). Off: what a request-level engine without it does.
    prefix_caching: bool = False
    # Say in its info that it takes a prompt in a Generate (false: the manager sends a Fill
    # and then a Generate, a step later to the first token; an A/B switch).
    prompt_in_generate: bool = True
    # A Generate that does not set ignore_eos ends, as a model's turn does, after a length drawn
    # from a geometric distribution of this mean (capped by max_tokens); None: every Generate
    # runs to max_tokens (what the benchmark workloads ask for with ignore_eos anyway).
    eos_mean_tokens: int | None = None
    latency: LatencyModel = field(default_factory=LatencyModel)
    profile: str | None = None  # where the latency defaults came from, for information

    def __post_init__(self) -> None:
        for key in ("max_context_len", "block_size", "num_blocks", "max_num_seqs",
                    "max_num_batched_tokens"):
            _CHECK.positive_int(key, getattr(self, key))
        _CHECK.text("model", self.model)
        _CHECK.boolean("shared_prefix_decode", self.shared_prefix_decode)
        _CHECK.boolean("prefix_caching", self.prefix_caching)
        _CHECK.boolean("prompt_in_generate", self.prompt_in_generate)
        if self.eos_mean_tokens is not None:
            _CHECK.positive_int("eos_mean_tokens", self.eos_mean_tokens)

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> SimulatedEngineConfig:
        """Parse YAML/JSON params. `profile` (a path, or a name in configs/profiles/) supplies
        defaults that the other keys override."""
        params = _CHECK.mapping("", {} if params is None else params)
        merged: dict[str, Any] = {}
        profile = params.get("profile")
        if profile is not None:
            merged.update(load_profile(profile))
        merged.update({k: v for k, v in params.items() if k != "profile"})
        latency_keys = {f.name for f in fields(LatencyModel)}
        engine_keys = {f.name for f in fields(cls)} - {"latency", "profile"}
        _CHECK.keys(merged, engine_keys | latency_keys | {"profile"})
        latency_kwargs = {k: merged.pop(k) for k in latency_keys if k in merged}
        if "decode_table" in latency_kwargs:
            clash = sorted(set(_DECODE_FORMULA_KEYS) & set(latency_kwargs))
            if clash:
                _CHECK.fail(clash[0], "conflicts with decode_table",
                            "decode_table or the decode formula's keys, not both")
            table = LatencyModel.parse_table(latency_kwargs["decode_table"])
            latency_kwargs["decode_table"] = table
        try:
            return cls(latency=LatencyModel(**latency_kwargs),
                       profile=None if profile is None else str(profile), **merged)
        except TypeError as exc:  # pragma: no cover - unknown keys are caught above
            _CHECK.fail("", str(exc))


def load_profile(profile: Any) -> dict[str, Any]:
    """Read a latency profile YAML (a path, or the name of a file in configs/profiles/)."""
    known = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
    allowed = f"a YAML file or one of {known}"
    _CHECK.text("profile", profile)
    path = Path(profile)
    if not path.is_file():
        path = PROFILE_DIR / (profile if profile.endswith(".yaml") else f"{profile}.yaml")
    _CHECK.require(path.is_file(), "profile", profile, allowed)
    data = yaml.safe_load(path.read_text())
    _CHECK.require(isinstance(data, dict) and "profile" not in data, "profile", profile,
                   f"{allowed}, holding a mapping that names no other profile")
    return {k: v for k, v in data.items() if k not in _PROFILE_METADATA_KEYS}
