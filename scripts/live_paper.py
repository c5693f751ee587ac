"""Run the paper's experiments live on one GPU (see parrot/sim/live_paper.py); print a table.

    python scripts/live_paper.py --out $OUT [--config configs/live_h200_llama7b.yaml]
    python scripts/live_paper.py --out /tmp/smoke --smoke     # tiny random model on the CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from repo_imports import alias_kernels, import_parrot  # noqa: E402

import_parrot()
alias_kernels()

from parrot.core.config import ServeConfig  # noqa: E402
from parrot.sim.live_paper import run  # noqa: E402

# The CPU smoke test: the same runs, tiny sizes, a 2-layer random model with SmolLM2's
# tokenizer, float32 on the CPU.
SMOKE_ENGINE = {"model": "tiny", "tokenizer": "smollm2", "device": "cpu", "dtype": "float32",
                "kv_cache_tokens": 16384, "max_batch_tokens": 2048, "max_num_seqs": 64}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "live_out")))
    parser.add_argument("--config", default="configs/live_h200_llama7b.yaml")
    parser.add_argument("--smoke", action="store_true",
                        default=os.environ.get("PARROT_LIVE_SMOKE", "") not in ("", "0"))
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="no new experiment starts after this many seconds")
    parser.add_argument("--network-delay-ms", default=None, metavar="LOW:HIGH",
                        help="default 200:300 (10:20 with --smoke)")
    args = parser.parse_args()
    config = ServeConfig.load(args.config)
    if args.smoke:
        config = dataclasses.replace(config, engines=tuple(
            dataclasses.replace(e, params=SMOKE_ENGINE) for e in config.engines))
    delay = args.network_delay_ms or ("10:20" if args.smoke else "200:300")
    low, high = (float(x) / 1000.0 for x in delay.split(":"))
    return run(config, args.out, smoke=args.smoke, budget_s=args.budget_s, delay_s=(low, high))


if __name__ == "__main__":
    sys.exit(main())
