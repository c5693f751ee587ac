"""Lowering one call onto one engine: prefix contexts, then Fill / Generate in a private context.

The prompt before the first output is split at variable boundaries into prefix pieces whose
contexts are shared through `EngineContexts` (forked, never recomputed). From the first output
on, the call works in its own context forked from the deepest prefix context: pending text is
filled (in the output's Generate where the engine takes a prompt there), each output is
generated (its tokens stay in the context, so later text follows what the model said), and its
value is published the moment it exists — consumers of an early output of a
multi-output call start before the call finishes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import cast

from parrot.manager.contexts import ContextChain
from parrot.manager.engine_pool import EngineState
from parrot.manager.nodes import Call, OutputBinding
from parrot.manager.prefix import PrefixPiece
from parrot.engines.protocol import Engine, FillRequest, GenerateChunk, GenerateRequest
from parrot.errors import OutOfKVCacheError, ParrotError, UnknownContextError
from parrot.template import Placeholder, Text

log = logging.getLogger(__name__)

# (an output, its final text): what a run reports each output to (the manager publishes it)
OutputSink = Callable[[OutputBinding, str], Awaitable[None]]
# How many calls (now or recently) have a prompt with this prefix; CACHED for a prefix whose
# context the engine already holds. Two or more: the prefix recurs.
Sharers = Callable[[str], int]
CACHED = sys.maxsize

# A context is worth its cost (an engine round trip, the partial block a fork copies, a slot in
# the cache) only when it saves real prefill: every context adds at least this many tokens
# (estimated) to the one it forks, so a prompt's chain of contexts holds at most
# 1 + block_size / MIN_CONTEXT_TOKENS times its own KV, however many boundaries it has.
MIN_CONTEXT_TOKENS = 64


def shareable_hashes(pieces: tuple[PrefixPiece, ...]) -> tuple[str, ...]:
    """The hashes of the boundaries that may get a context (far enough in to be worth a fork);
    the policy's prefix affinity looks only at these."""
    return tuple(p.prefix_hash for p in pieces if p.num_tokens >= MIN_CONTEXT_TOKENS)


def plan_prefix_contexts(pieces: tuple[PrefixPiece, ...],
                         sharers: Sharers) -> tuple[tuple[PrefixPiece, ...], str]:
    """Which boundaries get a cached context of their own, and the text left for the call.

    A boundary gets a context when the prompt since the previous context is at least
    MIN_CONTEXT_TOKENS (the pieces' token estimates: real counts for generated inputs, the
    same numbers `shareable_hashes` advertises) and the boundary is one of:
    * the end of the template's leading constant text followed by more prompt (a system
      prompt: shared by every call of the function);
    * a branch point of the prompts seen: a prefix that recurs (cached on the engine or seen
      in another call) and is shared by more calls than any longer prefix of this prompt;
    * the end of the input just before such a branch point's own template text, when the same
      calls share it: calls of another function that read the same inputs (a reviser after a
      reviewer of the same code) part there, and may come later.
    A recurring boundary that every call sharing it continues alike (the next boundary is
    shared by as many) would be a context nobody forks on its own: each costs an engine round
    trip and a prefill step, one after the other (measured live: 16 files of a shared code
    history filled as 16 nested contexts took 16 steps of 7.5-11.6 ms with a round trip
    between them). Pieces in between are merged forward, so a call makes as few engine round
    trips as it can. Two calls with the same prefix pick the same boundaries on it unless the
    sharing changed in between; the second then still forks the deepest context the first
    filled.
    """
    counts = [sharers(p.prefix_hash) for p in pieces]
    branch = [False] * len(pieces)
    most = 0                   # the most calls sharing any boundary after i
    for i in range(len(pieces) - 1, -1, -1):
        branch[i] = counts[i] >= 2 and counts[i] > most
        most = max(most, counts[i])
    for i in range(1, len(pieces)):
        if (branch[i] and pieces[i].is_template_text and not pieces[i - 1].is_template_text
                and counts[i - 1] == counts[i]):
            branch[i - 1] = True
    contexts: list[PrefixPiece] = []
    pending: list[str] = []
    tokens_at_context = 0      # the estimate at the end of the last context
    for i, piece in enumerate(pieces):
        pending.append(piece.text)
        # The template's leading text is worth a context when calls of the same function can
        # continue it differently, i.e. when more prompt follows it before the output.
        leading = i == 0 and piece.is_template_text and i < len(pieces) - 1
        long_enough = piece.num_tokens - tokens_at_context >= MIN_CONTEXT_TOKENS
        if long_enough and (leading or branch[i]):
            # the leading text alone is the template's (a system prompt): no session's data
            contexts.append(PrefixPiece("".join(pending), piece.prefix_hash,
                                        is_template_text=i == 0 and piece.is_template_text))
            pending, tokens_at_context = [], piece.num_tokens
    return tuple(contexts), "".join(pending)


