"""The knobs of the benchmark workloads, validated once (errors name the bad value).

One spec serves every workload; each reads the fields it needs (the registry in
`registry.py` says which, and gives per-workload defaults).
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.errors import ConfigError
from parrot.validation import Checks, is_int, is_number


class WorkloadConfigError(ConfigError):
    """A workload parameter is out of range; the message names it and what is allowed."""


_CHECK = Checks("", WorkloadConfigError)
CHAT_ARRIVALS = ("poisson", "uniform")
# "sampled": each call's real output length is drawn (seeded, per call) and hidden from the
# service, under a loose max_tokens cap; "exact": max_tokens is the real length, generated with
# ignore_eos (the oracle setting the paper experiments were measured in).
OUTPUT_LENGTHS = ("sampled", "exact")


@dataclass(frozen=True)
class WorkloadSpec:
    doc_tokens: int = 20_480            # document length per application (paper: > 20k)
    chunk_tokens: int = 1024            # paper: 512–2048
    output_tokens: int = 50             # per call; paper: 25–100
    num_apps: int = 1                   # applications of the main kind, one after another
    chat_rate: float = 0.0              # background chat arrivals per second
    # How chats arrive at chat_rate: "poisson" (seeded), or "uniform" (one every 1/chat_rate
    # seconds, as the paper's artifact sends its mixed workload's chats).
    chat_arrivals: str = "poisson"
    chat_prompt_tokens: tuple[int, int] = (128, 1024)   # uniform range per chat call
    chat_output_tokens: tuple[int, int] = (64, 512)
    # Chats arrive at fixed times in [0, max_chat_s) whatever the main applications do, so
    # every variant faces the same chat arrivals.
    max_chat_s: float = 3600.0
    seed: int = 0
    # concurrent_chains: clients at once; copilot: users at once; multi_agent: files (coders).
    num_clients: int = 1
    # mixed: the jobs' arrival times, seconds from the start (a trace: the paper's artifact
    # sends bursts of three); empty: num_apps jobs as a Poisson process at request_rate.
    job_offsets: tuple[float, ...] = ()
    # gpts (and mixed's jobs): Poisson request rate (requests/s) and how many requests arrive.
    request_rate: float = 1.0
    num_requests: int = 100
    system_prompt_tokens: int = 6000    # copilot's shared system prompt
    prompt_scale: float = 1.0           # gpts: system prompt lengths x this (fit a window)
    rounds: int = 3                     # multi_agent: review/revise rounds
    # How long outputs are (OUTPUT_LENGTHS). Sampled: a call of nominal length m (output_tokens,
    # or a chat's drawn length) produces a lognormal length of mean m (sigma 0.5, at least 1)
    # and its function declares max_tokens = max_tokens_factor x m; the simulated engine stops
    # at the drawn length (parrot/engines/sim_eos.py), which no scheduler sees.
    output_lengths: str = "sampled"
    max_tokens_factor: float = 4.0

    def __post_init__(self) -> None:
        for key in ("doc_tokens", "chunk_tokens", "output_tokens", "num_apps", "num_clients",
                    "num_requests", "system_prompt_tokens", "rounds"):
            _CHECK.positive_int(key, getattr(self, key))
        _CHECK.require(self.chunk_tokens <= self.doc_tokens, "chunk_tokens", self.chunk_tokens,
                       f"at most doc_tokens ({self.doc_tokens})")
        _CHECK.number("chat_rate", self.chat_rate, minimum=0)  # requests per second
        _CHECK.number("max_chat_s", self.max_chat_s, minimum=0)
        _CHECK.positive("request_rate", self.request_rate)
        _CHECK.positive("prompt_scale", self.prompt_scale)
        _CHECK.one_of("chat_arrivals", self.chat_arrivals, CHAT_ARRIVALS)
        _CHECK.one_of("output_lengths", self.output_lengths, OUTPUT_LENGTHS)
        _CHECK.number("max_tokens_factor", self.max_tokens_factor, minimum=1.0, maximum=100.0)
        offsets = self.job_offsets
        _CHECK.require(isinstance(offsets, (tuple, list))
                       and all(is_number(x) and x >= 0 for x in offsets)
                       and all(a <= b for a, b in zip(offsets, offsets[1:])),
                       "job_offsets", offsets,
                       "finite seconds >= 0 in arrival order (non-decreasing)")
        object.__setattr__(self, "job_offsets", tuple(float(x) for x in offsets))
        for key in ("chat_prompt_tokens", "chat_output_tokens"):
            value = getattr(self, key)
            _CHECK.require(isinstance(value, (tuple, list)) and len(value) == 2
                           and all(map(is_int, value)) and 1 <= value[0] <= value[1], key, value,
                           "two integers 1 <= low <= high")

    @property
    def num_chunks(self) -> int:
        return -(-self.doc_tokens // self.chunk_tokens)
