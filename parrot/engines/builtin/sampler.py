"""Sampling the next token of each row: greedy rows in one argmax, the others in one batch.

Sampled rows are filtered together (temperature, top-k and top-p as per-row tensors) and drawn
by inverse CDF: each row's uniform comes from its request's own generator, a `random.Random`
seeded once per request, so a per-request seed gives the same tokens whoever shares the batch
and wherever its row sits. One uniform a row is a Python call, not a kernel: a step of any
number of sampled rows is a fixed handful of kernels and one read-back. (Sampling row by row
made ~8 kernels and a read-back per row: at 256 sampled rows, thousands of launches and 256
synchronisations a step, when the OpenAI API's default is to sample.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from parrot.engines.builtin.cuda.staging import upload_packed
from parrot.engines.builtin.grammar import SequenceGrammar, masked_rows
from parrot.sampling import SamplingParams


def make_generator(seed: int) -> random.Random:
    """A request's generator: one uniform per sampled token."""
    return random.Random(seed)


@dataclass(frozen=True)
class SampledRows:
    """A step's sampled rows and their parameters on the device, in two copies made without
    waiting for the step being sampled (cuda/staging.py `upload_packed`: a
    `torch.tensor(values, device=cuda)` apiece would block until the stream is idle)."""

    index: torch.Tensor          # [n] int64: their rows in the step's logits
    top_k: torch.Tensor          # [n] int64: the top-k cut, 0 for none
    temperature: torch.Tensor    # [n] float32
    top_p: torch.Tensor          # [n] float32: 1.0 for none
    uniform: torch.Tensor        # [n] float32: each row's draw in [0, 1)
    widest_k: int                # the largest top-k cut (0: no row cuts)
    any_top_p: bool              # some row keeps a nucleus

    @classmethod
    def upload(cls, rows: list[int], params: list[SamplingParams], uniforms: list[float],
               vocab: int, device: torch.device) -> SampledRows:
        """`params[i]` and `uniforms[i]` are row `rows[i]`'s."""
        top_ks = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
        index, top_k = upload_packed([np.array(rows, dtype=np.int64),
                                      np.array(top_ks, dtype=np.int64)], device)
        temperature, top_p, uniform = upload_packed(
            [np.array([p.temperature for p in params], dtype=np.float32),
             np.array([p.top_p for p in params], dtype=np.float32),
             np.array(uniforms, dtype=np.float32)], device)
        return cls(index, top_k, temperature, top_p, uniform, max(top_ks, default=0),
                   any(p.top_p < 1.0 for p in params))


def filter_rows(logits: torch.Tensor, rows: SampledRows) -> torch.Tensor:
    """The sampled rows' logits [n, V] float32 -> probabilities [n, V] after each row's
    temperature, top-k and top-p, in a fixed number of batched operations."""
    x = logits / rows.temperature.unsqueeze(1)
    if rows.widest_k:
        values = torch.topk(x, rows.widest_k, dim=-1).values            # [n, widest]
        kth = values.gather(1, (rows.top_k - 1).clamp_(min=0).unsqueeze(1))
        kth = kth.masked_fill((rows.top_k == 0).unsqueeze(1), float("-inf"))   # no cut
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if rows.any_top_p:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token);
        # a row without top_p keeps everything (its cumulative mass may round past 1.0)
        limit = rows.top_p.unsqueeze(1)
        drop = ((cumulative - sorted_probs) >= limit) & (limit < 1.0)
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Each row's token by inverse CDF at its uniform in [0, 1) (on the device, no read-back):
    the first token whose cumulative probability passes it, so a token of probability 0 is
    never drawn."""
    cdf = torch.cumsum(probs, dim=-1)
    at = uniform.to(cdf.dtype) * cdf[:, -1]
    picks = torch.searchsorted(cdf, at.unsqueeze(1), right=True).squeeze(1)
    # a uniform that rounds to 1.0 in float32 lands past the end: the last token of any
    # probability instead (never a cut one)
    last = probs.shape[-1] - 1 - torch.argmax((probs > 0).flip(-1).to(torch.uint8), dim=-1)
    return torch.minimum(picks, last)


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[random.Random | None],
           greedy: torch.Tensor | None = None,
           grammars: list[SequenceGrammar | None] | None = None) -> list[int]:
    """logits [N, V] float32 -> N token ids. `greedy`: the argmax of every row when already
    computed on the device (a CUDA-graph step); reading the tokens back is the step's one
    sync. `generators[i]`: row i's request generator (sampled rows). `grammars`: each row's
    constraint state (None: free); a constrained row samples, greedy or not, from its logits
    masked to the tokens its grammar allows (grammar.py)."""
    rows, masked = masked_rows(logits, grammars) if grammars else ([], None)
    where = {row: j for j, row in enumerate(rows)}
    out: list[int] = _tokens(logits, params, generators, greedy, where, masked).tolist()
    if masked is not None:
        greedy_rows = [j for j, row in enumerate(rows) if params[row].is_greedy]
        if greedy_rows:   # the argmax under the mask (the sampled ones were drawn above)
            picked = masked if len(greedy_rows) == len(rows) else masked[greedy_rows]
            for j, token in zip(greedy_rows, torch.argmax(picked, dim=-1).tolist()):
                out[rows[j]] = token
    return out


def sample_on_device(logits: torch.Tensor, params: list[SamplingParams],
                     generators: list[random.Random | None],
                     greedy: torch.Tensor | None = None) -> torch.Tensor:
    """`sample`'s tokens of unconstrained rows as a device tensor [N], nothing read back: what a
    launch-ahead feeds to the next step on the device (runner.py). Each sampled row draws its
    uniform here, as `sample` would."""
    return _tokens(logits, params, generators, greedy, {}, None)


def _tokens(logits: torch.Tensor, params: list[SamplingParams],
            generators: list[random.Random | None], greedy: torch.Tensor | None,
            where: dict[int, int], masked: torch.Tensor | None) -> torch.Tensor:
    """Every row's token on the device: the argmax, or for a sampled row a draw from its
    filtered probabilities (row `row`'s logits masked by `masked[where[row]]` when
    constrained)."""
    tokens = torch.argmax(logits, dim=-1) if greedy is None else greedy
    hot = [row for row, p in enumerate(params) if not p.is_greedy]
    if not hot:
        return tokens
    chosen = [params[row] for row in hot]
    uniforms = [(generators[row] or random).random() for row in hot]
    rows = SampledRows.upload(hot, chosen, uniforms, logits.shape[-1], logits.device)
    sub = logits.index_select(0, rows.index).float()
    if masked is not None:
        for k, row in enumerate(hot):
            if row in where:
                sub[k] = masked[where[row]]
    # a copy: `greedy` may be a graph's output buffer
    return tokens.clone().index_copy_(0, rows.index,
                                      draw(filter_rows(sub, rows), rows.uniform).to(tokens.dtype))
