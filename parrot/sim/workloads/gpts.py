"""GPTs: four applications, each a long system prompt plus a user's query, Poisson traffic.

The paper's four GPTs have system prompts of 7,437 / 1,116 / 1,694 / 2,031 tokens; requests
are spread uniformly over the four and arrive as a Poisson process (`spec.request_rate` per
second, `spec.num_requests` of them, at times drawn before the run). `spec.prompt_scale`
scales the system prompts (and nothing else) so the longest fits a model's context window;
the results page says when it is not 1. Queries follow copilot's length distribution; answers
are `spec.output_tokens` long on average (or exactly: `spec.output_lengths`).

Serving it well needs prefix sharing (each app's system prompt filled once per engine, read
once per decode batch) and prefix affinity (an app's requests on the engine that holds its
prompt); the comparison turns affinity off through the policy's `prefix_affinity` parameter.
"""

from __future__ import annotations

import random

import parrot
from parrot.sim.workloads.arrivals import Arrivals, poisson_offsets
from parrot.sim.workloads.base import AppRecord, Env, app_session, get_latency, output_length
from parrot.sim.workloads.copilot import assistant_template, query_lengths, system_prompt
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.sim.workloads.text import text_window

SYSTEM_PROMPT_TOKENS = (7437, 1116, 1694, 2031)


def system_prompt_lengths(scale: float) -> tuple[int, ...]:
    return tuple(max(1, round(n * scale)) for n in SYSTEM_PROMPT_TOKENS)


async def gpts(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    rng = random.Random(f"gpts|{spec.seed}")
    templates = [assistant_template(system_prompt(n, f"gpt{k}|{spec.seed}"))
                 for k, n in enumerate(system_prompt_lengths(spec.prompt_scale))]
    offsets = poisson_offsets(rng, spec.request_rate, count=spec.num_requests)
    apps = [rng.randrange(len(templates)) for _ in offsets]
    queries = [text_window(n, f"gpts-query|{spec.seed}|{i}")
               for i, n in enumerate(query_lengths(rng, len(offsets)))]

    async def request(i: int) -> AppRecord:
        length = output_length(spec, spec.output_tokens, f"gpts|{i}")
        answer = parrot.semantic_function(prompt=templates[apps[i]], name=f"gpt{apps[i]}",
                                          **length.sampling)
        async with app_session(env, f"gpt{apps[i]}-req-{i}", "gpts", is_main=True,
                               output_tokens=length.num_tokens) as record:
            await get_latency(answer(query=queries[i] + length.marker))
            record.finished = env.now()
        return record

    return await Arrivals(offsets, request, "gpts").run()
