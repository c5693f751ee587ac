"""Sampling the next token of each row: greedy rows in one argmax, the others one by one with
their own torch.Generator (a per-request seed must not depend on who shares the batch)."""

from __future__ import annotations

import torch

from parrot.engines.builtin.grammar import SequenceGrammar, masked_rows
from parrot.sampling import SamplingParams


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int,
                  top_p: float) -> torch.Tensor:
    """One row [V] float32 -> probabilities [V] after temperature, top-k and top-p."""
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        drop = (cumulative - sorted_probs) >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None],
           greedy: torch.Tensor | None = None,
           grammars: list[SequenceGrammar | None] | None = None) -> list[int]:
    """logits [N, V] float32 -> N token ids. `greedy`: the argmax of every row when already
    computed on the device (a CUDA-graph step); reading it back is the step's one sync.
    `grammars`: each row's constraint state (None: free); a constrained row samples, greedy
    or not, from its logits masked to the tokens its grammar allows (grammar.py)."""
    rows, masked = masked_rows(logits, grammars) if grammars else ([], None)
    tokens = torch.argmax(logits, dim=-1) if greedy is None else greedy
    out = tokens.tolist()
    where: dict[int, int] = {}
    if masked is not None:
        where = {row: j for j, row in enumerate(rows)}
        greedy_rows = [j for j, row in enumerate(rows) if params[row].is_greedy]
        if greedy_rows:   # the argmax under the mask (the others sample below)
            picked = masked if len(greedy_rows) == len(rows) else masked[greedy_rows]
            for j, token in zip(greedy_rows, torch.argmax(picked, dim=-1).tolist()):
                out[rows[j]] = token
    for row, (p, gen) in enumerate(zip(params, generators)):
        if p.is_greedy:
            continue
        row_logits = logits[row] if masked is None or row not in where else masked[where[row]]
        probs = filter_logits(row_logits, p.temperature, p.top_k, p.top_p)
        out[row] = int(torch.multinomial(probs, 1, generator=gen).item())
    return out
