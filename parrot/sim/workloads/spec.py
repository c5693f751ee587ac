"""The knobs of the benchmark workloads, validated once (errors name the bad value)."""

from __future__ import annotations

from dataclasses import dataclass


class WorkloadConfigError(ValueError):
    """A workload parameter is out of range; the message names it and what is allowed."""


@dataclass(frozen=True)
class WorkloadSpec:
    doc_tokens: int = 20_480            # document length per application (paper: > 20k)
    chunk_tokens: int = 1024            # paper: 512–2048
    output_tokens: int = 50             # per call; paper: 25–100
    num_apps: int = 1                   # applications of the main kind, one after another
    chat_rate: float = 0.0              # background chat arrivals per second (Poisson)
    chat_prompt_tokens: tuple[int, int] = (128, 1024)   # uniform range per chat call
    chat_output_tokens: tuple[int, int] = (64, 512)
    max_chat_s: float = 3600.0          # no chat arrives after this (bounds an overload run)
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("doc_tokens", "chunk_tokens", "output_tokens", "num_apps"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadConfigError(f"{key}: {value!r} is not valid; allowed: integer >= 1")
        if self.chunk_tokens > self.doc_tokens:
            raise WorkloadConfigError(f"chunk_tokens: {self.chunk_tokens} is larger than "
                                      f"doc_tokens ({self.doc_tokens})")
        if isinstance(self.chat_rate, bool) or not isinstance(self.chat_rate, (int, float)) \
                or self.chat_rate < 0:
            raise WorkloadConfigError(f"chat_rate: {self.chat_rate!r} is not valid; allowed: "
                                      "number >= 0 (requests per second)")
        for key in ("chat_prompt_tokens", "chat_output_tokens"):
            low, high = getattr(self, key)
            if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
                raise WorkloadConfigError(f"{key}: {(low, high)!r} is not valid; allowed: "
                                          "two integers 1 <= low <= high")

    @property
    def num_chunks(self) -> int:
        return -(-self.doc_tokens // self.chunk_tokens)
