"""The server's CPU per wire request, by layer, in one process and without sockets.

parrot-serve's HTTP app (`ParrotServer`: app_centric, 16 zero-latency simulated engines in
process, the same `JsonAppRunner` and front door) is driven through aiohttp's own connection
handler with in-memory transports: each of 32 connections (one session each) sends
bench_manager's B workload as raw HTTP/1.1 bytes (submit + get per call, the headers
aiohttp's client sends) and reads the answer back. So every server layer runs, from the
bytes of a request to the bytes of its answer, and nothing else does: no kernel, no client
process, no scheduling noise from other work on the machine. The loop is uvloop, logging at
WARNING (bench_manager's parrot-serve).

Prints the CPU time per call (`time.process_time` over the run; the in-memory client's share
is a few µs of it) for each round, and with `--profile` the same run under
cProfile, summed into layers (µs per HTTP request: cumulative time of each layer's functions,
or own time where a layer wraps others). cProfile's overhead inflates every figure, so
compare profiled columns with profiled ones only.

    python bench/profile_http.py [--calls 3000] [--rounds 5] [--no-gc] [--gets | --chains]
        [--profile]
        [--top 40] [--dump FILE]

`--chains` runs bench_manager's D workload instead (chains of 10 dependent calls, each chain
one submit_batch and one get): the manager's per-call path with the HTTP cost spread over
ten calls.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import logging
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from parrot.cli.limits import settle_heap  # noqa: E402
from parrot.serve_config import ServeConfig  # noqa: E402
from parrot.server.service import ParrotServer  # noqa: E402
from serve_subprocess import zero_latency_engines  # noqa: E402
from bench_manager import chain_batch  # noqa: E402

CONCURRENCY = 32

# (layer, ((file suffix, function name), ...), own): the layer's time is the summed cumulative
# time of its functions, or their own time (`own`: a layer that wraps other layers) plus
# what they call outside this file list's functions where `extra` names the callees' files.
LAYERS: tuple[tuple[str, tuple[tuple[str, str], ...], bool, tuple[str, ...]], ...] = (
    ("aiohttp: parse request (data_received)", (("web_protocol.py", "data_received"),),
     False, ()),
    ("aiohttp: connection loop + request task (own)", (("web_protocol.py", "start"),
                                                      ("web_protocol.py", "_handle_request")),
     True, ("web_request.py", "web_protocol.py", "http_writer.py", "helpers.py",
            "asyncio/")),
    ("aiohttp: app + route resolve (own)", (("web_app.py", "_handle"),), True,
     ("web_urldispatcher.py", "web_app.py", "asyncio/", "web_request.py", "helpers.py")),
    ("aiohttp: write reply (finish_response)", (("web_protocol.py", "finish_response"),),
     False, ()),
    ("the one middleware (Front: 413, JSON errors, timing; own)",
     (("http_api.py", "middleware"), ("http_api.py", "_too_large")), True,
     ("web_request.py", "helpers.py", "web_urldispatcher.py")),
    ("request metrics (observe_request: labels, counters, log)",
     (("metrics.py", "observe_request"),), False, ()),
    ("_fix_request_current_app (aiohttp, own)", (("web_middlewares.py", "impl"),), True, ()),
    ("dispatch (own, incl. headers, serving_http)", (("http_api.py", "dispatch"),), True,
     ("web_request.py", "helpers.py", "off_loop.py:serving_http", "http_api.py:bearer_token",
      "multidict")),
    ("gate + route lookup (admit)", (("wire_routes.py", "admit"),), False, ()),
    # (a read under wait_for runs in a task of its own: its time is not read_json's)
    ("read body (read_nowait; request.read, wait_for)", (("streams.py", "read_nowait"),
                                                         ("web_request.py", "read"),
                                                         ("asyncio/tasks.py", "wait_for")),
     False, ()),
    ("JSON parse (parse_json_body)", (("json_body.py", "parse_json_body"),), False, ()),
    ("route run (regex quota)", (("wire_routes.py", "run"),), True,
     ("transforms.py", "contextlib.py")),
    ("route: submit (all of it)", (("wire_routes.py", "submit"),), False, ()),
    ("route: get (all of it)", (("wire_routes.py", "get"),), False, ()),
    ("  codec decode (from_wire)", (("codec.py", "from_wire"), ("calls.py", "from_wire")),
     False, ()),
    ("  manager.submit", (("manager/manager.py", "submit"),), False, ()),
    ("reply encode (to_wire)", (("codec.py", "to_wire"),), False, ()),
    ("reply JSON (json.dumps)", (("json/__init__.py", "dumps"),), False, ()),
    ("reply object (web.Response)", (("web_response.py", "__init__"),), False, ()),
)


class MemoryTransport:
    """The transport aiohttp's connection handler writes to: bytes are only collected here
    (the client parses them in its own coroutine, outside the server's layers)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.written: asyncio.Future[None] | None = None
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default)

    def write(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.buffer += chunk
        self._wake()

    def _wake(self) -> None:
        if self.written is not None and not self.written.done():
            self.written.set_result(None)

    def answer(self) -> tuple[int, bytes] | None:
        """The first complete answer in the buffer (by its Content-Length), taken out."""
        head, sep, rest = bytes(self.buffer).partition(b"\r\n\r\n")
        if not sep:
            return None
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines
                      if line.lower().startswith(b"content-length:"))
        if len(rest) < length:
            return None
        del self.buffer[:len(head) + 4 + length]
        return int(lines[0].split()[1]), rest[:length]

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Connection:
    """One client connection: raw HTTP/1.1 requests, as aiohttp's client writes them."""

    def __init__(self, server: Any) -> None:
        self.transport = MemoryTransport()
        self.protocol = server()
        self.protocol.connection_made(self.transport)

    async def post(self, path: str, body: dict[str, Any] | None, token: str | None = None
                   ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else b""
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1:8000", "Accept: */*",
                "Accept-Encoding: gzip, deflate", "User-Agent: Python/3.11 aiohttp/3.14.5"]
        if token is not None:
            head.append(f"Authorization: Bearer {token}")
        if body is not None:
            head.append("Content-Type: application/json")
        head.append(f"Content-Length: {len(data)}")
        loop = asyncio.get_running_loop()
        self.protocol.data_received(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        while (answer := self.transport.answer()) is None:
            self.transport.written = loop.create_future()
            await self.transport.written
        status, reply = answer
        answer: dict[str, Any] = json.loads(reply)
        if status != 200:
            raise RuntimeError(answer)
        return answer


async def worker(server: Any, calls: int, gets_only: bool = False) -> None:
    """bench_manager's B: submit + get per call. `gets_only`: one call, then `calls` gets of
    its finished output (the front door's cost with as little manager work as a route has)."""
    conn = Connection(server)
    s = await conn.post("/v1/sessions", None)
    sid, token = s["session_id"], s["token"]
    binding = {"name": "x", "in_out": "input", "value": "start"}
    var = ""
    for i in range(calls):
        if not gets_only or i == 0:
            reply = await conn.post("/v1/submit", {
                "session_id": sid, "prompt": "Go on: {{input:x}} {{output:y}}",
                "placeholders": [binding], "sampling": {"max_tokens": 4}}, token)
            var = reply["placeholders"][-1]["semantic_var_id"]
        await conn.post("/v1/get", {"session_id": sid, "semantic_var_id": var,
                                    "criteria": "latency"}, token)


CHAIN = 10


async def chain_worker(server: Any, calls: int) -> None:
    """bench_manager's D: chains of CHAIN dependent calls, each chain one submit_batch and one
    get of its last output."""
    conn = Connection(server)
    s = await conn.post("/v1/sessions", None)
    sid, token = s["session_id"], s["token"]
    for _ in range(max(1, calls // CHAIN)):
        reply = await conn.post("/v1/submit_batch",
                                {"session_id": sid, "calls": chain_batch(CHAIN)}, token)
        var = reply["results"][-1]["placeholders"][-1]["semantic_var_id"]
        await conn.post("/v1/get", {"session_id": sid, "semantic_var_id": var,
                                    "criteria": "latency"}, token)


async def measure(calls: int, rounds: int, profile: bool, policy: str, no_gc: bool,
                  gets_only: bool, chains: bool = False
                  ) -> list[tuple[float, pstats.Stats | None]]:
    """Per round: (CPU µs per call, or per get with `gets_only`; the round's profile)."""
    config = ServeConfig.from_mapping({"manager": {"port": 0}, "policy": {"name": policy},
                                       "engines": zero_latency_engines(16, in_process=True)})
    server = ParrotServer(config)
    await server.start("127.0.0.1", 0)
    assert server._runner is not None and server._runner.server is not None
    handler_factory = server._runner.server
    per_worker = max(1, calls // CONCURRENCY)
    out = []
    try:
        await asyncio.gather(*(worker(handler_factory, 20) for _ in range(8)))  # warm-up
        if no_gc:
            gc.collect()
            gc.disable()
        else:
            settle_heap(logging.getLogger("profile_http"))   # as parrot-serve does once ready
        for _ in range(rounds):
            profiler = cProfile.Profile() if profile else None
            cpu = time.process_time()
            if profiler is not None:
                profiler.enable()
            await asyncio.gather(*(
                chain_worker(handler_factory, per_worker) if chains
                else worker(handler_factory, per_worker, gets_only) for _ in range(CONCURRENCY)))
            if profiler is not None:
                profiler.disable()
            used = time.process_time() - cpu
            out.append((used / (per_worker * CONCURRENCY) * 1e6,
                        pstats.Stats(profiler) if profiler is not None else None))
    finally:
        gc.enable()
        await server.stop()
    return out


def _matches(key: tuple[str, int, str], functions: tuple[tuple[str, str], ...]) -> bool:
    return any(key[0].endswith(suffix) and key[2] == name for suffix, name in functions)


def layers(stats: pstats.Stats, requests: int) -> list[tuple[str, float]]:
    """µs per HTTP request of each layer."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    listed = tuple(f for _, functions, _, _ in LAYERS for f in functions)
    rows = []
    for layer, functions, own, extra in LAYERS:
        seconds = 0.0
        for key, (_cc, _nc, tt, ct, callers) in raw.items():
            if _matches(key, functions):
                # a cumulative layer leaves out what its own functions call of each other
                seconds += tt if own else ct - sum(
                    c[3] for caller, c in callers.items()
                    if caller != key and _matches(caller, functions))
            elif own and extra and not _matches(key, listed) and any(
                    m in key[0] or m == f"{Path(key[0]).name}:{key[2]}" for m in extra):
                seconds += sum(c[3] for caller, c in callers.items()
                               if _matches(caller, functions))
        rows.append((layer, seconds / requests * 1e6))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--policy", default="app_centric")
    parser.add_argument("--profile", action="store_true", help="under cProfile, by layer")
    parser.add_argument("--gets", action="store_true",
                        help="each session submits one call, then only gets its output: the "
                             "front door's cost per request, with little manager work")
    parser.add_argument("--chains", action="store_true",
                        help="bench_manager's D instead: chains of 10 calls, each chain one "
                             "submit_batch and one get (CPU per call)")
    parser.add_argument("--no-gc", action="store_true",
                        help="the garbage collector off during the rounds: its cost grows with "
                             "the heap the sessions leave, and without it the figure is steady "
                             "to about 1%% (for comparing two versions of the per-request path)")
    parser.add_argument("--top", type=int, default=0, help="also the top N functions by own time")
    parser.add_argument("--dump", default=None, help="keep the merged profile here (pstats)")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = runner(measure(args.calls, args.rounds, args.profile, args.policy, args.no_gc,
                             args.gets, args.chains))
    cpu = [us for us, _ in results]
    mode = ("under cProfile" if args.profile else "no profiler") + (", GC off" if args.no_gc
                                                                       else "")
    unit = ("get" if args.gets else "call (a tenth of a submit_batch + get)" if args.chains
            else "call (submit + get)")
    print(f"load average at start {load}; {args.calls} calls x {args.rounds} rounds {mode}: "
          f"CPU µs per {unit}, per round: {' '.join(f'{us:.0f}' for us in cpu)}")
    if not args.profile:
        return
    merged = results[0][1]
    assert merged is not None
    for _, stats in results[1:]:
        merged.add(stats)
    per_round = args.calls // CONCURRENCY * CONCURRENCY
    requests = (1 if args.gets else 0.2 if args.chains else 2) * per_round * len(results)
    print("\n| layer | µs per HTTP request (under cProfile) |\n|---|---:|")
    for layer, us in layers(merged, requests):
        print(f"| {layer} | {us:.1f} |")
    if args.dump:
        merged.dump_stats(args.dump)
    if args.top:
        merged.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
