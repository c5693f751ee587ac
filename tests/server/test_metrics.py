"""/metrics: parses with prometheus_client's parser and counts what happened; the access log."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer
from parrot.engines.launcher import relay_line
from parrot.manager.call_flow import CANCELLED
from tests.server.front_door import SLOW_ENGINE, config, new_session, one_call, running

SIM = {"kind": "simulated", "in_process": True, "params": {"zero_latency": True}}


@pytest.fixture
async def server():
    srv = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "app_centric"},
        "engines": [{"name": "sim-0", **SIM}, {"name": "sim-1", **SIM}]}))
    await srv.start(port=0)
    yield srv
    await srv.stop()


async def scrape(http: aiohttp.ClientSession, admin_token: str) -> dict[tuple[str, tuple], float]:
    async with http.get("/metrics", headers={"Authorization": f"Bearer {admin_token}"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_count_requests_calls_and_engines(server):
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.post("/v1/completions", json={"model": "simulated", "prompt": "p",
                                                      "max_tokens": 3, "n": 3}) as resp:
            assert resp.status == 200
        async with http.get("/v1/sessions/s-nope/graph") as resp:
            assert resp.status == 401  # no session's token: refused from the headers
        async with http.get("/metrics") as resp:  # per-engine prefix hits: the admin's only
            assert resp.status == 401
        m = await scrape(http, server.admin_token)
    assert m[("parrot_http_requests_total", (("method", "POST"), ("route", "/v1/completions"),
                                             ("status", "200")))] == 1
    # wire routes are labelled by their template, never by the raw path
    assert m[("parrot_http_requests_total", (("method", "GET"),
                                             ("route", "/v1/sessions/{sid}/graph"),
                                             ("status", "401")))] == 1
    assert m[("parrot_calls_finished_total", (("state", "done"),))] == 3
    assert m[("parrot_call_e2e_seconds_count", ())] == 3
    assert m[("parrot_call_ttft_seconds_count", ())] == 3
    assert m[("parrot_call_tpot_seconds_count", ())] == 3
    assert m[("parrot_policy_decision_seconds_count", ())] >= 1
    for engine in ("sim-0", "sim-1"):
        assert m[("parrot_engine_healthy", (("engine", engine),))] == 1
        assert m[("parrot_engine_kv_capacity_tokens", (("engine", engine),))] == 4096 * 16
        assert ("parrot_prefix_lookups_total", (("engine", engine), ("result", "hit"))) in m
        assert ("parrot_prefix_hit_ratio", (("engine", engine),)) in m
        # the engine's own report: all blocks free again once the calls are done
        assert m[("parrot_engine_reported_kv_blocks_capacity", (("engine", engine),))] == 4096
        assert m[("parrot_engine_reported_kv_blocks_used", (("engine", engine),))] == 0
    done = sum(v for (name, labels), v in m.items() if name == "parrot_engine_running_calls")
    assert done == 0
    assert m[("parrot_ready_calls", (("criterion", "latency"),))] == 0
    assert m[("parrot_ready_calls", (("criterion", "throughput"),))] == 0
    assert m[("parrot_sessions", ())] == 0  # the completion's private session is gone


async def test_request_counts_are_kept_per_method_route_and_status_on_every_request(server):
    """The request metrics' children are looked up once per label set: repeated requests keep
    counting, and each status, method and route counts on its own."""
    async with aiohttp.ClientSession(base_url=server.url) as http:
        sid, headers = await new_session(http)
        get = {"session_id": sid, "semantic_var_id": "v-nope"}
        for _ in range(3):
            async with http.post("/v1/get", json=get, headers=headers) as resp:
                assert resp.status == 404
        async with http.post("/v1/get", json=get) as resp:
            assert resp.status == 401
        async with http.get("/v1/get") as resp:
            assert resp.status == 405
        for _ in range(2):
            async with http.get("/healthz") as resp:
                assert resp.status == 200
        m = await scrape(http, server.admin_token)

    def count(method: str, route: str, status: int) -> float:
        return m[("parrot_http_requests_total",
                  (("method", method), ("route", route), ("status", str(status))))]

    assert count("POST", "/v1/get", 404) == 3
    assert count("POST", "/v1/get", 401) == 1
    assert count("GET", "/v1/get", 405) == 1
    assert count("GET", "/healthz", 200) == 2
    assert count("POST", "/v1/sessions", 200) == 1
    assert m[("parrot_http_request_seconds_count", (("route", "/v1/get"),))] == 5
    assert m[("parrot_http_request_seconds_count", (("route", "/healthz"),))] == 2


async def test_metric_names_follow_prometheus_conventions(server):
    """`_total` only on counters (a gauge named so reads as one to every Prometheus tool);
    every name under parrot_."""
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.get("/metrics",
                            headers={"Authorization": f"Bearer {server.admin_token}"}) as resp:
            text = await resp.text()
    families = list(text_string_to_metric_families(text))
    gauges = [f.name for f in families if f.type == "gauge"]
    assert "parrot_engine_reported_kv_blocks_capacity" in gauges
    assert not [name for name in gauges if name.endswith("_total")]
    assert all(f.name.startswith(("parrot_", "python_", "process_")) for f in families)


async def test_calls_by_state_and_sessions(server):
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.post("/v1/sessions") as resp:
            sid = (await resp.json())["session_id"]
            token = (await resp.json())["token"]
        async with http.post("/v1/submit", headers={"Authorization": f"Bearer {token}"}, json={
                "session_id": sid, "prompt": "{{input:a}} {{output:b}}",
                "placeholders": [{"name": "a", "in_out": "input", "value": "x"}],
                "sampling": {"max_tokens": 2}, "wait": True}) as resp:
            assert resp.status == 200
        m = await scrape(http, server.admin_token)
    assert m[("parrot_sessions", ())] == 1
    assert m[("parrot_calls", (("state", "done"),))] == 1
    assert m[("parrot_calls", (("state", "pending"),))] == 0


async def test_access_log_line_at_info(server, caplog):
    caplog.set_level(logging.INFO, logger="parrot.access")
    async with aiohttp.ClientSession(base_url=server.url) as http:
        async with http.get("/healthz") as resp:
            assert resp.status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "parrot.access"]
    assert len(lines) == 1 and lines[0].endswith("ms")
    assert "GET /healthz 200" in lines[0]


def test_engine_log_lines_are_relayed_at_their_level(caplog):
    relay = logging.getLogger("parrot.engine.e0")
    caplog.set_level(logging.DEBUG, logger="parrot.engine.e0")
    relay_line(relay, "2026-12-01 02:00:00,000 WARNING parrot.engine: out of blocks\n")
    relay_line(relay, "Traceback (most recent call last):\n")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "parrot.engine: out of blocks"),
        (logging.INFO, "Traceback (most recent call last):")]


async def test_outputs_stream_from_an_engine_process_only_when_read_as_a_stream():
    """Over HTTP an unwatched output is one non-streamed Generate, whose answer still says
    when its first token came (`first_token_s`: TTFT observed); a stream request streams it."""
    srv = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "least_queue"},
        "engines": [{"name": "proc", "kind": "simulated", "params": {"zero_latency": True}}]}))
    await srv.start(port=0)
    try:
        (state,) = list(srv.manager.engines)
        client, asked = state.engine, []
        whole, streamed = client.generate_all, client.generate

        async def recorded_whole(request):
            asked.append("whole")
            return await whole(request)

        def recorded_stream(request):
            asked.append("stream")
            return streamed(request)

        client.generate_all, client.generate = recorded_whole, recorded_stream
        async with aiohttp.ClientSession(base_url=srv.url) as http:
            body = {"model": "simulated", "prompt": "p", "max_tokens": 4}
            async with http.post("/v1/completions", json=body) as resp:
                assert resp.status == 200
            m = await scrape(http, srv.admin_token)
            assert asked == ["whole"]
            assert m[("parrot_call_e2e_seconds_count", ())] == 1
            assert m[("parrot_call_ttft_seconds_count", ())] == 1
            async with http.post("/v1/completions", json={**body, "stream": True}) as resp:
                assert resp.status == 200 and (await resp.read()).endswith(b"[DONE]\n\n")
            m = await scrape(http, srv.admin_token)
            assert asked == ["whole", "stream"]
            assert m[("parrot_call_e2e_seconds_count", ())] == 2
            assert m[("parrot_call_ttft_seconds_count", ())] == 2
    finally:
        await srv.stop()


def test_engine_work_counters_are_exported_in_seconds_and_tokens():
    """What an engine reports about its own work (EngineStats.counters) becomes Prometheus
    counters per engine, milliseconds as seconds; every known counter for every engine (0
    where it does not count it), and a name the manager does not know is not exported."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest

    from parrot.server.metrics import ManagerCollector
    from parrot.engines.counters import COUNTERS, engine_counters
    from parrot.engines.protocol import EngineStats

    collector = ManagerCollector(SimpleNamespace(engines=[]))
    collector.engine_stats = {"gpu-0": EngineStats(3, 0, 100, 60, 16, 640, 2, engine_counters(
        graph_captures_at_runtime=4, graph_capture_ms_at_runtime=250,
        num_steps=120, num_graph_steps=100, step_ms=1500, loop_ms=1600, prefill_tokens=9000,
        decode_tokens=2400, ahead_hits=90, ahead_misses=3, num_piecewise_steps=15,
        piecewise_step_ms=120, graph_stopgap_steps=7, jit_compiles_at_runtime=2,
        jit_compile_ms_at_runtime=380, gc_collections=40, gc_ms=55, tpot_generates=8,
        tpot_us_sum=96_000, aborted_generates=2, aborted_decode_tokens=130)),
        "newer": EngineStats(0, 0, 1, 1, 16, 0, 0, {"num_steps": 5, "fancy_new_counter": 9})}
    class Reported:
        def collect(self):
            return collector.reported()

    registry = CollectorRegistry()
    registry.register(Reported())
    m = {(s.name, tuple(sorted(s.labels.items()))): s.value
         for f in text_string_to_metric_families(generate_latest(registry).decode())
         for s in f.samples}
    label = (("engine", "gpu-0"),)
    assert m[("parrot_engine_steps_total", label)] == 120
    assert m[("parrot_engine_graph_steps_total", label)] == 100
    assert m[("parrot_engine_step_seconds_total", label)] == 1.5
    assert m[("parrot_engine_loop_seconds_total", label)] == 1.6
    assert m[("parrot_engine_prefill_tokens_total", label)] == 9000
    assert m[("parrot_engine_decode_tokens_total", label)] == 2400
    assert m[("parrot_engine_graph_captures_at_runtime_total", label)] == 4
    assert m[("parrot_engine_graph_capture_seconds_total", label)] == 0.25
    assert m[("parrot_engine_ahead_hits_total", label)] == 90
    assert m[("parrot_engine_ahead_misses_total", label)] == 3
    assert m[("parrot_engine_piecewise_steps_total", label)] == 15
    assert m[("parrot_engine_piecewise_step_seconds_total", label)] == 0.12
    assert m[("parrot_engine_graph_stopgap_steps_total", label)] == 7
    assert m[("parrot_engine_jit_compiles_at_runtime_total", label)] == 2
    assert m[("parrot_engine_jit_compile_seconds_total", label)] == 0.38
    assert m[("parrot_engine_gc_collections_total", label)] == 40
    assert m[("parrot_engine_gc_seconds_total", label)] == 0.055
    assert m[("parrot_engine_tpot_generates_total", label)] == 8
    assert m[("parrot_engine_tpot_seconds_total", label)] == pytest.approx(0.096)
    assert m[("parrot_engine_aborted_generates_total", label)] == 2
    assert m[("parrot_engine_aborted_decode_tokens_total", label)] == 130
    assert m[("parrot_engine_reported_kv_blocks_used", label)] == 40
    newer = {(name, value) for (name, labels), value in m.items()
             if labels == (("engine", "newer"),) and name.endswith("_total")}
    assert newer == {(f"{c.metric}_total", 5 if c.name == "num_steps" else 0)
                     for c in COUNTERS}


