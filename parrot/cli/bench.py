"""parrot-bench: compare scheduling policies and frontend modes on one workload.

    parrot-bench --workload chain_summary --compare app_centric,least_queue:baseline --out DIR
    parrot-bench --workload map_reduce --compare app_centric,latency_centric --out DIR
    parrot-bench --workload chain_summary --mode live --config policies.yaml --out DIR

Simulation (default) runs a Manager and N simulated engines (latency profile of LLaMA-13B on an
A100 by default) on a virtual clock: deterministic for a seed, minutes of traffic in seconds.
Live mode starts parrot-serve from --config with each policy and runs the same workload over
HTTP in real time. Writes DIR/results.json and PNG plots; prints a table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from parrot.errors import InvalidRequestError
from parrot.sim.cluster import ClusterSpec
from parrot.sim.compare import (CompareError, Settings, Variant, parse_variants)
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.spec import CHAT_ARRIVALS, OUTPUT_LENGTHS, WorkloadSpec
from parrot.validation import key_value
from parrot.cli.bench_run import (Progress, format_failures, format_table,  # noqa: F401
                                  run_comparison)

# --option dest -> WorkloadSpec field; unset options take the workload's default, then the spec's.
SPEC_OPTIONS = {"apps": "num_apps", "doc_tokens": "doc_tokens", "chunk_tokens": "chunk_tokens",
                "output_tokens": "output_tokens", "chat_rate": "chat_rate",
                "max_chat_s": "max_chat_s", "clients": "num_clients",
                "request_rate": "request_rate", "requests": "num_requests",
                "system_prompt_tokens": "system_prompt_tokens", "prompt_scale": "prompt_scale",
                "rounds": "rounds", "chat_arrivals": "chat_arrivals",
                "job_offsets": "job_offsets", "output_lengths": "output_lengths",
                "max_tokens_factor": "max_tokens_factor"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parrot-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workload", choices=sorted(WORKLOADS))
    p.add_argument("--compare", help="comma-separated policy[:parrot|baseline] items "
                   "(default depends on the workload, e.g. app_centric,least_queue:baseline)")
    p.add_argument("--mode", choices=("sim", "live"), default="sim")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engines", type=int, help="simulated engines (sim mode; default: the "
                   "workload's, 4 for gpts and mixed, else 1)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--reference", help="variant the speedups are relative to "
                   "(default: the last one of --compare)")
    w = p.add_argument_group("workload")
    w.add_argument("--apps", type=int, help="main applications, one after another (1; "
                   "mixed: jobs, 30)")
    w.add_argument("--doc-tokens", type=int, help="tokens per document (20480)")
    w.add_argument("--chunk-tokens", type=int, help="tokens per chunk (1024)")
    w.add_argument("--output-tokens", type=int, help="tokens per LLM call (50; copilot and "
                   "gpts 100, multi_agent 200)")
    w.add_argument("--output-lengths", choices=OUTPUT_LENGTHS,
                   help="sampled (default): each call's real length is drawn and hidden from "
                   "the service under a loose max_tokens cap; exact: max_tokens is the length "
                   "(ignore_eos; the paper experiments' setting)")
    w.add_argument("--max-tokens-factor", type=float,
                   help="sampled lengths: max_tokens = this x the mean length (4.0)")
    w.add_argument("--chat-rate", type=float, help="background chat requests/s "
                   "(default 1.0 for chain_summary_bg and mixed, else 0)")
    w.add_argument("--chat-prompt-tokens", default="128:1024", metavar="LOW:HIGH")
    w.add_argument("--chat-output-tokens", default="64:512", metavar="LOW:HIGH")
    w.add_argument("--chat-arrivals", choices=CHAT_ARRIVALS,
                   help="chats at chat_rate as a seeded Poisson process (default) or one every "
                   "1/chat_rate seconds (uniform, as the paper's artifact sends them)")
    w.add_argument("--max-chat-s", type=float, help="chats arrive at fixed times in "
                   "[0, this) whatever the main apps do (300 for chain_summary_bg, 60 mixed)")
    w.add_argument("--clients", type=int, help="concurrent_chains: clients; copilot: users; "
                   "multi_agent: files (10 / 32 / 8)")
    w.add_argument("--request-rate", type=float, help="gpts: Poisson requests/s (2.0); "
                   "mixed: map-reduce jobs/s (0.5)")
    w.add_argument("--job-offsets", type=_offsets, metavar="S1,S2,...",
                   help="mixed: the jobs' arrival times, seconds from the start, in order "
                   "(replaces --apps and --request-rate)")
    w.add_argument("--requests", type=int, help="gpts: number of requests (100)")
    w.add_argument("--system-prompt-tokens", type=int, help="copilot: shared prompt (6000)")
    w.add_argument("--prompt-scale", type=float, help="gpts: system prompt lengths x this (1.0)")
    w.add_argument("--rounds", type=int, help="multi_agent: review/revise rounds (3)")
    c = p.add_argument_group("cluster")
    c.add_argument("--profile", default="a100_llama13b",
                   help="latency profile (name in configs/profiles/ or a path)")
    c.add_argument("--latency-capacity", type=_capacity, default=6144, metavar="TOKENS|auto",
                   help="tokens (default: 6144, the paper's on its A100); auto: the load "
                        "where the profile's decode step takes 40/22 of the empty batch's, "
                        "the paper's rule (20,480 on h200_llama7b)")
    c.add_argument("--throughput-capacity", type=int, default=None,
                   help="tokens; default: each engine's share of its KV cache (32,768 of the "
                        "A100 profile's 56,000; 119,808 on h200_llama7b)")
    c.add_argument("--network-delay-ms", default="200:300", metavar="LOW:HIGH",
                   help="uniform delay of every client-service message")
    c.add_argument("--policy-param", action="append", default=[], metavar="POLICY.KEY=VALUE",
                   help="e.g. latency_centric.token_capacity=4096 (repeatable)")
    c.add_argument("--engine-param", action="append", default=[], metavar="KEY=VALUE",
                   help="simulated engine parameter over the profile, every variant "
                   "(repeatable); one variant's: --compare POLICY+engine.KEY=VALUE")
    c.add_argument("--config", help="live mode (required there): a parrot-serve YAML, or a "
                   "shipped config's name (policies, sim)")
    m = p.add_argument_group("sweeps and rate searches")
    m.add_argument("--sweep", metavar="FIELD=V1,V2,...", help="run the comparison once per "
                   "value of a workload field, e.g. output_tokens=25,50,75,100")
    m.add_argument("--sustainable-rate", type=float, metavar="S_PER_TOKEN",
                   help="search each variant's highest request rate whose mean latency per "
                   "output token stays within this target (gpts)")
    m.add_argument("--rate-window-s", type=float, default=10.0,
                   help="--sustainable-rate: requests arrive over this many seconds")
    m.add_argument("--max-rate", type=float, default=256.0,
                   help="--sustainable-rate: the search stops here (reported as >=)")
    m.add_argument("--no-point-plots", action="store_true",
                   help="--sweep: only the sweep's own plot, none per value")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _capacity(text: str) -> int | None:
    """--latency-capacity: a whole number of tokens >= 1, or auto (None)."""
    if text == "auto":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of tokens >= 1, or auto")
    return int(text)


def _offsets(text: str) -> tuple[float, ...]:
    """--job-offsets: comma-separated seconds (the spec checks their range and order)."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: comma-separated seconds, e.g. 15,15.5,16") from None


