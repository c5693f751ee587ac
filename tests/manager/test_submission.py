"""check_submit: every mistake is a typed 4xx error raised before the session changes."""

from __future__ import annotations

import time

import pytest

from parrot.manager.requests import SubmitRequest
from parrot.manager.submission import check_submit
from parrot.errors import ConflictError, InvalidRequestError, TemplateSyntaxError
from parrot.template import MAX_OUTPUTS, MAX_PLACEHOLDERS
from tests.manager.conftest import out, submit


def request(session, prompt: str, placeholders: list[dict]) -> SubmitRequest:
    return SubmitRequest.from_json({"session_id": session.session_id, "prompt": prompt,
                                    "placeholders": placeholders})


def sizes(session) -> tuple[int, int]:
    return len(session.calls), len(session.variables)


async def test_a_call_that_would_close_a_cycle_is_refused_without_changes(manager, engine):
    session = manager.create_session()
    seed = manager.create_variable(session, "seed", None)
    first = submit(manager, session, "A {{input:s}} {{output:a}}", s=seed.var_id)
    second = submit(manager, session, "B {{input:a}} {{output:b}}", a=out(first, "a"))
    before = sizes(session)
    with pytest.raises(ConflictError, match="close a cycle") as info:
        check_submit(session, request(session, "C {{input:b}} {{output:s}}", [
            {"name": "b", "in_out": "input", "semantic_var_id": out(second, "b")},
            {"name": "s", "in_out": "output", "semantic_var_id": seed.var_id}]))
    assert info.value.status == 409 and sizes(session) == before


async def test_too_many_placeholders_or_outputs_is_a_400(manager, engine):
    session = manager.create_session()
    inputs = "".join(f"{{{{input:x{i}}}}}" for i in range(MAX_PLACEHOLDERS))
    with pytest.raises(TemplateSyntaxError) as info:
        check_submit(session, request(session, inputs + "{{output:o}}", []))
    assert info.value.status == 400
    outputs = "".join(f"{{{{output:y{i}}}}}" for i in range(MAX_OUTPUTS + 1))
    with pytest.raises(InvalidRequestError, match=f"more than {MAX_OUTPUTS} output"):
        check_submit(session, request(session, outputs, []))
    assert sizes(session) == (0, 0)


async def test_many_inputs_and_outputs_over_a_long_chain_check_quickly(manager, engine):
    """A reproduction through the submit path: a call with 100 inputs from a 200-call
    chain and 100 outputs bound to variables that feed another 200-call chain."""
    engine.delay = 3600.0  # keep everything pending: only the checks run
    session = manager.create_session()
    chain_a = [submit(manager, session, "A {{input:x}} {{output:y}}", x="doc")]
    for _ in range(199):
        chain_a.append(submit(manager, session, "A {{input:x}} {{output:y}}",
                              x=out(chain_a[-1], "y")))
    targets = [manager.create_variable(session, f"t{i}", None) for i in range(100)]
    head = "".join(f"{{{{input:t{i}}}}}" for i in range(100)) + "{{output:y}}"
    chain_b = [submit(manager, session, head, **{f"t{i}": v.var_id
                                                 for i, v in enumerate(targets)})]
    for _ in range(199):
        chain_b.append(submit(manager, session, "B {{input:x}} {{output:y}}",
                              x=out(chain_b[-1], "y")))
    prompt = ("".join(f"{{{{input:i{k}}}}}" for k in range(100)) +
              "".join(f"{{{{output:o{k}}}}}" for k in range(100)))
    placeholders = (
        [{"name": f"i{k}", "in_out": "input", "semantic_var_id": out(chain_a[100 + k], "y")}
         for k in range(100)] +
        [{"name": f"o{k}", "in_out": "output", "semantic_var_id": targets[k].var_id}
         for k in range(100)])
    start = time.perf_counter()
    checked = check_submit(session, request(session, prompt, placeholders))
    assert time.perf_counter() - start < 0.5
    assert len(checked.input_vars) == 100 and len(checked.output_vars) == 100
