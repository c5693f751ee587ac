"""Decode work that aborts threw away (the engine counters `aborted_generates` /
`aborted_decode_tokens`): what an engine decoded for Generates nobody read to the end.

A Generate counts once, when it is aborted before its last token: its caller went away (a
cancelled task, a closed stream, a dropped connection, the batched route's abort) or its
context was freed under it. A Generate that finishes, or fails with an error of the engine's
(a failed step, a closed engine, a request it refuses), counts nothing: that is a failure,
not work thrown away. The engine counts because only it knows what it decoded: a Generate
that is not streamed reports its tokens to its caller only when it finishes.
"""

from __future__ import annotations

from dataclasses import dataclass

from parrot.engines.counters import engine_counters


@dataclass
class AbortedGenerates:
    """An engine's cumulative count of aborted Generates and of the tokens decoded for them."""

    generates: int = 0
    decode_tokens: int = 0

    def add(self, decoded_tokens: int) -> None:
        """One Generate aborted before it finished, after `decoded_tokens` were decoded for
        it (0 when it never started)."""
        self.generates += 1
        self.decode_tokens += decoded_tokens

    def counters(self) -> dict[str, int]:
        """Its engine counters (`EngineStats.counters`)."""
        return engine_counters(aborted_generates=self.generates,
                               aborted_decode_tokens=self.decode_tokens)
