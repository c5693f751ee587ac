"""Record a latency profile of the builtin engine for the simulated engine (one command).

    python bench/record_profile.py --model llama-13b --device cuda \\
        --out configs/profiles/h200_llama13b.yaml
    python bench/record_profile.py --model smollm2 --device cpu --quick \\
        --out /tmp/smollm2_cpu.yaml

Measures, through the engine protocol (so scheduler and batching overheads are included):

* prefill: Fill contexts of several lengths (each once untimed, then the best of the
  repeats); the least-squares line of time vs. tokens gives `prefill_per_token_ms` (slope)
  and `prefill_base_ms` (intercept: what a prefill-only step costs whatever its tokens, the
  weights read once and the launches, which the simulated engine charges such a step once).
  A line whose intercept would be negative is fitted through the origin instead. The measured
  points are written as a comment;
* decode: fill the largest batch's contexts of L tokens once; for each batch size B, run B
  Generates of S tokens concurrently on the first B of them; one iteration's time is the
  elapsed time / S, at `batch tokens` = the B contexts' mean KV length over those S steps,
  summed (the contexts grow by S each time).

The measurements are parrot/engines/speed_probe.py's, which the builtin engine also runs at
start-up to report its own profile to the manager (its `speed_probe` setting).

Writes a YAML in the format of configs/profiles/a100_llama13b.yaml (decode_table of
[batch_tokens, ms] points, strictly increasing) and checks that SimulatedEngineConfig loads it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

from repo_imports import import_parrot  # noqa: E402

import_parrot()

from parrot.engines.latency_model import SimulatedEngineConfig  # noqa: E402
from parrot.engines.speed_probe import ProbePlan, measure_decode, measure_prefill  # noqa: E402

FULL = ProbePlan(prefill_lens=(128, 512, 1024, 2048), batch_sizes=(1, 2, 4, 8, 16, 32, 64),
                 context_len=512, decode_steps=16, repeats=2)
QUICK = ProbePlan(prefill_lens=(32, 96), batch_sizes=(1, 2, 4), context_len=64,
                  decode_steps=4, repeats=1)


def hardware(device: str) -> str:
    try:
        import torch

        if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
            return torch.cuda.get_device_name()
    except ImportError:
        pass
    return f"{platform.processor() or platform.machine()} CPU"


def to_yaml(profile: dict[str, Any], comment: str) -> str:
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    for key in ("description", "hardware", "source", "model"):
        lines.append(f"{key}: {profile[key]!s}" if key == "model"
                     else f"{key}: {profile[key]!r}".replace("'", '"'))
    for key in ("max_context_len", "block_size", "num_blocks"):
        lines.append(f"{key}: {profile[key]}")
    lines.append(f"prefill_per_token_ms: {profile['prefill_per_token_ms']:.4f}")
    lines.append(f"prefill_base_ms: {profile['prefill_base_ms']:.2f}")
    lines.append("decode_table:")
    lines += [f"  - [{x}, {ms:.2f}]" for x, ms in profile["decode_table"]]
    return "\n".join(lines) + "\n"


async def record(args: argparse.Namespace) -> dict[str, Any]:
    from parrot.engines.builtin import create_engine

    plan = QUICK if args.quick else FULL
    if args.batch_sizes:
        plan = dataclasses.replace(plan, batch_sizes=tuple(sorted(args.batch_sizes)))
    if args.context_len:
        plan = dataclasses.replace(plan, context_len=args.context_len)
    params: dict[str, Any] = {"model": args.model, "device": args.device, "dtype": args.dtype,
                              "speed_probe": "off"}
    if args.kv_cache_tokens:
        params["kv_cache_tokens"] = args.kv_cache_tokens
    needed = plan.batch_sizes[-1] * (plan.max_context_tokens + 16)
    if "kv_cache_tokens" not in params and args.device == "cpu":
        params["kv_cache_tokens"] = max(needed, max(plan.prefill_lens) * 2, 4096)
    print(f"loading {args.model} on {args.device} ...", file=sys.stderr)
    engine = await asyncio.to_thread(create_engine, "profile", params)
    await engine.start()
    try:
        info = await engine.info()
        print(f"prefill at {list(plan.prefill_lens)} tokens ...", file=sys.stderr)
        base_ms, prefill_ms, prefill_points = await measure_prefill(
            engine, plan.prefill_lens, plan.repeats)
        points = await measure_decode(engine, plan)
        for batch, (x, ms) in zip(plan.batch_sizes, points):
            print(f"decode batch {batch:3d}: {x:6d} batch tokens  {ms:8.2f} ms/iteration",
                  file=sys.stderr)
    finally:
        await engine.close()
    return {
        "description": f"{info.model} on {hardware(args.device)}, recorded by "
                       f"bench/record_profile.py{' --quick' if args.quick else ''}",
        "hardware": hardware(args.device),
        "source": f"record_profile {datetime.date.today().isoformat()} device={args.device} "
                  f"dtype={args.dtype} context_len={plan.context_len} "
                  f"decode_steps={plan.decode_steps}",
        "model": info.model,
        "max_context_len": info.max_context_len,
        "block_size": info.block_size,
        "num_blocks": info.num_blocks_total,
        "prefill_per_token_ms": prefill_ms,
        "prefill_base_ms": base_ms,
        "prefill_points": prefill_points,
        "decode_table": points,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2",
                        help="smollm2, llama-13b (random weights), a folder or a .gguf")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", type=Path, required=True, help="profile YAML to write")
    parser.add_argument("--quick", action="store_true", help="a small grid (CPU smoke run)")
    parser.add_argument("--batch-sizes", type=int, nargs="+")
    parser.add_argument("--context-len", type=int)
    parser.add_argument("--kv-cache-tokens", type=int)
    args = parser.parse_args(argv)
    if args.batch_sizes and (min(args.batch_sizes) < 1 or len(set(args.batch_sizes))
                             != len(args.batch_sizes)):
        parser.error(f"--batch-sizes: {args.batch_sizes} must be distinct integers >= 1")
    if len(args.batch_sizes or FULL.batch_sizes) < 2:
        parser.error("--batch-sizes: need at least two batch sizes for a decode table")
    profile = asyncio.run(record(args))
    fills = ", ".join(f"{n} tokens {ms:.1f} ms" for n, ms in profile["prefill_points"])
    comment = ("Latency profile of the simulated engine, measured on the builtin engine.\n"
               "decode_table: [batch tokens (sum of the decoding sequences' context lengths), "
               "ms per iteration].\nprefill_base_ms + prefill_per_token_ms x tokens: least-squares "
               "line of fill time vs. tokens,\nover single fills (each length's best repeat, after "
               "one untimed fill of it): " + fills + ".")
    text = to_yaml(profile, comment)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    SimulatedEngineConfig.from_mapping({"profile": str(args.out)})  # loads as a profile
    print(text, end="")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
