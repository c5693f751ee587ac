"""A serving benchmark in the style of vLLM's benchmark_serving.py, against the OpenAI route of
a running parrot-serve (`POST /v1/completions`, streamed).

    python bench/bench_serving.py --url http://127.0.0.1:9000 --num-prompts 400 \\
        --max-concurrency 64,256 --request-rate inf --out results.json

Traffic: synthetic chat requests, prompt and output lengths drawn (seeded) from lognormal
distributions shaped like public chat traces (ShareGPT-like: prompts of a few hundred
tokens with a long tail, answers of ~200 tokens with a long tail), both clipped. Each request
is sent either at a Poisson rate (`--request-rate`, a list: a sweep; `inf`: all at once) or
with at most `--max-concurrency` in flight (a list: a sweep), or both. The requests, sending
and timing them, and a run's statistics are serving_load.py; this file is the CLI, the servers
(`--serve`), the floor and the report.

Lengths (`--lengths`): `exact` (default, any engine) sends max_tokens = the drawn length with
`ignore_eos`, as vLLM's random dataset does; `hidden` sends a loose cap (`--cap-factor` x the
mean) and writes the drawn length into the prompt as the simulated engine's end-of-sequence
marker (parrot/engines/sim_eos.py), so the service cannot see it (simulated engines only).

With `--serve CONFIG --policies A,B` it starts parrot-serve from CONFIG once per policy
(`--engine-param KEY=VALUE` over every engine's params), warms it with a few untimed requests,
waits until its engines stop capturing the CUDA graphs their warm-up left for idle time
(`lazy_graphs`: timing starts on a warm engine), runs every spec against it and stops it:
policies side by side on the same engines and load. Each run's JSON row then also counts the
graphs captured while serving during it (`graph_captures_at_runtime`, and the seconds they
stalled: a warm engine has none).

    python bench/bench_serving.py --serve configs/serving_h200_llama7b.yaml \
        --policies least_queue,app_centric --max-concurrency 64,256 --num-prompts 400

With `--floor` (and `--serve`, one builtin engine) each run also gets its floor for the exact
token mix it completed (bench/serving_floor.py): prompt FLOPs at the dense matmul rate plus
every engine step's weight reads and every decode token's KV reads at the copy rate, both
measured on this machine before the server starts, added as if nothing overlapped; the table
shows the floor and wall / floor.

Per run: completed and failed requests, duration, request and output-token throughput, TTFT,
ITL (time between streamed chunks), TPOT ((E2E - TTFT) / (output tokens - 1)) and E2E at
p50/p90/p99, and goodput (requests per second meeting `--slo-ttft-ms` and `--slo-tpot-ms`).
Prints one table and writes JSON (`--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402

import_parrot()     # --floor reads the engine's config through parrot (a checkout on a GPU)

from serving_floor import (ModelCost, Rates, measure_rates, model_cost,  # noqa: E402
                           serving_floor)
from serve_metrics import (RUNTIME_CAPTURE_S, RUNTIME_CAPTURES,  # noqa: E402
                           grown, idle_captures, server_metrics, settle_idle_captures,
                           steps_total)
from provenance import provenance  # noqa: E402
from report import record  # noqa: E402
from serving_report import markdown  # noqa: E402

from serving_load import (Outcome, Request, RunSpec, run_one, summarize,  # noqa: E402
                          synthetic_chat, with_sampling)

def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (f"{'policy':>12} {'rate':>6} {'conc':>5} {'done':>5} {'req/s':>7} {'tok/s':>8} "
            f"{'TTFT p50/p90/p99 ms':>22} {'ITL p50/p99 ms':>15} {'TPOT p50/p99 ms':>16} "
            f"{'E2E p50/p99 s':>14} {'goodput':>8} {'TPOT<=SLO':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        t, i, p, e = r["ttft_ms"], r["itl_ms"], r["tpot_ms"], r["e2e_ms"]
        lines.append(
            f"{r.get('policy', ''):>12} "
            f"{r['request_rate']:>6} {str(r['max_concurrency'] or '-'):>5} {r['completed']:>5} "
            f"{r['request_throughput']:>7.2f} {r['output_throughput']:>8.1f} "
            f"{t['p50']:>7.0f}/{t['p90']:.0f}/{t['p99']:.0f}".rjust(23)
            + f"{i['p50']:>8.1f}/{i['p99']:.1f}".rjust(16)
            + f"{p['p50']:>8.1f}/{p['p99']:.1f}".rjust(17)
            + f"{e['p50'] / 1000:>7.2f}/{e['p99'] / 1000:.2f}".rjust(15)
            + f"{r['goodput']:>9.2f}"
            + (f"{r['tpot_within_slo']:>10.1%}" if r.get("tpot_within_slo") is not None
               else f"{'-':>10}")
            + (f"  floor {r['floor']['total_s']:.2f} s ({r['floor']['prefill_s']:.2f} prefill"
               f" + {r['floor']['decode_s']:.2f} decode), wall {r['floor']['wall_over_floor']:.2f}x"
               if r.get("floor") else ""))
    return "\n".join(lines)


async def model_of(url: str, headers: dict[str, str]) -> str:
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{url}/v1/models", headers=headers) as reply:
            reply.raise_for_status()
            data = await reply.json()
    return str(data["data"][0]["id"])


def _strict(value: Any) -> Any:
    """`value` as strict JSON: NaN -> null, infinities -> "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else "inf"
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def _spec(text: str) -> RunSpec:
    """RATE[@CONCURRENCY] -> a RunSpec (RATE: requests/s or inf)."""
    rate, _, conc = text.partition("@")
    try:
        return RunSpec(float(rate), int(conc) if conc else None)
    except ValueError:
        raise SystemExit(f"--specs: {text!r} is not RATE[@CONCURRENCY]") from None


