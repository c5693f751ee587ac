"""Chain summary: each step summarizes the next chunk together with the summary so far.

The summaries flow from call to call inside the service; the client only submits the chain and
gets the final summary (one `get`). The chunk comes before the previous summary in the prompt, so
the service can prefill it while the previous step is still generating (prefill ahead).

    python examples/chain_summary.py --url http://127.0.0.1:9000 --chunks 4
"""

from __future__ import annotations

import argparse
import asyncio
import time

import parrot
from parrot.sim.workloads.documents import chunk_document, long_document

# chat=True: the text before the output is the user's turn, the output the assistant's; the
# service renders them with the model's own chat template (no model-specific markup here).
first_summary = parrot.semantic_function(prompt="""\
Summarize this text in one sentence:
{{input:chunk}}
{{output:summary}}""", chat=True, system="You summarize documents briefly.",
    name="first_summary")

refine_summary = parrot.semantic_function(prompt="""\
Text:
{{input:chunk}}

Summarize the text above in one sentence, continuing this summary: {{input:previous}}
{{output:summary}}""", chat=True, name="refine_summary")


async def chain_summary(chunks: list[str], max_tokens: int) -> str:
    """Submit the whole chain at once; only the last summary comes back to the client."""
    first = first_summary.options(max_tokens=max_tokens)
    refine = refine_summary.options(max_tokens=max_tokens)
    summary = first(chunk=chunks[0])
    for chunk in chunks[1:]:
        summary = refine(previous=summary, chunk=chunk)
    return await summary.aget(parrot.LATENCY)


def document_chunks(num_chunks: int, chunk_tokens: int) -> list[str]:
    text = long_document(min_tokens=num_chunks * chunk_tokens)
    return chunk_document(text, chunk_tokens)[:num_chunks]


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:9000")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    chunks = document_chunks(args.chunks, args.chunk_tokens)
    started = time.perf_counter()
    async with parrot.Session(args.url):
        summary = await chain_summary(chunks, args.max_tokens)
    elapsed = time.perf_counter() - started
    print(f"Chain summary of {len(chunks)} chunks ({args.chunk_tokens} tokens each):\n")
    print(summary.strip())
    print(f"\nend-to-end time: {elapsed:.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