async def test_aborted_calls_and_their_tokens_are_counted():
    """A session DELETE and a client leaving an OpenAI request each abort calls on the engine:
    the counters show those calls and, for outputs streamed to the manager (a submit's
    `stream`, a streamed completion), exactly the tokens generated for them."""
    async with running(config(engine=SLOW_ENGINE)) as (server, http):
        ended: list = []
        server.manager.call_observers.append(ended.append)
        sid, auth = await new_session(http)
        async with http.post("/v1/submit", json=one_call(sid, sampling={"max_tokens": 2000},
                                                         stream=["y"]),
                             headers=auth) as resp:
            assert resp.status == 200
        session = server.manager.sessions.get(sid)
        (running_call,) = session.calls.values()
        while sum(b.stream.num_tokens for b in running_call.outputs.values()) < 3:
            await asyncio.sleep(0.01)
        async with http.delete(f"/v1/sessions/{sid}", headers=auth) as resp:
            assert resp.status == 200
        m = await scrape(http, server.admin_token)
        tokens = sum(b.stream.num_tokens for b in running_call.outputs.values())
        assert tokens >= 3
        assert m[("parrot_aborted_calls_total", ())] == 1
        assert m[("parrot_aborted_tokens_total", ())] == tokens
        # the engine counts what it decoded for the call: at least what the manager received
        engine = (("engine", "sim-0"),)
        for _ in range(200):
            if m[("parrot_engine_aborted_generates_total", engine)] == 1:
                break
            await asyncio.sleep(0.01)
            m = await scrape(http, server.admin_token)
        assert m[("parrot_engine_aborted_generates_total", engine)] == 1
        assert m[("parrot_engine_aborted_decode_tokens_total", engine)] >= tokens
        try:
            async with http.post("/v1/completions", timeout=aiohttp.ClientTimeout(total=0.5),
                                 json={"model": "simulated", "prompt": "p", "max_tokens": 2000,
                                       "n": 2, "stream": True}) as resp:
                await resp.read()
        except TimeoutError:
            pass
        for _ in range(200):
            if len([c for c in ended if c.error == CANCELLED]) == 3:
                break
            await asyncio.sleep(0.01)
        cancelled = [c for c in ended if c.error == CANCELLED]
        assert len(cancelled) == 3
        m = await scrape(http, server.admin_token)
        assert m[("parrot_aborted_calls_total", ())] == 3
        assert m[("parrot_aborted_tokens_total", ())] == sum(
            b.stream.num_tokens for c in cancelled for b in c.outputs.values())
        assert m[("parrot_aborted_tokens_total", ())] > tokens


