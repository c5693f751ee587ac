"""LangChain's ChatOpenAI against parrot-serve (simulated engine): `with_structured_output`
(json_schema and function calling) returns valid Pydantic objects, and `bind_tools` with
`tool_choice` required / a named tool returns tool calls whose arguments fit the tool."""

from __future__ import annotations

import pytest

from tests.serve_process import SIM_ENGINE, parrot_serve

langchain_openai = pytest.importorskip("langchain_openai")
pydantic = pytest.importorskip("pydantic")


class City(pydantic.BaseModel):
    name: str
    population: int


def get_weather(city: str, unit: str) -> str:
    """The current weather in a city, in unit c or f."""
    return f"sunny in {city}"


def get_time(zone: str) -> str:
    """The time in a time zone."""
    return "12:00"


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    config = {"policy": {"name": "least_queue"}, "engines": [{"name": "sim", **SIM_ENGINE}]}
    with parrot_serve(config, tmp_path_factory.mktemp("langchain")) as (url, _):
        yield langchain_openai.ChatOpenAI(base_url=url + "/v1", api_key="unused",
                                          model="simulated", max_tokens=32)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(llm, method):
    city = llm.with_structured_output(City, method=method).invoke("Tell me about Paris")
    assert isinstance(city, City) and isinstance(city.population, int)


@pytest.mark.parametrize("tool_choice, names", [
    ("required", {"get_weather", "get_time"}), ("get_time", {"get_time"})])
def test_bind_tools(llm, tool_choice, names):
    message = llm.bind_tools([get_weather, get_time], tool_choice=tool_choice).invoke(
        "What is the weather in Rome?")
    (call,) = message.tool_calls
    assert call["name"] in names and call["id"].startswith("call_")
    expected = {"get_weather": {"city", "unit"}, "get_time": {"zone"}}[call["name"]]
    assert set(call["args"]) == expected