def _floats(text: str) -> list[float]:
    return [math.inf if x.strip() == "inf" else float(x) for x in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running parrot-serve's base URL (or --serve)")
    p.add_argument("--serve", type=Path, metavar="CONFIG",
                   help="start parrot-serve from this YAML, once per --policies")
    p.add_argument("--policies", default="",
                   help="--serve: comma-separated policy names (default: the config's)")
    p.add_argument("--engine-param", action="append", default=[], metavar="KEY=VALUE",
                   help="--serve: set on every engine's params (YAML value), repeatable")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --serve: run every policy this many times, each round in the "
                        "other order from the round before (A B, B A, ...), each run on a "
                        "parrot-serve of its own; the page compares policies round by round "
                        "and by the geometric mean over the rounds")
    p.add_argument("--warmup", type=int, default=16,
                   help="--serve: untimed requests first (graphs, kernels), 0 for none")
    p.add_argument("--api-key", help="a tenant's API key (when the server has tenants)")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--request-rate", default="inf",
                   help="Poisson requests/s, comma-separated for a sweep; inf: all at once")
    p.add_argument("--max-concurrency", default="",
                   help="at most this many in flight, comma-separated for a sweep")
    p.add_argument("--specs", default="",
                   help="runs as RATE[@CONCURRENCY], comma-separated (e.g. inf@64,inf@256,10,20),"
                        " instead of every --request-rate x --max-concurrency")
    p.add_argument("--lengths", choices=("exact", "hidden"), default="exact")
    p.add_argument("--cap-factor", type=float, default=4.0,
                   help="hidden lengths: max_tokens = this x the mean output length")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="every request's temperature (0: greedy, the default; chat traffic "
                        "samples: OpenAI's default is 1.0)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--floor", action="store_true",
                   help="with --serve and one builtin engine: print each run's floor for the "
                        "tokens it sent (prompt FLOPs at the measured matmul rate + every "
                        "step's weights and KV reads at the measured copy rate) and wall/floor")
    p.add_argument("--label", default="", help="a name for this run in the JSON")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--md", type=Path,
                   help="write the results as a markdown page here (serving_report.py): "
                        "date, commit, GPU, command, the runs, and each policy against the "
                        "first one run")
    return p


