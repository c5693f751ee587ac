"""Copilot: many users at once behind one long shared system prompt (Bing-Copilot-like).

`spec.num_clients` users (the paper: 8–64) each send one query at the same moment; every
prompt is the same ~`spec.system_prompt_tokens`-token system prompt followed by the user's
query. The system prompt is constant template text, so in parrot mode the service sees the
shared prefix (one context, forked per user; the shared-prefix kernel reads it once per decode
step); a baseline client renders the whole prompt, so nothing is shared.

Query lengths follow a log-normal distribution (median 40 tokens, sigma 0.8, clipped to
8–512): short chat queries with a long tail, as in public chat logs. The paper's Copilot
prompts are not public; the system prompt here is a window of the stdlib documentation text.
Answers are `spec.output_tokens` long on average, drawn per user under a loose cap and hidden
from the service (or exactly that long: `spec.output_lengths`).
"""

from __future__ import annotations

import asyncio
import math
import random

import parrot
from parrot.sim.workloads.base import (AppRecord, Env, OutputLength, app_session, get_latency,
                                       output_length)
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.sim.workloads.text import text_window

QUERY_MEDIAN_TOKENS = 40
QUERY_SIGMA = 0.8
QUERY_TOKENS_RANGE = (8, 512)


def query_lengths(rng: random.Random, count: int) -> list[int]:
    low, high = QUERY_TOKENS_RANGE
    return [min(high, max(low, round(rng.lognormvariate(math.log(QUERY_MEDIAN_TOKENS),
                                                         QUERY_SIGMA))))
            for _ in range(count)]


def system_prompt(num_tokens: int, salt: str) -> str:
    return ("You are a helpful search assistant. Follow these instructions and use the "
            "reference material below when you answer.\n" + text_window(num_tokens, salt))


def assistant_template(system: str) -> str:
    """A template whose constant head is the system prompt (shared by every user)."""
    return system + "\nUser: {{input:query}}\nAssistant: {{output:answer}}"


async def copilot(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    rng = random.Random(f"copilot|{spec.seed}")
    template = assistant_template(system_prompt(spec.system_prompt_tokens, f"sys|{spec.seed}"))
    queries = [text_window(n, f"query|{spec.seed}|{i}")
               for i, n in enumerate(query_lengths(rng, spec.num_clients))]
    return list(await asyncio.gather(*(
        _one_user(env, f"user-{i}", template, query,
                  output_length(spec, spec.output_tokens, f"copilot|user-{i}"))
        for i, query in enumerate(queries))))


async def _one_user(env: Env, app_id: str, template: str, query: str,
                    length: OutputLength) -> AppRecord:
    # the answer's length rides on the user's own query (nothing with exact lengths)
    answer = parrot.semantic_function(prompt=template, name="copilot", **length.sampling)
    async with app_session(env, app_id, "copilot", is_main=True,
                           output_tokens=length.num_tokens) as record:
        await get_latency(answer(query=query + length.marker))
        record.finished = env.now()
    return record