async def test_an_aborted_call_nobody_streamed_counts_its_call_and_no_tokens():
    """An output nobody reads as it is generated runs as one whole Generate, also on an
    in-process engine: the manager holds none of its tokens until it finishes, so an abort
    counts the call and no tokens (the documented lower bound); the engine counts what it
    decoded for it."""
    async with running(config(engine=SLOW_ENGINE)) as (server, http):
        sid, auth = await new_session(http)
        async with http.post("/v1/submit", json=one_call(sid, sampling={"max_tokens": 2000}),
                             headers=auth) as resp:
            assert resp.status == 200
        (state,) = list(server.manager.engines)
        while (await state.engine.stats()).counter("decode_tokens") < 3:
            await asyncio.sleep(0.01)
        (running_call,) = server.manager.sessions.get(sid).calls.values()
        assert sum(b.stream.num_tokens for b in running_call.outputs.values()) == 0
        async with http.delete(f"/v1/sessions/{sid}", headers=auth) as resp:
            assert resp.status == 200
        engine = (("engine", state.engine_id),)
        for _ in range(200):
            m = await scrape(http, server.admin_token)
            if m[("parrot_engine_aborted_generates_total", engine)] == 1:
                break
            await asyncio.sleep(0.01)
        assert m[("parrot_aborted_calls_total", ())] == 1
        assert m[("parrot_aborted_tokens_total", ())] == 0
        assert m[("parrot_engine_aborted_decode_tokens_total", engine)] >= 3