def _range(parser: argparse.ArgumentParser, option: str, text: str,
           kind: type = int) -> tuple[Any, Any]:
    try:
        low, high = (kind(x) for x in text.split(":"))
    except ValueError:
        parser.error(f"{option}: {text!r} is not valid; expected LOW:HIGH, e.g. 200:300")
    return low, high


def _policy_params(parser: argparse.ArgumentParser,
                   items: Sequence[str]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {}
    for item in items:
        pair = key_value(item)
        policy, dot, name = pair[0].rpartition(".") if pair else ("", "", "")
        if pair is None or not dot or not policy or not name:
            parser.error(f"--policy-param: {item!r} is not valid; expected POLICY.KEY=VALUE, "
                         "e.g. latency_centric.token_capacity=4096")
        params.setdefault(policy, {})[name] = pair[1]
    return params


def workload_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The WorkloadSpec fields: options given on the command line over the workload's own
    defaults (the spec's defaults cover the rest)."""
    fields = dict(WORKLOADS[args.workload].spec_defaults)
    for dest, name in SPEC_OPTIONS.items():
        if getattr(args, dest) is not None:
            fields[name] = getattr(args, dest)
    return fields


def _key_values(parser: argparse.ArgumentParser, option: str,
                items: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        pair = key_value(item)
        if pair is None:
            parser.error(f"{option}: {item!r} is not valid; expected KEY=VALUE, "
                         "e.g. shared_prefix_decode=false")
        params[pair[0]] = pair[1]
    return params


def parse_settings(parser: argparse.ArgumentParser,
                   args: argparse.Namespace) -> tuple[Settings, list[Variant], Variant]:
    try:
        definition = WORKLOADS[args.workload]
        variants = parse_variants(args.compare or definition.default_compare)
        workload = WorkloadSpec(**workload_fields(args),
            chat_prompt_tokens=_range(parser, "--chat-prompt-tokens", args.chat_prompt_tokens),
            chat_output_tokens=_range(parser, "--chat-output-tokens", args.chat_output_tokens),
            seed=args.seed)
        low, high = _range(parser, "--network-delay-ms", args.network_delay_ms, float)
        engines = args.engines if args.engines is not None else definition.num_engines
        engine_params = _key_values(parser, "--engine-param", args.engine_param)
        if args.mode == "live" and engine_params:
            raise CompareError("--engine-param: simulation only; live engines take their "
                               "params from --config (per variant: POLICY+engine.KEY=VALUE)")
        cluster = ClusterSpec(num_engines=engines, profile=args.profile,
                              engine_params=engine_params,
                              latency_capacity=args.latency_capacity,
                              throughput_capacity=args.throughput_capacity,
                              network_delay_s=(low / 1000.0, high / 1000.0))
        settings = Settings(args.workload, args.mode == "live", args.seed, cluster, workload,
                            _policy_params(parser, args.policy_param), args.config)
        unused = sorted(set(settings.policy_params) - {v.policy for v in variants})
        if unused:
            raise CompareError(f"--policy-param: {unused} not in --compare "
                               f"{[v.policy for v in variants]}")
        for variant in variants:  # unknown policies and bad params fail before any run
            # Live engines (builtin, ...) check their own params when they start; only the
            # simulated engine's are known here.
            sim_params = {} if settings.live else variant.engine_params
            ClusterSpec(policy=variant.registry_name, policy_params=settings.params_for(variant),
                        profile=args.profile,
                        engine_params={**cluster.engine_params, **sim_params})
        reference = variants[-1]
        if args.reference is not None:
            matches = [v for v in variants if args.reference in (v.label, v.policy)]
            if len(matches) != 1:
                raise CompareError(f"--reference: {args.reference!r} must name one variant of "
                                   f"{[v.label for v in variants]}")
            reference = matches[0]
    except (CompareError, ValueError, InvalidRequestError) as exc:  # ConfigError is the latter
        parser.error(str(exc))
    return settings, variants, reference


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workload is None:
        parser.error("--workload is required")
    if args.config is not None:
        from parrot.cli.serve import resolve_config

        args.config = str(resolve_config(args.config))   # a shipped config's name works too
    settings, variants, reference = parse_settings(parser, args)
    if args.mode == "live" and args.config is None:
        # Live mode runs real engines; which ones is the user's choice, never a guess.
        print("parrot-bench: --mode live needs --config: the parrot-serve YAML whose engines "
              "to run (e.g. --config policies.yaml, or --config sim for simulated engines)",
              file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out: cannot create {str(args.out)!r}: {exc}")
    if args.sweep is not None:
        from parrot.cli.bench_modes import run_sweep

        return run_sweep(parser, args, settings, variants, reference)
    if args.sustainable_rate is not None:
        from parrot.cli.bench_modes import run_rate_search

        return run_rate_search(parser, args, settings, variants, reference)
    results, ok = run_comparison(settings, variants, reference, args.out, quiet=args.quiet,
                                 plots=not args.no_plots)
    print(format_table(results))
    failures = format_failures(results)
    if failures:
        print(failures)
    print(f"\nwrote {args.out / 'results.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
