"""Every experiment of the paper on the simulated cluster, run together; the results table,
JSON and plots under --out, and optionally the table spliced into the results page.

    python -m bench.paper.reproduce --out docs/results/paper --page docs/RESULTS.md [--jobs 2]
    python -m bench.paper.reproduce --calibrate --out docs/results/paper_calibrated

Each experiment is one `parrot-bench` command (bench/paper/experiments.py lists them); this
is the lab around the product's CLI, so the product never imports it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# The repository root on sys.path, so `bench.paper` imports when run as a file too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.paper.experiments import EXPERIMENTS, PROFILE, run_paper  # noqa: E402
from bench.paper.live_results import slim  # noqa: E402
from bench.paper.report import cited_plot  # noqa: E402

# What the page reads of a run besides its plot: the table, the ratios with their numbers,
# the run's timings, and each experiment's summary (sweep.json / rates.json / results.json,
# without its per-application records) and console table. Everything else (the per-point
# runs of a sweep, timelines, per-app records) the command in the table regenerates.
KEPT_FILES = frozenset({"table.md", "paper.json", "run.json"})
KEPT_IN_EXPERIMENT = frozenset({"sweep.json", "rates.json", "results.json", "table.txt"})


def keep_only_cited(out: Path) -> int:
    """Delete what the results page does not cite from a finished run under `out`; returns
    the number of files removed."""
    removed = 0
    experiments = {e.key for e in EXPERIMENTS}
    for path in sorted(out.iterdir()):
        if path.is_dir() and path.name in experiments:
            plot = cited_plot(path)
            for inner in sorted(path.iterdir()):
                if inner.is_dir():
                    removed += sum(1 for f in inner.rglob("*") if f.is_file())
                    shutil.rmtree(inner)
                elif inner.name not in KEPT_IN_EXPERIMENT and inner.name != plot:
                    inner.unlink()
                    removed += 1
                elif inner.name == "results.json":
                    inner.write_text(json.dumps(slim(json.loads(inner.read_text())),
                                                indent=2) + "\n")
        elif path.is_file() and path.name not in KEPT_FILES:
            path.unlink()
            removed += 1
    return removed


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for every run and the table")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel processes")
    p.add_argument("--profile", default=PROFILE,
                   help=f"the latency profile of every run (default {PROFILE})")
    p.add_argument("--calibrate", action="store_true",
                   help="the caps (app_centric's latency and throughput capacities, the "
                        "latency- and throughput-centric baselines' caps) calibrated to the "
                        "profile instead of the paper's A100 figures (docs/RESULTS.md)")
    p.add_argument("--page", type=Path, help="splice the table into this markdown page "
                   "between its paper-table markers (e.g. docs/RESULTS.md)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--keep-all", action="store_true", help="keep every run's files (the "
                   "default keeps what the results page cites: tables, summaries, its plots)")
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code = run_paper(args.out, quiet=args.quiet, plots=not args.no_plots, jobs=args.jobs,
                     page=args.page, profile=args.profile, calibrate=args.calibrate)
    if not args.keep_all:
        keep_only_cited(args.out)
    return code


if __name__ == "__main__":
    sys.exit(main())
