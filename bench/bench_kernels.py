"""Benchmark the decode-attention kernels on one GPU (written for an H200), one command:

    python3 bench/bench_kernels.py --out bench.md [--quick] [--sweep]

For each shape (B requests sharing one prefix of P tokens, each with its own S-token suffix;
MHA 32x128 and GQA 32/8 heads, bf16, block size 16) it times, as medians of CUDA-event
intervals with the L2 flushed before every rep: shared_prefix_decode_attention ("auto"),
paged_decode_attention over the same pages (prefix pages shared in memory, read per row),
and torch SDPA over per-request materialised KV [B, Hkv, P+S, D]. Before each timed rep the
GPU is held by torch.cuda._sleep so the launches queue up: the numbers are device time (what
a CUDA-graph replay sees), not Python launch overhead. The byte floor is the KV read once
(prefix once + every suffix) plus q and out, at the device-to-device copy bandwidth
measured at start (bytes read + written). Prints a markdown table and writes it to --out.
--sweep first times launch variants (KernelTuning) at a few shapes.

Where the repo is not pip-installed, parrot_kernels imports from the repo root.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

from repo_imports import import_parrot


import_parrot()
import parrot_kernels as pk  # noqa: E402
DEV = "cuda"
DT = torch.bfloat16
PAGE = 16
HQ, D = 32, 128


class Timer:
    """Median device time of fn over reps, L2 flushed and launches queued before each rep."""

    def __init__(self) -> None:
        self.flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=DEV)

    def __call__(self, fn, reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
        for start, end in ev:
            self.flush.zero_()
            torch.cuda._sleep(300_000)  # ~0.15 ms: the host gets ahead of the device
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in ev)


def copy_bandwidth(timer: Timer) -> float:
    x = torch.empty(2 * 2**30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    ms = timer(lambda: y.copy_(x), 20)
    return 2 * x.numel() / (ms * 1e-3)  # bytes/s, read + write


class Shape:
    """One shared-prefix batch laid out in a paged cache, plus the same KV materialised."""

    def __init__(self, batch: int, prefix: int, suffix: int, kvh: int, sdpa: bool = True,
                 engine_widths: bool = False):
        """engine_widths: block tables padded to the power-of-two widths of the engine's
        graph buckets (the launch plan reads widths, not lengths)."""
        self.b, self.p, self.s, self.kvh = batch, -(-prefix // PAGE) * PAGE, suffix, kvh
        p_blocks, s_blocks = self.p // PAGE, -(-suffix // PAGE)
        num_blocks = p_blocks + batch * s_blocks
        gen = torch.Generator(device=DEV).manual_seed(batch * 7919 + prefix + suffix + kvh)
        perm = torch.randperm(num_blocks, device=DEV, generator=gen).to(torch.int32)
        cache = (num_blocks, PAGE, kvh, D)
        self.k = torch.randn(cache, device=DEV, dtype=DT, generator=gen)
        self.v = torch.randn(cache, device=DEV, dtype=DT, generator=gen)
        self.q = torch.randn(batch, HQ, D, device=DEV, dtype=DT, generator=gen)
        self.scale = D ** -0.5
        self.indptr = torch.tensor([0, batch], dtype=torch.int32, device=DEV)
        self.ptab = perm[:p_blocks].view(1, -1).contiguous()
        self.plen = torch.tensor([self.p], dtype=torch.int32, device=DEV)
        self.stab = perm[p_blocks:].view(batch, s_blocks).contiguous()
        if engine_widths:   # padding entries name block 0: never read past the lengths
            self.ptab, self.stab = (F.pad(t, (0, (1 << (t.shape[1] - 1).bit_length())
                                              - t.shape[1])).contiguous()
                                    for t in (self.ptab, self.stab))
        self.slen = torch.full((batch,), suffix, dtype=torch.int32, device=DEV)
        self.table = torch.cat([self.ptab.expand(batch, -1), self.stab], 1).contiguous()
        self.lens = self.slen + self.p
        self.out = torch.empty_like(self.q)
        self.K = self.V = None
        if sdpa:  # [B, Hkv, P+S, D]: the prefix copied into every request
            self.K, self.V = (self._materialise(c, suffix) for c in (self.k, self.v))

    def _materialise(self, cache: torch.Tensor, suffix: int) -> torch.Tensor:
        out = torch.empty(self.b, self.kvh, self.p + suffix, D, device=DEV, dtype=DT)
        prefix = cache[self.ptab[0].long()].reshape(self.p, self.kvh, D)
        out[:, :, : self.p] = prefix.transpose(0, 1)
        tok = cache[self.stab.long()].reshape(self.b, -1, self.kvh, D)[:, :suffix]
        out[:, :, self.p:] = tok.transpose(1, 2)
        return out

    def shared(self, **kw):
        return pk.shared_prefix_decode_attention(
            self.q, self.k, self.v, self.indptr, self.ptab, self.plen, self.stab, self.slen,
            self.scale, out=self.out, **kw)

    def paged(self, **kw):
        return pk.paged_decode_attention(self.q, self.k, self.v, self.table, self.lens,
                                         self.scale, out=self.out, **kw)

    def sdpa(self):
        return F.scaled_dot_product_attention(self.q[:, :, None], self.K, self.V,
                                              scale=self.scale, enable_gqa=self.kvh != HQ)

    def floor_bytes(self) -> int:
        kv = (self.p + self.b * self.s) * self.kvh * D * 2 * DT.itemsize
        return kv + 2 * self.q.numel() * DT.itemsize

    def path(self) -> str:
        return pk.choose_shared_prefix_strategy(self.b, 1, self.p, 2 * self.kvh * D * DT.itemsize)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def reps_for(est_ms: float, quick: bool) -> int:
    reps = 30 if est_ms < 0.5 else 15 if est_ms < 3 else 7
    return max(5, reps // 2) if quick else reps


COLS = ["heads", "B", "P", "S", "path", "shared ms", "cascade ms", "paged ms", "sdpa ms",
        "floor ms",
        "shared GB/s", "paged/shared", "sdpa/shared", "shared/floor", "paged/sdpa", "err"]


def run_shape(timer, bw, b, p, s, kvh, quick) -> list:
    sh = Shape(b, p, s, kvh)
    floor_ms = sh.floor_bytes() / bw * 1e3
    est = b * (sh.p + s) * kvh * D * 4 / bw * 1e3
    ref = sh.sdpa()[:, :, 0].clone()
    err = max(rel_err(sh.shared(), ref), rel_err(sh.paged(), ref))
    t_cas = timer(lambda: sh.shared(strategy="cascade"), reps_for(floor_ms, quick) * 2)
    t_pg = timer(sh.paged, reps_for(est, quick))
    t_sh = t_cas if sh.path() == "cascade" else timer(sh.shared, reps_for(est, quick))
    t_sd = timer(sh.sdpa, reps_for(est, quick))
    heads = "MHA 32x128" if kvh == HQ else f"GQA {HQ}/{kvh}"
    return [heads, b, sh.p, s, sh.path(), t_sh, t_cas, t_pg, t_sd, floor_ms,
            sh.floor_bytes() / t_sh / 1e6, t_pg / t_sh, t_sd / t_sh, t_sh / floor_ms,
            t_pg / t_sd, err]


def fmt(row) -> str:
    cells = []
    for v in row:
        if isinstance(v, float):
            cells.append(f"{v:.2e}" if v < 1e-2 else f"{v:.0f}" if v >= 1000 else f"{v:.3f}")
        else:
            cells.append(str(v))
    return "| " + " | ".join(cells) + " |"


SWEEP_SHAPES = "64/6000/200/32,64/1000/500/32,128/16000/50/8"


def sweep(timer, shapes: str, engine_widths: bool) -> list[str]:
    """Launch variants at a few shapes (B/P/S/kv heads): what the KernelTuning defaults were
    chosen from."""
    T = pk.KernelTuning
    variants = {  # name: (tuning, kernels it matters for)
        "default": (T(), ("cascade", "paged")), "unfused": (T(fuse=False), ("cascade",)),
        "bn32": (T(block_n=32), ("cascade", "paged")),
        "bn128": (T(block_n=128), ("cascade", "paged")),
        "tile_bn32": (T(tile_block_n=32), ("cascade",)),
        "unfused_tile_bn128": (T(fuse=False, tile_block_n=128), ("cascade",)),
        "unfused_bm128w8": (T(fuse=False, block_m=128, tile_num_warps=8), ("cascade",)),
        "unfused_bm128w8_bn128": (T(fuse=False, block_m=128, tile_num_warps=8,
                                    tile_block_n=128), ("cascade",)),
        "stages3": (T(num_stages=3), ("cascade", "paged")),
        "split512": (T(split_tokens=512), ("cascade", "paged")),
        "split2048": (T(split_tokens=2048), ("cascade", "paged")),
        # prefix tiles sized to the rows a group has (MHA: rows x 1 head)
        "bm16": (T(block_m=16), ("cascade",)),
        "bm32": (T(block_m=32), ("cascade",)),
        "bm16_tile_bn64": (T(block_m=16, tile_block_n=64), ("cascade",)),
        "bm16_tile_bn128": (T(block_m=16, tile_block_n=128), ("cascade",)),
        "bm16_tile_bn64_stages3": (T(block_m=16, tile_block_n=64, num_stages=3), ("cascade",)),
        "bm16_tile_bn64_split1024": (T(block_m=16, tile_block_n=64, split_tokens=1024),
                                     ("cascade",)),
        "bm16_tile_bn64_split256": (T(block_m=16, tile_block_n=64, split_tokens=256),
                                    ("cascade",)),
        "tile_bn64": (T(tile_block_n=64), ("cascade",)),
        "unfused_bm16_tile_bn64": (T(fuse=False, block_m=16, tile_block_n=64), ("cascade",)),
        "unfused_bm16_tile_bn128_w8": (T(fuse=False, block_m=16, tile_block_n=128,
                                         tile_num_warps=8), ("cascade",)),
    }
    lines = ["| shape B/P/S/kv heads | kernel | variant | ms |", "|---|---|---|---|"]
    for spec in shapes.split(","):
        b, p, s, kvh = (int(x) for x in spec.split("/"))
        sh = Shape(b, p, s, kvh, sdpa=False, engine_widths=engine_widths)
        runs = {"cascade": functools.partial(sh.shared, strategy="cascade"),
                "per_row": functools.partial(sh.shared, strategy="per_row"),
                "paged": sh.paged}
        for name, (tuning, kernels) in variants.items():
            for kernel in kernels:
                try:
                    ms = f"{timer(functools.partial(runs[kernel], tuning=tuning), 10):.4f}"
                except Exception as e:  # a variant may not compile (resources): report it
                    ms = f"failed: {type(e).__name__}"
                lines.append(f"| {b}/{p}/{s}/{kvh} | {kernel} | {name} | {ms} |")
                print(lines[-1], flush=True)
        torch.cuda.empty_cache()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    ap.add_argument("--sweep", action="store_true", help="also time launch variants first")
    ap.add_argument("--sweep-shapes", default=SWEEP_SHAPES,
                    help="the sweep's shapes, B/P/S/kv-heads comma-separated")
    ap.add_argument("--engine-widths", action="store_true",
                    help="the sweep pads block tables to the engine's power-of-two widths")
    ap.add_argument("--sweep-only", action="store_true", help="the sweep, not the table")
    args = ap.parse_args()
    t0 = time.time()
    timer = Timer()
    bw = copy_bandwidth(timer)
    props = torch.cuda.get_device_properties(0)
    import triton
    head = [f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__},"
            f" triton {triton.__version__}; copy bandwidth {bw / 1e12:.2f} TB/s (read+write); "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    print(head[0], flush=True)
    lines = sweep(timer, args.sweep_shapes, args.engine_widths) + [""] if args.sweep else []
    if args.sweep_only:
        args.out.write_text("\n".join(head + lines) + "\n")
        print(f"wrote {args.out} in {time.time() - t0:.0f} s")
        return
    lines += ["| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    print("\n".join(lines[-2:]), flush=True)
    batches = [8, 64, 128] if args.quick else [8, 16, 32, 64, 128]
    for kvh in (32, 8):
        for p in ([1000, 6000] if args.quick else [1000, 6000, 16000]):
            for s in ([50, 500] if args.quick else [50, 200, 500]):
                for b in batches:
                    lines.append(fmt(run_shape(timer, bw, b, p, s, kvh, args.quick)))
                    print(lines[-1], flush=True)
                torch.cuda.empty_cache()
    lines.append("")
    lines.append(f"total {time.time() - t0:.0f} s")
    args.out.write_text("\n".join(head + lines) + "\n")
    print(f"wrote {args.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
