"""The executor sends the text before an output inside that output's Generate when the engine's
info says it takes a prompt there: one request an output instead of a Fill and a Generate, the
same text in the context, the same values."""

from __future__ import annotations

from parrot.serve_config import EngineSpec
from parrot.manager.manager import Manager
from parrot.policies.least_queue import LeastQueuePolicy
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine

PROMPT = "Question: {{input:q}} Draft: {{output:draft}} Final answer: {{output:final}}"


async def run(prompt_in_generate: bool) -> tuple[RecordingEngine, dict[str, str], int | None]:
    manager = Manager(LeastQueuePolicy())
    await manager.start()
    engine = RecordingEngine(prompt_in_generate=prompt_in_generate)
    try:
        await manager.add_engine(EngineSpec(name="e0", in_process=True), engine)
        session = manager.create_session()
        call = submit(manager, session, PROMPT, q="why is the sky blue?")
        values = {name: await manager.get(session, out(call, name), Criterion.LATENCY)
                  for name in ("draft", "final")}
        return engine, values, call.num_prompt_tokens
    finally:
        await manager.close()


async def test_text_before_each_output_rides_in_its_generate_and_changes_nothing_else():
    split_engine, split_values, split_prompt = await run(prompt_in_generate=False)
    engine, values, prompt_tokens = await run(prompt_in_generate=True)
    ops = [op for op, *_ in engine.log]
    assert ops == ["generate", "generate", "free"]
    assert [op for op, *_ in split_engine.log] == ["fill", "generate", "fill", "generate",
                                                  "free"]
    # the engine saw the same text in the same order, so the values are the same
    assert values == split_values and values["draft"].startswith("gen(")
    # the prompt's length in real tokens comes back on the Generate's first chunk
    assert prompt_tokens == split_prompt == -(-len("Question: why is the sky blue? Draft: ")
                                              // 4)
