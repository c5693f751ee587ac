"""Typed Semantic Variables over HTTP against simulated engines: outputs declared with
parrot.json / parrot.regex / parrot.choice arrive valid and parse with aget_json; a bad
schema or pattern is a 400 naming the output, before any engine sees it."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

import parrot
from parrot.errors import InvalidRequestError
from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer

jsonschema = pytest.importorskip("jsonschema")

PLAN = {
    "type": "object",
    "properties": {
        "goal": {"type": "string"},
        "priority": {"enum": ["low", "high"]},
        "steps": {"type": "array", "minItems": 1, "maxItems": 4,
                  "items": {"type": "object", "properties": {
                      "tool": {"enum": ["search", "calc"]},
                      "arg": {"type": "string", "pattern": "[a-z]{3,8}"}},
                      "required": ["tool", "arg"]}},
    },
    "required": ["goal", "priority", "steps"],
}


@pytest.fixture
async def url():
    server = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "least_queue"},
        "engines": [{"name": "sim", "kind": "simulated", "in_process": True,
                     "params": {"zero_latency": True}}]}))
    yield await server.start(port=0)
    await server.stop()


@parrot.semantic_function(max_tokens=32, outputs={"plan": parrot.json(PLAN),
                                                  "code": parrot.regex(r"[A-Z]{2}-[0-9]{4}"),
                                                  "mood": parrot.choice(["calm", "busy"])})
def plan_task(task, plan, code, mood):
    """Task: {{input:task}} Plan: {{output:plan}} Code: {{output:code}} Mood: {{output:mood}}"""


async def test_typed_outputs_are_valid_and_parse(url):
    async with parrot.Session(url):
        results = [plan_task(f"task {i}") for i in range(4)]
        plans = [await r[0].aget_json() for r in results]
        codes = [await r[1].aget() for r in results]
        moods = [await r[2].aget() for r in results]
    for plan in plans:
        jsonschema.validate(plan, PLAN)
    assert len({json.dumps(p, sort_keys=True) for p in plans}) > 1   # sampled, not fixed
    assert all(re.fullmatch(r"[A-Z]{2}-[0-9]{4}", c) for c in codes)
    assert set(moods) <= {"calm", "busy"}


async def test_a_pydantic_model_is_a_schema(url):
    pydantic = pytest.importorskip("pydantic")

    class Step(pydantic.BaseModel):
        tool: str
        count: int

    class Plan(pydantic.BaseModel):
        steps: list[Step]

    fn = parrot.semantic_function(prompt="Plan: {{output:plan}}", max_tokens=16,
                                  outputs={"plan": parrot.json(Plan)})
    async with parrot.Session(url):
        plan = Plan.model_validate(await fn().aget_json())
    assert isinstance(plan.steps, list)


def _post(url: str, path: str, body: dict, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("constraint, problem", [
    ({"type": "json_schema", "schema": {"type": "nonsense"}}, "json_schema"),
    ({"type": "regex", "pattern": "a(b"}, "regex"),
])
async def test_a_bad_constraint_is_a_400_naming_the_output(url, constraint, problem):
    bad = parrot.semantic_function(prompt="Say {{output:answer}}",
                                   outputs={"answer": {"constraint": constraint}})
    with pytest.raises(InvalidRequestError, match=rf"output 'answer': invalid {problem}"):
        async with parrot.Session(url):
            await bad().aget()


async def test_the_server_refuses_a_bad_schema_over_raw_http(url):
    """Not only the Python frontend: a raw submit with a bad schema is a 400 naming it."""
    import asyncio

    def run() -> tuple[int, dict]:
        _, opened = _post(url, "/v1/sessions", {})
        return _post(url, "/v1/submit", {
            "session_id": opened["session_id"], "prompt": "Say {{output:answer}}",
            "placeholders": [{"name": "answer", "in_out": "output", "sampling": {
                "constraint": {"type": "json_schema", "schema": {"type": "nonsense"}}}}]},
            opened["token"])

    status, body = await asyncio.to_thread(run)
    assert status == 400 and "output 'answer'" in json.dumps(body), body


async def test_a_json_path_on_a_typed_output_never_fails_on_the_shape(url):
    first_tool = parrot.semantic_function(
        prompt="Plan: {{output:plan}}", max_tokens=16, outputs={"plan": parrot.json(PLAN)},
        transforms={"plan": [{"type": "json_path", "path": "steps.0.tool"}]})
    async with parrot.Session(url):
        tools = [await first_tool().aget() for _ in range(5)]
    assert set(tools) <= {"search", "calc"}
