"""The policy interface: read-only views in, typed placements out.

A policy sees the calls that are ready to run and a snapshot of every engine; it decides which
calls go where *now*. Calls it leaves out stay queued and are offered again at the next
scheduling round (when a call finishes, a new call becomes ready or an engine joins). A policy
holds no reference into the manager or the engines: everything it may use is in these views.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from collections.abc import Mapping, Sequence, Set
from typing import Any, ClassVar

from parrot.speed_profile import DEFAULT_PROFILE, SpeedProfile
from parrot.types import Criterion


@dataclass(frozen=True)
class CallView:
    """What a policy may know about one ready call."""

    call_id: str
    session_id: str
    criterion: Criterion | None          # deduced objective; None when nothing asked yet
    task_group: str | None               # id of the group of parallel calls it belongs to
    task_group_size: int                 # number of calls in that group (1 when none)
    prefix_hashes: tuple[str, ...]       # cumulative prompt hashes at each variable boundary
    num_tokens: int                      # estimate: prompt + output (core/output_lengths.py)
    topo_rank: int                       # depth in its session's DAG (0 = no producer upstream)
    arrival_seq: int                     # submission order (the manager's FCFS priority)
    # Of num_tokens, how many are output (decode steps); the rest is prompt to prefill.
    num_output_tokens: int = 0
    # Estimated prompt tokens up to each of prefix_hashes (same length, non-decreasing).
    prefix_num_tokens: tuple[int, ...] = ()
    # The deepest of prefix_hashes that another *queued* call shares (the paper's
    # SharedReqsInQueue, counted over the queue each round); None when no queued call shares one.
    shared_prefix: str | None = None
    # A call of its session waits on its outputs alone (Call.has_waiting_consumer): its
    # application's next call follows it.
    has_waiting_consumer: bool = False
    # What its outputs are needed for, downstream included (deduction's demand, before task
    # grouping): a task group's member is THROUGHPUT with a LATENCY demand when a
    # latency-critical call waits on the group; THROUGHPUT with a THROUGHPUT demand, nobody
    # waits on it latency-critically (background work). None: nothing asked yet.
    demand: Criterion | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return self.num_tokens - self.num_output_tokens

    @cached_property
    def max_reusable_tokens(self) -> int:
        """The most prompt tokens a cached or shared prefix can spare this call: its deepest
        prefix's (an upper bound; which one an engine holds is the engine's business)."""
        return min(max(self.prefix_num_tokens, default=0), self.num_prompt_tokens)

    def prefix_tokens(self, prefix_hash: str) -> int:
        """Estimated prompt tokens up to `prefix_hash` (0 when unknown)."""
        try:
            return self.prefix_num_tokens[self.prefix_hashes.index(prefix_hash)]
        except (ValueError, IndexError):
            return 0


@dataclass(frozen=True)
class EngineView:
    """A snapshot of one engine as the manager sees it (manager-side accounting)."""

    engine_id: str
    num_running_calls: int               # calls placed on it and not finished
    num_tokens_in_use: int               # tokens of those calls, a shared prefix counted once
    latency_capacity: int                # token load under which latency calls stay fast
    throughput_capacity: int             # token load a throughput engine may be filled to
    speed: float                         # relative speed (FastChat's queue_length / speed)
    num_latency_calls: int               # of the running calls, how many are LATENCY
    num_throughput_calls: int            # ... and how many are THROUGHPUT
    task_groups: frozenset[str]          # task groups with a call on this engine
    cached_prefixes: Set[str]            # prefix hashes with a context on (or going to) it
    is_healthy: bool = True
    # How fast it prefills and decodes (parrot/speed_profile.py): the engine's configured
    # profile, else the one it reports, else the default.
    profile: SpeedProfile = DEFAULT_PROFILE
    # Prefix hashes of its running calls: already counted (once) in num_tokens_in_use. A
    # cached prefix saves a new call's prefill; only one in this set also saves its load.
    running_prefixes: Set[str] = frozenset()
    # The smallest whole footprint (prompt, its prefixes included, plus maximum output) of its
    # running LATENCY calls; 0 when it runs none. The step time that call would have alone
    # bounds how strict its latency capacity can usefully be (placement.Slot.latency_limit).
    latency_floor_tokens: int = 0
    # KV tokens held neither by its running calls nor by prefix contexts filled ahead for
    # waiting calls (None: unknown); other idle contexts count as free (evicted least
    # recently used first). Placing past it evicts a prefix a waiting call would fork.
    kv_free_tokens: int | None = None
    # When every running LATENCY call has a call of its application waiting on its outputs
    # alone, the latest submission (`CallView.arrival_seq`) among them; None otherwise. Those next
    # calls come before any call submitted after it (first come, first served per
    # application), so such a call that waits for room here waits for a whole chain to end.
    chained_latency_seq: int | None = None
    # Prompt tokens its running calls have still to prefill (placed in earlier rounds, their
    # first fill not reported yet): a call placed here now starts decoding after them.
    queued_prefill_tokens: int = 0
    # Of num_tokens_in_use, the tokens only its running THROUGHPUT calls hold (a prefix a
    # LATENCY call also uses counts as the latency calls').
    throughput_tokens_in_use: int = 0

    @property
    def mode(self) -> Criterion | None:
        """The criterion this engine is serving now (None when idle or mixed-equal)."""
        if self.num_latency_calls > self.num_throughput_calls:
            return Criterion.LATENCY
        if self.num_throughput_calls > self.num_latency_calls:
            return Criterion.THROUGHPUT
        return None


@dataclass(frozen=True)
class Placement:
    call_id: str
    engine_id: str
    # The criterion the policy placed the call under (its deduced one, or the policy's default
    # for a call without one); the engine's accounting counts the call as that. None: the
    # call's own criterion (latency when it has none). THROUGHPUT also runs its engine
    # requests at the lower priority (engine_pool.EngineState.request_priority).
    criterion: Criterion | None = None


@dataclass(frozen=True)
class PolicyParams:
    """Base for a policy's parameters; subclasses add validated fields (see `Policy.Params`)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> PolicyParams:
        from parrot.policies.params import parse_params

        return parse_params(cls, data or {})


class Policy(ABC):
    """A scheduling policy. Subclasses set `name`, optionally `Params`, and implement schedule."""

    name: ClassVar[str]
    Params: ClassVar[type[PolicyParams]] = PolicyParams

    def __init__(self, params: PolicyParams | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @property
    def tpot_target_ms(self) -> float | None:
        """The per-token latency target (ms per output token) the policy keeps engines
        carrying latency work to, or None: what `/metrics` reports TPOT against."""
        return None

    @abstractmethod
    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        """Return placements for some of `calls` (each at most once) on `engines`.

        `calls` come in the manager's priority order: the order in which they were submitted
        (first come, first served per application). A call left out stays queued. Placements
        must name call ids from `calls` and healthy engine ids from `engines`: the manager
        rejects a round with any other (see manager/placement_check.py).
        """

