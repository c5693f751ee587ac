"""Time per output token as an engine hands a Generate's tokens over (the engine counters
`tpot_generates` / `tpot_us_sum`): what a client reading the stream would see after its first
token, measured where the tokens leave the engine. Live runs read it from the engines because
over HTTP the manager sees a non-streamed Generate as one answer, with no token times.

Each Generate starts a `TpotTimer` and shows it every chunk before handing the chunk on (a
consumer may stop reading at the finished chunk); a finished Generate of two or more tokens
adds its (last chunk - first chunk) / (tokens after the first) to the meter. Times are the
event loop's clock, so a simulated engine on a virtual clock measures virtual seconds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from parrot.engines.counters import engine_counters
from parrot.engines.protocol import GenerateChunk


@dataclass
class TpotMeter:
    """An engine's cumulative count and sum (seconds) of per-Generate TPOT."""

    generates: int = 0
    seconds_sum: float = 0.0

    def timer(self) -> TpotTimer:
        return TpotTimer(self)

    @property
    def us_sum(self) -> int:
        return round(1e6 * self.seconds_sum)

    def counters(self) -> dict[str, int]:
        """Its engine counters (`EngineStats.counters`)."""
        return engine_counters(tpot_generates=self.generates, tpot_us_sum=self.us_sum)


class TpotTimer:
    """One Generate's chunks, as they are handed over."""

    __slots__ = ("_meter", "_first", "_after_first", "_loop")

    def __init__(self, meter: TpotMeter) -> None:
        self._meter = meter
        self._first: float | None = None
        self._after_first = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # its Generate's, at the 1st chunk

    def first_token(self, at: float) -> None:
        """The Generate's first token was produced at loop time `at` and is handed over with
        later tokens (an engine that answers a Generate whole times its first token without
        handing it over then): the next chunk counts the tokens after it."""
        self._first, self._after_first = at, -1

    def observe(self, chunk: GenerateChunk, tokens: int | None = None) -> float | None:
        """Note a chunk handed over, of `tokens` tokens (default: its token ids; an engine
        that streams text only says how many it counts); the Generate's TPOT (seconds) when
        it finished it."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        count = len(chunk.token_ids) if tokens is None else tokens
        if self._first is None:
            self._first, self._after_first = now, -count
        self._after_first += count
        if not (chunk.is_finished and self._after_first > 0):
            return None
        tpot = (now - self._first) / self._after_first
        self._meter.generates += 1
        self._meter.seconds_sum += tpot
        return tpot
