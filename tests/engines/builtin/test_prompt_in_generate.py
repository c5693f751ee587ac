"""A Generate that carries its prompt (GenerateRequest.token_ids / text) on the builtin engine:
the same tokens as a Fill of that prompt and then a Generate, one model step fewer, and the
prompt's length on the first chunk."""

from __future__ import annotations

import random

import pytest

from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.errors import InvalidRequestError, UnknownContextError
from parrot.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def prompt(seed: int, n: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(3, 500) for _ in range(n))


async def steps(engine) -> int:
    return (await engine.stats()).counter("num_steps")


async def test_a_prompt_in_the_generate_gives_the_fill_then_generate_tokens_a_step_sooner(
        tiny_bundle, make_engine):
    split, fused = make_engine(tiny_bundle), make_engine(tiny_bundle)
    tokens = prompt(1, 21)
    filled = await split.fill(FillRequest("a", token_ids=tokens))
    expected = await split.generate_all(GenerateRequest("a", sampling=GREEDY))
    got = await fused.generate_all(GenerateRequest("a", sampling=GREEDY, token_ids=tokens))
    assert got.token_ids == expected.token_ids and len(got.token_ids) == 6
    assert (got.finish_reason, got.prompt_len) == ("length", filled.context_len) == ("length", 21)
    assert expected.prompt_len is None   # a Generate without a prompt reports none
    # one prefill step and five decode steps against a prefill, then six decodes
    assert (await steps(fused), await steps(split)) == (6, 7)
    counters = [(await e.stats()).counters for e in (fused, split)]
    assert [(c["generated_tokens"], c["decode_tokens"], c["prefill_tokens"])
            for c in counters] == [(6, 5, 21), (6, 6, 20)]
    fused.check_invariants()


async def test_a_prompt_forking_a_parent_streams_its_length_on_the_first_chunk_only(
        tiny_bundle, make_engine):
    split, fused = make_engine(tiny_bundle), make_engine(tiny_bundle)
    for engine in (split, fused):
        await engine.fill(FillRequest("p", token_ids=prompt(2, 17)))
    await split.fill(FillRequest("c", "p", token_ids=prompt(3, 5)))
    expected = await split.generate_all(GenerateRequest("c", sampling=GREEDY))
    chunks = [c async for c in fused.generate(GenerateRequest(
        "c", "p", sampling=GREEDY, token_ids=prompt(3, 5)))]
    assert tuple(t for c in chunks for t in c.token_ids) == expected.token_ids
    assert [c.prompt_len for c in chunks] == [22] + [None] * (len(chunks) - 1)
    # the prompt and the generated tokens stay in the context: a Fill appends after them
    assert (await fused.fill(FillRequest("c", token_ids=(7,)))).context_len == 22 + 6 + 1
    fused.check_invariants()


async def test_a_generate_on_a_new_context_needs_a_parent_or_a_prompt(tiny_bundle, make_engine):
    engine = make_engine(tiny_bundle)
    with pytest.raises(UnknownContextError, match="a parent_context_id or a prompt"):
        await engine.generate_all(GenerateRequest("new", sampling=GREEDY))
    with pytest.raises(InvalidRequestError, match="holds no tokens"):
        await engine.generate_all(GenerateRequest("empty", sampling=GREEDY, token_ids=()))
    with pytest.raises(InvalidRequestError, match="at most one of token_ids and text"):
        GenerateRequest("x", token_ids=(1,), text="a")
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        await engine.generate_all(GenerateRequest("big", sampling=GREEDY,
                                                  token_ids=(1, 10**6)))
    # (the engine serves on after each refusal)
    got = await engine.generate_all(GenerateRequest("ok", sampling=GREEDY, token_ids=(5, 6)))
    assert (len(got.token_ids), got.prompt_len) == (6, 2)
    engine.check_invariants()


async def test_text_in_the_generate_is_tokenized_as_a_fill_on_smollm2(smollm2_bundle,
                                                                       make_engine):
    """The real tokenizer: a system prompt filled, then a question as the Generate's text,
    gives the greedy tokens of a Fill of the question and a Generate."""
    split = make_engine(smollm2_bundle, num_blocks=64)
    fused = make_engine(smollm2_bundle, num_blocks=64)
    system, question = "You are a helpful assistant. ", "What is the capital of France?"
    for engine in (split, fused):
        await engine.fill(FillRequest("sys", text=system))
    filled = await split.fill(FillRequest("q", "sys", text=question))
    expected = await split.generate_all(GenerateRequest("q", sampling=GREEDY))
    got = await fused.generate_all(GenerateRequest("q", "sys", GREEDY, text=question))
    assert got.token_ids == expected.token_ids and got.text == expected.text
    assert got.prompt_len == filled.context_len
