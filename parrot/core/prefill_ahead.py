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

from parrot.core.engine_pool import EngineState
from parrot.core.executor import plan_prefix_contexts
from parrot.core.nodes import Call
from parrot.core.prefix import PrefixPiece, prefix_pieces
from parrot.core.sessions import Session
from parrot.errors import ParrotError
from parrot.transforms import TransformError, apply_transforms
from parrot.types import estimate_num_tokens

log = logging.getLogger(__name__)

# Worth a context of its own only when it saves real prefill work.
MIN_PREFILL_AHEAD_TOKENS = 256


def known_prefix(session: Session, call: Call) -> tuple[PrefixPiece, ...]:
    """The prefix pieces of a waiting call that are already certain (may be empty)."""
    values: dict[str, str] = {}
    for name, binding in call.inputs.items():
        var = session.variables[binding.var_id]
        if var.value is not None:
            try:
                values[name] = apply_transforms(binding.transforms, var.value)
            except TransformError:
                return ()
    return prefix_pieces(call.template, values, session.prefix_salt,
                         call.input_token_counts(session.variables))


async def prefill_ahead(session: Session, call: Call, engine: EngineState) -> None:
    """Fill `call`'s certain prefix on `engine` and leave it cached there."""
    pieces = known_prefix(session, call)
    if not pieces or estimate_num_tokens("".join(p.text for p in pieces)) \
            < MIN_PREFILL_AHEAD_TOKENS:
        return
    deepest = pieces[-1].prefix_hash
    contexts, _ = plan_prefix_contexts(pieces, lambda h: h == deepest)
    try:
        chain = await engine.contexts.acquire(contexts, call.session_id)
    except ParrotError as exc:  # an optimisation only: the call fills it itself later
        log.debug("prefill ahead of %s on %s failed: %s", call.call_id, engine.engine_id, exc)
        return
    engine.contexts.release_ahead(chain)
