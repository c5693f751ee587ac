"""Rotary position embedding: inverse frequencies (with the model's scaling) and the rotation.

Layout follows HF LLaMA (rotate_half over the two halves of the head dimension), which is what
the HF state dict's q/k projections expect (transformers un-permutes GGUF weights to it).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Mapping

import torch


def inv_frequencies(head_dim: int, theta: float, scaling: Mapping[str, Any]) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies for rope_type default, linear or llama3."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float()
                                / head_dim))
    rope_type = scaling.get("rope_type", "default")
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        factor = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"unsupported rope_type {rope_type!r}; supported: default, linear, llama3")


def cos_sin_table(inv_freq: torch.Tensor, max_positions: int, dtype: torch.dtype,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_positions, head_dim] in dtype (computed in float32 like HF)."""
    positions = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq.float())          # [P, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)                    # [P, D]
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos/sin [T, D] (already gathered at the tokens' positions)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
