"""Constrained decoding: per-sequence token masks from llguidance, applied before sampling.

A Generate whose sampling carries a constraint (parrot/constraints.py) gets a `SequenceGrammar`:
an llguidance matcher that has consumed every token the sequence generated so far. Each step,
for the constrained rows only, the matchers write their allowed-token bitmasks (on the CPU,
all rows in one call to llguidance's thread pool) and the rows' logits are masked to -inf
outside them before sampling; unconstrained rows are never touched. The sampled token is
consumed when the engine appends it (outputs.process_token). When the grammar is complete
EOS is the only allowed token, so a constrained output ends with "eos".

Grammars are compiled once per constraint and tokenizer (`GrammarCache`, LRU): a sequence
starts from a deep copy of the compiled matcher, which costs microseconds, not the compile.
The mask is applied to the logits the step produced, whatever path produced them (a CUDA
graph's output buffers or an eager forward): the masked rows are copies, so a graph's static
buffers are never written.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from parrot.constraints import Constraint, ConstraintError, grammar_text
from parrot.engines.builtin.llama.tokenizer import FastTokenizer
from parrot.errors import EngineError
from parrot.extras import missing_extra

MAX_CACHED_GRAMMARS = 256


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise missing_extra("structured", "constrained decoding", exc) from None
    return llguidance


def _ll_tokenizer(llg: Any, tokenizer: Any, vocab_size: int, eos: list[int] | None) -> Any:
    """llguidance's view of the engine's tokenizer: a FastTokenizer's tokenizer.json as is
    (what llguidance's transformers bridge serializes; importing the bridge imports
    transformers), else through the bridge."""
    if isinstance(tokenizer, FastTokenizer):
        return llg.LLTokenizer(tokenizer.json_text(), n_vocab=vocab_size,
                               eos_token=eos if eos is not None else tokenizer.eos_token_id)
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos)


class SequenceGrammar:
    """One sequence's matcher: the tokens it allows next, and the token it consumed."""

    __slots__ = ("matcher", "cache")

    def __init__(self, matcher: Any, cache: GrammarCache) -> None:
        self.matcher = matcher
        self.cache = cache   # fills the masks of every row of its engine in one call

    def advance(self, token: int) -> None:
        """Consume a sampled token; a token the grammar refused is an engine bug (the mask
        allowed it), so it fails the request loudly rather than emit invalid text."""
        if not self.matcher.consume_token(token):
            raise EngineError(f"constrained decoding: token {token} refused by the grammar: "
                              f"{self.matcher.get_error()}")

    @property
    def is_stopped(self) -> bool:
        return bool(self.matcher.is_stopped())


