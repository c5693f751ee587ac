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
from collections.abc import Sequence

import torch

from parrot.engines.builtin.grammar import SequenceGrammar, masked_rows
from parrot.sampling import SamplingParams


def make_generator(seed: int) -> random.Random:
    """A request's generator: one uniform per sampled token."""
    return random.Random(seed)


def on_device(values: Sequence[float], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`values` as a tensor on `device`, copied without waiting for the work queued there:
    `torch.tensor(values, device=cuda)` blocks until the stream is idle, here until the very
    step whose logits are being sampled has finished (a pinned copy, as the engine's staging
    makes: cuda/staging.py)."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int,
                  top_p: float) -> torch.Tensor:
    """One row [V] float32 -> probabilities [V] after temperature, top-k and top-p."""
    device = logits.device
    return filter_rows(logits.unsqueeze(0), on_device([temperature], torch.float32, device),
                       [top_k], [top_p])[0]


def filter_rows(logits: torch.Tensor, temperatures: torch.Tensor, top_ks: list[int],
                top_ps: list[float]) -> torch.Tensor:
    """Rows [N, V] float32 -> probabilities [N, V] after each row's temperature, top-k (0 or
    >= V: none) and top-p (1.0: none), in a fixed number of batched operations."""
    n, vocab = logits.shape
    x = logits / temperatures.unsqueeze(1)
    cut = [0 < k < vocab for k in top_ks]
    if any(cut):
        widest = max(k for k, c in zip(top_ks, cut) if c)
        values = torch.topk(x, widest, dim=-1).values                  # [N, widest]
        kth_index = on_device([k - 1 if c else 0 for k, c in zip(top_ks, cut)], torch.int64,
                              x.device).unsqueeze(1)
        kth = values.gather(1, kth_index)
        kth = kth.masked_fill(~on_device(cut, torch.bool, x.device).unsqueeze(1), float("-inf"))
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    nucleus = [p < 1.0 for p in top_ps]
    if any(nucleus):
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token);
        # a row without top_p keeps everything (its cumulative mass may round past 1.0)
        limit = on_device(top_ps, torch.float32, x.device).unsqueeze(1)
        drop = ((cumulative - sorted_probs) >= limit) & on_device(
            nucleus, torch.bool, x.device).unsqueeze(1)
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, uniforms: list[float]) -> torch.Tensor:
    """Each row's token by inverse CDF at its uniform in [0, 1) (on the device, no read-back):
    the first token whose cumulative probability passes it, so a token of probability 0 is
    never drawn."""
    cdf = torch.cumsum(probs, dim=-1)
    at = on_device(uniforms, cdf.dtype, cdf.device) * cdf[:, -1]
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
    index = on_device(hot, torch.int64, logits.device)
    sub = logits.index_select(0, index).float()
    if masked is not None:
        for k, row in enumerate(hot):
            if row in where:
                sub[k] = masked[where[row]]
    chosen = [params[row] for row in hot]
    probs = filter_rows(sub, on_device([p.temperature for p in chosen], torch.float32,
                                       logits.device),
                        [p.top_k for p in chosen], [p.top_p for p in chosen])
    uniforms = []
    for row in hot:
        gen = generators[row]
        uniforms.append((gen or random).random())
    # a copy: `greedy` may be a graph's output buffer
    return tokens.clone().index_copy_(0, index, draw(probs, uniforms).to(tokens.dtype))
