"""EngineState's load accounting: what a placed call adds is exactly what its removal takes
back, so an engine's view returns to idle when its calls finish."""

from __future__ import annotations

import pytest

from parrot.serve_config import ConfigError, EngineSpec, auto_throughput_capacity
from parrot.manager.engine_pool import EnginePool, EngineState
from parrot.manager.nodes import Call
from parrot.engines.protocol import EngineInfo
from parrot.template import parse_template
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine


def make_engine_state() -> EngineState:
    return EnginePool().add(EngineSpec(name="e0", in_process=True), RecordingEngine(),
                            EngineInfo("e0", "fake", "fake", 4096, 16, 1024))


def make_call(call_id: str, num_tokens: int, criterion: Criterion | None,
              task_group: str | None = None) -> Call:
    call = Call(call_id, "s", parse_template("{{output:o}}"), {}, {}, criterion=criterion,
                task_group=task_group)
    call.num_tokens = num_tokens
    return call


def load(state: EngineState) -> tuple[int, int, int, int, frozenset[str]]:
    view = state.view()
    return (view.num_running_calls, view.num_tokens_in_use, view.num_latency_calls,
            view.num_throughput_calls, view.task_groups)


def test_removing_calls_gives_back_exactly_what_adding_them_took():
    state = make_engine_state()
    a = make_call("a", 100, Criterion.LATENCY)
    b = make_call("b", 250, Criterion.THROUGHPUT, task_group="g")
    state.add_call(a)
    state.add_call(b)
    assert load(state) == (2, 350, 1, 1, frozenset({"g"}))
    a.num_tokens, b.criterion = 9999, Criterion.LATENCY  # re-deduction after placement
    state.remove_call(a)
    assert load(state) == (1, 250, 0, 1, frozenset({"g"}))
    state.remove_call(b)
    assert load(state) == (0, 0, 0, 0, frozenset())
    state.remove_call(b)  # twice: no effect
    assert load(state) == (0, 0, 0, 0, frozenset())


def test_kv_overflow_falls_back_when_calls_finish():
    state = make_engine_state()
    big = make_call("big", 1024 * 16, None)
    state.add_call(big)
    assert state.kv_overflow_tokens() > 0
    state.remove_call(big)
    assert state.kv_overflow_tokens() == -1024 * 16


async def test_an_engine_is_idle_again_after_its_calls_finish(manager, engine):
    session = manager.create_session()
    calls = [submit(manager, session, f"call {i} {{{{output:y}}}}") for i in range(3)]
    for call in calls:
        await manager.get(session, out(call, "y"), Criterion.LATENCY, timeout=10)
    state = manager.engines.get("e0")
    assert state.num_calls_done == 3
    assert load(state) == (0, 0, 0, 0, frozenset())


def test_auto_throughput_capacity_is_the_papers_share_of_the_engines_kv_cache():
    # the default (`auto`): 58.5% of the KV cache the engine reported, rounded down to 1024
    assert EngineSpec(name="e0").throughput_capacity is None
    assert EngineSpec(name="e0", throughput_capacity="auto").throughput_capacity is None
    assert make_engine_state().view().throughput_capacity == 9216    # 16,384 tokens of KV
    explicit = EnginePool().add(EngineSpec(name="e1", throughput_capacity=20000),
                                RecordingEngine(), EngineInfo("e1", "fake", "fake", 4096, 16, 1024))
    assert explicit.view().throughput_capacity == 20000
    assert explicit.describe()["throughput_capacity"] == 20000
    assert auto_throughput_capacity(56000, 6144) == 32768      # the paper's A100: its 32,768
    assert auto_throughput_capacity(206400, 6144) == 119808    # the H200 LLaMA-7B profile
    assert auto_throughput_capacity(4096, 6144) == 6144        # never below the latency cap
    assert auto_throughput_capacity(0, 6144) == 32768          # no KV size reported
    with pytest.raises(ConfigError, match="throughput_capacity"):
        EngineSpec(name="e0", throughput_capacity="big")


def test_the_view_splits_the_load_by_criterion_and_counts_prefill_still_queued():
    state = make_engine_state()
    chat = make_call("chat", 100, Criterion.LATENCY)
    maps = [make_call(f"m{i}", 250, Criterion.THROUGHPUT, task_group="g") for i in range(2)]
    for call in (chat, *maps):
        state.add_call(call, call.criterion)
    view = state.view()
    assert (view.num_tokens_in_use, view.throughput_tokens_in_use) == (600, 500)
    assert view.queued_prefill_tokens == 600        # no prompt has been prefilled yet
    state.note_prefilled("m0")                       # its prompt was a cached context
    state.note_prompt_tokens("chat", 100)            # its first fill reported
    assert state.view().queued_prefill_tokens == 250
    state.remove_call(maps[1])
    view = state.view()
    assert (view.throughput_tokens_in_use, view.queued_prefill_tokens) == (250, 0)


def test_the_prefill_queued_follows_the_running_calls_without_walking_them():
    state = make_engine_state()

    def check(only: dict[str, bool]) -> None:
        queued = sum(state.prefilling.values())
        assert state.view().queued_prefill_tokens == state.queued_prefill_tokens == queued
        assert {cid: state.prefills_only(cid) for cid in only} == only

    state.add_call(make_call("a", 100, None))
    check({"a": True, "b": False})
    state.add_call(make_call("b", 250, Criterion.THROUGHPUT))
    check({"a": False, "b": False})
    state.note_prefilled("b")
    check({"a": True, "b": False})
    state.note_prompt_tokens("a", 80)   # its first fill reported: prefilled
    check({"a": True, "b": True, "c": True})
    state.add_call(make_call("c", 40, None))
    state.remove_call(make_call("c", 0, None))
    check({"a": True})
    state.remove_call(make_call("a", 0, None))
    state.remove_call(make_call("b", 0, None))
    check({"a": True})
