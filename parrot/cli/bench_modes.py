"""parrot-bench's multi-run modes: `--sweep FIELD=...` and `--sustainable-rate TARGET`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any
from collections.abc import Sequence

from parrot.cli.bench_run import format_table, run_comparison
from parrot.sim.compare import Settings, Variant, results_json, run_variant
from parrot.sim.sweep import Sweep, sustainable_rate, sweep_summary, sweep_table
from parrot.sim.workloads.spec import WorkloadConfigError


def run_sweep(parser: argparse.ArgumentParser, args: argparse.Namespace, settings: Settings,
              variants: Sequence[Variant], reference: Variant) -> int:

    try:
        sweep = Sweep.parse(args.sweep)
        specs = sweep.specs(settings.workload_spec)
    except (WorkloadConfigError, TypeError) as exc:
        parser.error(str(exc))
    points, all_ok = [], True
    for value, spec in zip(sweep.values, specs):
        out = args.out / sweep.point_name(value)
        point_settings = dataclasses.replace(settings, workload_spec=spec)
        results, ok = run_comparison(point_settings, variants, reference, out,
                                     quiet=args.quiet,
                                     plots=not (args.no_plots or args.no_point_plots))
        all_ok &= ok
        points.append(results)
        if not args.quiet:
            print(format_table(results) + "\n", file=sys.stderr)
    summary = sweep_summary(sweep, points)
    (args.out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = sweep_table(summary)
    (args.out / "table.txt").write_text(table + "\n")
    print(table)
    if not args.no_plots:
        _sweep_plot(summary, args.out, settings.workload)
    print(f"\nwrote {args.out / 'sweep.json'}")
    return 0 if all_ok else 1


def _sweep_plot(summary: dict[str, Any], out: Any, workload: str) -> None:
    from parrot.sim.plots import PlotsUnavailableError, sweep_plot

    try:
        sweep_plot(summary, out / "sweep.png", f"{workload} (sim)")
    except PlotsUnavailableError as exc:
        print(str(exc), file=sys.stderr)


def run_rate_search(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    settings: Settings, variants: Sequence[Variant], reference: Variant) -> int:
    """Per variant, the highest Poisson rate meeting the latency target; requests arrive over
    `--rate-window-s` seconds at each rate tried."""
    if args.sustainable_rate <= 0 or args.rate_window_s <= 0:
        parser.error("--sustainable-rate and --rate-window-s must be > 0")
    found: dict[str, Any] = {}
    for variant in variants:
        def run_at(rate: float, variant: Variant = variant) -> dict[str, Any]:
            spec = dataclasses.replace(settings.workload_spec, request_rate=rate,
                                       num_requests=max(1, math.ceil(rate * args.rate_window_s)))
            run = run_variant(dataclasses.replace(settings, workload_spec=spec), variant)
            entry = results_json(settings, [run], variant)["variants"][variant.label]
            if not args.quiet:
                norm = (entry.get("normalized_latency_s_per_token") or {}).get("mean")
                print(f"{variant.label}: {rate:.3g} req/s -> "
                      f"{'-' if norm is None else f'{norm * 1000:.1f}'} ms/token",
                      file=sys.stderr)
            return entry

        rate, points = sustainable_rate(run_at, args.sustainable_rate, start=1.0,
                                        max_rate=args.max_rate, refinements=2)
        found[variant.label] = {"sustainable_rate": rate, "capped": rate >= args.max_rate,
                                "points": [dataclasses.asdict(p) for p in points]}
    ref_rate = found[reference.label]["sustainable_rate"]
    for entry in found.values():
        entry["ratio_vs_reference"] = (entry["sustainable_rate"] / ref_rate if ref_rate
                                       else None)
    summary = {"workload": settings.workload, "target_s_per_token": args.sustainable_rate,
               "rate_window_s": args.rate_window_s, "max_rate": args.max_rate,
               "reference": reference.label,
               "settings": {"workload": dataclasses.asdict(settings.workload_spec),
                            "cluster": {"num_engines": settings.cluster.num_engines,
                                        "profile": settings.cluster.profile}},
               "variants": found}
    (args.out / "rates.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"sustainable request rate at mean <= {args.sustainable_rate * 1000:.0f} ms per "
             f"output token ({settings.workload}); x = rate / rate of {reference.label}"]
    for label, entry in found.items():
        ratio = entry["ratio_vs_reference"]
        at_least = ">=" if entry["capped"] else "  "
        lines.append(f"  {label:<52} {at_least}{entry['sustainable_rate']:8.2f} req/s  "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'}")
    (args.out / "table.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not args.no_plots:
        from parrot.sim.plots import PlotsUnavailableError, rate_plot

        try:
            rate_plot(summary, args.out / "rates.png", f"{settings.workload} (sim)")
        except PlotsUnavailableError as exc:
            print(str(exc), file=sys.stderr)
    return 0
