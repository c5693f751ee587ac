"""The document applications: chain summary (one at a time or concurrent clients), map-reduce
summary, and background chat.

Each takes an `Env` (a simulated or live cluster) and a `WorkloadSpec` and returns one
`AppRecord` per application. The application code is the same in parrot and baseline mode
(the Session decides how calls reach the service).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import parrot
from parrot.engines.sim_eos import eos_marker
from parrot.sim.workloads.arrivals import Arrivals, poisson_offsets, uniform_offsets
from parrot.sim.workloads.base import (AppRecord, Env, app_session, get_latency, output_length,
                                       sampling)
from parrot.sim.workloads.documents import CHARS_PER_TOKEN, chunk_document, stdlib_document
from parrot.sim.workloads.spec import WorkloadSpec

FIRST_SUMMARY = """\
Summarize the following text in one or two sentences.
Text: {{input:chunk}}
Summary: {{output:summary}}"""

# The chunk comes first: it is known when the chain is submitted, so the service can prefill
# it while the previous step still runs (the manager's prefill-ahead); only the short
# previous summary is left for when it exists.
REFINE_SUMMARY = """\
Next part of a document: {{input:chunk}}
Summary of the document so far: {{input:previous}}
Continue the summary with the main point of the next part, in one or two sentences.
Updated summary: {{output:summary}}"""

MAP_SUMMARY = """\
Summarize the following text in one sentence.
Text: {{input:chunk}}
Summary: {{output:summary}}"""

CHAT = """\
You are a helpful assistant. Answer the user's message.
User: {{input:message}}
Assistant: {{output:reply}}"""


def documents(spec: WorkloadSpec, count: int | None = None) -> list[list[str]]:
    """`count` (default `num_apps`) different documents of `doc_tokens` tokens each
    (consecutive windows of the stdlib documentation, wrapping around), already split into
    chunks."""
    # A literal "{{name:" would read as a placeholder once the baseline client renders it.
    text = stdlib_document()
    while "{{" in text:
        text = text.replace("{{", "{ {")
    width = spec.doc_tokens * CHARS_PER_TOKEN
    if width > len(text):
        raise ValueError(f"doc_tokens: {spec.doc_tokens} is more than the whole document "
                         f"(~{len(text) // CHARS_PER_TOKEN} tokens)")
    docs = []
    span = len(text) - width + 1
    for i in range(spec.num_apps if count is None else count):
        # Past the end the windows wrap around, each lap shifted so no document repeats
        # another (a repeated prompt would be a prefix-cache hit no real workload has).
        start = (i * width + (i * width // span) * 7919) % span
        docs.append(chunk_document(text[start:start + width], spec.chunk_tokens))
    return docs


async def chain_summary(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    """Applications one after another (the paper's single-app setting); with `chat_rate` > 0,
    background chat arrives meanwhile."""
    return await _apps_in_sequence(env, spec, "chain", _one_chain)


async def _apps_in_sequence(env: Env, spec: WorkloadSpec, prefix: str,
                            one_app) -> list[AppRecord]:
    """Run `one_app(env, app_id, chunks, spec)` per document, one after another, with
    Poisson background chat alongside when `spec.chat_rate` > 0."""
    docs = await asyncio.to_thread(documents, spec)  # tokenising is blocking work

    async def apps() -> list[AppRecord]:
        return [await one_app(env, f"{prefix}-{i}", chunks, spec)
                for i, chunks in enumerate(docs)]

    return await _with_background_chat(env, spec, apps)


async def _with_background_chat(env: Env, spec: WorkloadSpec,
                                main: Callable[[], Awaitable[list[AppRecord]]]
                                ) -> list[AppRecord]:
    """`main()`'s records, then those of the Poisson background chat that runs alongside it
    when `spec.chat_rate` > 0 (started first, cancelled if main fails)."""
    chat = BackgroundChat(env, spec) if spec.chat_rate > 0 else None
    if chat is not None:
        chat.start()
    try:
        records = await main()
    except BaseException:
        if chat is not None:
            await chat.cancel()
        raise
    if chat is not None:
        records.extend(await chat.stop())
    return records


async def concurrent_chains(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    """`spec.num_clients` chain-summary clients start at once, each on its own document (the
    paper's 10–25 concurrent clients)."""
    docs = await asyncio.to_thread(documents, spec, spec.num_clients)
    return list(await asyncio.gather(*(
        _one_chain(env, f"chain-{i}", chunks, spec)
        for i, chunks in enumerate(docs))))


async def _one_chain(env: Env, app_id: str, chunks: list[str],
                     spec: WorkloadSpec) -> AppRecord:
    # each step's length rides on its own chunk (sampled lengths; nothing with exact ones)
    lengths = [output_length(spec, spec.output_tokens, f"{app_id}|{i}")
               for i in range(len(chunks))]
    first = parrot.semantic_function(prompt=FIRST_SUMMARY, name="first_summary",
                                     **lengths[0].sampling)
    refine = parrot.semantic_function(prompt=REFINE_SUMMARY, name="refine_summary",
                                      **lengths[0].sampling)
    async with app_session(env, app_id, "chain_summary", is_main=True,
                           output_tokens=sum(n.num_tokens for n in lengths)) as record:
        summary = first(chunk=chunks[0] + lengths[0].marker)
        for chunk, length in zip(chunks[1:], lengths[1:]):
            summary = refine(previous=summary, chunk=chunk + length.marker)
        await get_latency(summary)
        record.finished = env.now()
    return record


async def map_reduce(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    return await _apps_in_sequence(env, spec, "mapreduce", _one_map_reduce)


# The paper's artifact's mixed run (its published benchmark script): 9 map-reduce jobs in
# three bursts of three, 0.5 s apart, the bursts 11 s apart, the first 15 s after the chats
# start; beside them 40 chats, one a second. `--job-offsets` replays it (seconds).
ARTIFACT_JOB_OFFSETS = (15.0, 15.5, 16.0, 26.0, 26.5, 27.0, 37.0, 37.5, 38.0)
ARTIFACT_CHAT_S = 40.0


async def mixed(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    """The paper's mixed workload: map-reduce jobs arriving at `spec.job_offsets` (a trace),
    or `num_apps` of them as a Poisson process at `request_rate` jobs per second, while chat
    arrives at `chat_rate` per second; both streams at times fixed before the run."""
    offsets = list(spec.job_offsets) or poisson_offsets(
        random.Random(f"jobs|{spec.seed}"), spec.request_rate, count=spec.num_apps)
    docs = await asyncio.to_thread(documents, spec, len(offsets))

    async def job(i: int) -> AppRecord:
        return await _one_map_reduce(env, f"mapreduce-{i}", docs[i], spec)

    return await _with_background_chat(env, spec, Arrivals(offsets, job, "mapreduce").run)


async def _one_map_reduce(env: Env, app_id: str, chunks: list[str],
                          spec: WorkloadSpec) -> AppRecord:
    output_tokens = spec.output_tokens
    # A map's length rides on its chunk. The reduce's inputs are all generated, so with
    # sampled lengths its instruction ends in an input of its own that carries the marker
    # (with exact lengths the prompt is the paper's, unchanged).
    lengths = [output_length(spec, output_tokens, f"{app_id}|{i}")
               for i in range(len(chunks))]
    reduce_length = output_length(spec, output_tokens, f"{app_id}|reduce")
    mapper = parrot.semantic_function(prompt=MAP_SUMMARY, name="map_summary",
                                      **lengths[0].sampling)
    parts_text = "\n".join(f"- {{{{input:part{i}}}}}" for i in range(len(chunks)))
    own = "{{input:stop}}" if reduce_length.marker else ""
    reducer = parrot.semantic_function(
        prompt=("Combine these partial summaries of one document into a short overall "
                f"summary.{own}\n{parts_text}\nOverall summary: {{{{output:summary}}}}"),
        name="reduce_summary", **reduce_length.sampling)
    stop = {"stop": reduce_length.marker} if own else {}
    async with app_session(env, app_id, "map_reduce", is_main=True,
                           output_tokens=sum(n.num_tokens for n in lengths)
                           + reduce_length.num_tokens) as record:
        parts = [mapper(chunk=chunk + length.marker) for chunk, length in zip(chunks, lengths)]
        final = reducer(**stop, **{f"part{i}": part for i, part in enumerate(parts)})
        await get_latency(final)
        record.finished = env.now()
    return record


class BackgroundChat:
    """Single latency-sensitive chat calls at times fixed before the run (`spec.chat_rate`
    per second over [0, `spec.max_chat_s`), Poisson or uniform by `spec.chat_arrivals`), with
    seeded lengths; background traffic unless `is_main`."""

    def __init__(self, env: Env, spec: WorkloadSpec, *, is_main: bool = False) -> None:
        self._env = env
        self._spec = spec
        self._is_main = is_main     # the chats are the applications under test
        rng = random.Random(f"chat|{spec.seed}")
        text = stdlib_document()
        if spec.chat_arrivals == "uniform":
            offsets = uniform_offsets(spec.chat_rate, horizon_s=spec.max_chat_s)
        else:
            offsets = poisson_offsets(rng, spec.chat_rate, horizon_s=spec.max_chat_s)
        self._chats: list[tuple[str, int]] = []
        for _ in offsets:
            prompt_tokens = rng.randint(*spec.chat_prompt_tokens)
            output_tokens = rng.randint(*spec.chat_output_tokens)
            start = rng.randrange(len(text) - prompt_tokens * CHARS_PER_TOKEN)
            self._chats.append((text[start:start + prompt_tokens * CHARS_PER_TOKEN],
                                output_tokens))
        self._arrivals = Arrivals(offsets, self._chat, "chat")

    def start(self) -> None:
        self._arrivals.start()

    async def stop(self) -> list[AppRecord]:
        """Wait for every scheduled chat to arrive and finish (their latencies are reported)."""
        return await self._arrivals.wait()

    async def cancel(self) -> None:
        await self._arrivals.cancel()

    async def _chat(self, index: int) -> AppRecord:
        message, output_tokens = self._chats[index]
        spec = self._spec
        if spec.output_lengths == "exact":
            chat = parrot.semantic_function(prompt=CHAT, name="chat", **sampling(output_tokens))
        else:
            # The drawn length is the real one; every chat declares the same loose cap.
            low, high = spec.chat_output_tokens
            cap = max(output_tokens, round(spec.max_tokens_factor * (low + high) / 2))
            chat = parrot.semantic_function(prompt=CHAT, name="chat", max_tokens=cap,
                                            ignore_eos=False)
            message += " " + eos_marker(output_tokens)
        async with app_session(self._env, f"chat-{index}", "chat", is_main=self._is_main,
                               output_tokens=output_tokens) as record:
            await get_latency(chat(message=message))
            record.finished = self._env.now()
        return record
