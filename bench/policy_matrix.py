"""The policy matrix: every built-in workload x {1, 2, 4, 8} simulated engines x {app_centric,
least_queue:baseline, latency_centric:baseline, throughput_centric:baseline}.

    python bench/policy_matrix.py --out docs/results/matrix_fair       # the fair setting
    python bench/policy_matrix.py --setting paper --out docs/results/matrix   # the ablation
    python bench/policy_matrix.py --workloads map_reduce --engines 4   # one cell
    python bench/policy_matrix.py --parrot app_centric+policy.hold_background_work=true

`--setting fair` (the default): hidden output lengths under loose caps, baselines with
automatic prefix caching, app_centric's defaults, the latency-centric cap equal to
app_centric's latency capacity; `--setting paper`: exact lengths, no prefix caching, the
paper's latency rule (bench/matrix.py says exactly what each sets).

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

# The repository root on sys.path: `bench.matrix` and, on a machine where Parrot is not
# installed, `parrot` itself import from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.matrix import (ENGINE_COUNTS, SETTINGS, MatrixSpec, run_matrix,  # noqa: E402
                          write_outputs)
from parrot.policies import PolicyConfigError, default_registry  # noqa: E402
from parrot.sim.compare import parse_variant  # noqa: E402
from parrot.sim.workloads.registry import WORKLOADS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None,
                   help="default: docs/results/matrix_fair (fair), docs/results/matrix (paper)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated, from {sorted(WORKLOADS)}")
    p.add_argument("--engines", default=",".join(map(str, ENGINE_COUNTS)))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default="a100_llama13b",
                   help="engine latency profile (configs/profiles/) for workloads that fit its "
                        "context window; copilot and gpts always use h200_llama7b")
    p.add_argument("--setting", default="fair", choices=SETTINGS)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--parrot", default="app_centric",
                   help="the application-centric variant, with parameters of its own over "
                        "the setting's: e.g. app_centric+policy.hold_background_work=true")
    args = p.parse_args(argv)
    try:
        spec = MatrixSpec(workloads=tuple(args.workloads.split(",")),
                          engine_counts=tuple(int(n) for n in args.engines.split(",")),
                          seed=args.seed, profile=args.profile, setting=args.setting,
                          parrot=args.parrot)
        parrot = parse_variant(spec.parrot)   # its parameters checked here, not in a worker
        default_registry().create(parrot.registry_name, parrot.policy_params)
    except (ValueError, PolicyConfigError) as exc:   # (a CompareError is a ValueError)
        p.error(str(exc))
    out = args.out or Path("docs/results/matrix_fair" if spec.setting == "fair"
                           else "docs/results/matrix")
    started = time.perf_counter()
    cells = run_matrix(spec, processes=args.processes)
    wall = time.perf_counter() - started
    print(write_outputs(cells, spec, out, wall))
    slowest = max(cells, key=lambda c: c.wall_s)
    print(f"\n{len(cells)} cells in {wall:.0f} s wall ({args.processes} processes; slowest "
          f"cell {slowest.workload} x {slowest.num_engines}: {slowest.wall_s:.0f} s); "
          f"wrote {out}/matrix.md, matrix.json, matrix.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
