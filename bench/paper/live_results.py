"""The live results the paper table cites, kept as data: one folder per experiment holding the
run that backs its cell, and a manifest that says which run that is.

    docs/results/live/manifest.json    {"experiments": {key: {"run", "parts"}},
                                        "runs": {run: its log header}}
    docs/results/live/<experiment>/results.json

A new live run (`bench/paper/live.py --out RUN`) is published into it:

    python -m bench.paper.live_results publish RUN --run-id NAME [--into docs/results/live]

Each experiment of the run replaces the published one of the same key, except a rate search:
one search of every variant runs past a device call's time limit, so it is run in parts
(`--variants`), each part with its own reference, and the published search keeps, per
variant, the part that searched it (`parts` lists the runs merged). A run's header is its
log's (machine, command, engine): the lines of RUN/log.txt before its first blank line.
Then `python -m bench.paper.report docs/results/paper --page docs/RESULTS.md` refreshes the
page from it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
# Per-application records: the bulk of a run's JSON, read by no cell. A published experiment
# keeps every variant's summary (means, percentiles, engine counters) and counts its records.
APP_RECORDS = "apps"
# A searched variant's copy of the clock of the part that measured it (None: the earlier
# clock): a merged search's own "app_clock" is its last part's, which need not be this one's.
PART_CLOCK = "part_app_clock"


def load_run(path: Path) -> dict[str, Any] | None:
    """The experiments of one live run's results.json; None when missing or a smoke run."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return None if data.get("smoke") else data.get("experiments")


def load(live_dir: Path) -> dict[str, Any] | None:
    """Every published experiment (key -> its results), in the manifest's order; None when
    nothing is published."""
    manifest = read_manifest(live_dir)
    experiments = {key: json.loads((live_dir / key / "results.json").read_text())
                   for key in manifest["experiments"]}
    return experiments or None


def read_manifest(live_dir: Path) -> dict[str, Any]:
    path = live_dir / MANIFEST
    return (json.loads(path.read_text()) if path.is_file()
            else {"experiments": {}, "runs": {}})


def publish(run_dir: Path, live_dir: Path, run_id: str) -> list[str]:
    """Publish the experiments of `run_dir` under `live_dir`; returns their keys."""
    experiments = load_run(run_dir / "results.json")
    if experiments is None:
        raise ValueError(f"{run_dir}: no results.json of a real (not smoke) live run")
    manifest = read_manifest(live_dir)
    manifest["runs"][run_id] = _log_header(run_dir / "log.txt")
    published = manifest["experiments"]
    for key, experiment in experiments.items():
        folder = live_dir / key
        earlier = (json.loads((folder / "results.json").read_text())
                   if (folder / "results.json").is_file() else None)
        merged = slim(merge_rate_search(earlier, experiment))
        searches = "rate_search" in experiment and earlier is not None \
            and "rate_search" in earlier
        parts = [*published.get(key, {}).get("parts", []), run_id] if searches else [run_id]
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(merged, indent=1) + "\n")
        published[key] = {"run": run_id, "parts": parts}
    cited = {run for entry in published.values() for run in entry["parts"]}
    manifest["runs"] = {run: h for run, h in manifest["runs"].items() if run in cited}
    live_dir.mkdir(parents=True, exist_ok=True)
    (live_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return list(experiments)


def slim(experiment: dict[str, Any]) -> dict[str, Any]:
    """`experiment` without its per-application records (counted instead)."""
    def without_apps(summary: Any) -> Any:
        if not isinstance(summary, dict) or APP_RECORDS not in summary:
            return summary
        rest = {k: without_apps(v) for k, v in summary.items() if k != APP_RECORDS}
        return {**rest, "num_app_records": len(summary[APP_RECORDS])}

    variants = experiment.get("variants", {})
    return {**experiment, "variants": {label: {k: without_apps(v) for k, v in
                                               without_apps(v_all).items()}
                                       for label, v_all in variants.items()}}


def merge_rate_search(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    """`later` replaces `earlier`, except that two rate searches merge per variant (each
    variant keeps the part that searched it, and that part's clock)."""
    if "rate_search" in later:
        later = _with_part_clock(later)
    if earlier is None or "rate_search" not in earlier or "rate_search" not in later:
        return later
    searched = {label: v for label, v in later["variants"].items() if "sustainable_rate" in v}
    return {**later, "variants": {**earlier["variants"], **searched}}


def _with_part_clock(search: dict[str, Any]) -> dict[str, Any]:
    clock = search.get("app_clock")
    return {**search, "variants": {label: {**v, PART_CLOCK: clock}
                                   if "sustainable_rate" in v and PART_CLOCK not in v else v
                                   for label, v in search["variants"].items()}}


def _log_header(log: Path) -> list[str]:
    if not log.is_file():
        return []
    return log.read_text().split("\n\n", 1)[0].strip().splitlines()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pub = sub.add_parser("publish", help="publish a live run's experiments")
    pub.add_argument("run", type=Path, help="the run's --out folder (results.json, log.txt)")
    pub.add_argument("--run-id", required=True, help="a name for the run (recorded)")
    pub.add_argument("--into", type=Path, default=Path("docs/results/live"))
    args = parser.parse_args(argv)
    try:
        keys = publish(args.run, args.into, args.run_id)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"published {', '.join(keys)} into {args.into}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
