"""Prefill ahead: fill the certain part of a waiting call's prompt while its producer runs.

When a call is dispatched, each consumer of its outputs that is still waiting already has a
prompt prefix that cannot change: the text up to its first missing input (a document chunk, a
long instruction). If that prefix is long, it is filled now on the producer's engine as an
ordinary cached prefix context. When the consumer becomes ready, its prefix hashes include that
boundary, so prefix affinity (app_centric) places it on the same engine and the executor forks
the context: the prefill happened during the producer's decode instead of after it. With a
policy that ignores affinity the context is simply never used and ages out of the LRU cache.
"""

from __future__ import annotations

import logging

from parrot.manager.engine_pool import EngineState
from parrot.manager.executor import plan_prefix_contexts
from parrot.manager.nodes import Call
from parrot.manager.prefix import PrefixPiece, prefix_pieces
from parrot.manager.sessions import Session
from parrot.errors import ParrotError
from parrot.template import Text
from parrot.types import CHARS_PER_TOKEN

log = logging.getLogger(__name__)

# Worth a context of its own only when it saves real prefill work.
MIN_PREFILL_AHEAD_TOKENS = 256


def _known_values(session: Session, call: Call) -> dict[str, str]:
    """The inputs of a waiting call whose values are already certain, by name."""
    values: dict[str, str] = {}
    for name, binding in call.inputs.items():
        var = session.variables[binding.var_id]
        # An input with transforms ends the certain prefix: transforms cost loop time, which
        # the call pays once, from its tenant's budget, when it becomes ready (call_flow.py).
        if var.value is not None and not binding.transforms:
            values[name] = var.value
    return values


def _known_prefix_chars(call: Call, values: dict[str, str]) -> int:
    """The characters of the certain prefix (what its pieces join to), counted without
    hashing it: most waiting calls' certain prefix is too short to fill ahead."""
    chars = 0
    for seg in call.template.segments:
        if isinstance(seg, Text):
            chars += len(seg.text)
        elif seg.is_output or seg.name not in values:
            break
        else:
            chars += len(values[seg.name])
    return chars


def plan_ahead(session: Session, call: Call, engine: EngineState,
               producer: Call) -> tuple[PrefixPiece, ...]:
    """The certain prefix of waiting `call` to fill on `engine` while `producer` runs there;
    () when none is worth it: too short, or the engine has other prefill queued. Engines
    prefill first come, first served, so a prefix filled ahead then only takes the prefill
    budget of calls already waiting, whose work is as urgent, and costs its own call a
    request more (concurrent chains on a busy engine measure it: docs/RESULTS.md). A producer
    alone on its engine still gets its consumer's prefix filled during its decode."""
    values = _known_values(session, call)
    if -(-_known_prefix_chars(call, values) // CHARS_PER_TOKEN) < MIN_PREFILL_AHEAD_TOKENS:
        return ()   # (estimate_num_tokens of the joined pieces, without joining or hashing)
    pieces = prefix_pieces(call.template, values, session.prefix_salt,
                           call.input_token_counts(session.variables))
    if _uncached_tokens(pieces, engine) > 0 and not engine.prefills_only(producer.call_id):
        return ()
    return pieces


def _uncached_tokens(pieces: tuple[PrefixPiece, ...], engine: EngineState) -> int:
    """Tokens of `pieces` past the deepest one cached on `engine` (what a fill prefills)."""
    cached = next((p.num_tokens for p in reversed(pieces)
                   if p.prefix_hash in engine.contexts.prefix_hashes), 0)
    return max(0, pieces[-1].num_tokens - cached)


async def prefill_ahead(call: Call, engine: EngineState,
                        pieces: tuple[PrefixPiece, ...]) -> None:
    """Fill `pieces` (plan_ahead's) for `call` on `engine` and leave them cached there."""
    deepest = pieces[-1].prefix_hash
    contexts, _ = plan_prefix_contexts(pieces, lambda h: 2 if h == deepest else 0)
    try:
        chain = await engine.contexts.acquire(contexts, call.session_id)
    except ParrotError as exc:  # an optimisation only: the call fills it itself later
        log.debug("prefill ahead of %s on %s failed: %s", call.call_id, engine.engine_id, exc)
        return
    engine.contexts.release_ahead(chain)
