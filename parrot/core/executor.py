"""Lowering one call onto one engine: prefix contexts, then Fill / Generate in a private context.

The prompt before the first output is split at variable boundaries into prefix pieces whose
contexts are shared through `EngineContexts` (forked, never recomputed). From the first output
on, the call works in its own context forked from the deepest prefix context: pending text is
filled, each output is generated (its tokens stay in the context, so later text follows what the
model said), and its value is published the moment it exists — consumers of an early output of a
multi-output call start before the call finishes.
"""

from __future__ import annotations

from typing import Callable

from parrot.core.engine_pool import EngineState
from parrot.core.nodes import Call, OutputBinding
from parrot.core.prefix import PrefixPiece
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.errors import OutOfKVCacheError
from parrot.template import Placeholder, Text
from parrot.transforms import apply_transforms

OutputSink = Callable[[Call, OutputBinding, str], None]
IsShared = Callable[[str], bool]

# A prefix shorter than about one KV block (16 tokens) saves nothing when forked.
MIN_SHARED_PREFIX_CHARS = 64


def shareable_hashes(pieces: tuple[PrefixPiece, ...]) -> tuple[str, ...]:
    """The hashes of the boundaries that may get a context (prefix long enough to fork)."""
    hashes, chars = [], 0
    for piece in pieces:
        chars += len(piece.text)
        if chars >= MIN_SHARED_PREFIX_CHARS:
            hashes.append(piece.prefix_hash)
    return tuple(hashes)


def plan_prefix_contexts(pieces: tuple[PrefixPiece, ...],
                         is_shared: IsShared) -> tuple[tuple[PrefixPiece, ...], str]:
    """Which boundaries get a cached context of their own, and the text left for the call.

    A boundary gets a context when the prefix up to it is long enough to be worth a fork and it
    is either the template's leading constant text followed by more prompt (a system prompt:
    shared by every call of the function) or a prefix known to recur (cached on the engine or seen in another call). Pieces
    in between are merged forward, so a call makes as few engine round trips as it can.
    """
    contexts: list[PrefixPiece] = []
    pending: list[str] = []
    chars = 0
    for i, piece in enumerate(pieces):
        pending.append(piece.text)
        chars += len(piece.text)
        # The template's leading text is worth a context when calls of the same function can
        # continue it differently, i.e. when more prompt follows it before the output.
        leading = i == 0 and piece.is_template_text and i < len(pieces) - 1
        if chars >= MIN_SHARED_PREFIX_CHARS and (leading or is_shared(piece.prefix_hash)):
            contexts.append(PrefixPiece("".join(pending), piece.prefix_hash))
            pending = []
    return tuple(contexts), "".join(pending)


async def run_call(call: Call, engine: EngineState, publish: OutputSink,
                   is_shared: IsShared) -> None:
    """Run `call` on `engine`, publishing each output value through `publish`."""
    def shared(prefix_hash: str) -> bool:
        return prefix_hash in engine.contexts.prefix_hashes or is_shared(prefix_hash)

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
                    is_shared: IsShared) -> None:
    pieces, head = plan_prefix_contexts(call.prefix_pieces, is_shared)
    chain = await engine.contexts.acquire(pieces)
    context_id = f"c-{call.call_id}-{call.attempts}"
    parent = chain.leaf_id
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
                if pending:
                    filled = await engine.engine.fill(FillRequest(
                        context_id=context_id, parent_context_id=None if created else parent,
                        text="".join(pending)))
                    if not created:  # the whole prompt before the first output, in real tokens
                        engine.note_prompt_tokens(call.call_id, filled.context_len)
                    created, pending = True, []
                binding = call.outputs[seg.name]
                result = await engine.engine.generate_all(GenerateRequest(
                    context_id=context_id, parent_context_id=None if created else parent,
                    sampling=binding.sampling))
                created = True
                publish(call, binding, apply_transforms(binding.transforms, result.text))
        # Text after the last output conditions nothing: it is never sent to the engine.
    finally:
        engine.contexts.release(chain)
        if created:
            try:
                await engine.engine.free_context(context_id)
            except Exception:  # noqa: BLE001 - a lost engine has freed it already
                pass
