"""Acceptance check of constrained decoding on SmolLM2 (CPU): semantic functions whose outputs
are typed with a JSON Schema (nested object, enum, array), a regex and a choice, sampled at
temperature 1.0, `--samples` each (50 by default) through a Parrot session over HTTP with the
builtin engine; prints how many are valid (jsonschema / re.fullmatch / membership).

    PYTHONPATH=. python bench/constrained_acceptance.py --samples 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

import jsonschema

import parrot
from parrot.serve_config import ServeConfig
from parrot.server.service import ParrotServer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "level": {"enum": ["low", "medium", "high"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
        "owner": {"type": "object", "properties": {
            "id": {"type": "integer", "minimum": 0}, "active": {"type": "boolean"}},
            "required": ["id", "active"], "additionalProperties": False},
    },
    "required": ["name", "level", "tags", "owner"],
    "additionalProperties": False,
}
PATTERN = r"[A-Z][a-z]{2,8}-[0-9]{3}"
CHOICES = ["red", "green", "blue", "dark purple"]

describe = parrot.semantic_function(
    prompt="Describe a software project as JSON.\n{{output:project}}", chat=True,
    temperature=1.0, max_tokens=120, outputs={"project": parrot.json(SCHEMA)}, name="describe")
code = parrot.semantic_function(
    prompt="Invent a product code like Abc-123.\n{{output:code}}", chat=True, temperature=1.0,
    max_tokens=16, outputs={"code": parrot.regex(PATTERN)}, name="code")
colour = parrot.semantic_function(
    prompt="Pick a colour.\n{{output:colour}}", chat=True, temperature=1.0, max_tokens=8,
    outputs={"colour": parrot.choice(CHOICES)}, name="colour")


def valid_json(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=50)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    server = ParrotServer(ServeConfig.from_mapping({
        "policy": {"name": "least_queue"},
        "engines": [{"name": "smol", "kind": "builtin", "in_process": True, "params": {
            "model": "smollm2", "device": "cpu", "dtype": "float32", "kv_cache_tokens": 32768,
            "max_num_seqs": 16, "num_threads": args.threads, "speed_probe": "off"}}]}))
    url = await server.start(port=0)
    try:
        async with parrot.Session(url):
            for name, fn, check in (("json schema", describe, valid_json),
                                    ("regex", code, lambda t: bool(re.fullmatch(PATTERN, t))),
                                    ("choice", colour, lambda t: t in CHOICES)):
                started = time.perf_counter()
                outputs = [fn() for _ in range(args.samples)]
                texts = [await o.aget() for o in outputs]
                ok = sum(map(check, texts))
                print(f"{name}: {ok}/{len(texts)} valid, {len(set(texts))} distinct, "
                      f"{time.perf_counter() - started:.0f} s; e.g. {texts[0]!r}", flush=True)
    finally:
        await server.stop()


if __name__ == "__main__":
    asyncio.run(main())