# --- TPOT against the per-token latency target --------------------------------------------

@pytest.mark.parametrize("target_ms", [None, 40.0])
async def test_tpot_is_reported_per_engine_since_the_previous_scrape_and_against_the_target(
        target_ms):
    """One engine on the paper's A100 profile (a decode step of ~22 ms alone): after a
    completion of 12 tokens its recent TPOT is that step; with a target, the target, the
    ratio and the load that meets the target on the engine's profile. A scrape with no
    Generate finished since the previous one has no recent TPOT."""
    from parrot.manager.engine_profiles import speed_profile

    params = {} if target_ms is None else {"tpot_target_ms": target_ms}
    srv = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "app_centric", "params": params},
        "engines": [{"name": "a100", "kind": "simulated", "in_process": True,
                     "params": {"profile": "a100_llama13b"}}]}))
    await srv.start(port=0)
    try:
        async with aiohttp.ClientSession(base_url=srv.url) as http:
            async with http.get("/v1/models") as resp:
                model = (await resp.json())["data"][0]["id"]
            async with http.post("/v1/completions", json={
                    "model": model, "prompt": "p", "max_tokens": 12,
                    "ignore_eos": True}) as resp:
                assert resp.status == 200
            first = await scrape(http, srv.admin_token)
            again = await scrape(http, srv.admin_token)
    finally:
        await srv.stop()
    label = (("engine", "a100"),)
    profile = speed_profile({"profile": "a100_llama13b"})
    recent = first[("parrot_engine_tpot_recent_seconds", label)]
    assert recent == pytest.approx(profile.decode_ms(16) * 1e-3, rel=0.2)
    assert ("parrot_engine_tpot_recent_seconds", label) not in again
    target_keys = [k for k in first if k[0].startswith("parrot_engine_tpot_")
                   and k[0] != "parrot_engine_tpot_recent_seconds"
                   and not k[0].endswith("_total")]
    if target_ms is None:
        assert target_keys == []
        return
    assert first[("parrot_engine_tpot_target_seconds", label)] == 0.04
    assert first[("parrot_engine_tpot_over_target_ratio", label)] == pytest.approx(
        recent / 0.04)
    assert first[("parrot_engine_tpot_target_load_tokens", label)] == \
        profile.max_batch_tokens(40.0) > 0
    assert ("parrot_engine_tpot_over_target_ratio", label) not in again
