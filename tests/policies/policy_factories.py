"""Tiny factories for policy tests: a CallView or an EngineView from a few keywords."""

from __future__ import annotations

from collections.abc import Iterable

from parrot.policies import CallView, EngineView, Placement
from parrot.speed_profile import DEFAULT_PROFILE, SpeedProfile
from parrot.types import Criterion

LAT = Criterion.LATENCY
THR = Criterion.THROUGHPUT


def make_call(call_id: str, *, criterion: Criterion | None = LAT, tokens: int = 1000,
              group: str | None = None, group_size: int = 1,
              prefixes: Iterable[str] = (), session: str = "s", seq: int = 0,
              output: int = 0, prefix_tokens: Iterable[int] = (),
              shared: str | None = None, chained: bool = False,
              demand: Criterion | None = None) -> CallView:
    """`output`: of `tokens`, the decode steps; `prefix_tokens`: prompt tokens up to each of
    `prefixes`; `shared`: the prefix another queued call shares (SharedReqsInQueue);
    `chained`: a call of its session waits on its output; `demand`: what downstream needs
    (THROUGHPUT with criterion THROUGHPUT: background work)."""
    return CallView(call_id=call_id, session_id=session, criterion=criterion, task_group=group,
                    task_group_size=group_size if group else 1,
                    prefix_hashes=tuple(prefixes), num_tokens=tokens, topo_rank=0,
                    arrival_seq=seq, num_output_tokens=output,
                    prefix_num_tokens=tuple(prefix_tokens), shared_prefix=shared,
                    has_waiting_consumer=chained, demand=demand)


def make_engine(engine_id: str, *, tokens: int = 0, lat: int = 0, thr: int = 0,
                other: int = 0, lat_cap: int = 4096, thr_cap: int = 32768,
                groups: Iterable[str] = (), prefixes: Iterable[str] = (),
                healthy: bool = True, speed: float = 1.0,
                running: Iterable[str] = (), latency_floor: int = 0,
                profile: SpeedProfile = DEFAULT_PROFILE,
                kv_free: int | None = None, chained_seq: int | None = None,
                thr_tokens: int | None = None, queued_prefill: int = 0) -> EngineView:
    """`lat`/`thr`/`other`: running calls by criterion (other = no criterion); `prefixes`:
    cached contexts; `running`: prefixes of running calls (counted in `tokens`, and cached);
    `latency_floor`: the smallest whole footprint of its running latency calls; `kv_free`: KV
    tokens neither running calls nor cached contexts hold (None: unknown); `chained_seq`: the
    latest submission among its running latency calls when each has a consumer waiting;
    `thr_tokens`: of `tokens`, those its throughput calls hold (default: all of them when it
    runs only throughput calls, else none); `queued_prefill`: prompt tokens still to prefill."""
    if thr_tokens is None:
        thr_tokens = tokens if thr and not (lat or other) else 0
    return EngineView(engine_id=engine_id, num_running_calls=lat + thr + other,
                      num_tokens_in_use=tokens, latency_capacity=lat_cap,
                      throughput_capacity=thr_cap, speed=speed, num_latency_calls=lat,
                      num_throughput_calls=thr, task_groups=frozenset(groups),
                      cached_prefixes=frozenset(prefixes) | frozenset(running),
                      is_healthy=healthy, running_prefixes=frozenset(running),
                      latency_floor_tokens=latency_floor, profile=profile,
                      kv_free_tokens=kv_free, chained_latency_seq=chained_seq,
                      throughput_tokens_in_use=thr_tokens,
                      queued_prefill_tokens=queued_prefill)


def by_call(placements: list[Placement]) -> dict[str, str]:
    """call_id -> engine_id, checking no call was placed twice."""
    result = {p.call_id: p.engine_id for p in placements}
    assert len(result) == len(placements), placements
    return result
