"""Sum up a builtin engine's step trace (engine param `step_trace`): per run, where the
engine's time went by kind of step, against a simulated engine's profile.

    python bench/step_trace_report.py TRACE.jsonl [--profile h200_llama7b_recorded]
        [--gap-s 2] [--segment -1] [--gaps 10] [--slowest 10]
    python bench/step_trace_report.py TRACE.jsonl --results RESULTS.json --run KEY/VARIANT
    python bench/step_trace_report.py TRACE.jsonl --floor 780.5:4106 [--model llama-7b]

A trace holds every step the engine ran (warm-up and several runs); it is cut into segments
wherever the engine sat idle for more than --gap-s, and each segment (or only --segment N,
negative counting from the end) gets a table: per kind of step, the steps, their time in the
loop (iteration = scheduling + model step + postprocessing), the host's part, the profile's
price of the same shapes (`x profile` = live over priced), and launch-ahead hits / misses.
With --results (a live_paper.py results.json) and --run (an experiment key and variant label,
e.g. multi_agent_16/app_centric:parrot) the table covers exactly that run's wall-clock window.
With --floor MATMUL_TFLOPS:COPY_GBS (the rates bench_serving.py --floor measured and printed)
every step is priced by the serving floor's rule instead (serving_floor.StepFloor, for
--model's shape and --dtype): which kinds of step the run's wall over its floor went to.
"""

from __future__ import annotations

import argparse
import json
import sys

from repo_imports import import_parrot

import_parrot()

from parrot.engines.builtin.observe.step_trace import read_trace  # noqa: E402
from parrot.engines.builtin.observe.trace_summary import (Summary, kind_of,  # noqa: E402
                                                          largest_gaps, segments, slowest,
                                                          summarize)
from parrot.engines.builtin.observe.trace_summary import StepPricer  # noqa: E402
from parrot.engines.latency_model import SimulatedEngineConfig  # noqa: E402
from serving_floor import Rates, StepFloor, model_cost  # noqa: E402


def table(summary: Summary, priced: str | None) -> str:
    """The summary's groups; `priced`: what the steps were priced by ("profile", "floor")."""
    head = ["kind", "steps", "loop ms", "ms/step", "host ms/step", "ahead hit/miss"]
    if priced:
        head += [f"{priced} ms", f"x {priced}"]
    rows = [head]
    order = sorted(summary.groups.items(), key=lambda kv: (kv[0] != "all", -kv[1].iteration_ms))
    for kind, g in order:
        row = [kind, str(g.steps), f"{g.iteration_ms:.0f}", f"{g.iteration_ms / g.steps:.2f}",
               f"{g.host_ms / g.steps:.2f}", f"{g.ahead_hits}/{g.ahead_misses}"]
        if priced:
            row += [f"{g.priced_ms:.0f}",
                    f"{g.iteration_ms / g.priced_ms:.2f}" if g.priced_ms else "-"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths))) for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--profile", default=None,
                        help="a simulated engine profile (a YAML file or a name in "
                             "configs/profiles/) to price every step with")
    parser.add_argument("--floor", default=None, metavar="MATMUL_TFLOPS:COPY_GBS",
                        help="price every step by the serving floor's rule at these rates")
    parser.add_argument("--model", default="llama-7b",
                        help="--floor: the builtin engine's model (a named shape, smollm2 or "
                             "a folder)")
    parser.add_argument("--dtype", default="bfloat16", help="--floor: the weights' dtype")
    parser.add_argument("--gap-s", type=float, default=2.0)
    parser.add_argument("--segment", type=int, default=None,
                        help="only this segment (0-based; negative: from the end)")
    parser.add_argument("--gaps", type=int, default=0, metavar="N",
                        help="also list the N longest waits for work in each segment")
    parser.add_argument("--slowest", type=int, default=0, metavar="N",
                        help="also list the N steps furthest over their price (their time "
                             "without --profile), with the compilations and collections "
                             "inside them")
    parser.add_argument("--results", default=None, help="a live_paper.py results.json")
    parser.add_argument("--run", default=None, metavar="KEY/VARIANT",
                        help="with --results: only the steps of this run")
    args = parser.parse_args()
    if args.profile is not None and args.floor is not None:
        parser.error("--profile or --floor, not both")
    model: StepPricer | None = None
    priced = None
    if args.profile is not None:
        model, priced = SimulatedEngineConfig.from_mapping({"profile": args.profile}).latency, \
            "profile"
    elif args.floor is not None:
        model, priced = floor_pricer(args.floor, args.model, args.dtype), "floor"
    records = read_trace(args.trace)
    if (args.results is None) != (args.run is None):
        parser.error("--results and --run go together")
    if args.run is not None:
        key, _, label = args.run.partition("/")
        with open(args.results, encoding="utf-8") as f:
            variant = json.load(f)["experiments"][key]["variants"][label]
        began, ended = variant["wall_window"]
        records = [r for r in records if began <= r.t <= ended]
        print(f"{args.run}: E2E {variant['e2e_latency_s']['mean']:.2f} s mean, "
              f"window {ended - began:.2f} s")
    parts = segments(records, args.gap_s)
    chosen = list(enumerate(parts))
    if args.segment is not None:
        chosen = [chosen[args.segment]]
    for i, steps in chosen:
        s = summarize(steps, model)
        busy = s.groups["all"].iteration_ms
        print(f"segment {i}: {len(steps)} steps over {s.span_ms / 1000:.2f} s: "
              f"{busy / 1000:.2f} s in loop iterations, {s.idle_ms / 1000:.2f} s idle between "
              f"them; {s.groups['all'].jit_compiles} Triton compilations inside steps "
              f"({s.groups['all'].jit_ms:.0f} ms), {s.groups['all'].gc_ms:.0f} ms in garbage "
              f"collections")
        print(table(s, priced))
        for offset, r in largest_gaps(steps, args.gaps):
            print(f"  waited {r.idle_ms:7.1f} ms before the step at +{offset:.3f} s: {kind_of(r)}, "
                  f"{r.decode_rows} decode rows, {r.prefill_tokens} prefill tokens")
        for offset, r, price in slowest(steps, args.slowest, model):
            print(f"  slow: {r.iteration_ms:7.1f} ms (priced {price:.1f}) at +{offset:.3f} s: "
                  f"{kind_of(r)}, {r.decode_rows} decode rows ({r.shared_groups} shared "
                  f"groups), {r.prefill_chunks} chunks of {r.prefill_tokens} prefill tokens; "
                  f"{r.jit_compiles} compilations ({r.jit_ms:.1f} ms), {r.gc_ms:.1f} ms in "
                  f"garbage collections, {r.sched_ms:.1f} ms scheduling, {r.post_ms:.1f} ms "
                  f"postprocessing")
        print()
    return 0


def floor_pricer(rates: str, model: str, dtype: str) -> StepFloor:
    """StepFloor at `rates` ("MATMUL_TFLOPS:COPY_GBS") for a builtin engine of `model`."""
    try:
        tflops, gbs = (float(x) for x in rates.split(":"))
    except ValueError:
        raise SystemExit(f"--floor: {rates!r} is not MATMUL_TFLOPS:COPY_GBS") from None
    return StepFloor(model_cost({"model": model, "dtype": dtype}, on_cuda=True),
                     Rates(matmul_flops_per_s=tflops * 1e12, copy_bytes_per_s=gbs * 1e9))


if __name__ == "__main__":
    sys.exit(main())