async def run_call(call: Call, engine: EngineState, publish: OutputSink,
                   occurrences: Sharers) -> None:
    """Run `call` on `engine`, publishing each output value through `publish`;
    `occurrences`: how many calls recently had each prefix (PrefixIndex.occurrences)."""
    def shared(prefix_hash: str) -> int:
        if prefix_hash in engine.contexts.prefix_hashes:
            return CACHED
        return occurrences(prefix_hash)

    # Cached prefixes stay on the engine until it needs the memory: make room for this call
    # (least recently used first) when the manager's accounting says it would not fit.
    overflow = engine.kv_overflow_tokens()  # this call is already counted as running
    if overflow > 0:
        await engine.contexts.evict(overflow)
    try:
        await _run_once(call, engine, publish, shared)
    except OutOfKVCacheError:
        # Cached prefixes of finished calls may be what fills the engine: drop them, retry once.
        if await engine.contexts.evict_all() == 0:
            raise
        await _run_once(call, engine, publish, shared)


async def _run_once(call: Call, engine: EngineState, publish: OutputSink,
                    sharers: Sharers) -> None:
    pieces, head = plan_prefix_contexts(call.prefix_pieces, sharers)
    priority = engine.request_priority(call.call_id)
    # (no prefix context to hold, the usual short prompt: no coroutine to run for none)
    chain = await engine.contexts.acquire(pieces, call.session_id, priority) if pieces \
        else ContextChain()
    context_id = f"c-{call.call_id}-{call.attempts}"
    parent = chain.leaf_id
    # Text before an output goes in that output's Generate where the engine takes it: one
    # request, one answer, and the step that computes the text's last token samples the first
    # generated one (a Fill leaves it for the Generate's first step: a step later).
    in_generate = engine.info.takes_prompt_in_generate
    created = False
    try:
        segments = call.template.segments
        first_output = next(i for i, s in enumerate(segments)
                            if isinstance(s, Placeholder) and s.is_output)
        pending: list[str] = [head] if head else []
        for seg in segments[first_output:]:
            if isinstance(seg, Text):
                pending.append(seg.text)
            elif not seg.is_output:
                pending.append(call.rendered_inputs[seg.name])
            else:
                prompt = "".join(pending) if pending else None
                pending = []
                fork = None if created else parent
                if prompt is not None and not in_generate:
                    filled = await engine.engine.fill(FillRequest(
                        context_id=context_id, parent_context_id=fork, text=prompt,
                        priority=priority))
                    if not created:
                        _prompt_in_kv(call, engine, filled.context_len)
                    created, prompt, fork = True, None, None
                elif prompt is None and not created:   # the whole prompt is a prefix context
                    engine.note_prefilled(call.call_id)
                    if call.num_prompt_tokens is None:
                        call.num_prompt_tokens = sum(c.num_tokens for c in chain.contexts)
                binding = call.outputs[seg.name]
                text = await _generate(call, binding, engine, GenerateRequest(
                    context_id=context_id, parent_context_id=fork, text=prompt,
                    sampling=binding.sampling, priority=priority),
                    first_prompt=prompt is not None and not created)
                created = True
                await publish(binding, text)  # the sink applies the output's transforms
        # Text after the last output conditions nothing: it is never sent to the engine.
    finally:
        engine.contexts.release(chain)
        if created:
            await _free_private_context(engine, context_id)