def floor_of(outcomes: Sequence[Outcome], steps: int, seconds: float, cost: ModelCost,
             rates: Rates) -> dict[str, Any]:
    """The run's floor (serving_floor.py) for the token mix it completed, and wall / floor."""
    done = [(o.prompt_tokens, o.output_tokens) for o in outcomes if o.ok]
    floor = serving_floor(done, steps, cost, rates)
    return {"steps": steps, "prefill_s": floor.prefill_s, "decode_s": floor.decode_s,
            "total_s": floor.total_s, "wall_over_floor": seconds / floor.total_s,
            "matmul_tflops": rates.matmul_flops_per_s / 1e12,
            "copy_gb_s": rates.copy_bytes_per_s / 1e9}


@dataclass(frozen=True)
class FloorInputs:
    """What `--floor` needs besides the run and the server's /metrics (its engines' steps):
    the served model's cost and this machine's rates."""

    cost: ModelCost
    rates: Rates


async def run_specs(url: str, headers: dict[str, str], model: str | None,
                    requests: Sequence[Request], specs: Sequence[RunSpec],
                    args: argparse.Namespace, policy: str,
                    floor: FloorInputs | None = None,
                    admin_token: str = "") -> list[dict[str, Any]]:
    """Each spec's row; with the server's `admin_token` (its /metrics), also the graphs its
    engines captured while serving during that run (each stalls a step: a warm engine
    captures none), and with `floor` the run's floor from its engines' steps."""
    model = model or await model_of(url, headers)
    rows = []
    for spec in specs:
        before = await server_metrics(url, admin_token) if admin_token else ""
        outcomes, seconds = await run_one(url, model, headers, requests, spec, args.seed)
        row = summarize(outcomes, seconds, spec, args.slo_ttft_ms, args.slo_tpot_ms)
        if admin_token:
            after = await server_metrics(url, admin_token)
            row["graph_captures_at_runtime"] = int(grown(before, after, RUNTIME_CAPTURES))
            row["graph_capture_s_at_runtime"] = round(grown(before, after, RUNTIME_CAPTURE_S),
                                                      3)
            if floor is not None:
                steps = steps_total(after) - steps_total(before)
                row["floor"] = floor_of(outcomes, steps, seconds, floor.cost, floor.rates)
        rows.append({"policy": policy, **row})
        print(f"[{policy or 'server'}] " + table([row]).splitlines()[-1], file=sys.stderr)
    return rows


def serve_config(path: Path, policy: str | None, engine_params: Sequence[str]
                 ) -> dict[str, Any]:
    """The YAML at `path` with its policy replaced and `KEY=VALUE` set on every engine."""
    config = yaml.safe_load(path.read_text())
    if policy:
        config["policy"] = {**(config.get("policy") or {}), "name": policy}
    for item in engine_params:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--engine-param: {item!r} is not KEY=VALUE")
        for engine in config.get("engines", []):
            engine.setdefault("params", {})[key] = yaml.safe_load(value)
    config.setdefault("manager", {}).update({"host": "127.0.0.1", "port": 0})
    return config


def floor_inputs(args: argparse.Namespace) -> FloorInputs:
    """The served model's cost and this machine's rates, measured before the server starts
    (the GPU idle), for `--floor`: one builtin engine in the config."""
    import torch

    engines = serve_config(args.serve, None, args.engine_param).get("engines", [])
    if len(engines) != 1 or engines[0].get("kind") != "builtin":
        raise SystemExit("--floor: the config must have exactly one builtin engine")
    cost = model_cost(engines[0].get("params") or {}, torch.cuda.is_available())
    rates = measure_rates()
    print(f"floor rates: matmul {rates.matmul_flops_per_s / 1e12:.1f} TFLOP/s, copy "
          f"{rates.copy_bytes_per_s / 1e9:.0f} GB/s", file=sys.stderr)
    return FloorInputs(cost, rates)


