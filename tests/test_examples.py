"""The example applications, end to end over HTTP against simulated engines."""

from __future__ import annotations

import pytest

import parrot
from examples.chain_summary import chain_summary, document_chunks
from examples.map_reduce_summary import map_reduce_summary
from examples.multi_output import run as multi_output
from examples.tool_agent import PLAN_SCHEMA, call_tool
from examples.tool_agent import run as tool_agent
from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer


@pytest.fixture
async def url():
    server = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "least_queue"},
        "engines": [{"name": f"sim-{i}", "kind": "simulated", "in_process": True,
                     "params": {"zero_latency": True}} for i in range(2)]}))
    yield await server.start(port=0)
    await server.stop()


async def test_chain_summary(url):
    chunks = document_chunks(3, 64)
    assert len(chunks) == 3
    async with parrot.Session(url) as session:
        summary = await chain_summary(chunks, max_tokens=5)
        graph = await session.graph()
    assert len(summary) == 5 * 4
    calls = [n for n in graph.nodes if n.kind == "call"]
    assert [c.state for c in calls] == ["done"] * 3


async def test_map_reduce_summary_groups_the_maps(url):
    chunks = document_chunks(4, 64)
    async with parrot.Session(url) as session:
        summary = await map_reduce_summary(chunks, max_tokens=3)
        graph = await session.graph()
    assert len(summary) == 12
    calls = [n for n in graph.nodes if n.kind == "call"]
    maps = [c for c in calls if "Summarize" in c.prompt]
    reduce_ = [c for c in calls if "Combine" in c.prompt]
    assert len(maps) == 4 and len(reduce_) == 1
    assert {c.criterion for c in maps} == {"throughput"}
    assert len({c.task_group for c in maps}) == 1 and maps[0].task_group is not None
    assert reduce_[0].criterion == "latency" and reduce_[0].task_group is None


async def test_multi_output(url):
    async with parrot.Session(url):
        result = await multi_output("a task")
    assert set(result) == {"title", "body", "shout"}
    assert len(result["body"]) == 48 * 4 and len(result["shout"]) == 16 * 4


async def test_tool_agent_plans_calls_and_summarises(url):
    jsonschema = pytest.importorskip("jsonschema")
    async with parrot.Session(url) as session:
        results = [await tool_agent(f"question {i}") for i in range(3)]
        graph = await session.graph()
    for result in results:
        jsonschema.validate(result["plan"], PLAN_SCHEMA)
        assert result["observation"] == call_tool(result["plan"]["call"])
        assert result["answer"]
    calls = [n for n in graph.nodes if n.kind == "call"]
    assert len(calls) == 6 and {c.state for c in calls} == {"done"}
