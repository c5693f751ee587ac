"""Run the paper's experiments live on one GPU (see bench/paper/live_runs.py); print a table.

    python bench/paper/live.py --out $OUT [--config configs/live_h200_llama7b.yaml]
    python bench/paper/live.py --out $OUT --only gpts,mixed --tokenizer $PWD/.tok
    python bench/paper/live.py --out $OUT --only gpts_rate ...  # the live gpts rate search
    python bench/paper/live.py --out /tmp/smoke --smoke     # tiny random model on the CPU
    python bench/paper/live.py --out $OUT --setting fair --only map_reduce,chain_summary ...

`--setting fair` (default `paper`) runs today's calibration on every side: prefix caching on
every engine, app_centric work-conserving, the latency-centric cap and every engine's latency
capacity calibrated from its measured speed profile, output lengths hidden (SETTINGS in
live_experiments.py); options given beside it win.

Experiments on one engine use --config; those on two engines (gpts, mixed) use
--two-engine-config. Only the configs the selected experiments need are read.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

# The repository root on sys.path: `bench.paper` and, on a machine where Parrot is not
# installed (the GPU machine), `parrot` itself import from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from parrot.serve_config import ServeConfig  # noqa: E402
from bench.paper.live_experiments import (SETTINGS, LiveExperimentError,  # noqa: E402
                                         select_experiments, with_output_lengths,
                                         with_policy_params, with_rate_search, with_variants)
from bench.paper.live_runs import (ServeSetup, capacity_arg, run,  # noqa: E402
                                   with_engine_capacity, with_engine_params)

# The CPU smoke test: the same runs, tiny sizes, a 2-layer random model with SmolLM2's
# tokenizer, float32 on the CPU (every engine of a config gets these params).
SMOKE_ENGINE = {"model": "tiny", "tokenizer": "smollm2", "device": "cpu", "dtype": "float32",
                "kv_cache_tokens": 16384, "max_batch_tokens": 2048, "max_num_seqs": 64}


def _engine_params(engine, *, smoke: bool, tokenizer: str | None) -> dict:  # noqa: ANN001
    if engine.kind != "builtin":
        return dict(engine.params)
    params = dict(SMOKE_ENGINE) if smoke else dict(engine.params)
    if tokenizer is not None:
        params["tokenizer"] = tokenizer
    return params


def load_setup(path: str, *, smoke: bool, tokenizer: str | None) -> ServeSetup:
    config = ServeConfig.load(path)
    engines = tuple(dataclasses.replace(e, params=_engine_params(e, smoke=smoke,
                                                                 tokenizer=tokenizer))
                    for e in config.engines)
    return ServeSetup(path, dataclasses.replace(config, engines=engines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "live_out")))
    parser.add_argument("--config", default="configs/live_h200_llama7b.yaml",
                        help="the one-engine experiments' parrot-serve config")
    parser.add_argument("--two-engine-config",
                        default="configs/live_h200_two_engines_llama7b.yaml",
                        help="gpts and mixed (two engines); on the two-GPU kind: "
                             "configs/live_h200x2_llama7b.yaml")
    parser.add_argument("--only", default=None, metavar="KEY1,KEY2",
                        help="run these experiments only (results.json holds only them)")
    parser.add_argument("--variants", default=None, metavar="V1,V2,...",
                        help="with --only KEY: run these variants (in this order, the "
                             "reference among them) instead of the experiment's own")
    parser.add_argument("--latency-capacity", type=capacity_arg, default=None,
                        metavar="TOKENS|auto",
                        help="every engine's latency capacity (default: the configs'; "
                             "20480 is the H200 calibration, docs/RESULTS.md; auto: the "
                             "paper's rule on the speed profile each engine measures at start)")
    parser.add_argument("--throughput-capacity", type=int, default=None, metavar="TOKENS",
                        help="every engine's throughput capacity (default: the configs', "
                             "auto: 58.5%% of each engine's KV cache, docs/POLICIES.md; the "
                             "throughput-centric baseline follows it unless --policy-param "
                             "throughput_centric.token_capacity=N)")
    parser.add_argument("--policy-param", action="append", default=[],
                        metavar="POLICY.KEY=VALUE",
                        help="a parameter of every variant of POLICY (repeatable), e.g. "
                             "latency_centric.token_capacity=auto (each engine's latency "
                             "capacity: the cap app_centric's latency work gets)")
    parser.add_argument("--engine-param", action="append", default=[], metavar="KEY=VALUE",
                        help="a builtin engine parameter of every engine (repeatable), e.g. "
                             "prefill_attention=sdpa")
    parser.add_argument("--setting", default="paper", choices=sorted(SETTINGS),
                        help="paper (default) or fair: prefix caching, work-conserving "
                             "app_centric, every cap calibrated from each engine's speed "
                             "profile, sampled lengths (the options below override it)")
    parser.add_argument("--lengths", default=None, choices=("exact", "sampled"),
                        help="exact (the paper's setting: every call's max_tokens is its "
                             "length) or sampled (lengths drawn under a loose cap, ended by a "
                             "marker only a random-weight engine reads: no scheduler knows "
                             "them)")
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="every builtin engine's tokenizer (a folder of tokenizer files)")
    parser.add_argument("--smoke", action="store_true",
                        default=os.environ.get("PARROT_LIVE_SMOKE", "") not in ("", "0"))
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="no new experiment starts after this many seconds")
    parser.add_argument("--network-delay-ms", default=None, metavar="LOW:HIGH",
                        help="default 200:300 (10:20 with --smoke)")
    parser.add_argument("--rate-window-s", type=float, default=None,
                        help="rate search: seconds of Poisson arrivals per rate tried "
                             "(default 15)")
    parser.add_argument("--rate-start", type=float, default=None,
                        help="rate search: the first rate tried, requests/s (default 2)")
    parser.add_argument("--rate-max", type=float, default=None,
                        help="rate search: the highest rate tried, requests/s (default 256, "
                             "the simulated search's cap)")
    parser.add_argument("--rate-refinements", type=int, default=None,
                        help="rate search: bisection steps after the first failing rate "
                             "(default 2)")
    parser.add_argument("--log-level", default="WARNING",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="this process's and the engines' log level (their lines are "
                             "relayed to stderr); INFO names each graph bucket an engine "
                             "captures while serving")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "DEBUG":   # one line per request: only when asked for everything
        logging.getLogger("parrot.access").setLevel(logging.WARNING)
    try:
        experiments = select_experiments(args.only)
        if args.variants is not None:
            experiments = with_variants(experiments, args.variants)
        setting = SETTINGS[args.setting]
        experiments = with_policy_params(experiments,
                                         [*setting.policy_params, *args.policy_param])
        experiments = with_output_lengths(experiments, args.lengths or setting.lengths)
        experiments = with_rate_search(experiments, window_s=args.rate_window_s,
                                       start=args.rate_start, max_rate=args.rate_max,
                                       refinements=args.rate_refinements)
    except LiveExperimentError as exc:
        parser.error(str(exc))
    paths = {1: args.config, 2: args.two_engine_config}
    counts = sorted({e.engines for e in experiments})
    if any(n not in paths for n in counts):
        parser.error(f"experiments need {counts} engines; configs exist for {sorted(paths)}")
    setups = [load_setup(paths[n], smoke=args.smoke, tokenizer=args.tokenizer)
              for n in counts]
    if args.latency_capacity is None and setting.latency_capacity is not None:
        args.latency_capacity = capacity_arg(setting.latency_capacity)
    for field in ("latency_capacity", "throughput_capacity"):
        if getattr(args, field) is not None:
            try:
                setups = [with_engine_capacity(s, field, getattr(args, field)) for s in setups]
            except LiveExperimentError as exc:
                parser.error(str(exc))
    try:
        setups = [with_engine_params(s, [*setting.engine_params, *args.engine_param])
                  for s in setups]
    except LiveExperimentError as exc:
        parser.error(str(exc))
    delay = args.network_delay_ms or ("10:20" if args.smoke else "200:300")
    low, high = (float(x) / 1000.0 for x in delay.split(":"))
    return run(setups, args.out, smoke=args.smoke, budget_s=args.budget_s,
               delay_s=(low, high), experiments=experiments)


if __name__ == "__main__":
    sys.exit(main())
