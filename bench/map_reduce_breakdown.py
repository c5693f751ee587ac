"""Where a map-reduce application's time goes, per policy, in simulation.

    python bench/map_reduce_breakdown.py                      # 4 engines, 4 apps, as the issue
    python bench/map_reduce_breakdown.py --engines 32 --delay-ms 0:0

Runs `map_reduce` (applications one after another) under each variant and splits every
application's end-to-end time into phases, from the session's call records:

* **to first map**: application start until its first map is ready in the manager (the
  client's submit round trip; in baseline mode the first completion request's);
* **maps**: first map ready until the last map finishes (queueing, prefill and decode);
* **reduce wait**: last map finished until the reduce is dispatched (in baseline mode the
  client fetching the map outputs and sending the reduce);
* **reduce**: reduce dispatched until it finishes;
* **return**: reduce finished until the application has its output.

and reports per engine the busy time (at least one call running), the idle time inside the
applications' span and the mean number of running calls while busy. Prints a table; the
numbers are a deterministic function of the arguments (`--seed`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402

import_parrot()

from parrot.sim.cluster import ClusterSpec  # noqa: E402
from parrot.sim.compare import Settings, parse_variant, run_variant  # noqa: E402
from parrot.sim.workloads.base import AppRecord, CallRecord  # noqa: E402
from parrot.sim.workloads.spec import WorkloadSpec  # noqa: E402

PHASES = ("to first map", "maps", "reduce wait", "reduce", "return")


def phases(app: AppRecord) -> dict[str, float]:
    """The five phases of one map-reduce application (seconds); the reduce is its last call."""
    calls = sorted(app.calls, key=lambda c: (c.ready or 0.0, c.submitted or 0.0))
    reduce, maps = calls[-1], calls[:-1]
    first_ready = min(c.ready for c in maps)
    last_map = max(c.finished for c in maps)
    return {"to first map": first_ready - app.started, "maps": last_map - first_ready,
            "reduce wait": reduce.dispatched - last_map,
            "reduce": reduce.finished - reduce.dispatched,
            "return": app.finished - reduce.finished}


def busy_intervals(calls: list[CallRecord]) -> list[tuple[float, float]]:
    """The union of the calls' [dispatched, finished) intervals."""
    merged: list[list[float]] = []
    for start, end in sorted((c.dispatched, c.finished) for c in calls):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def engine_rows(apps: list[AppRecord]) -> list[str]:
    span = sum(a.finished - a.started for a in apps)
    calls = [c for a in apps for c in a.calls
             if c.engine and c.finished is not None and c.dispatched is not None]
    rows = []
    for engine in sorted({c.engine for c in calls}):
        mine = [c for c in calls if c.engine == engine]
        busy = sum(b - a for a, b in busy_intervals(mine))
        running = sum(c.finished - c.dispatched for c in mine) / busy if busy else 0.0
        rows.append(f"    {engine}: {len(mine)} calls, busy {busy:.2f} s, idle {span - busy:.2f} s "
                    f"of the apps' {span:.2f} s, {running:.1f} calls running while busy")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--apps", type=int, default=4)
    p.add_argument("--compare", default="app_centric,least_queue:baseline,"
                                        "throughput_centric:baseline")
    p.add_argument("--delay-ms", default="200:300", metavar="LOW:HIGH",
                   help="client-manager network delay per message")
    p.add_argument("--profile", default="a100_llama13b")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    low, high = (float(x) / 1000 for x in args.delay_ms.split(":"))
    settings = Settings(workload="map_reduce", seed=args.seed,
                        cluster=ClusterSpec(num_engines=args.engines, profile=args.profile,
                                            network_delay_s=(low, high)),
                        workload_spec=WorkloadSpec(num_apps=args.apps, seed=args.seed))
    print(f"map_reduce, {args.apps} apps one after another, {args.engines} engines "
          f"({args.profile}), network delay {args.delay_ms} ms, seed {args.seed}")
    print("| variant | E2E mean | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    details = []
    for label in args.compare.split(","):
        run = run_variant(settings, parse_variant(label))
        apps = [r for r in run.records if r.is_main and r.error is None]
        split = [phases(a) for a in apps]
        means = [statistics.mean(s[k] for s in split) for k in PHASES]
        e2e = statistics.mean(a.latency_s for a in apps)
        print(f"| {label} | {e2e:.2f} s | " + " | ".join(f"{m:.2f}" for m in means) + " |")
        details.append((label, engine_rows(apps)))
    for label, rows in details:
        print(f"\n{label}:")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
