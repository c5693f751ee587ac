"""The serve configuration (policies.yaml): parsed once at the edge into frozen dataclasses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

import yaml

from parrot.errors import ConfigError
from parrot.types import EngineKind
from parrot.validation import Checks

__all__ = ["ConfigError", "EngineSpec", "ManagerConfig", "PolicySpec", "ServeConfig",
           "TenantSpec", "auto_throughput_capacity"]

# Throughput work is not held to a step time: its cap is memory headroom. The paper's setting
# (LLaMA-13B on an A100-80GB, 56,000 tokens of KV cache) fills throughput engines to 32,768
# tokens, 58.5% of the cache; an engine that does not say otherwise keeps that share of *its*
# cache (32,768 on the A100, ~120k on an H200 with LLaMA-7B), so the headroom left for
# prompts still estimated (characters / 4) and cached prefix contexts is the paper's too.
PAPER_THROUGHPUT_TOKENS, PAPER_KV_TOKENS = 32768, 56000
FALLBACK_THROUGHPUT_CAPACITY = 32768   # an engine that reports no KV cache size


def auto_throughput_capacity(kv_capacity_tokens: int, latency_capacity: int) -> int:
    """The throughput capacity of an engine configured with `auto` (the default): the
    paper's share of its KV cache, rounded down to 1024 tokens, never below its latency
    capacity (throughput work may fill an engine at least as far as latency work)."""
    if kv_capacity_tokens <= 0:
        return max(latency_capacity, FALLBACK_THROUGHPUT_CAPACITY)
    share = kv_capacity_tokens * PAPER_THROUGHPUT_TOKENS // PAPER_KV_TOKENS // 1024 * 1024
    return max(latency_capacity, share)


@dataclass(frozen=True)
class ManagerConfig:
    host: str = "127.0.0.1"
    port: int = 9000
    max_body_bytes: int = 8 * 1024 * 1024     # larger request bodies get 413
    max_get_timeout_s: float = 3600.0         # longest a `get` may long-poll
    default_get_timeout_s: float = 600.0
    max_call_retries: int = 2                 # re-dispatches after an engine failure
    admin_token: str | None = None            # for POST /v1/engines and full stats; parrot-serve
                                              # generates and prints one when unset
    session_idle_timeout_s: float = 3600.0    # a session idle this long (nothing running,
                                              # nobody waiting) is deleted
    # Engines (docs/RELIABILITY.md): how the manager talks to engine processes and when it
    # gives up on one.
    engine_connect_timeout_s: float = 5.0     # TCP connect to an engine (not the pool wait)
    engine_request_timeout_s: float | None = 1800.0  # one Fill/Generate; null: unbounded
    engine_pool_size: int = 512               # HTTP connections per engine
    # Calls running their requests on one engine process at once (manager/call_slots.py; the
    # others wait in the manager, latency-critical first). None: the engine's batch (the
    # max_num_seqs it reports; unbounded if it reports none); 0: no bound.
    engine_max_calls: int | None = None
    # A scheduling round waits, after the wake that calls for it, while the loop's next turns
    # keep bringing more ready calls, at most this long (manager/scheduler.py, COALESCE_TURNS):
    # under load one round then places what a burst of turns made ready instead of one round
    # each. 0: a round at the first wake.
    round_coalesce_ms: float = 5.0
    engine_heartbeat_interval_s: float = 1.0  # an engine's /healthz is asked this often
    engine_heartbeat_timeout_s: float = 5.0   # unanswered this long: engine down, calls moved
    no_engine_grace_s: float = 10.0           # with every engine down, calls wait this long
    # Engine processes parrot-serve launched and that exit on their own are restarted
    # (engine_supervisor.py): at most engine_restart_max times within engine_restart_window_s
    # (0: never), after a back-off starting at engine_restart_backoff_s, doubling.
    engine_restart_max: int = 5
    engine_restart_window_s: float = 600.0
    engine_restart_backoff_s: float = 1.0
    # The front door's limits (docs/SECURITY.md): slow clients, queues, shutdown.
    request_header_timeout_s: float = 30.0    # a connection must send a request's headers
    request_body_timeout_s: float = 30.0      # ...and then its body, within these
    max_sessions: int = 10_000                # more live sessions: 429
    max_active_calls: int = 65_536            # unfinished calls, all sessions: beyond, 429
    max_active_calls_per_session: int = 4096  # unfinished calls of one session: beyond, 429
    max_waiting_gets_per_session: int = 1024  # concurrent blocked `get`s of one session
    # A prompt's rendered size is known before it is rendered (its text plus each input's
    # length times its occurrences): one call's is capped (400 at submit, or the call fails
    # when its inputs arrive), and so is the sum over a session's unfinished calls (429).
    max_prompt_chars: int = 8 * 1024 * 1024
    max_session_prompt_chars: int = 64 * 1024 * 1024
    max_output_tokens: int | None = None      # max_tokens cap per output (besides the
                                              # largest engine window, always enforced)
    retry_after_s: float = 1.0                # the Retry-After of a 429
    shutdown_grace_s: float = 30.0            # on SIGTERM, running calls get this long

    def __post_init__(self) -> None:
        check = Checks("manager")
        check.number("port", self.port, minimum=0, maximum=65535, integer=True)
        check.number("max_body_bytes", self.max_body_bytes, minimum=1024, integer=True)
        for key in ("max_get_timeout_s", "default_get_timeout_s", "session_idle_timeout_s",
                    "engine_connect_timeout_s", "engine_heartbeat_interval_s",
                    "engine_heartbeat_timeout_s", "no_engine_grace_s",
                    "engine_restart_window_s", "engine_restart_backoff_s",
                    "request_header_timeout_s", "request_body_timeout_s", "retry_after_s"):
            check.positive(key, getattr(self, key))
        check.positive("engine_request_timeout_s", self.engine_request_timeout_s, optional=True)
        check.number("max_call_retries", self.max_call_retries, minimum=0, integer=True)
        check.number("engine_max_calls", self.engine_max_calls, minimum=0, integer=True,
                     optional=True)
        check.number("round_coalesce_ms", self.round_coalesce_ms, minimum=0.0, maximum=1000.0)
        check.number("engine_restart_max", self.engine_restart_max, minimum=0, integer=True)
        check.number("shutdown_grace_s", self.shutdown_grace_s, minimum=0)
        for key in ("engine_pool_size", "max_sessions", "max_active_calls",
                    "max_active_calls_per_session", "max_waiting_gets_per_session",
                    "max_prompt_chars", "max_session_prompt_chars"):
            check.positive_int(key, getattr(self, key))
        check.positive_int("max_output_tokens", self.max_output_tokens, optional=True)
        check.require(self.admin_token is None or (isinstance(self.admin_token, str)
                                                   and len(self.admin_token) >= 16
                                                   and self.admin_token.isascii()),
                      "admin_token", "<hidden>", "an ASCII string of at least 16 characters")


@dataclass(frozen=True)
class TenantSpec:
    """A tenant: who may open sessions with `api_key`, and whether its prompt prefixes may
    share cached contexts with other tenants that opt in too (off: isolated, see SECURITY.md)."""

    name: str
    api_key: str
    share_prefixes: bool = False
    # Live sessions this tenant may hold (its OpenAI requests' private sessions included):
    # null, only the service's max_sessions. One tenant could otherwise take all of them.
    max_sessions: int | None = None
    # Unfinished calls this tenant may have in all its sessions (OpenAI requests included):
    # null, only the service's max_active_calls. Past it 429, and other tenants keep theirs.
    max_active_calls: int | None = None

    def __post_init__(self) -> None:
        Checks("tenants[]").require(
            isinstance(self.name, str) and 0 < len(self.name) <= 64 and self.name.isascii(),
            "name", self.name, "an ASCII string of 1 to 64 characters")
        check = Checks(f"tenants[{self.name!r}]")
        check.require(isinstance(self.api_key, str) and len(self.api_key) >= 16
                      and self.api_key.isascii() and " " not in self.api_key,
                      "api_key", "<hidden>",
                      "an ASCII string of at least 16 characters without spaces")
        check.boolean("share_prefixes", self.share_prefixes)
        check.positive_int("max_sessions", self.max_sessions, optional=True)
        check.positive_int("max_active_calls", self.max_active_calls, optional=True)


@dataclass(frozen=True)
class EngineSpec:
    """One engine: started by parrot-serve (builtin/simulated) or reached by URL (remote)."""

    name: str
    kind: str = EngineKind.SIMULATED   # an EngineKind value; stored as the EngineKind member
    url: str | None = None
    # Token load under which latency calls stay fast; None ("auto" in YAML, the default): the
    # paper's rule on the engine's speed profile (the load where a decode step takes 40/22 of
    # the empty batch's; speed_profile.calibrated_latency_capacity), known once it connects.
    # 6,144 on the paper's A100 profile, which an engine with no profile is costed with; the
    # A100's figure on a faster engine kept its latency calls waiting for room the engine had
    # (docs/RESULTS_HISTORY.md, "The latency capacity at the artifact's load").
    latency_capacity: int | None = None
    # Token load a throughput engine may be filled to; None ("auto" in YAML): a share of the
    # engine's own KV cache, known once it connects (`auto_throughput_capacity`).
    throughput_capacity: int | None = None
    speed: float = 1.0                 # relative speed, for least-queue style policies
    in_process: bool = False           # run inside the manager's process (tests, simulation)
    params: Mapping[str, Any] = field(default_factory=dict)  # passed to the engine factory

    def __post_init__(self) -> None:
        Checks("engines[]").require(
            isinstance(self.name, str) and self.name.replace("-", "").replace("_", "").isalnum(),
            "name", self.name, "letters, digits, '-' and '_'")
        check = Checks(f"engines[{self.name!r}]")
        object.__setattr__(self, "kind", check.enum("kind", self.kind, EngineKind))
        check.require((self.kind is EngineKind.REMOTE) == (self.url is not None), "url",
                      self.url, "set exactly when kind is 'remote'")
        for key in ("latency_capacity", "throughput_capacity"):
            given: Any = getattr(self, key)    # YAML may say `auto`
            if given == "auto":
                object.__setattr__(self, key, None)
        check.positive_int("latency_capacity", self.latency_capacity, optional=True)
        check.positive_int("throughput_capacity", self.throughput_capacity, optional=True)
        check.positive("speed", self.speed)
        check.mapping("params", self.params)


@dataclass(frozen=True)
class PolicySpec:
    name: str = "least_queue"
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServeConfig:
    manager: ManagerConfig = field(default_factory=ManagerConfig)
    policy: PolicySpec = field(default_factory=PolicySpec)
    engines: tuple[EngineSpec, ...] = ()
    tenants: tuple[TenantSpec, ...] = ()   # none: anyone may open a session (one tenant)

    def __post_init__(self) -> None:
        check = Checks()
        names = [e.name for e in self.engines]
        dupes = sorted({n for n in names if names.count(n) > 1})
        check.require(not dupes, "engines[].name", dupes, "unique names")
        tenant_names = [t.name for t in self.tenants]
        dupes = sorted({n for n in tenant_names if tenant_names.count(n) > 1})
        check.require(not dupes, "tenants[].name", dupes, "unique names")
        keys = [t.api_key for t in self.tenants]
        check.require(len(set(keys)) == len(keys), "tenants[].api_key", "<hidden>", "unique keys")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, base_dir: Path | None = None) -> ServeConfig:
        check = Checks()
        check.require(isinstance(data, Mapping), "", type(data).__name__, "a mapping")
        check.keys(data, ("manager", "policy", "engines", "tenants"))
        manager = ManagerConfig(**_section(data.get("manager"), ManagerConfig, "manager"))
        policy_data = _section(data.get("policy"), PolicySpec, "policy")
        policy = PolicySpec(**policy_data)
        engines_data = data.get("engines") or []
        check.require(isinstance(engines_data, list), "engines", engines_data, "a list")
        engines = []
        for i, item in enumerate(engines_data):
            fields_ = _section(item, EngineSpec, f"engines[{i}]")
            params = dict(fields_.get("params") or {})
            # Relative file paths in engine params (profiles, model folders) are relative to
            # the config file, so a config works from any working directory.
            for key in ("profile", "model_path"):
                value = params.get(key)
                if base_dir is not None and isinstance(value, str) \
                        and not Path(value).is_absolute() and (base_dir / value).exists():
                    params[key] = str((base_dir / value).resolve())
            fields_["params"] = params
            engines.append(EngineSpec(**fields_))
        tenants_data = data.get("tenants") or []
        check.require(isinstance(tenants_data, list), "tenants", tenants_data, "a list")
        tenants = []
        for i, item in enumerate(tenants_data):
            fields_ = _section(item, TenantSpec, f"tenants[{i}]")
            Checks(f"tenants[{i}]").keys(fields_, (f.name for f in dataclasses.fields(TenantSpec)),
                                         required=("name", "api_key"))
            tenants.append(TenantSpec(**fields_))
        return cls(manager, policy, tuple(engines), tuple(tenants))

    @classmethod
    def load(cls, path: str | Path) -> ServeConfig:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(str(path), f"cannot read the config file: {exc}") from None
        return cls.from_mapping(data or {}, base_dir=path.parent)


def _section(value: Any, cls: type, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    check = Checks(where)
    check.keys(check.mapping("", value), (f.name for f in dataclasses.fields(cls)))
    return dict(value)