def _prompt_in_kv(call: Call, engine: EngineState, context_len: int | None) -> None:
    """The engine has the call's prompt before its first output in KV: `context_len` tokens in
    the call's context (a Fill's `context_len`, a Generate's `prompt_len`), which replace the
    engine's estimate of the prompt."""
    if context_len is None:   # (an engine that does not report it: the estimate stays)
        return
    engine.note_prompt_tokens(call.call_id, context_len)
    if call.num_prompt_tokens is None:
        call.num_prompt_tokens = context_len


async def _free_private_context(engine: EngineState, context_id: str) -> None:
    """Free a call's own context. An engine-side failure is logged, never raised: the call's
    outputs are published already, and raising here would hide the body's own exception. Any
    other exception is a bug and propagates."""
    try:
        await engine.engine.free_context(context_id)
    except UnknownContextError:
        log.debug("engine %s: context %s was gone already", engine.engine_id, context_id)
    except ParrotError as exc:
        # A lost engine drops its contexts when it restarts (an HTTP client also retries the
        # free when the engine answers again); say which context, in case neither happens.
        log.warning("engine %s: freeing context %s failed (%s: %s)", engine.engine_id,
                    context_id, type(exc).__name__, exc)


async def _generate(call: Call, binding: OutputBinding, engine: EngineState,
                    request: GenerateRequest, *, first_prompt: bool) -> str:
    """One Generate. Streamed when someone reads the output as it is generated (an OpenAI
    `stream` request, `astream`) or when the engine's `generate_all` is only the protocol's
    loop over `generate` (the in-process builtin engine): each chunk then goes to the output
    variable's stream as it arrives (not shown for outputs with transforms: their value is not a
    prefix of the raw text). Otherwise one whole answer: over HTTP an unwatched output is one
    non-streamed request (per-token NDJSON lines halve what the manager's loop can carry,
    docs/results/openai_api.md); the simulated engine answers whole in process too, without
    waking this loop for every token; either reports when its first token came
    (`first_token_s`) where it timed it.
    `first_prompt`: the request carries the first text of the call's context, whose length
    (the first chunk's `prompt_len`) is the call's prompt in real tokens."""
    stream = binding.stream
    stream.begin_attempt()
    if not stream.wanted and type(engine.engine).generate_all is not Engine.generate_all:
        started = asyncio.get_running_loop().time()
        result = await engine.engine.generate_all(request)
        if result.first_token_s is not None:   # the engine timed it: TTFT and TPOT in /metrics
            call.timings.setdefault("first_token", started + result.first_token_s)
        if first_prompt:
            _prompt_in_kv(call, engine, result.prompt_len)
        stream.push(result.text, len(result.token_ids), result.finish_reason,
                    visible=not binding.transforms)
        return result.text
    texts: list[str] = []
    visible = not binding.transforms
    # Every engine's generate is an async generator (the protocol declares AsyncIterator).
    generated = cast(AsyncGenerator[GenerateChunk, None], engine.engine.generate(request))
    async with aclosing(generated) as chunks:
        async for chunk in chunks:
            if not texts:   # the first chunk: its first token
                call.timings.setdefault("first_token", asyncio.get_running_loop().time())
                if first_prompt:
                    _prompt_in_kv(call, engine, chunk.prompt_len)
            texts.append(chunk.text)
            stream.push(chunk.text, len(chunk.token_ids), chunk.finish_reason, visible=visible)
            if chunk.is_finished:
                break
    return "".join(texts)
