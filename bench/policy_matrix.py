"""The policy matrix: every built-in workload x {1, 2, 4, 8} simulated engines x {app_centric,
least_queue:baseline, latency_centric:baseline, throughput_centric:baseline}.

    python bench/policy_matrix.py --out docs/results/matrix            # the whole matrix
    python bench/policy_matrix.py --workloads map_reduce --engines 4   # one cell

Prints a markdown table of app_centric's speedup over the best baseline per cell and writes
OUT/matrix.md, OUT/matrix.json and OUT/matrix.png (a heat-map). Deterministic for a seed; cells
run in parallel worker processes (--processes). Rerun it when a policy changes and update
docs/MATRIX.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repo_imports import import_parrot  # noqa: E402

import_parrot()

from bench.matrix import ENGINE_COUNTS, MatrixSpec, run_matrix, write_outputs  # noqa: E402
from parrot.sim.workloads.registry import WORKLOADS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/results/matrix"))
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated, from {sorted(WORKLOADS)}")
    p.add_argument("--engines", default=",".join(map(str, ENGINE_COUNTS)))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default="a100_llama13b",
                   help="engine latency profile (configs/profiles/) for workloads that fit its "
                        "context window; copilot and gpts always use h200_llama7b")
    p.add_argument("--processes", type=int, default=2)
    args = p.parse_args(argv)
    try:
        spec = MatrixSpec(workloads=tuple(args.workloads.split(",")),
                          engine_counts=tuple(int(n) for n in args.engines.split(",")),
                          seed=args.seed, profile=args.profile)
    except ValueError as exc:
        p.error(str(exc))
    started = time.perf_counter()
    cells = run_matrix(spec, processes=args.processes)
    wall = time.perf_counter() - started
    print(write_outputs(cells, spec, args.out, wall))
    slowest = max(cells, key=lambda c: c.wall_s)
    print(f"\n{len(cells)} cells in {wall:.0f} s wall ({args.processes} processes; slowest "
          f"cell {slowest.workload} x {slowest.num_engines}: {slowest.wall_s:.0f} s); "
          f"wrote {args.out}/matrix.md, matrix.json, matrix.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
