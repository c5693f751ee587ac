"""One sampled token -> one streamed GenerateChunk, with the stop conditions.

Every sampled token stays in the context and is reported in `token_ids`, including the one that
ends the generation (EOS, a stop token id, the token completing a stop string). The text never
contains EOS/stop-token text nor a stop string or anything after it.
Stop conditions, first match wins: a stop token id -> "stop"; EOS (unless ignore_eos) -> "eos";
a stop string -> "stop"; a random-weight model's hidden stop (`Work.eos_after`, unless
ignore_eos) -> "eos"; max_tokens or the context window full -> "length".
"""

from __future__ import annotations

from parrot.engines.builtin.context import Work
from parrot.engines.protocol import GenerateChunk


def process_token(work: Work, token: int, eos_token_ids: frozenset[int],
                  max_context_len: int) -> GenerateChunk:
    """Append token to work's context and build the chunk to stream (not yet emitted)."""
    assert work.stream is not None
    params = work.sampling
    work.context.token_ids.append(token)
    if work.grammar is not None:   # the constrained sequence's matcher follows its tokens
        work.grammar.advance(token)
    work.num_generated += 1
    finish: str | None = None
    text = ""
    if token in params.stop_token_ids:
        finish = "stop"
    elif token in eos_token_ids and not params.ignore_eos:
        finish = "eos"
    else:
        text, hit_stop = work.stream.push(token)
        if hit_stop:
            finish = "stop"
    if finish is None and work.eos_after is not None and work.num_generated >= work.eos_after:
        finish = "eos"
    if finish is None and (work.num_generated >= params.max_tokens
                           or len(work.context.token_ids) >= max_context_len):
        finish = "length"
    if finish is not None:
        text += work.stream.flush()
    # (the first chunk of a Generate that carried a prompt says how long the prompt made it)
    return GenerateChunk(text, (token,), finish,
                         work.prompt_len if work.num_generated == 1 else None)
