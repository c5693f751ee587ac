"""bench_serving's results as a markdown page: where, when and how they were measured, one
row per run, and each policy against a reference policy, run by run; with several rounds
(`bench_serving.py --rounds`), each round's runs against the same round's, then the
geometric mean over the rounds.

    python bench/serving_report.py results.json [--vs least_queue] > docs/results/serving_x.md

`bench_serving.py --md PATH` writes the same page at the end of its run (its JSON, `--out`,
keeps the provenance the page's header shows).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = ("policy", "rate", "in flight", "output tok/s", "TTFT p50 / p90 / p99 ms",
           "ITL p50 / p99 ms", "TPOT p50 / p99 ms", "E2E p50 / p99 s", "failed",
           "floor s (prefill + decode)", "wall / floor", "graphs captured while timed")


def _rate(row: dict[str, Any]) -> str:
    rate = row["request_rate"]
    return "inf" if rate in ("inf", None) or rate == float("inf") else f"{float(rate):g}"


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return _rate(row), str(row.get("max_concurrency") or "-")


def _rounds(rows: Sequence[dict[str, Any]]) -> int:
    return 1 + max((int(r.get("round", 0)) for r in rows), default=0)


def run_row(row: dict[str, Any]) -> list[str]:
    t, i, p, e = row["ttft_ms"], row["itl_ms"], row["tpot_ms"], row["e2e_ms"]
    floor = row.get("floor")
    captures = row.get("graph_captures_at_runtime")
    return [row.get("policy") or "-", *_key(row), f"{row['output_throughput']:,.0f}",
            f"{t['p50']:.0f} / {t['p90']:.0f} / {t['p99']:.0f}",
            f"{i['p50']:.1f} / {i['p99']:.1f}", f"{p['p50']:.1f} / {p['p99']:.1f}",
            f"{e['p50'] / 1000:.2f} / {e['p99'] / 1000:.2f}", str(row["failed"]),
            (f"{floor['total_s']:.2f} ({floor['prefill_s']:.2f} + {floor['decode_s']:.2f})"
             if floor else "-"),
            f"{floor['wall_over_floor']:.2f}x" if floor else "-",
            "-" if captures is None else str(captures)]


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference else "-"


def _ratios(row: dict[str, Any], base: dict[str, Any]) -> tuple[float, float, float]:
    return (row["output_throughput"] / base["output_throughput"],
            row["ttft_ms"]["p50"] / base["ttft_ms"]["p50"],
            row["ttft_ms"]["p99"] / base["ttft_ms"]["p99"])


def _compared(rows: Sequence[dict[str, Any]], reference: str
              ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, the reference policy's run of the same rate, concurrency and round)."""
    ref = {(_key(r), r.get("round", 0)): r for r in rows if r.get("policy") == reference}
    pairs = []
    for row in rows:
        base = ref.get((_key(row), row.get("round", 0)))
        if row.get("policy") != reference and base is not None:
            pairs.append((row, base))
    return pairs


def ratio_rows(rows: Sequence[dict[str, Any]], reference: str) -> list[list[str]]:
    """Each other policy's run against the reference policy's run of the same rate,
    concurrency and round: output tok/s (higher is better), TTFT p50 and p99 (lower is
    better); a round column when there are several."""
    several = _rounds(rows) > 1
    out = []
    for row, base in _compared(rows, reference):
        cells = [_ratio(row["output_throughput"], base["output_throughput"]),
                 _ratio(row["ttft_ms"]["p50"], base["ttft_ms"]["p50"]),
                 _ratio(row["ttft_ms"]["p99"], base["ttft_ms"]["p99"])]
        round_cell = [str(row.get("round", 0) + 1)] if several else []
        out.append([row.get("policy") or "-", *_key(row), *round_cell, *cells])
    return out


def pooled_ratio_rows(rows: Sequence[dict[str, Any]], reference: str) -> list[list[str]]:
    """Each other policy against the reference at each rate and concurrency: the geometric
    mean of its rounds' ratios, and how many rounds."""
    pooled: dict[tuple[str, tuple[str, str]], list[tuple[float, float, float]]] = {}
    for row, base in _compared(rows, reference):
        if all((base["output_throughput"], base["ttft_ms"]["p50"], base["ttft_ms"]["p99"])):
            pooled.setdefault((row.get("policy") or "-", _key(row)), []).append(
                _ratios(row, base))
    return [[policy, *key, *(f"{math.exp(sum(map(math.log, col)) / len(col)):.2f}x"
                             for col in zip(*ratios)), str(len(ratios))]
            for (policy, key), ratios in pooled.items()]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def markdown(results: dict[str, Any], reference: str | None = None) -> str:
    """The page for one bench_serving JSON; `reference` (default: the first policy run)
    is what the other policies are compared with."""
    rows = results["runs"]
    where = results.get("provenance") or {}
    policies = list(dict.fromkeys(r.get("policy") or "-" for r in rows))
    reference = reference or policies[0]
    lines = [f"# Serving: {', '.join(policies)} on {results.get('url', '?')}", ""]
    for key in ("date", "commit", "device", "cpus", "command"):
        if key in where:
            value = f"`{where[key]}`" if key == "command" else where[key]
            lines.append(f"* {key}: {value}")
    sampling = (f"temperature {results['temperature']:g}, top_p {results.get('top_p', 1.0):g}"
                if results.get("temperature") else "greedy")
    lines += [f"* load: {results.get('num_prompts')} streamed completions, "
              f"{results.get('lengths')} lengths, {sampling}, seed {results.get('seed')}, "
              "mean prompt "
              f"{results.get('mean_prompt_tokens', 0):.0f} tokens, mean output "
              f"{results.get('mean_output_tokens', 0):.0f} tokens; `inf` with a number in "
              "flight: all at once, at most that many in flight; a rate: Poisson arrivals",
              ""]
    several = _rounds(rows) > 1
    if several:
        lines += _table(("round", *COLUMNS),
                        [[str(r.get("round", 0) + 1), *run_row(r)] for r in rows])
    else:
        lines += _table(COLUMNS, [run_row(r) for r in rows])
    compared = ratio_rows(rows, reference)
    if compared:
        lines += ["", f"Against {reference}, run by run (output tok/s: higher is better; "
                      "TTFT: lower is better):", ""]
        lines += _table(("policy", "rate", "in flight", *(("round",) if several else ()),
                         "output tok/s", "TTFT p50", "TTFT p99"), compared)
    if several and compared:
        lines += ["", f"Against {reference}, the geometric mean over the rounds (each round "
                      "ran the policies in the other order from the round before):", ""]
        lines += _table(("policy", "rate", "in flight", "output tok/s", "TTFT p50",
                         "TTFT p99", "rounds"), pooled_ratio_rows(rows, reference))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a JSON bench_serving.py --out wrote")
    parser.add_argument("--vs", default=None,
                        help="the reference policy (default: the first one run)")
    args = parser.parse_args(argv)
    sys.stdout.write(markdown(json.loads(args.results.read_text()), args.vs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
