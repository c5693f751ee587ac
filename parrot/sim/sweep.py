"""Sweeps: the same comparison at several values of one workload parameter, and the search
for the highest request rate a variant sustains at a latency target.

    parrot-bench --workload chain_summary --sweep output_tokens=25,50,75,100 --out DIR
    parrot-bench --workload gpts --sustainable-rate 0.04 --out DIR

A sweep point is a whole comparison (every variant, one results.json in DIR/FIELD=VALUE/), so
each ratio is measured in one run against its reference. `sweep.json` collects the figures
per point; `sweep_table()` prints them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Sequence

import yaml

from parrot.sim.workloads.spec import WorkloadConfigError, WorkloadSpec

SWEEPABLE = ("doc_tokens", "chunk_tokens", "output_tokens", "num_apps", "chat_rate",
             "num_clients", "request_rate", "num_requests", "system_prompt_tokens",
             "prompt_scale", "rounds")


@dataclass(frozen=True)
class Sweep:
    field: str
    values: tuple[Any, ...]

    @classmethod
    def parse(cls, text: str) -> Sweep:
        """`FIELD=V1,V2,...` with FIELD a WorkloadSpec field (errors name what is allowed)."""
        name, sep, values = text.partition("=")
        if not sep or name not in SWEEPABLE:
            raise WorkloadConfigError("--sweep", f"{text!r} is not valid",
                                      f"FIELD=V1,V2,... with FIELD one of {list(SWEEPABLE)}")
        parsed = tuple(yaml.safe_load(v) for v in values.split(",") if v.strip())
        if not parsed:
            raise WorkloadConfigError("--sweep", f"{text!r} lists no values")
        return cls(name, parsed)

    def specs(self, base: WorkloadSpec) -> list[WorkloadSpec]:
        """One spec per value; each is validated (a bad value fails before any run)."""
        return [dataclasses.replace(base, **{self.field: value}) for value in self.values]

    def point_name(self, value: Any) -> str:
        return f"{self.field}={value}"


def point_figures(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of one comparison the results page reads, per variant label."""
    figures = {}
    for label, v in results["variants"].items():
        background = v.get("background") or {}
        figures[label] = {
            "status": v["status"],
            "e2e_mean_s": v["e2e_latency_s"]["mean"],
            "speedup": results["speedup_vs_reference"][label],
            "per_app_min_speedup": (results.get("per_app_speedup_vs_reference", {})
                                    .get(label, {}).get("min")),
            "normalized_latency_s_per_token": (v.get("normalized_latency_s_per_token")
                                               or {}).get("mean"),
            "chat_normalized_latency_s_per_token": (
                (background.get("normalized_latency_s_per_token") or {}).get("mean")),
            "tpot_mean_s": (v.get("tpot_s") or {}).get("mean"),
            "peak_kv_tokens": v.get("peak_kv_tokens"),
            "num_failed": v.get("num_failed"),
        }
    return figures


def sweep_summary(sweep: Sweep, points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`points`: the results.json of each value, in order."""
    return {"field": sweep.field, "values": list(sweep.values),
            "reference": points[0]["reference"] if points else None,
            "points": [{"value": value, "figures": point_figures(results)}
                       for value, results in zip(sweep.values, points)]}


def sweep_table(summary: dict[str, Any]) -> str:
    labels = list(summary["points"][0]["figures"]) if summary["points"] else []
    head = [summary["field"], *[f"{label} (mean s, x)" for label in labels]]
    rows = [head]
    for point in summary["points"]:
        cells = [str(point["value"])]
        for label in labels:
            f = point["figures"][label]
            cells.append("-" if f["e2e_mean_s"] is None else
                         f"{f['e2e_mean_s']:.2f} ({_x(f['speedup'])})")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return (f"sweep of {summary['field']}; x = mean E2E of {summary['reference']} / mean E2E\n"
            + "\n".join(lines))


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# --- sustainable request rate -------------------------------------------------------------

@dataclass(frozen=True)
class RatePoint:
    rate: float
    normalized_latency_s_per_token: float | None
    ok: bool


RunAt = Callable[[float], dict[str, Any]]   # rate -> the variant's results.json entry


def meets_target(entry: dict[str, Any], target_s_per_token: float) -> tuple[bool, float | None]:
    """A rate is sustained when every request finished and the mean latency per output token
    (end to end: network, queueing, prefill and decode) stays within the target."""
    norm = (entry.get("normalized_latency_s_per_token") or {}).get("mean")
    ok = (entry["status"] == "ok" and not entry.get("num_failed") and norm is not None
          and norm <= target_s_per_token)
    return ok, norm


class RateSearch:
    """The search of `sustainable_rate` as a state machine, so a synchronous (simulation) and
    an asynchronous (live) driver share it: `while (rate := search.next_rate()) is not None:
    search.record(rate, ok, norm)`, then `search.result`.

    Double from `start` until a rate fails (or passes `max_rate`), then bisect geometrically
    between the last good and the first bad rate `refinements` times."""

    def __init__(self, *, start: float = 0.5, factor: float = 2.0, max_rate: float = 512.0,
                 refinements: int = 3) -> None:
        self._factor, self._max_rate, self._left = factor, max_rate, refinements
        self.points: list[RatePoint] = []
        self.good: float = 0.0           # the highest rate that held so far
        self.bad: float | None = None    # the lowest rate that failed so far
        self._next: float | None = start if start <= max_rate else None

    def next_rate(self) -> float | None:
        return self._next

    def record(self, rate: float, ok: bool, norm: float | None = None) -> None:
        if rate != self._next:
            raise ValueError(f"recorded {rate}, expected a result for {self._next}")
        self.points.append(RatePoint(rate, norm, ok))
        if self.bad is None:                     # doubling
            if ok:
                self.good = rate
                nxt = rate * self._factor
                self._next = nxt if nxt <= self._max_rate else None
                return
            self.bad = rate
            if self.good == 0.0:                 # even the first rate fails: no bisection
                self._next = None
                return
        elif ok:                                 # bisecting
            self.good = rate
        else:
            self.bad = rate
        if self._left <= 0:
            self._next = None
            return
        self._left -= 1
        self._next = math.sqrt(self.good * self.bad)

    @property
    def result(self) -> tuple[float, list[RatePoint]]:
        return self.good, self.points


def sustainable_rate(run_at: RunAt, target_s_per_token: float, *, start: float = 0.5,
                     factor: float = 2.0, max_rate: float = 512.0,
                     refinements: int = 3) -> tuple[float, list[RatePoint]]:
    """The highest rate found that meets the target (RateSearch). Returns (rate, every point
    tried); rate 0.0 when even `start` fails."""
    search = RateSearch(start=start, factor=factor, max_rate=max_rate, refinements=refinements)
    while (rate := search.next_rate()) is not None:
        ok, norm = meets_target(run_at(rate), target_s_per_token)
        search.record(rate, ok, norm)
    return search.result
