"""The one list of benchmark workloads: `parrot-bench --workload NAME` and every sweep or
policy matrix iterate over `WORKLOADS`.

A `Workload` is callable like the function it wraps (`await WORKLOADS[name](env, spec)`) and
carries what a comparison needs to run it sensibly: the variants it is compared under by
default, the reference variant of its headline ratio, spec fields that differ from
`WorkloadSpec`'s defaults, and how many engines it is meant for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable, Mapping

from parrot.sim.workloads.apps import chain_summary, concurrent_chains, map_reduce, mixed
from parrot.sim.workloads.base import AppRecord
from parrot.sim.workloads.copilot import copilot
from parrot.sim.workloads.gpts import gpts
from parrot.sim.workloads.multi_agent import multi_agent
from parrot.sim.workloads.serving import agent_loop, chat_batch, tiny_apps

RunFn = Callable[[Any, Any], Awaitable[list[AppRecord]]]


@dataclass(frozen=True)
class Workload:
    name: str
    run: RunFn
    description: str
    default_compare: str                        # --compare when none is given
    spec_defaults: Mapping[str, Any] = field(default_factory=dict)
    num_engines: int = 1
    main_apps_field: str | None = "num_apps"   # the spec field counting main apps; None: one
    # the spec field counting background applications that arrive as a process (or None)
    background_apps_field: str | None = None

    def num_main_apps(self, spec: Any) -> int:
        return 1 if self.main_apps_field is None else int(getattr(spec, self.main_apps_field))

    async def __call__(self, env: Any, spec: Any) -> list[AppRecord]:
        return await self.run(env, spec)


_ALL = (
    Workload("chain_summary", chain_summary,
             "one chain summary after another (each step consumes the previous summary)",
             "app_centric,least_queue:baseline"),
    Workload("chain_summary_bg", chain_summary,
             "chain summary with Poisson background chat, arrivals fixed in time",
             "app_centric,least_queue:baseline", {"chat_rate": 1.0, "max_chat_s": 300.0}),
    Workload("concurrent_chains", concurrent_chains,
             "num_clients chain-summary clients at once (paper: 10-25)",
             "app_centric,least_queue:baseline", {"num_clients": 10},
             main_apps_field="num_clients"),
    Workload("map_reduce", map_reduce,
             "one map call per chunk in parallel, one reduce over all summaries",
             "app_centric,latency_centric,latency_centric:baseline"),
    Workload("copilot", copilot,
             "num_clients users at once behind one shared ~6000-token system prompt",
             "app_centric,least_queue,least_queue+engine.shared_prefix_decode=false,"
             "least_queue:baseline",
             {"num_clients": 32, "output_tokens": 100}, main_apps_field="num_clients"),
    Workload("gpts", gpts,
             "four apps (system prompts 7437/1116/1694/2031 tokens), Poisson requests",
             "app_centric,app_centric+policy.prefix_affinity=false,least_queue:baseline",
             {"request_rate": 2.0, "num_requests": 100, "output_tokens": 100}, num_engines=4,
             main_apps_field="num_requests"),
    Workload("multi_agent", multi_agent,
             "architect, num_clients coders and reviewers, revisions; shared code history",
             "app_centric,throughput_centric:baseline,latency_centric:baseline",
             {"num_clients": 8, "output_tokens": 200}, main_apps_field=None),
    Workload("mixed", mixed,
             "map-reduce jobs (Poisson, 0.5/s) beside chat at 1 req/s over one minute, "
             "four engines",
             "app_centric,throughput_centric,latency_centric",
             {"chat_rate": 1.0, "max_chat_s": 60.0, "num_apps": 30, "request_rate": 0.5},
             num_engines=4),
    Workload("chat_batch", chat_batch,
             "chats (each call read at once: latency) at 1 req/s for a minute beside batch "
             "jobs (16 summaries each, fetched as throughput) at 0.1/s; four engines",
             "app_centric,least_queue:baseline+engine.prefix_caching=true",
             {"chat_rate": 1.0, "max_chat_s": 60.0, "num_apps": 6, "request_rate": 0.1,
              "doc_tokens": 16384, "output_tokens": 200},
             num_engines=4, main_apps_field=None, background_apps_field="num_apps"),
    Workload("tiny_apps", tiny_apps,
             "one- and two-call applications (half each), Poisson at 6/s; four engines",
             "app_centric,least_queue:baseline+engine.prefix_caching=true",
             {"request_rate": 6.0, "num_requests": 120, "output_tokens": 100},
             num_engines=4, main_apps_field="num_requests"),
    Workload("agent_loop", agent_loop,
             "num_clients agents at once, each `rounds` turns on a history it grows and "
             "re-sends itself, a 1-s client-side tool between turns",
             "app_centric,least_queue:baseline+engine.prefix_caching=true",
             {"num_clients": 8, "rounds": 5, "system_prompt_tokens": 1000,
              "output_tokens": 80}, main_apps_field="num_clients"),
)

WORKLOADS: Mapping[str, Workload] = {w.name: w for w in _ALL}
