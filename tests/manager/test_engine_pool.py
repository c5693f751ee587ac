"""Engine accounting: a shared prefix counted once, real token counts, cost profiles."""

from __future__ import annotations

import asyncio
import dataclasses

from parrot.serve_config import EngineSpec
from parrot.manager.engine_profiles import speed_profile
from parrot.engines.protocol import EngineInfo, FillRequest, FillResult
from parrot.speed_profile import DEFAULT_PROFILE, SpeedProfile, calibrated_latency_capacity
from parrot.types import Criterion
from tests.manager.conftest import out, submit
from tests.manager.fakes import RecordingEngine

SYSTEM = ("You are a helpful assistant that answers questions about parrots briefly, "
          "kindly and with care. " * 4)


async def test_shared_prefix_is_counted_once_per_engine(manager, engine):
    session = manager.create_session()
    calls = [submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q=f"question {i}")
             for i in range(3)]
    state = manager.engines.get("e0")
    for call in calls:
        state.add_call(call)
    prefix = -(-len(SYSTEM) // 4)
    assert state.num_tokens_in_use == sum(c.num_tokens for c in calls) - 2 * prefix
    for call in calls:
        state.remove_call(call)
    assert state.num_tokens_in_use == 0 and not state.prefix_refs
    for call in calls:
        await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_the_view_gives_the_smallest_latency_calls_whole_footprint(manager, engine):
    """EngineView.latency_floor_tokens: the smallest prompt (shared prefix included) plus
    output of the running latency calls — what a policy needs to know how strict the
    latency capacity can usefully be there; throughput calls do not count."""
    session = manager.create_session()
    short, long = (submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q=q)
                   for q in ("q", "a much longer question " * 20))
    bulk = submit(manager, session, "{{input:q}} {{output:a}}", q="x")
    state = manager.engines.get("e0")
    assert state.view().latency_floor_tokens == 0
    state.add_call(long)
    state.add_call(bulk, Criterion.THROUGHPUT)
    assert state.view().latency_floor_tokens == long.num_tokens
    state.add_call(short)      # forks the same prefix: its whole footprint, prefix included
    assert state.view().latency_floor_tokens == short.num_tokens < long.num_tokens
    state.remove_call(short)
    assert state.view().latency_floor_tokens == long.num_tokens
    for call in (long, bulk):
        state.remove_call(call)
    for call in (short, long, bulk):
        await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_the_view_splits_the_tokens_in_use_between_throughput_and_latency_calls(
        manager, engine):
    """EngineView.throughput_tokens_in_use: what the running THROUGHPUT calls hold of
    num_tokens_in_use, i.e. all of it but the latency calls' own tokens and every prefix one
    of them uses (a prefix a latency and a throughput call share is the latency side's)."""
    session = manager.create_session()
    a, b = (submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q=f"question {i}")
            for i in range(2))
    bulk = submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q="a batch item")
    plain = submit(manager, session, "{{input:q}} {{output:a}}", q="x" * 40)
    prefix = -(-len(SYSTEM) // 4)
    state = manager.engines.get("e0")
    state.add_call(bulk, Criterion.THROUGHPUT)
    state.add_call(plain, Criterion.THROUGHPUT)
    assert state.view().throughput_tokens_in_use == state.num_tokens_in_use
    state.add_call(a)
    state.add_call(b)
    latency = a.num_tokens + b.num_tokens - prefix       # the shared prefix counted once
    assert state.view().throughput_tokens_in_use == state.num_tokens_in_use - latency
    assert state.view().throughput_tokens_in_use == bulk.num_tokens - prefix + plain.num_tokens
    for call in (a, b, bulk, plain):
        state.remove_call(call)
    for call in (a, b, bulk, plain):
        await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_the_view_gives_the_kv_free_of_running_calls_and_contexts_filled_ahead(
        manager, engine):
    """EngineView.kv_free_tokens: the engine's KV cache less its running calls (two blocks of
    rounding each) and the contexts filled ahead for waiting calls — what a waiting latency
    call may take without making another fill its prefix again
    (placement.Slot.has_room_backlogged). A stale idle context counts as free."""
    from parrot.manager.prefix import PrefixPiece
    state = manager.engines.get("e0")
    capacity = state.kv_capacity_tokens
    assert capacity > 0 and state.view().kv_free_tokens == capacity
    state.contexts.release(await state.contexts.acquire((PrefixPiece("x" * 400, "p"),)))
    assert state.view().kv_free_tokens == capacity       # a stale context counts as free
    state.contexts.release_ahead(await state.contexts.acquire((PrefixPiece("y" * 400, "q"),)))
    ahead = state.contexts.num_ahead_tokens
    assert ahead > 0 and state.view().kv_free_tokens == capacity - ahead
    session = manager.create_session()
    call = submit(manager, session, SYSTEM + "{{input:q}} {{output:a}}", q="q")
    state.add_call(call)        # no await until it is removed: the scheduler would place it
    rounding = 2 * state.info.block_size
    assert state.view().kv_free_tokens == capacity - call.num_tokens - rounding - ahead
    state.remove_call(call)
    await manager.get(session, out(call, "a"), Criterion.LATENCY)


async def test_a_context_a_running_call_forks_is_not_counted_again_for_overflow(manager, engine):
    """The executor evicts cached contexts by kv_overflow_tokens: the context a running call
    forks from is in the call's own load, so only idle contexts count beside the calls."""
    from parrot.manager.prefix import PrefixPiece
    state = manager.engines.get("e0")
    held = await state.contexts.acquire((PrefixPiece("x" * 400, "p"),))   # a call forks it
    idle = await state.contexts.acquire((PrefixPiece("y" * 400, "q"),))
    state.contexts.release(idle)
    assert state.contexts.num_idle_tokens < state.contexts.num_cached_tokens
    assert state.kv_overflow_tokens() == (state.contexts.num_idle_tokens
                                          - state.kv_capacity_tokens)
    state.contexts.release(held)
    assert state.kv_overflow_tokens() == (state.contexts.num_cached_tokens
                                          - state.kv_capacity_tokens)


class TwoCharTokens(RecordingEngine):
    """An engine whose tokenizer makes a token of every 2 characters (not the 4 estimated)."""

    async def fill(self, request: FillRequest) -> FillResult:
        result = await super().fill(request)
        return FillResult(result.context_id, result.num_filled_tokens * 2,
                          -(-len(self.contexts[request.context_id]) // 2))


async def test_prompt_is_counted_in_the_tokens_the_engine_reports(manager):
    engine = TwoCharTokens(delay=0.05)
    await manager.add_engine(EngineSpec(name="two", in_process=True), engine)
    session = manager.create_session()
    prompt_text = "Word " * 40
    call = submit(manager, session, prompt_text + "{{output:a}}")
    state = manager.engines.get("two")
    estimated = call.num_tokens
    max_tokens = call.outputs["a"].sampling.max_tokens
    # Wait until its prompt is filled (the generate is still sleeping).
    while not any(op == "fill" for op, _, _ in engine.log):
        await asyncio.sleep(0.01)
    assert state.num_tokens_in_use == len(prompt_text) // 2 + max_tokens != estimated
    await manager.get(session, out(call, "a"), Criterion.LATENCY)
    assert state.num_tokens_in_use == 0


def test_speed_profile_comes_from_the_engines_latency_profile():
    a100 = speed_profile({"profile": "a100_llama13b"})
    assert a100.prefill_ms_per_token == 0.15 and a100.decode_ms(6144) == 40.0
    h200 = speed_profile({"profile": "h200_llama13b_recorded"})
    assert h200 != a100
    assert speed_profile({"profile": "a100_llama13b", "prefill_per_token_ms": 0.3}) \
        .prefill_ms_per_token == 0.3
    assert speed_profile({}) is DEFAULT_PROFILE
    assert speed_profile({"profile": "no-such-profile"}) is DEFAULT_PROFILE


async def test_a_generated_input_counts_the_tokens_the_engine_generated(manager):
    # The fake engine answers 1,200 characters (300 tokens at 4 characters each) in one token.
    engine = RecordingEngine(outputs={"write: ": "y" * 1200})
    await manager.add_engine(EngineSpec(name="one", in_process=True), engine)
    session = manager.create_session()
    producer = submit(manager, session, "write: {{output:code}}")
    # The same output through a transform: its text is no longer what the engine counted.
    stripped = submit(manager, session, "write: {{output:code}}",
                      code={"in_out": "output", "transforms": ["strip"]})
    consumer = submit(manager, session, "Review {{input:code}} now {{output:r}}",
                      code=out(producer, "code"))
    estimated = submit(manager, session, "Review {{input:code}} now {{output:r}}",
                       code=out(stripped, "code"))
    for call in (consumer, estimated):
        await manager.get(session, out(call, "r"), Criterion.LATENCY)
    assert session.variables[out(producer, "code")].num_tokens == 1
    assert session.variables[out(stripped, "code")].num_tokens is None
    max_tokens = consumer.outputs["r"].sampling.max_tokens
    text = -(-len("Review  now ") // 4)
    assert consumer.num_tokens == 1 + text + max_tokens
    assert [p.num_tokens for p in consumer.prefix_pieces] == [2, 3, 4]
    assert estimated.num_tokens == -(-(len("Review  now ") + 1200) // 4) + max_tokens
    # Equal prompt text, different estimates: the prefix leaves the count as it entered it.
    state = manager.engines.get("one")
    assert state.num_tokens_in_use == 0 and not state.prefix_refs


class SlowFree(RecordingEngine):
    """Frees contexts slowly: a finished call's last step is still in flight a while."""

    async def free_context(self, context_id: str) -> None:
        await asyncio.sleep(0.5)
        await super().free_context(context_id)


async def test_a_call_stops_counting_once_its_last_output_is_published(manager):
    engine = SlowFree()
    await manager.add_engine(EngineSpec(name="slow", in_process=True), engine)
    session = manager.create_session()
    producer = submit(manager, session, "write: {{output:code}} and {{output:notes}}")
    consumer = submit(manager, session, "Review {{input:code}} {{output:r}}",
                      code=out(producer, "code"))
    state = manager.engines.get("slow")
    await manager.get(session, out(producer, "notes"), Criterion.LATENCY)
    # The producer is freeing its context; its consumer was placed without its load.
    assert producer.call_id not in state.running
    assert set(state.running) <= {consumer.call_id}
    await manager.get(session, out(consumer, "r"), Criterion.LATENCY)
    assert state.num_tokens_in_use == 0 and not state.running


async def test_the_view_says_when_every_running_latency_call_has_its_next_call_waiting(
        manager, engine):
    """Call.has_waiting_consumer (a call waits on its outputs alone: the application's next
    step) and EngineView.chained_latency_seq: the latest submission among the
    running latency calls when each of them has one, else None — a later application's call
    waiting for room there would wait for a whole chain (placement.Slot.has_room_backlogged)."""
    session = manager.create_session()
    first = submit(manager, session, "Summarise: {{input:q}} {{output:a}}", q="a document")
    second = submit(manager, session, "Shorter: {{input:s}} {{output:b}}", s=out(first, "a"))
    alone = submit(manager, session, "Answer: {{input:q}} {{output:a}}", q="a question")
    assert first.has_waiting_consumer and not alone.has_waiting_consumer
    assert not second.has_waiting_consumer    # not ready yet; and nothing consumes it
    state = manager.engines.get("e0")
    assert state.view().chained_latency_seq is None
    state.add_call(first)
    assert state.view().chained_latency_seq == first.arrival_seq
    state.add_call(alone, Criterion.THROUGHPUT)   # throughput calls do not count
    assert state.view().chained_latency_seq == first.arrival_seq
    state.remove_call(alone)
    state.add_call(alone)                         # a latency call that ends within a turn
    assert state.view().chained_latency_seq is None
    for call in (first, alone):
        state.remove_call(call)
    for call, name in ((second, "b"), (alone, "a")):
        await manager.get(session, out(call, name), Criterion.LATENCY)


class ProfiledEngine(RecordingEngine):
    """Reports a speed profile in its info, as a builtin engine's start-up probe does."""

    def __init__(self, profile: SpeedProfile) -> None:
        super().__init__()
        self.profile = profile

    async def info(self) -> EngineInfo:
        return dataclasses.replace(await super().info(), speed_profile=self.profile)


H200_LIKE = SpeedProfile(0.03, ((0, 7.7), (65536, 7.7 + 0.0003 * 65536)))


async def test_auto_latency_capacity_follows_the_profile_the_engine_reports(manager):
    await manager.add_engine(EngineSpec(name="m", in_process=True, latency_capacity="auto"),
                             ProfiledEngine(H200_LIKE))
    state = manager.engines.get("m")
    assert state.profile is H200_LIKE and state.profile_source == "measured"
    # 40/22 of the 7.7-ms empty step at 20,533 tokens, rounded down to 1024
    assert state.latency_capacity == calibrated_latency_capacity(H200_LIKE) == 20480
    view = state.view()
    assert view.latency_capacity == 20480 and view.profile is H200_LIKE
    assert (state.describe()["latency_capacity"], state.describe()["profile_source"]) == (
        20480, "measured")
    # the throughput capacity's floor is the resolved latency capacity, not None
    assert state.throughput_capacity >= 20480


async def test_what_an_engine_serves_with_is_described_as_it_reports_it(manager):
    """`/v1/engines` shows the limits a builtin engine chose (`max_num_seqs: auto`...)."""
    from parrot.engines.protocol import ServingLimits
    from parrot.wire_types import EngineDescription

    limits = ServingLimits(max_num_seqs=256, max_batch_tokens=2048, kv_cache_tokens=208064,
                           graph_batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                           step_token_budget="step token budget: auto, ITL target 50 ms")

    class SizedEngine(RecordingEngine):
        async def info(self) -> EngineInfo:
            return dataclasses.replace(await super().info(), serving=limits)

    await manager.add_engine(EngineSpec(name="sized", in_process=True), SizedEngine())
    described = manager.engines.get("sized").describe()
    assert described["serving"] == {**limits.to_wire(), "graph_batch_sizes": [
        1, 2, 4, 8, 16, 32, 64, 128, 256]}
    wire = EngineDescription.from_wire(described, "engine", strict=False)
    assert wire.public().serving == wire.serving and wire.serving is not None
    assert (wire.serving.max_num_seqs, wire.serving.graph_batch_sizes[-1]) == (256, 256)


async def test_an_engine_given_no_capacity_is_calibrated_to_its_profile(manager):
    # auto is the default: an engine that says nothing is not held to the A100's 6,144
    await manager.add_engine(EngineSpec(name="plain", in_process=True), ProfiledEngine(H200_LIKE))
    assert manager.engines.get("plain").latency_capacity == 20480


async def test_a_simulated_engine_given_no_profile_is_costed_as_its_model_runs(manager):
    # an engine process registered by URL: the manager has no params, the engine its model
    from parrot.engines.simulated import SimulatedEngine, SimulatedEngineConfig

    engine = SimulatedEngine("s", SimulatedEngineConfig.from_mapping({"profile": "h200_llama7b"}))
    await manager.add_engine(EngineSpec(name="s", in_process=True), engine)
    state = manager.engines.get("s")
    assert state.profile_source == "measured" and state.profile.decode_ms(0) == 3.85
    assert state.latency_capacity == 20480                   # not the A100's 6,144


async def test_a_configured_profile_or_number_wins_and_no_profile_keeps_the_papers(manager):
    # a profile in the params wins over the one the engine reports
    await manager.add_engine(EngineSpec(name="c", in_process=True, latency_capacity="auto",
                                        params={"profile": "a100_llama13b"}),
                             ProfiledEngine(H200_LIKE))
    configured = manager.engines.get("c")
    assert (configured.profile_source, configured.latency_capacity) == ("configured", 6144)
    # a number is kept whatever the engine reports (the profile still costs placements)
    await manager.add_engine(EngineSpec(name="n", in_process=True, latency_capacity=9000),
                             ProfiledEngine(H200_LIKE))
    number = manager.engines.get("n")
    assert (number.latency_capacity, number.profile) == (9000, H200_LIKE)
    # nothing reported nor configured: the default profile, the paper's A100, and its 6,144
    await manager.add_engine(EngineSpec(name="d", in_process=True, latency_capacity="auto"),
                             RecordingEngine())
    default = manager.engines.get("d")
    assert default.profile is DEFAULT_PROFILE and default.profile_source == "default"
    assert default.latency_capacity == 6144


async def test_a_returning_engine_is_costed_with_its_new_profile(manager):
    await manager.add_engine(EngineSpec(name="r", in_process=True, latency_capacity="auto"),
                             RecordingEngine())
    state = manager.engines.get("r")
    assert state.latency_capacity == 6144
    manager.health.mark_down(state, "restarted")
    # back (a restarted process measures itself again): its new profile applies
    await manager.add_engine(EngineSpec(name="r", in_process=True, latency_capacity="auto"),
                             ProfiledEngine(H200_LIKE))
    assert state.is_healthy and state.profile is H200_LIKE and state.latency_capacity == 20480
