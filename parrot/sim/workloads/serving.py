"""Everyday serving shapes: chat beside batch jobs, and many tiny applications.

* `chat_batch`: chats are the applications under test. Each is one call whose output the user
  reads at once (LATENCY), Poisson at `spec.chat_rate` over `spec.max_chat_s`, with the chat
  lengths of `BackgroundChat`. Beside them, `spec.num_apps` batch jobs arrive as a Poisson
  process at `spec.request_rate`: a job summarises each chunk of its own document
  (`doc_tokens` / `chunk_tokens` independent calls, `output_tokens` long on average) and
  fetches the results as THROUGHPUT (`parrot.gather(..., criteria=THROUGHPUT)`). Their job
  times are recorded as background.
* `tiny_apps`: `spec.num_requests` applications of one or two calls (half each, seeded),
  Poisson at `spec.request_rate`: a one-call app answers a question; a two-call app first
  drafts an outline, then answers from it. Each awaits its answer at once (LATENCY).

* `agent_loop`: `spec.num_clients` agents at once, each `spec.rounds` turns: a call on the
  history so far and a new observation, then a tool that runs on the client for
  `TOOL_S` seconds; the client appends the observation and the answer to the history it
  sends next (so the service sees a new literal prompt each turn, as from any request-level
  agent framework).

All draw every output length under a loose cap unless `spec.output_lengths` is exact.
"""

from __future__ import annotations

import asyncio
import math
import random

import parrot
from parrot.sim.workloads.apps import BackgroundChat, documents
from parrot.sim.workloads.arrivals import Arrivals, poisson_offsets
from parrot.sim.workloads.base import AppRecord, Env, app_session, output_length
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.sim.workloads.text import text_window

BATCH_SUMMARY = """\
Write a detailed summary of the following section for the report.
Section: {{input:chunk}}
Detailed summary: {{output:summary}}"""

ANSWER = """\
You are a helpful assistant. Answer the question.
Question: {{input:question}}
Answer: {{output:answer}}"""

OUTLINE = """\
You are a helpful assistant. Before answering, list the points an answer must cover.
Question: {{input:question}}
Points: {{output:outline}}"""

ANSWER_FROM_OUTLINE = """\
You are a helpful assistant. Answer the question, covering these points.
Points: {{input:outline}}
Question: {{input:question}}
Answer: {{output:answer}}"""

AGENT_STEP = """\
{{input:history}}
Observation: {{input:observation}}
Thought: {{output:thought}}"""

TOOL_S = 1.0                      # the client-side tool's time per turn
OBSERVATION_TOKENS = 150

# Question lengths of the tiny apps: lognormal, median 150 tokens, clipped to 16-1024.
QUESTION_MEDIAN_TOKENS = 150
QUESTION_SIGMA = 0.7
QUESTION_TOKENS_RANGE = (16, 1024)


async def chat_batch(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    offsets = poisson_offsets(random.Random(f"batch-jobs|{spec.seed}"), spec.request_rate,
                              count=spec.num_apps)
    docs = await asyncio.to_thread(documents, spec, len(offsets))

    async def job(i: int) -> AppRecord:
        return await _batch_job(env, f"batch-{i}", docs[i], spec)

    chats = BackgroundChat(env, spec, is_main=True)
    jobs = Arrivals(offsets, job, "batch")
    chats.start()
    jobs.start()
    return [*await chats.stop(), *await jobs.wait()]


async def _batch_job(env: Env, app_id: str, chunks: list[str],
                     spec: WorkloadSpec) -> AppRecord:
    lengths = [output_length(spec, spec.output_tokens, f"{app_id}|{i}")
               for i in range(len(chunks))]
    summary = parrot.semantic_function(prompt=BATCH_SUMMARY, name="batch_summary",
                                       **lengths[0].sampling)
    async with app_session(env, app_id, "batch", is_main=False,
                           output_tokens=sum(n.num_tokens for n in lengths)) as record:
        outs = [summary(chunk=chunk + length.marker) for chunk, length in zip(chunks, lengths)]
        await parrot.gather(outs, criteria=parrot.THROUGHPUT)
        record.finished = env.now()
    return record


def question_lengths(rng: random.Random, count: int) -> list[int]:
    low, high = QUESTION_TOKENS_RANGE
    mu = math.log(QUESTION_MEDIAN_TOKENS)
    return [min(high, max(low, round(rng.lognormvariate(mu, QUESTION_SIGMA))))
            for _ in range(count)]


async def tiny_apps(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    rng = random.Random(f"tiny|{spec.seed}")
    offsets = poisson_offsets(rng, spec.request_rate, count=spec.num_requests)
    two_calls = [rng.random() < 0.5 for _ in offsets]
    questions = [text_window(n, f"tiny-question|{spec.seed}|{i}")
                 for i, n in enumerate(question_lengths(rng, len(offsets)))]

    async def app(i: int) -> AppRecord:
        answer_length = output_length(spec, spec.output_tokens, f"tiny-{i}|answer")
        outline_length = output_length(spec, spec.output_tokens, f"tiny-{i}|outline")
        calls = 2 if two_calls[i] else 1
        tokens = answer_length.num_tokens + (outline_length.num_tokens if calls == 2 else 0)
        async with app_session(env, f"tiny-{i}", f"tiny_{calls}", is_main=True,
                               output_tokens=tokens) as record:
            if calls == 1:
                answer = parrot.semantic_function(prompt=ANSWER, name="answer",
                                                  **answer_length.sampling)
                await answer(question=questions[i] + answer_length.marker).aget()
            else:
                outline = parrot.semantic_function(prompt=OUTLINE, name="outline",
                                                   **outline_length.sampling)
                answer = parrot.semantic_function(prompt=ANSWER_FROM_OUTLINE,
                                                  name="answer_from_outline",
                                                  **answer_length.sampling)
                # each call's length rides on its own copy of the question
                points = outline(question=questions[i] + outline_length.marker)
                await answer(outline=points,
                             question=questions[i] + answer_length.marker).aget()
            record.finished = env.now()
        return record

    return await Arrivals(offsets, app, "tiny").run()


async def agent_loop(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    async def agent(i: int) -> AppRecord:
        lengths = [output_length(spec, spec.output_tokens, f"agent-{i}|{t}")
                   for t in range(spec.rounds)]
        step = parrot.semantic_function(prompt=AGENT_STEP, name="agent_step",
                                        **lengths[0].sampling)
        history = ("You are an agent. Use the observations to reach the goal.\n"
                   + text_window(spec.system_prompt_tokens, f"agent-task|{spec.seed}|{i}"))
        async with app_session(env, f"agent-{i}", "agent_loop", is_main=True,
                               output_tokens=sum(n.num_tokens for n in lengths)) as record:
            for t, length in enumerate(lengths):
                observation = (text_window(OBSERVATION_TOKENS, f"obs|{spec.seed}|{i}|{t}")
                               + length.marker)
                thought = await step(history=history, observation=observation).aget()
                history += f"\nObservation: {observation}\nThought: {thought}"
                if t + 1 < len(lengths):
                    await asyncio.sleep(TOOL_S)   # the tool runs on the client
            record.finished = env.now()
        return record

    return list(await asyncio.gather(*(agent(i) for i in range(spec.num_clients))))
