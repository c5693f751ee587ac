"""The "ours, live" cells of the paper table: read from the committed results of
`scripts/live_paper.sh` (docs/results/live_paper_h200/results.json) so that regenerating the
simulated table keeps the live measurements beside it instead of "pending".

Each paper experiment maps to the live runs that measure the same ratio (the live shapes are
smaller, see docs/RESULTS.md); a ratio is the reference variant's mean E2E over ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# paper experiment key -> (label, live experiment, our variant, baseline variant or None for the
# experiment's own reference); a baseline given as "exp/variant" comes from another live run.
LIVE_RATIOS: dict[str, tuple[tuple[str, str, str, str | None], ...]] = {
    "chain_output": (("vs request-level", "chain_summary", "app_centric:parrot", None),),
    "concurrent_chains": (("mean JCT vs request-level (10 clients)", "concurrent_chains",
                           "app_centric:parrot", None),),
    "map_reduce_apps": (("vs latency-capped request-level", "map_reduce",
                         "app_centric:parrot", None),),
    "copilot": (("32 users, sharing vs no sharing", "copilot_32", "least_queue:parrot", None),
                ("32 users, app_centric vs no sharing", "copilot_32", "app_centric:parrot", None),
                ("64 users, sharing vs no sharing", "copilot_64", "least_queue:parrot", None),
                ("32 users, sharing vs static sharing", "copilot_32", "least_queue:parrot",
                 "copilot_32_static/least_queue:parrot"),
                ("64 users, sharing vs static sharing", "copilot_64", "least_queue:parrot",
                 "copilot_64_static/least_queue:parrot")),
    "multi_agent": (("8 files, vs latency-centric", "multi_agent", "app_centric:parrot", None),
                    ("8 files, vs throughput-centric", "multi_agent", "app_centric:parrot",
                     "multi_agent/throughput_centric:baseline")),
}


def load_live(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return None if data.get("smoke") else data.get("experiments")


def _mean_e2e(live: dict[str, Any], experiment: str, variant: str) -> float | None:
    run = live.get(experiment, {}).get("variants", {}).get(variant)
    if not run or run.get("status") != "ok":
        return None
    return run["e2e_latency_s"]["mean"]


def live_cell(live: dict[str, Any] | None, key: str) -> str:
    """The table cell for paper experiment `key`: its live ratios, or why there are none."""
    if live is None:
        return "pending"
    ratios = LIVE_RATIOS.get(key)
    if not ratios:
        return "not run live"
    cells = []
    for label, experiment, ours, baseline in ratios:
        if baseline is None:
            baseline = f"{experiment}/{live.get(experiment, {}).get('reference', '')}"
        ref_exp, ref_variant = baseline.split("/", 1)
        mine, theirs = _mean_e2e(live, experiment, ours), _mean_e2e(live, ref_exp, ref_variant)
        value = "n/a" if not mine or theirs is None else f"{theirs / mine:.2f}×"
        cells.append(f"{label}: {value}")
    return "<br>".join(cells)
