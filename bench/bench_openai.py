"""The OpenAI front door as a client sees it: the official `openai` client against a real
parrot-serve process. Prints a table (and --out writes it as JSON).

    python bench/bench_openai.py --engine sim      # front-door overhead (zero-latency engine)
    python bench/bench_openai.py --engine smollm2  # streaming: first token vs whole answer
    python bench/bench_openai.py --stream-cost     # manager throughput, aget vs astream

sim: sequential non-streaming completions (max_tokens 16) and chat completions; the latency is
the manager's per-request cost (HTTP, private session, one-call DAG, policy round, engine
protocol). smollm2 (CPU): the time to the first streamed chunk against the time to the whole
non-streamed answer, for the same greedy request. --stream-cost: 200 calls of 64 tokens on a
zero-latency simulated engine *process* (engine protocol over HTTP), read in-process with
`aget` (one non-streamed Generate per output) or `astream` (per-token NDJSON from the engine).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.serve_process import SIM_ENGINE, parrot_serve  # noqa: E402

ENGINES = {
    "sim": {"name": "sim-0", **SIM_ENGINE},
    "smollm2": {"name": "smol", "kind": "builtin", "in_process": True,
                "params": {"model": "smollm2", "device": "cpu", "dtype": "float32",
                           "kv_cache_tokens": 8192}},
}


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bench_sim(client: openai.OpenAI, model: str, n: int) -> list[tuple[str, float, float]]:
    completion = [timed(lambda: client.completions.create(model=model, prompt="Hello",
                                                           max_tokens=16)) for _ in range(n)]
    chat = [timed(lambda: client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=16))
        for _ in range(n)]
    return [("completion, 16 tokens", _ms(completion, 50), _ms(completion, 99)),
            ("chat, 16 tokens", _ms(chat, 50), _ms(chat, 99))]


def bench_stream(client: openai.OpenAI, model: str, n: int,
                 max_tokens: int) -> list[tuple[str, float, float]]:
    prompt = "Write a long story about a parrot who learns to fly over the sea."
    first, whole_stream, whole = [], [], []
    for _ in range(n):
        started = time.perf_counter()
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                           temperature=0, stream=True, extra_body={
                                               "ignore_eos": True})
        got_first = None
        for chunk in stream:
            if got_first is None and chunk.choices and chunk.choices[0].text:
                got_first = time.perf_counter() - started
        first.append(got_first or 0.0)
        whole_stream.append(time.perf_counter() - started)
        whole.append(timed(lambda: client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
            extra_body={"ignore_eos": True})))
    return [(f"stream: first chunk ({max_tokens} tokens)", _ms(first, 50), _ms(first, 99)),
            (f"stream: last chunk ({max_tokens} tokens)", _ms(whole_stream, 50),
             _ms(whole_stream, 99)),
            (f"no stream: whole reply ({max_tokens} tokens)", _ms(whole, 50), _ms(whole, 99))]


async def _stream_cost(readers: str, rounds: int = 3) -> float:
    """Best-of-`rounds` seconds for 200 calls x 64 tokens read with `readers`."""
    import asyncio

    import parrot
    from parrot.serve_config import ServeConfig
    from parrot.server.service import ParrotServer

    gen = parrot.semantic_function(prompt="Write about {{input:x}}: {{output:y}}",
                                   max_tokens=64, ignore_eos=True)

    async def read(var: parrot.SemanticVariable) -> str:
        if readers == "aget":
            return await var.aget()
        return "".join([piece async for piece in var.astream()])

    server = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "least_queue"},
        "engines": [{"name": "sim", "kind": "simulated", "params": {"zero_latency": True}}]}))
    await server.start(port=0)
    try:
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            async with parrot.Session(manager=server.manager):
                outputs = [gen(f"topic {i}") for i in range(200)]
                await asyncio.gather(*(read(o) for o in outputs))
            best = min(best, time.perf_counter() - started)
        return best
    finally:
        await server.stop()


def bench_stream_cost() -> list[tuple[str, float, float]]:
    import asyncio

    rows = []
    for readers in ("aget", "astream", "aget", "astream"):  # interleaved: a shared box drifts
        seconds = asyncio.run(_stream_cost(readers))
        rows.append((f"{readers}: 200 calls x 64 tokens", 1000 * seconds, 200 * 64 / seconds))
    return rows


def _ms(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    if pct == 50:
        return 1000 * statistics.median(ordered)
    return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default="sim")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--stream-cost", action="store_true")
    args = parser.parse_args()
    if args.stream_cost:
        print(f"{'readers (engine process over HTTP)':44} {'best ms':>9} {'tok/s':>9}")
        for name, ms, tok_s in bench_stream_cost():
            print(f"{name:44} {ms:9.1f} {tok_s:9.0f}")
        return 0
    n = args.requests or (200 if args.engine == "sim" else 3)
    config = {"policy": {"name": "app_centric"}, "engines": [ENGINES[args.engine]]}
    with parrot_serve(config, Path(tempfile.mkdtemp())) as (url, _):
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as client:
            model = client.models.list().data[0].id
            rows = bench_sim(client, model, n) if args.engine == "sim" \
                else bench_stream(client, model, n, args.max_tokens)
    print(f"openai client -> parrot-serve ({args.engine}, model {model}), {n} requests each, "
          f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print(f"{'request':44} {'p50 ms':>9} {'p99 ms':>9}")
    for name, p50, p99 in rows:
        print(f"{name:44} {p50:9.1f} {p99:9.1f}")
    if args.out is not None:
        args.out.write_text(json.dumps({"engine": args.engine, "model": model, "requests": n,
                                        "rows": rows, "date": time.strftime("%Y-%m-%d"),
                                        "command": " ".join(sys.argv)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
