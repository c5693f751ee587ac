"""An engine's counters: the registry of their names, the mapping an engine builds, and
EngineStats' wire form (`counters` as one JSON object; the older flat form still read)."""

from __future__ import annotations

import pytest

from parrot.engines.counters import COUNTER_NAMES, COUNTERS, engine_counters
from parrot.engines.protocol import EngineStats
from parrot.errors import InvalidRequestError

CORE = {"num_running": 1, "num_waiting": 2, "num_blocks_total": 64, "num_blocks_free": 60,
        "block_size": 16, "num_tokens_in_use": 40, "num_contexts": 3}


def test_the_registry_names_each_counter_once_with_its_metric_and_scale():
    assert len(set(COUNTER_NAMES)) == len(COUNTER_NAMES) == 26
    assert len({c.metric for c in COUNTERS}) == len(COUNTERS)
    scales = {c.name: c.scale for c in COUNTERS}
    assert (scales["num_steps"], scales["step_ms"], scales["tpot_us_sum"]) == (1.0, 1e-3, 1e-6)
    assert all(c.meaning and c.metric.startswith("parrot_engine_") for c in COUNTERS)


def test_engine_counters_orders_by_the_registry_and_refuses_unknown_names_and_non_integers():
    assert list(engine_counters(tpot_us_sum=5, gc_ms=1, num_steps=2)) == [
        "num_steps", "gc_ms", "tpot_us_sum"]
    assert engine_counters() == {}
    with pytest.raises(ValueError, match=r"unknown engine counter\(s\) \['num_stpes'\]"):
        engine_counters(num_stpes=1)
    with pytest.raises(TypeError, match="step_ms must be an integer, got 1.5"):
        engine_counters(step_ms=1.5)
    with pytest.raises(TypeError, match="num_steps must be an integer, got True"):
        engine_counters(num_steps=True)


def test_counter_reads_zero_where_not_counted_and_refuses_an_unknown_name():
    stats = EngineStats(**CORE, counters=engine_counters(num_steps=7))
    assert (stats.counter("num_steps"), stats.counter("gc_ms")) == (7, 0)
    with pytest.raises(ValueError, match=r"unknown engine counter\(s\) \['steps'\]"):
        stats.counter("steps")


def test_the_wire_form_is_the_core_fields_and_one_counters_object():
    stats = EngineStats(**CORE, counters=engine_counters(step_ms=340, num_steps=12))
    assert stats.to_wire() == {**CORE, "counters": {"num_steps": 12, "step_ms": 340}}
    assert EngineStats.from_wire(stats.to_wire()) == stats
    assert EngineStats(**CORE).to_wire() == {**CORE, "counters": {}}
    # absent or empty: no counters
    assert EngineStats.from_wire(CORE) == EngineStats.from_wire({**CORE, "counters": {}}) \
        == EngineStats(**CORE)


def test_a_reply_is_read_leniently_and_its_values_strictly():
    # a newer engine's counter and field travel along; the manager exports only known names
    newer = EngineStats.from_wire({**CORE, "counters": {"num_steps": 3, "fancy": 4},
                                   "new_field": 1}, strict=False)
    assert newer.counters == {"num_steps": 3, "fancy": 4} and newer.counter("num_steps") == 3
    with pytest.raises(InvalidRequestError,
                       match="EngineStats.counters.num_steps must be an integer, got '12'"):
        EngineStats.from_wire({**CORE, "counters": {"num_steps": "12"}})
    with pytest.raises(InvalidRequestError, match="EngineStats.counters must be an object"):
        EngineStats.from_wire({**CORE, "counters": [1]})
    with pytest.raises(InvalidRequestError, match="EngineStats.num_contexts is required"):
        EngineStats.from_wire({k: v for k, v in CORE.items() if k != "num_contexts"})


def test_the_older_flat_form_is_folded_into_counters():
    """An engine from before `counters` wrote each counter as a field of its own."""
    old = {**CORE, "num_steps": 12, "tpot_us_sum": 900, "graph_captures_at_runtime": 0}
    expected = EngineStats(**CORE, counters={"num_steps": 12, "graph_captures_at_runtime": 0,
                                             "tpot_us_sum": 900})
    assert EngineStats.from_wire(old) == EngineStats.from_wire(old, strict=False) == expected
    with pytest.raises(InvalidRequestError,
                       match="EngineStats.counters.num_steps must be an integer"):
        EngineStats.from_wire({**CORE, "num_steps": "12"})
    # a reply with `counters` is read as it is: flat names beside it are not counters
    both = EngineStats.from_wire({**CORE, "counters": {"gc_ms": 1}, "num_steps": 5},
                                 strict=False)
    assert both.counters == {"gc_ms": 1}
