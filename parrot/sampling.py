"""Sampling parameters: one validated dataclass shared by the wire API, the manager and engines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from parrot.constraints import Constraint, constraint_from_json
from parrot.errors import InvalidRequestError

MAX_STOP_STRINGS = 16
# Every list a client sends is capped: the engine checks each generated token against every
# stop id, so an uncapped list (a million ids) slowed other tenants' generation 1.6-2.3x.
MAX_STOP_TOKEN_IDS = 64
MAX_TOKEN_ID = 2**31 - 1   # ids index a vocabulary: never wider than int32
MAX_TOP_K = 1_000_000      # no vocabulary is larger; a larger top_k means "no cut" anyway
MAX_MAX_TOKENS = 1_000_000
MAX_TEMPERATURE = 100.0


@dataclass(frozen=True)
class SamplingParams:
    """How one output is decoded.

    temperature 0 means greedy; top_k 0 means no top-k cut; top_p 1.0 means no nucleus cut.
    Generation stops at max_tokens, at a stop string (excluded from the text), at a stop token
    id, or at the model's EOS unless ignore_eos.
    """

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # What the text must match (parrot/constraints.py), decoded under its grammar; None: free.
    constraint: Constraint | None = None

    def __post_init__(self) -> None:
        # Runs for every submit: parameters of the usual exact types within their ranges,
        # with no stop string or id and no constraint, pass one cheap test (stricter than the
        # rules of `_check_fields`, on the same bounds); any other go through every rule, and
        # the first broken one names its field.
        if (self.constraint is None and type(self.max_tokens) is int
                and 1 <= self.max_tokens <= MAX_MAX_TOKENS
                and type(self.temperature) is float and 0.0 <= self.temperature <= MAX_TEMPERATURE
                and type(self.top_p) is float and 0.0 < self.top_p <= 1.0
                and type(self.top_k) is int and 0 <= self.top_k <= MAX_TOP_K
                and self.seed is None and type(self.stop) is tuple and not self.stop
                and type(self.stop_token_ids) is tuple and not self.stop_token_ids
                and type(self.ignore_eos) is bool):
            return
        self._check_fields()
        object.__setattr__(self, "constraint", constraint_from_json(self.constraint))
        # A constrained output ends where its grammar does (EOS is then the one token
        # allowed): ignoring EOS or cutting at a stop string would leave it incomplete.
        _check(self.constraint is None or not self.ignore_eos, "ignore_eos", self.ignore_eos,
               "false when a constraint is given")
        _check(self.constraint is None or not self.stop, "stop", self.stop,
               "empty when a constraint is given (a stop string would cut the constrained text)")

    def _check_fields(self) -> None:
        """Each field's rule, in order: the first broken one raises, naming its field."""
        _check(isinstance(self.max_tokens, int) and not isinstance(self.max_tokens, bool)
               and 1 <= self.max_tokens <= MAX_MAX_TOKENS, "max_tokens", self.max_tokens,
               _MAX_TOKENS_ALLOWED)
        _check(_is_number(self.temperature) and 0.0 <= self.temperature <= MAX_TEMPERATURE,
               "temperature", self.temperature, _TEMPERATURE_ALLOWED)
        _check(_is_number(self.top_p) and 0.0 < self.top_p <= 1.0, "top_p", self.top_p,
               "a number in (0, 1]")
        _check(isinstance(self.top_k, int) and not isinstance(self.top_k, bool)
               and 0 <= self.top_k <= MAX_TOP_K, "top_k", self.top_k, _TOP_K_ALLOWED)
        _check(self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool)
                                     and 0 <= self.seed < 2**63),
               "seed", self.seed, "null or an integer in [0, 2**63)")
        _check(isinstance(self.stop, tuple) and len(self.stop) <= MAX_STOP_STRINGS
               and all(isinstance(s, str) and s for s in self.stop),
               "stop", self.stop, _STOP_ALLOWED)
        if not (isinstance(self.stop_token_ids, tuple)
                and len(self.stop_token_ids) <= MAX_STOP_TOKEN_IDS
                and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID
                        for t in self.stop_token_ids)):
            _check(False, "stop_token_ids", _clipped(self.stop_token_ids), _STOP_IDS_ALLOWED)
        _check(isinstance(self.ignore_eos, bool), "ignore_eos", self.ignore_eos, "a boolean")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SamplingParams:
        """Parse the wire form; unknown keys and bad values raise InvalidRequestError."""
        if data is None:
            return cls()
        if type(data) is not dict and not isinstance(data, Mapping):  # a dict: no ABC check
            raise InvalidRequestError(f"sampling must be an object, got {type(data).__name__}")
        known = _FIELD_NAMES.get(cls) or _field_names(cls)
        if not known.issuperset(data):
            raise InvalidRequestError(f"unknown sampling field(s) {sorted(set(data) - known)}; "
                                      f"allowed: {sorted(known)}")
        kwargs = dict(data)
        if "stop" in data or "stop_token_ids" in data:
            _lists_as_tuples(kwargs, data)
        for key in _NUMBER_FIELDS:  # an integer is a number: 1 -> 1.0 (a bool is not)
            value = kwargs.get(key)
            if type(value) is not float and isinstance(value, int) \
                    and not isinstance(value, bool):
                kwargs[key] = float(value)
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        data["stop_token_ids"] = list(self.stop_token_ids)
        if self.constraint is None:
            del data["constraint"]   # the wire form of an unconstrained output is unchanged
        else:
            data["constraint"] = self.constraint.to_json()
        return data

    def merged(self, override: Mapping[str, Any] | None) -> SamplingParams:
        """These parameters with the fields of `override` (wire form) replacing them."""
        if not override:
            return self
        base = self.to_json()
        base.update(override)
        return SamplingParams.from_json(base)


# What the checks of __post_init__ say is allowed, formatted once (they run on every submit).
_MAX_TOKENS_ALLOWED = f"an integer in [1, {MAX_MAX_TOKENS}]"
_TEMPERATURE_ALLOWED = f"a number in [0, {MAX_TEMPERATURE:g}]"
_TOP_K_ALLOWED = f"an integer in [0, {MAX_TOP_K}] (0 disables top-k)"
_STOP_ALLOWED = f"a list of at most {MAX_STOP_STRINGS} non-empty strings"
_STOP_IDS_ALLOWED = f"a list of at most {MAX_STOP_TOKEN_IDS} integers in [0, {MAX_TOKEN_ID}]"


_NUMBER_FIELDS = ("temperature", "top_p")


def _lists_as_tuples(kwargs: dict[str, Any], given: Mapping[str, Any]) -> None:
    """The lists `given` as the tuples the fields hold (`stop` may be one string)."""
    for key in ("stop", "stop_token_ids"):
        if key in given:
            value = kwargs[key]
            if isinstance(value, str) and key == "stop":
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise InvalidRequestError(f"sampling.{key} must be a list, got {value!r}")
            kwargs[key] = tuple(value)


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type[SamplingParams]) -> frozenset[str]:
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return _FIELD_NAMES[cls]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _clipped(value: Any) -> Any:
    """A list named in an error, cut short (the error must not echo a million items)."""
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{len(value)} items]"
    return value


def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        text = repr(value)
        if len(text) > 200:  # a huge value (4,000 digits) is not echoed back whole
            text = text[:80] + f"...({len(text)} characters)"
        raise InvalidRequestError(f"invalid sampling.{name}={text}: must be {allowed}")