class GrammarCache:
    """Compiled matchers per constraint for one tokenizer (thread-safe: steps run in a
    worker thread, Generates are admitted on the loop)."""

    def __init__(self, tokenizer: Any, vocab_size: int,
                 max_entries: int = MAX_CACHED_GRAMMARS, *, parallel: bool = True,
                 eos_token_ids: list[int] | None = None) -> None:
        llg = _llguidance()
        if tokenizer is None:
            raise ConstraintError("constrained decoding needs the model's tokenizer")
        self._llg = llg
        # the engine's EOS ids: a complete grammar allows exactly the tokens that end a
        # Generate (the tokenizer's own EOS may be only one of them)
        self.tokenizer = _ll_tokenizer(llg, tokenizer, vocab_size, eos_token_ids or None)
        self.vocab_size = vocab_size
        # Masks of several rows on llguidance's thread pool: for a GPU engine, whose host
        # threads idle while the step runs. A CPU engine fills them on its own thread: pool
        # threads would take the cores the model's forward runs on.
        self.parallel = parallel
        self.executor = llg.LLExecutor() if parallel else None
        # a GPU engine's masks go to the device from page-locked memory (an asynchronous
        # copy); one buffer reused step after step (each step's copy ends before the next)
        self._pinned: torch.Tensor | None = None
        self._compiled: OrderedDict[Constraint, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries
        self.compiles = 0
        self.compile_s = 0.0

    def compiled(self, constraint: Constraint) -> Any:
        """The constraint's compiled matcher, before any token (compiled on first use)."""
        with self._lock:
            matcher = self._compiled.get(constraint)
            if matcher is not None:
                self._compiled.move_to_end(constraint)
                return matcher
        started = time.perf_counter()
        matcher = self._llg.LLMatcher(self.tokenizer, grammar_text(constraint), log_level=0)
        if matcher.is_error():
            raise ConstraintError(f"the constraint does not compile: {matcher.get_error()}")
        with self._lock:
            self.compiles += 1
            self.compile_s += time.perf_counter() - started
            self._compiled[constraint] = matcher
            while len(self._compiled) > self.max_entries:
                self._compiled.popitem(last=False)
        return matcher

    def start(self, constraint: Constraint) -> SequenceGrammar:
        return SequenceGrammar(self.compiled(constraint).deep_copy(), self)

    def _buffer(self, rows: int, words: int) -> torch.Tensor:
        if not (self.parallel and torch.cuda.is_available()):
            return torch.empty((rows, words), dtype=torch.int32)
        if self._pinned is None or self._pinned.shape[0] < rows:
            self._pinned = torch.empty((max(rows, 64), words), dtype=torch.int32,
                                       pin_memory=True)
        return self._pinned[:rows]

    def fill_masks(self, grammars: list[SequenceGrammar]) -> torch.Tensor:
        """[R, ceil(V/32)] int32 allowed-token bitmasks of the rows, on the CPU."""
        words = (self.vocab_size + 31) // 32
        bitmask = self._buffer(len(grammars), words)
        if self.executor is not None and len(grammars) > 1:
            self.executor.unsafe_compute_mask_ptr(
                [(g.matcher, i) for i, g in enumerate(grammars)], bitmask.data_ptr(),
                words * 4, len(grammars))
        else:
            for i, g in enumerate(grammars):
                g.matcher.unsafe_compute_mask_ptr(bitmask[i].data_ptr(), words * 4)
        for g in grammars:
            if g.matcher.is_error():
                raise EngineError(f"constrained decoding failed: {g.matcher.get_error()}")
        return bitmask


_SHIFTS: dict[torch.device, torch.Tensor] = {}


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """logits [R, V] (a copy: this writes into it) -> the same with -inf where the bit is 0.
    On the CPU the bits are unpacked by numpy (a torch shift-and-mask over [R, V/32, 32] is
    ~20x slower there); on a GPU the packed masks (V/8 bytes a row) are uploaded and unpacked
    by a shift on the device."""
    vocab = logits.shape[-1]
    device = logits.device
    if device.type == "cpu":
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=-1, bitorder="little")
        allowed = torch.from_numpy(bits[:, :vocab])
    else:
        shifts = _SHIFTS.get(device)
        if shifts is None:
            shifts = _SHIFTS[device] = torch.arange(32, dtype=torch.int32, device=device)
        mask = bitmask.to(device, non_blocking=True)
        allowed = ((mask.unsqueeze(-1) >> shifts) & 1).view(mask.shape[0], -1)[:, :vocab]
    return logits.masked_fill_(allowed == 0, float("-inf"))


def masked_rows(logits: torch.Tensor, grammars: list[SequenceGrammar | None]
                ) -> tuple[list[int], torch.Tensor | None]:
    """The constrained rows of a step and their masked logits ([R, V] float32 copies). Called
    before anything reads the logits back, so on a GPU the masks are computed on the CPU
    while the step still runs."""
    live = [(i, g) for i, g in enumerate(grammars) if g is not None]
    if not live:
        return [], None
    bitmask = live[0][1].cache.fill_masks([g for _, g in live])
    rows = [i for i, _ in live]
    index = torch.tensor(rows, device=logits.device)
    sub = logits.index_select(0, index).float()
    return rows, apply_bitmask(sub, bitmask)
