"""End-to-end shared-prefix decode in the builtin engine on CUDA: torch attention vs kernels.

B requests fork one context holding a P-token prefix (a shared system prompt) and decode
`new` tokens each; the same run with `attention_backend=torch` (per-request attention over
the paged cache), `attention_backend=triton` (parrot_kernels: paged + shared-prefix cascade)
eagerly, and the Triton path with the decode steps in CUDA graphs. Reports time per output
step and how many greedy tokens agree (torch vs kernels, and kernels graphs vs eager).

    python3 bench/bench_engine_prefix.py [--model llama-7b] [--prefix 4000] [--batch 32]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engine  # noqa: E402  (shares the model loader)
from repo_imports import import_parrot  # noqa: E402


async def run(torch, bundle, device: str, backend: str, prefix: list[int], batch: int, new: int,
              suffix: int, graphs: bool = False) -> tuple[float, list[list[int]], int]:
    from parrot.engines.builtin.build import build_engine
    from parrot.engines.builtin.config import BuiltinEngineConfig
    from parrot.engines.protocol import FillRequest, GenerateRequest
    from parrot.sampling import SamplingParams

    per_seq = -(-(suffix + new + 16) // 16)
    config = BuiltinEngineConfig(model=bundle.name, device=device, block_size=16,
                                 num_blocks=len(prefix) // 16 + 2 + 2 * batch * per_seq + 16,
                                 max_num_seqs=batch, max_batch_tokens=8192,
                                 attention_backend=backend, cuda_graphs=graphs,
                                 lazy_graphs=False)   # no capture inside the timing
    engine = build_engine(f"prefix-{backend}", config, bundle)
    try:
        await engine.fill(FillRequest("system", token_ids=tuple(prefix)))
        g = torch.Generator().manual_seed(1)
        vocab = bundle.shape.vocab_size
        await asyncio.gather(*(engine.fill(FillRequest(
            f"r{i}", parent_context_id="system",
            token_ids=tuple(torch.randint(0, vocab, (suffix,), generator=g).tolist())))
            for i in range(batch)))
        # Warm-up at this batch size (kernel compilation; with graphs, the bucket's capture)
        # on throwaway children, outside the timing.
        warm = SamplingParams(max_tokens=2, ignore_eos=True)
        await asyncio.gather(*(engine.generate_all(GenerateRequest(
            f"w{i}", parent_context_id=f"r{i}", sampling=warm)) for i in range(batch)))
        for i in range(batch):
            await engine.free_context(f"w{i}")
        bench_engine.sync(torch, device)
        started = time.perf_counter()
        params = SamplingParams(max_tokens=new, ignore_eos=True)
        results = await asyncio.gather(*(engine.generate_all(GenerateRequest(f"r{i}",
                                                                              sampling=params))
                                         for i in range(batch)))
        bench_engine.sync(torch, device)
        elapsed = time.perf_counter() - started
        runner = engine._runner
        graph_steps = runner.graphs.num_replays if runner.graphs is not None else 0
    finally:
        await engine.close()
    return elapsed / new, [list(r.token_ids) for r in results], graph_steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-7b")
    parser.add_argument("--prefix", type=int, default=4000)
    parser.add_argument("--suffix", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a smoke run of the script)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import_parrot()
    import torch

    bundle, hf = bench_engine.load(torch, args.model, args.device)
    del hf
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, bundle.shape.vocab_size, (args.prefix,), generator=g).tolist()
    lines = [f"### bench_engine_prefix — {time.strftime('%Y-%m-%d')} — "
             f"{torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'} — "
             f"torch {torch.__version__}", "",
             f"`python3 bench/bench_engine_prefix.py --model {args.model} --prefix "
             f"{args.prefix} --suffix {args.suffix} --new-tokens {args.new_tokens}` "
             "(bf16, random weights, greedy)", "",
             "| batch | torch attention ms/step | kernels ms/step | kernels + graphs ms/step | "
             "kernels / torch | graphs / eager kernels | greedy tokens torch = kernels | "
             "greedy tokens graphs = eager kernels |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cuda = args.device == "cuda"
    kernels = "triton" if cuda else "auto"   # cpu smoke run: auto -> torch, graphs off
    for batch in args.batch:
        t_torch, tok_torch, _ = asyncio.run(run(torch, bundle, args.device, "torch", prefix,
                                                batch, args.new_tokens, args.suffix))
        t_triton, tok_triton, _ = asyncio.run(run(torch, bundle, args.device, kernels, prefix,
                                                  batch, args.new_tokens, args.suffix))
        t_graphs, tok_graphs, steps = asyncio.run(run(
            torch, bundle, args.device, kernels, prefix, batch, args.new_tokens, args.suffix,
            graphs=True))

        def same(xs: list[list[int]], ys: list[list[int]]) -> int:
            return sum(a == b for x, y in zip(xs, ys) for a, b in zip(x, y))

        total = sum(len(x) for x in tok_torch)
        lines.append(f"| {batch} | {t_torch * 1e3:.2f} | {t_triton * 1e3:.2f} | "
                     f"{t_graphs * 1e3:.2f} | {t_torch / t_triton:.2f}x | "
                     f"{t_triton / t_graphs:.2f}x | {same(tok_torch, tok_triton)}/{total} | "
                     f"{same(tok_triton, tok_graphs)}/{total} ({steps} graph steps) |")
        print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
