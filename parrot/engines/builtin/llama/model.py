"""The LLaMA forward pass over a flat token batch and the paged KV cache.

RMSNorm -> fused QKV -> RoPE -> write K/V into the cache -> attention (attention.py) -> o_proj
-> residual -> RMSNorm -> fused gate/up -> SiLU * up -> down -> residual, per layer; weights
come from an HF-named state dict (q/k/v and gate/up are concatenated once at load time so a
layer is three matmuls plus the output projection).

Two implementations of the elementwise parts, equal in value: PyTorch ops (the CPU, and CUDA
without the kernels), or the fused Triton ops of `parrot_kernels` (`use_fused`): residual
add + RMSNorm, RoPE + K/V cache write, SiLU * up as one launch each, so a decode layer is
4 GEMMs + 3 fused kernels + attention instead of ~20 launches. With the fused ops on CUDA,
a small-batch step (decode at batch 1-16, some projections up to 64) also runs its GEMMs and
the LM head through the kernels' small-batch linear (`small_batch_linear`, where
`kernel_wins`): a weight read, 5-17% faster than cuBLAS at one row and 5-11% at 2-16 rows
(docs/results/gemv_h200.md, docs/results/gemv_dot_h200.md).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F

from parrot.engines.builtin.llama.attention import (AttentionMetadata, DecodeFn,
                                                    prefill_sdpa_backends, prefill_torch, write_kv)
from parrot.engines.builtin.llama.linear_choice import LinearChoice
from parrot.engines.builtin.llama.rope import apply_rope, cos_sin_table, inv_frequencies
from parrot.engines.builtin.llama.shapes import ModelShape


@dataclass
class LayerWeights:
    input_norm: torch.Tensor     # [H]
    qkv: torch.Tensor            # [(Hq + 2 Hkv) D, H]
    o_proj: torch.Tensor         # [H, Hq D]
    post_norm: torch.Tensor      # [H]
    gate_up: torch.Tensor        # [2 I, H]
    down: torch.Tensor           # [H, I]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, H]; computed in float32 like HF LlamaRMSNorm."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class LlamaModel:
    def __init__(self, shape: ModelShape, state: dict[str, torch.Tensor], decode_fn: DecodeFn,
                 max_positions: int) -> None:
        self.shape = shape
        self._decode = decode_fn
        self.embed = state["model.embed_tokens.weight"]
        self.final_norm = state["model.norm.weight"]
        lm_head = state.get("lm_head.weight", self.embed)
        self.layers = [self._layer(state, i) for i in range(shape.num_layers)]
        self.dtype, self.device = self.embed.dtype, self.embed.device
        on_cpu = self.device.type == "cpu"
        # CPU (measured on 2 cores, fp32): MKL is faster on two [I, H] matmuls than on one
        # [2I, H], and on the LM head as x @ W^T in vocab slices of 8192 columns (the whole
        # [V, H] matrix at once falls out of cache). On CUDA the fused/whole forms win.
        self._split_gate_up = on_cpu
        self._lm_head_slices = ([s.t().contiguous() for s in lm_head.split(8192)] if on_cpu
                                else None)
        self.lm_head = lm_head
        inv_freq = inv_frequencies(shape.head_dim, shape.rope_theta, shape.rope_scaling)
        self.cos, self.sin = cos_sin_table(inv_freq, max_positions, self.dtype, self.device)
        self.scale = shape.head_dim ** -0.5
        self._q_size = shape.num_heads * shape.head_dim
        self._kv_size = shape.num_kv_heads * shape.head_dim
        self._fused: ModuleType | None = None
        self._gemv: ModuleType | None = None    # kernels whose small-batch linear is used
        # Where the small-batch kernels beat cuBLAS on this GPU, measured at start-up
        # (build.choose_linear_layers); None: the kernels' static table (an H200's).
        self.linear_choice: LinearChoice | None = None
        self.prefill_kernels: ModuleType | None = None   # use_paged_prefill

    def use_fused(self, kernels: ModuleType | None, *,
                  small_batch_gemv: bool | None = None) -> None:
        """Run the elementwise parts through these fused kernels (None: PyTorch ops), and
        small-batch linear layers through the kernels' small-batch linear wherever it reads
        the weights faster than cuBLAS (`kernel_wins`: 1-16 rows, some shapes up to 64;
        default: on CUDA, where it was measured; the CPU tests turn it on under the
        interpreter)."""
        if kernels is not None and not hasattr(kernels, "rope_kv_write"):
            kernels = None  # an older parrot_kernels without the fused ops
        self._fused = kernels
        if small_batch_gemv is None:
            small_batch_gemv = self.device.type == "cuda"
        has_gemv = hasattr(kernels, "small_batch_linear") and hasattr(kernels, "kernel_wins")
        self._gemv = kernels if (has_gemv and small_batch_gemv) else None

    @property
    def decode(self) -> DecodeFn:
        """The decode attention every step calls (attention.make_decode_fn)."""
        return self._decode

    def use_decode(self, decode_fn: DecodeFn) -> None:
        """Decode through `decode_fn` from now on: the Triton kernels' path on the CPU (the
        interpreter), or a wrapper that observes each call."""
        self._decode = decode_fn

    def projection_weights(self) -> dict[tuple[int, int], list[torch.Tensor]]:
        """Every linear layer's weights by shape (N, K), one per layer: what a decode step
        reads, for timing the small-batch kernels against cuBLAS (linear_choice.py)."""
        shapes: dict[tuple[int, int], list[torch.Tensor]] = {}
        for layer in self.layers:
            for w in (layer.qkv, layer.o_proj, layer.gate_up, layer.down):
                shapes.setdefault((w.shape[0], w.shape[1]), []).append(w)
        shapes.setdefault((self.lm_head.shape[0], self.lm_head.shape[1]), []).append(self.lm_head)
        return shapes

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x @ w^T through the small-batch kernel where it wins at x's row count, else cuBLAS
        (decided in Python: once per bucket when a CUDA graph is captured). Where the start-up
        measured this shape and row bucket, that decides; elsewhere the kernels' table."""
        gemv = self._gemv
        if gemv is None:
            return F.linear(x, w)
        n, k, rows = w.shape[0], w.shape[1], x.shape[0]
        measured = None if self.linear_choice is None else self.linear_choice.kernel_wins(
            n, k, rows)
        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured
        return gemv.small_batch_linear(x, w) if wins else F.linear(x, w)

    @property
    def fused(self) -> bool:
        return self._fused is not None

    @property
    def small_batch_kernels(self) -> ModuleType | None:
        """The kernels module whose small-batch linear `linear` may call (None: never)."""
        return self._gemv

    @staticmethod
    def _layer(state: dict[str, torch.Tensor], i: int) -> LayerWeights:
        p = f"model.layers.{i}."
        # pop: the fused copies replace the originals (no double memory when nobody else holds
        # the state dict).
        qkv = torch.cat([state.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
        gate_up = torch.cat([state.pop(p + "mlp.gate_proj.weight"),
                             state.pop(p + "mlp.up_proj.weight")])
        return LayerWeights(state[p + "input_layernorm.weight"], qkv,
                            state[p + "self_attn.o_proj.weight"],
                            state[p + "post_attention_layernorm.weight"], gate_up,
                            state[p + "mlp.down_proj.weight"])

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                meta: AttentionMetadata) -> torch.Tensor:
        """input_ids, positions [T] -> final hidden states [T, H] (K/V written into the cache)."""
        with prefill_sdpa_backends(self.device) if meta.prefills else contextlib.nullcontext():
            if self._fused is not None:
                return self._forward_fused(input_ids, positions, kv_caches, meta)
            return self._forward_unfused(input_ids, positions, kv_caches, meta)

    def _forward_unfused(self, input_ids: torch.Tensor, positions: torch.Tensor,
                         kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                         meta: AttentionMetadata) -> torch.Tensor:
        s = self.shape
        eps = s.rms_norm_eps
        x = F.embedding(input_ids, self.embed)                        # [T, H]
        cos = self.cos.index_select(0, positions)                     # [T, D]
        sin = self.sin.index_select(0, positions)
        t = x.shape[0]
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            h = rms_norm(x, layer.input_norm, eps)
            qkv = F.linear(h, layer.qkv)                              # [T, (Hq + 2 Hkv) D]
            qk, v = qkv.split([self._q_size + self._kv_size, self._kv_size], dim=-1)
            qk = apply_rope(qk.view(t, s.num_heads + s.num_kv_heads, s.head_dim), cos, sin)
            q, k = qk.split([s.num_heads, s.num_kv_heads], dim=1)     # [T, Hq|Hkv, D]
            v = v.view(t, s.num_kv_heads, s.head_dim)
            write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
            attn = self.attention(q, k, v, k_cache, v_cache, meta)    # [T, Hq, D]
            x = x + F.linear(attn.reshape(t, self._q_size), layer.o_proj)
            h = rms_norm(x, layer.post_norm, eps)
            if self._split_gate_up:
                gate_w, up_w = layer.gate_up.chunk(2)                 # row slices: contiguous
                gate, up = F.linear(h, gate_w), F.linear(h, up_w)     # [T, I] each
            else:
                gate, up = F.linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        return rms_norm(x, self.final_norm, eps)

    def _forward_fused(self, input_ids: torch.Tensor, positions: torch.Tensor,
                       kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                       meta: AttentionMetadata) -> torch.Tensor:
        """forward() through the fused kernels, as the pieces prefill graphs capture
        (prefill_graphs.py): each residual add is fused into the RMSNorm that follows it (the
        next layer's input norm, or the final norm)."""
        x, h = self.embed_normed(input_ids)
        for i, (k_cache, v_cache) in enumerate(kv_caches):
            q, k, v = self.layer_qkv(i, h, positions, meta.slot_mapping, k_cache, v_cache)
            attn = self.attention(q, k, v, k_cache, v_cache, meta)    # [T, Hq, D]
            h = self.layer_rest(i, x, attn)
        return h

    # -- the fused forward's pieces: the layers between two attention calls ------------------

    def embed_normed(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, h): the embeddings [T, H] (the residual stream, updated in place by
        `layer_rest`) and their first input norm. Fused path only."""
        ops = self._fused
        assert ops is not None
        x = F.embedding(input_ids, self.embed)
        return x, ops.add_rms_norm(x, None, self.layers[0].input_norm, self.shape.rms_norm_eps)

    def layer_qkv(self, i: int, h: torch.Tensor, positions: torch.Tensor,
                  slot_mapping: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  *, out: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer i's q [T, Hq, D], k, v [T, Hkv, D] from its normed input h: the QKV
        projection (copied into `out` [T, (Hq + 2 Hkv) D] when given: a graph's fixed
        buffer), RoPE applied and K/V written into the cache at slot_mapping; views of the
        projection. Fused path only."""
        ops, s = self._fused, self.shape
        assert ops is not None
        qkv = self.linear(h, self.layers[i].qkv)
        if out is not None:
            qkv = out.copy_(qkv)
        return ops.rope_kv_write(qkv, self.cos, self.sin, positions, slot_mapping, k_cache,
                                 v_cache, s.num_heads, s.num_kv_heads)

    def layer_rest(self, i: int, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Layer i after its attention (attn [T, Hq, D] or [T, Hq D]): o_proj, residual,
        MLP, residual (x updated in place); returns the next layer's normed input, the final
        norm's output after the last layer. Fused path only."""
        ops, eps = self._fused, self.shape.rms_norm_eps
        assert ops is not None
        layer, t = self.layers[i], x.shape[0]
        next_norm = (self.layers[i + 1].input_norm if i + 1 < len(self.layers)
                     else self.final_norm)
        h = ops.add_rms_norm(x, self.linear(attn.reshape(t, self._q_size), layer.o_proj),
                             layer.post_norm, eps)
        act = ops.silu_mul(self.linear(h, layer.gate_up))
        return ops.add_rms_norm(x, self.linear(act, layer.down), next_norm, eps)

    def use_paged_prefill(self, kernels: ModuleType | None) -> None:
        """Prefill attention through the kernels' paged prefill (every chunk of a step in one
        launch per layer, its context read in the paged cache). The runner plans the chunks
        once per step (AttentionMetadata.prefill_plan). ValueError without such kernels (the
        torch attention path, or an older parrot_kernels)."""
        if kernels is None or not hasattr(kernels, "paged_prefill_attention"):
            raise ValueError("needs the Triton kernels' paged_prefill_attention (parrot_kernels "
                             "on CUDA)")
        self.prefill_kernels = kernels

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, *,
                  out: torch.Tensor | None = None) -> torch.Tensor:
        """[T, Hq, D]: every row's attention (the decode rows first, then the prefill chunks'),
        written into `out` when given (a graph's fixed buffer: prefill_graphs.py)."""
        nd = meta.num_decode
        if meta.prefills and meta.prefill_plan is not None and self.prefill_kernels is not None:
            if out is None:
                out = q.new_empty(q.shape)     # contiguous; q may be a view of the fused QKV
            padded = meta.decode_rows
            # Rows fewer than the decode bucket: the decode pads a copy of q (not replayed).
            # Else the decode attention runs over the padded rows straight into `out` (no
            # padded copy of q, no copy of the result): its padding rows are prefill rows,
            # read as queries of the one-token padding suffix, and the prefill kernel, after
            # it on the same stream, overwrites their outputs.
            copied = bool(nd) and padded > q.shape[0]
            tensors = (q[:padded], out[:padded], q, out, k_cache, v_cache)
            replay = meta.attention_replay
            if replay is not None and not copied and replay[0].replay(replay[1], tensors):
                return out
            # Not replayed: the wrappers; the first layer's launches recorded for the others
            # (every layer's differ only in these tensors: parrot_kernels.launch.Recording)
            replayable = not copied and (not nd or getattr(self._decode, "replayable", False)) \
                and hasattr(self.prefill_kernels, "recording")
            record = (self.prefill_kernels.recording() if replay is None and replayable
                      else contextlib.nullcontext())
            decode_q, decode_out = (q[:nd], out[:nd]) if copied else tensors[:2]
            with record as rec:
                if nd:
                    self._decode(decode_q, k_cache, v_cache, meta, self.scale, out=decode_out)
                self.prefill_kernels.paged_prefill_attention(
                    q, k_cache, v_cache, meta.prefill_plan, self.scale, out=out)
            if rec is not None:
                meta.attention_replay = (rec, tensors)
            return out
        if not meta.prefills:
            result = self._decode(q, k_cache, v_cache, meta, self.scale)
        else:
            parts = [self._decode(q[:nd], k_cache, v_cache, meta, self.scale)] if nd else []
            parts += [prefill_torch(q, k, v, k_cache, v_cache, chunk, self.scale)
                      for chunk in meta.prefills]
            result = parts[0] if len(parts) == 1 else torch.cat(parts)
        return result if out is None else out.copy_(result)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] -> float32 logits [N, V]."""
        if self._lm_head_slices is not None:
            return torch.cat([hidden @ w for w in self._lm_head_slices], dim=-1).float()
        return self.linear(hidden, self.lm_head).float()