def round_order(policies: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, policy) in the order they run: every policy each round, each round in the
    other order from the round before, so that neither is always the first server started
    on the machine (one server process's speed moves a few percent from another's)."""
    return [(r, policy) for r in range(rounds)
            for policy in (policies if r % 2 == 0 else list(reversed(policies)))]


async def serve_and_run(args: argparse.Namespace, requests: Sequence[Request],
                        specs: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """Each policy on a parrot-serve of its own, started from args.serve and warmed first."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serve_subprocess import start_parrot_serve

    floor = floor_inputs(args) if args.floor else None
    rows: list[dict[str, Any]] = []
    for round_, policy in round_order([p for p in args.policies.split(",") if p] or [""],
                                      args.rounds):
        config = serve_config(args.serve, policy, args.engine_param)
        proc, url, admin = await start_parrot_serve(config, timeout_s=900.0)
        try:
            model = args.model or await model_of(url, {})
            if args.warmup:
                warm = with_sampling(synthetic_chat(args.warmup, args.seed + 1, args.lengths,
                                                    args.cap_factor), args)
                await run_one(url, model, {}, warm, RunSpec(math.inf, None), args.seed)

            waited, captured = await settle_idle_captures(
                functools.partial(idle_captures, url, admin))
            print(f"[{policy or 'server'}] warm: {captured} graphs captured while idle, "
                  f"{waited:.1f} s waited for them", file=sys.stderr)
            rows += [{**row, "round": round_} for row in await run_specs(
                url, {}, model, requests, specs, args, policy, floor=floor,
                admin_token=admin)]
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (args.url is None) == (args.serve is None):
        raise SystemExit("give exactly one of --url and --serve")
    if args.floor and args.serve is None:
        raise SystemExit("--floor needs --serve (the engine's model and this machine's rates)")
    if args.num_prompts < 1:
        raise SystemExit("--num-prompts must be >= 1")
    if args.rounds < 1 or (args.rounds > 1 and args.serve is None):
        raise SystemExit("--rounds must be >= 1, and more than 1 needs --serve")
    requests = with_sampling(synthetic_chat(args.num_prompts, args.seed, args.lengths,
                                            args.cap_factor), args)
    concurrencies: list[int | None] = (
        [int(x) for x in args.max_concurrency.split(",")] if args.max_concurrency else [None])
    specs = ([_spec(item) for item in args.specs.split(",") if item] if args.specs else
             [RunSpec(rate, conc) for rate in _floats(args.request_rate)
              for conc in concurrencies])
    if args.serve is not None:
        rows = asyncio.run(serve_and_run(args, requests, specs))
        url = f"parrot-serve --config {args.serve}"
    else:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        url = args.url.rstrip("/")
        rows = asyncio.run(run_specs(url, headers, args.model, requests, specs, args, ""))
    print(table(rows))
    results = _strict({
        "label": args.label, "url": url, "lengths": args.lengths,
        "num_prompts": args.num_prompts, "seed": args.seed,
        "temperature": args.temperature, "top_p": args.top_p,
        "mean_prompt_tokens": sum(r.prompt_tokens for r in requests) / len(requests),
        "mean_output_tokens": sum(r.output_tokens for r in requests) / len(requests),
        "provenance": provenance(sys.argv if argv is None else ["bench/bench_serving.py",
                                                                 *argv]),
        "runs": rows})
    if args.out is not None:
        record(json.dumps(results, indent=2) + "\n", args.out)
    if args.md is not None:
        record(markdown(results), args.md)
    return 0 if all(r["failed"] == 0 for r in rows) else 1

if __name__ == "__main__":
    sys.exit(main())
