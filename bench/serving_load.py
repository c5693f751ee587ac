"""bench_serving's load: synthetic chat requests (lognormal lengths shaped like public chat
traces), each streamed through `/v1/completions` and timed (first token, gaps, end), Poisson or
all-at-once arrivals under a concurrency limit, and a run's percentiles, tok/s and goodput.
bench_serving.py drives it (the CLI, the servers, the floor, the report)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

# Lognormal shapes of chat traffic (tokens): median ~ exp(mu).
PROMPT_MU, PROMPT_SIGMA, PROMPT_RANGE = math.log(250), 0.8, (16, 2048)
OUTPUT_MU, OUTPUT_SIGMA, OUTPUT_RANGE = math.log(160), 0.7, (8, 1024)
CHARS_PER_TOKEN = 4     # the simulated tokenizer's; real tokenizers differ a little
_WORDS = ("the", "parrot", "sky", "river", "system", "answer", "quiet", "data", "music",
          "garden", "window", "engine", "story", "light", "north", "paper", "number")


@dataclass(frozen=True)
class Request:
    prompt: str
    prompt_tokens: int
    output_tokens: int          # the drawn length
    max_tokens: int
    ignore_eos: bool
    temperature: float = 0.0    # 0: greedy; else sampled (OpenAI's default is 1.0)
    top_p: float = 1.0


@dataclass
class Outcome:
    ok: bool
    ttft_s: float = math.nan
    e2e_s: float = math.nan
    output_tokens: int = 0
    prompt_tokens: int = 0      # as the server counted them (usage)
    itl_s: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def tpot_s(self) -> float:
        if self.output_tokens <= 1:
            return math.nan
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class RunSpec:
    request_rate: float          # requests/s (inf: all at once)
    max_concurrency: int | None  # None: unbounded


def _clipped_lognormal(rng: random.Random, mu: float, sigma: float,
                       bounds: tuple[int, int]) -> int:
    return min(bounds[1], max(bounds[0], round(rng.lognormvariate(mu, sigma))))


def with_sampling(requests: Sequence[Request], args: argparse.Namespace) -> list[Request]:
    """The requests with the run's `--temperature` and `--top-p`."""
    return [replace(r, temperature=args.temperature, top_p=args.top_p)
            for r in requests]


def synthetic_chat(num: int, seed: int, lengths: str, cap_factor: float) -> list[Request]:
    """`num` chat requests with seeded prompt and output lengths."""
    rng = random.Random(f"bench_serving|{seed}")
    mean_output = math.exp(OUTPUT_MU + OUTPUT_SIGMA ** 2 / 2)
    requests = []
    for i in range(num):
        prompt_tokens = _clipped_lognormal(rng, PROMPT_MU, PROMPT_SIGMA, PROMPT_RANGE)
        output_tokens = _clipped_lognormal(rng, OUTPUT_MU, OUTPUT_SIGMA, OUTPUT_RANGE)
        words = " ".join(rng.choice(_WORDS) for _ in range(prompt_tokens))
        # a unique head, so no two prompts share a cached prefix by accident
        text = f"Request {i}: {words}"[:prompt_tokens * CHARS_PER_TOKEN]
        if lengths == "hidden":
            cap = max(output_tokens, round(cap_factor * mean_output))
            requests.append(Request(f"{text} [[eos@{output_tokens}]]", prompt_tokens,
                                    output_tokens, cap, False))
        else:
            requests.append(Request(text, prompt_tokens, output_tokens, output_tokens, True))
    return requests


async def send(session: aiohttp.ClientSession, url: str, model: str, headers: dict[str, str],
               request: Request) -> Outcome:
    """One streamed completion; times its first chunk, the gaps between chunks and the end."""
    body = {"model": model, "prompt": request.prompt, "max_tokens": request.max_tokens,
            "ignore_eos": request.ignore_eos, "temperature": request.temperature,
            "top_p": request.top_p, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    outcome = Outcome(ok=False)
    last = started
    try:
        async with session.post(f"{url}/v1/completions", json=body, headers=headers) as reply:
            if reply.status != 200:
                outcome.error = f"HTTP {reply.status}: {(await reply.text())[:200]}"
                return outcome
            async for raw in reply.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    outcome.output_tokens = int(chunk["usage"]["completion_tokens"])
                    outcome.prompt_tokens = int(chunk["usage"]["prompt_tokens"])
                if not any(c.get("text") for c in chunk.get("choices", ())):
                    continue
                now = time.perf_counter()
                if math.isnan(outcome.ttft_s):
                    outcome.ttft_s = now - started
                else:
                    outcome.itl_s.append(now - last)
                last = now
    except (TimeoutError, aiohttp.ClientError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
        return outcome
    outcome.e2e_s = time.perf_counter() - started
    outcome.ok = not math.isnan(outcome.ttft_s)
    return outcome


async def run_one(url: str, model: str, headers: dict[str, str], requests: Sequence[Request],
                  spec: RunSpec, seed: int) -> tuple[list[Outcome], float]:
    """Every request of `requests` at `spec`'s rate and concurrency; (outcomes, seconds)."""
    rng = random.Random(f"arrivals|{seed}")
    limit = asyncio.Semaphore(spec.max_concurrency or len(requests) or 1)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    connector = aiohttp.TCPConnector(limit=0)

    async def limited(client: aiohttp.ClientSession, request: Request) -> Outcome:
        async with limit:
            return await send(client, url, model, headers, request)

    started = time.perf_counter()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as client:
        tasks = []
        for request in requests:
            tasks.append(asyncio.ensure_future(limited(client, request)))
            if math.isfinite(spec.request_rate):
                await asyncio.sleep(rng.expovariate(spec.request_rate))
        outcomes = list(await asyncio.gather(*tasks))
    return outcomes, time.perf_counter() - started


def percentiles(values: Sequence[float], unit: float = 1000.0) -> dict[str, float]:
    """p50/p90/p99 (nearest rank) in ms (`unit` per second); NaN when empty."""
    ordered = sorted(v for v in values if not math.isnan(v))
    out = {}
    for p in (50, 90, 99):
        out[f"p{p}"] = (ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] * unit
                        if ordered else math.nan)
    return out


def summarize(outcomes: Sequence[Outcome], seconds: float, spec: RunSpec,
              slo_ttft_ms: float, slo_tpot_ms: float) -> dict[str, Any]:
    done = [o for o in outcomes if o.ok]
    good = [o for o in done if o.ttft_s * 1000 <= slo_ttft_ms
            and (math.isnan(o.tpot_s) or o.tpot_s * 1000 <= slo_tpot_ms)]
    tokens = sum(o.output_tokens for o in done)
    return {"request_rate": spec.request_rate, "max_concurrency": spec.max_concurrency,
            "completed": len(done), "failed": len(outcomes) - len(done),
            "errors": sorted({o.error for o in outcomes if o.error})[:5],
            "duration_s": seconds, "request_throughput": len(done) / seconds,
            "output_tokens": tokens, "output_throughput": tokens / seconds,
            "ttft_ms": percentiles([o.ttft_s for o in done]),
            "itl_ms": percentiles([g for o in done for g in o.itl_s]),
            "tpot_ms": percentiles([o.tpot_s for o in done]),
            "e2e_ms": percentiles([o.e2e_s for o in done]),
            "slo": {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms},
            # TPOT against the target: the requests whose TPOT met it (one token: no TPOT)
            "tpot_within_slo": (sum(o.tpot_s * 1000 <= slo_tpot_ms for o in timed) / len(timed)
                                if (timed := [o for o in done if not math.isnan(o.tpot_s)])
                                else None),
            "goodput": len(good) / seconds}
