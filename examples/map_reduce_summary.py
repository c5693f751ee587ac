"""Map-reduce summary: summarize every chunk in parallel, then combine the summaries.

The map calls form a task group (they all feed the reduce), so the service schedules them for
group completion time; the reduce is latency-critical.

    python examples/map_reduce_summary.py --url http://127.0.0.1:9000 --chunks 8
"""

from __future__ import annotations

import argparse
import asyncio
import time

import parrot
from examples.chain_summary import document_chunks

# chat=True: rendered by the service with the model's chat template, as in chain_summary.py.
map_summary = parrot.semantic_function(prompt="""\
Summarize this text in one sentence:
{{input:chunk}}
{{output:summary}}""", chat=True, name="map_summary")


def reduce_function(num_parts: int) -> parrot.SemanticFunction:
    parts = "\n".join(f"- {{{{input:part{i}}}}}" for i in range(num_parts))
    return parrot.semantic_function(prompt=(
        "Combine these partial summaries of one document into a short overall summary:\n"
        f"{parts}\n{{{{output:summary}}}}"), chat=True, name="reduce_summary")


async def map_reduce_summary(chunks: list[str], max_tokens: int) -> str:
    mapper = map_summary.options(max_tokens=max_tokens)
    parts = [mapper(chunk=chunk) for chunk in chunks]
    reducer = reduce_function(len(parts)).options(max_tokens=max_tokens)
    final = reducer(**{f"part{i}": part for i, part in enumerate(parts)})
    return await final.aget(parrot.LATENCY)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:9000")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    chunks = document_chunks(args.chunks, args.chunk_tokens)
    started = time.perf_counter()
    async with parrot.Session(args.url):
        summary = await map_reduce_summary(chunks, args.max_tokens)
    print(f"Map-reduce summary of {len(chunks)} chunks:\n\n{summary.strip()}")
    print(f"\nend-to-end time: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
