"""The floor of a serving run: the least time the GPU (or CPU) could have taken for the exact
token mix a benchmark sent, from two rates measured on the same machine in the same run.

* Prefill: every prompt token's matmul FLOPs (2 per weight outside the embedding) plus its
  causal attention (4 * layers * heads * head_dim per query-key pair), at the measured dense
  matmul rate.
* Decode: every model step reads every weight once (the engine's own step count over the
  run), and every generated token after the first reads its sequence's KV so far, at the
  measured copy rate (read + write of a large buffer, as bench_engine.py --floor uses).

The two are added as if nothing overlapped; a perfect overlap of prefill and decode would go
below the sum, so a wall under 1.0x of it is possible and not an error."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelCost:
    weight_bytes: int               # every weight once, as a step reads them
    matmul_flops_per_token: int     # 2 x the weights a token multiplies (not the embedding)
    attention_flops_per_pair: int   # per (query token, key token) pair, all layers
    kv_bytes_per_token: int

    @classmethod
    def of(cls, shape: Any, dtype_bytes: int) -> ModelCost:
        """From a builtin engine ModelShape and the weights' element size."""
        h, d, layers = shape.hidden_size, shape.head_dim, shape.num_layers
        per_layer = (h * (shape.num_heads + 2 * shape.num_kv_heads) * d   # q, k, v
                     + shape.num_heads * d * h                            # o
                     + 3 * h * shape.intermediate_size)                   # gate, up, down
        head = shape.vocab_size * h
        embed = 0 if shape.tie_word_embeddings else shape.vocab_size * h
        norms = (2 * layers + 1) * h
        multiplied = layers * per_layer + head
        return cls(weight_bytes=(multiplied + embed + norms) * dtype_bytes,
                   matmul_flops_per_token=2 * multiplied,
                   attention_flops_per_pair=4 * layers * shape.num_heads * d,
                   kv_bytes_per_token=shape.kv_bytes_per_token(dtype_bytes))


@dataclass(frozen=True)
class Rates:
    matmul_flops_per_s: float
    copy_bytes_per_s: float


@dataclass(frozen=True)
class Floor:
    prefill_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s


def serving_floor(sequences: Sequence[tuple[int, int]], steps: int, cost: ModelCost,
                  rates: Rates) -> Floor:
    """`sequences`: (prompt tokens, output tokens) of every completed request; `steps`: the
    model steps the engines ran for them."""
    flops = 0
    kv_reads = 0
    for prompt, output in sequences:
        flops += prompt * cost.matmul_flops_per_token
        flops += cost.attention_flops_per_pair * prompt * (prompt + 1) // 2
        # the first output token comes from the prefill; token t (1-based, t >= 2) is a
        # decode row reading the KV of the prompt and the t - 1 tokens before it
        decodes = max(0, output - 1)
        kv_reads += decodes * prompt + decodes * (decodes + 1) // 2
    decode_bytes = steps * cost.weight_bytes + kv_reads * cost.kv_bytes_per_token
    return Floor(prefill_s=flops / rates.matmul_flops_per_s,
                 decode_s=decode_bytes / rates.copy_bytes_per_s)


@dataclass(frozen=True)
class StepFloor:
    """The serving floor's rule for one engine iteration (a `trace_summary.StepPricer`): its
    prefill tokens' matmul FLOPs at the matmul rate, plus every weight once (each step reads
    them) and the KV its decode rows read, at the copy rate. Summed over a run's steps it is
    `serving_floor` less the prompts' attention FLOPs (a step trace does not give each
    chunk's context): it says which steps the wall over the floor went to."""

    cost: ModelCost
    rates: Rates

    def iteration_seconds(self, decode_rows: int, decode_kv_tokens: int,
                          prefill_tokens: int) -> float:
        flops = prefill_tokens * self.cost.matmul_flops_per_token
        read = self.cost.weight_bytes + decode_kv_tokens * self.cost.kv_bytes_per_token
        return flops / self.rates.matmul_flops_per_s + read / self.rates.copy_bytes_per_s


def _median_seconds(torch: Any, device: str, fn: Any, repeats: int = 10) -> float:
    fn()                                    # warm: allocation, cuBLAS heuristics
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def copy_rate(torch: Any, device: str) -> float:
    """Bytes a device-to-device copy moves per second (read + write), the median of 10: the
    rate a decode step's weight and KV reads are held against."""
    numel = 2**29 if device == "cuda" else 2**26      # 1 GiB bf16 on the GPU, 256 MiB fp32
    src = torch.randn(numel, device=device, dtype=torch.bfloat16 if device == "cuda"
                      else torch.float32)
    dst = torch.empty_like(src)
    seconds = _median_seconds(torch, device, lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / seconds


def matmul_rate(torch: Any, device: str) -> float:
    """Dense matmul FLOP/s at a prefill-like size (bf16 on the GPU, fp32 on the CPU)."""
    n = 8192 if device == "cuda" else 1024
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = _median_seconds(torch, device, lambda: a @ b)
    return 2 * n**3 / seconds


def measure_rates() -> Rates:
    """Both rates on this machine's first GPU, else its CPU."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return Rates(matmul_flops_per_s=matmul_rate(torch, device),
                 copy_bytes_per_s=copy_rate(torch, device))


def model_cost(params: dict[str, Any], on_cuda: bool) -> ModelCost:
    """The cost model of a builtin engine from its YAML params (its model and dtype)."""
    import json
    from pathlib import Path

    from parrot.engines.builtin.config import BuiltinEngineConfig
    from parrot.engines.builtin.llama.loader import prepare_smollm2
    from parrot.engines.builtin.llama.shapes import NAMED_SHAPES, ModelShape

    config = BuiltinEngineConfig.from_mapping(params)
    if config.model in NAMED_SHAPES:
        shape = NAMED_SHAPES[config.model]
    else:
        folder = (prepare_smollm2(config.resolved_cache_dir()) if config.model == "smollm2"
                  else Path(config.model).expanduser())
        if not (folder / "config.json").is_file():
            raise ValueError(f"--floor: no config.json for model {config.model!r} (a named "
                             "shape, smollm2 or a model folder)")
        shape = ModelShape.from_hf_config(json.loads((folder / "config.json").read_text()))
    dtype = config.dtype if config.dtype != "auto" else ("bfloat16" if on_cuda else "float32")
    return ModelCost.of(shape, 4 if dtype == "float32" else 2)
