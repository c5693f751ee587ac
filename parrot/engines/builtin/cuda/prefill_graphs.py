"""Piecewise CUDA graphs for the steps decode graphs do not take: the layers between the
attention calls of prefill and mixed steps.

An eager step of LLaMA-7B launches ~330 kernels from Python. Measured on an H200
(docs/results/engine_fill_h200.md, before this module): one 128-token Fill spent 8.8 ms
enqueueing them against 4.7 ms of device time and took 16.7 ms; a decode step of 16 rows
that a 128-token Fill joined took 20.6 ms instead of 5.8. A prefill step cannot be one graph:
the attention's launch plan depends on the step's chunks (count, lengths, positions) and
decode rows. So, as vLLM's piecewise graphs do, the step is cut at its attention calls. Per
token bucket T there are L + 1 graphs: the embeddings and layer 0's QKV; layer i's output
projection and MLP with layer i + 1's QKV (RoPE and the K/V write included); the last layer's
rest and the final norm. The attention runs eagerly between them over the step's real rows,
reading q/k/v from, and writing its output into, fixed buffers.

* buckets: a step's rows (decode rows + prefill tokens) padded to the next bucket up to
  `max_tokens` (config `prefill_graph_max_tokens`, 512 by default: above it a step's device
  time hides its launches; a 2,048-token Fill enqueued in 12.7 ms and ran 47). Powers of two
  to 256, then steps of 128: a GEMM over M bf16 rows does M FLOP per weight byte, so on an
  H200 (745 TFLOP/s measured over 4.16 TB/s: ~180 FLOP per byte) it reads the weights in
  the same time up to ~180 rows, and padding there is free; past it every padding row
  costs its FLOPs, so 300 rows run as 384, not 512.
* padding rows: token 0 at position 0, writing its K/V into the KV cache's scratch block (as
  decode graphs' padding does); the attention never sees them and their outputs are dropped.
* fixed buffers: token ids, positions and slots (staging.py: one upload per step), the QKV
  projection [T, (Hq + 2 Hkv) D] and the attention output [T, Hq, D], reused by every layer;
  the residual stream and the final hidden states are the graphs' own outputs.
* GEMMs run over T rows instead of the step's t: results are close to the eager step's, not
  bitwise (cuBLAS may pick another kernel for another row count).
* captured at start-up (warmup.py) largest bucket first into one memory pool of their own (a
  decode step launched ahead never shares memory with them); else on a bucket's first step.
  `capture=False` runs the same pieces over the same buffers eagerly (the CPU tests).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from parrot.engines.builtin.llama.attention import AttentionMetadata, prefill_sdpa_backends
from parrot.engines.builtin.cuda.graph_capture import GraphBuckets, capture_graph
from parrot.engines.builtin.kv_cache import KVCache
from parrot.engines.builtin.llama.model import LlamaModel
from parrot.engines.builtin.cuda.staging import StaticInputs

MIN_TOKEN_BUCKET = 16
LINEAR_FROM = 256        # buckets double up to here, then grow by it / 2 (see the docstring)


def token_buckets(max_tokens: int) -> list[int]:
    """Every bucket below max_tokens (powers of two from MIN_TOKEN_BUCKET to LINEAR_FROM, then
    steps of LINEAR_FROM / 2), then max_tokens itself."""
    buckets, b = [], MIN_TOKEN_BUCKET
    while b < max_tokens:
        buckets.append(b)
        b = 2 * b if b < LINEAR_FROM else b + LINEAR_FROM // 2
    return buckets + [max_tokens] if max_tokens >= 1 else []


def token_bucket(n: int, max_tokens: int) -> int | None:
    """The bucket of a step of n rows, or None when it runs eagerly (n over max_tokens)."""
    if n < 1 or n > max_tokens:
        return None
    return next(b for b in token_buckets(max_tokens) if b >= n)


class _Bucket:
    """One token bucket: its fixed buffers and its L + 1 pieces (graphs once captured)."""

    def __init__(self, graphs: PrefillGraphs, tokens: int) -> None:
        model, s = graphs.model, graphs.model.shape
        self.tokens = tokens
        heads = s.num_heads + 2 * s.num_kv_heads
        self.qkv = torch.zeros(tokens, heads * s.head_dim, dtype=model.dtype,
                               device=model.device)
        self.q, self.k, self.v = self.qkv.view(tokens, heads, s.head_dim).split(
            [s.num_heads, s.num_kv_heads, s.num_kv_heads], dim=1)
        self.attn = torch.zeros(tokens, s.num_heads, s.head_dim, dtype=model.dtype,
                                device=model.device)
        self.x: torch.Tensor | None = None        # the residual stream (a piece's output)
        self.hidden: torch.Tensor | None = None   # the final norm's output
        ids, positions, slots = (graphs.input_ids[:tokens], graphs.positions[:tokens],
                                 graphs.slots[:tokens])
        layers = graphs.kv.layers

        def first() -> None:
            self.x, h = model.embed_normed(ids)
            model.layer_qkv(0, h, positions, slots, *layers[0], out=self.qkv)

        def between(i: int) -> Callable[[], None]:     # layer i - 1's rest, layer i's QKV
            def piece() -> None:
                assert self.x is not None
                h = model.layer_rest(i - 1, self.x, self.attn)
                if i < len(layers):
                    model.layer_qkv(i, h, positions, slots, *layers[i], out=self.qkv)
                else:
                    self.hidden = h
            return piece

        self.pieces: list[Callable[[], None]] = [first] + [between(i) for i in
                                                           range(1, len(layers) + 1)]
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def run_piece(self, i: int) -> None:
        if self.graphs:
            self.graphs[i].replay()
        else:
            self.pieces[i]()


class PrefillGraphs(GraphBuckets[int, _Bucket]):
    """Fixed step inputs for the largest bucket and the buckets' pieces (captured at start-up
    by warmup.py, else on first use), by token bucket."""

    kind = "prefill graph"

    def __init__(self, model: LlamaModel, kv_cache: KVCache, *, max_tokens: int,
                 capture: bool = True) -> None:
        if kv_cache.scratch_block is None:
            raise ValueError("prefill graphs need a KV cache with a scratch block")
        if not model.fused:
            raise ValueError("prefill graphs need the fused layer ops (fused_ops)")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        super().__init__()
        self.model, self.kv, self.max_tokens = model, kv_cache, max_tokens
        self.capture_graphs = capture
        self.scratch_slot = kv_cache.scratch_block * kv_cache.block_size
        self.inputs = StaticInputs(max_tokens, 1, model.device)
        views = self.inputs.views
        self.input_ids, self.positions, self.slots = (views["input_ids"], views["positions"],
                                                      views["slots"])
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self.num_replays = 0

    @property
    def buckets(self) -> list[int]:
        return token_buckets(self.max_tokens)

    @property
    def num_captured(self) -> int:
        return len(self._graphs)

    def takes(self, n: int) -> bool:
        """Whether a step of n rows runs here (a bucket holds it, its capture never failed)."""
        tokens = token_bucket(n, self.max_tokens)
        return tokens is not None and tokens not in self._failed

    def run(self, token_ids: list[int], positions: list[int], slots: list[int],
            meta: AttentionMetadata) -> torch.Tensor | None:
        """The step's final hidden states [t, H] (K/V written into the cache), or None: run
        it eagerly (`takes` says which beforehand). `meta` is the step's attention metadata
        over its t real rows (decode rows first), as the runner builds it; its slot_mapping
        may be this object's `slots` view (the attention never reads it)."""
        t = len(token_ids)
        tokens = token_bucket(t, self.max_tokens)
        if tokens is None or tokens in self._failed:
            return None
        bucket = self._graphs.get(tokens) or self.capture_at_runtime(tokens)
        if bucket is None:
            return None
        self.fill(token_ids, positions, slots, tokens)
        q, k, v, attn = bucket.q[:t], bucket.k[:t], bucket.v[:t], bucket.attn[:t]
        backends = (prefill_sdpa_backends(self.model.device) if meta.prefills
                    else contextlib.nullcontext())
        with backends:
            bucket.run_piece(0)
            for i, (k_cache, v_cache) in enumerate(self.kv.layers):
                self.model.attention(q, k, v, k_cache, v_cache, meta, out=attn)
                bucket.run_piece(i + 1)
        self.num_replays += 1
        assert bucket.hidden is not None
        return bucket.hidden[:t]

    def fill(self, token_ids: list[int], positions: list[int], slots: list[int],
             tokens: int) -> None:
        """Copy a step's rows into the fixed inputs, padding rows up to `tokens`."""
        n = len(token_ids)
        h = self.inputs.host
        h["input_ids"][:n], h["input_ids"][n:tokens] = token_ids, 0
        h["positions"][:n], h["positions"][n:tokens] = positions, 0
        h["slots"][:n], h["slots"][n:tokens] = slots, self.scratch_slot
        self.inputs.upload()

    def capture_all(self) -> int:
        """Capture every bucket, largest first (the smaller reuse the pool's memory); the
        number whose capture failed (they run eagerly)."""
        return sum(self.capture(tokens) is None for tokens in reversed(self.buckets))

    def _capture(self, tokens: int) -> _Bucket:
        self.fill([], [], [], tokens)            # every row a padding row: writes the scratch
        bucket = _Bucket(self, tokens)
        if not self.capture_graphs:
            return bucket
        with torch.cuda.device(self.model.device):
            for piece in bucket.pieces:          # compile the Triton kernels outside a capture
                piece()
            torch.cuda.synchronize()
            bucket.graphs = [capture_graph(piece, self._pool)[0] for piece in bucket.pieces]
        return bucket

