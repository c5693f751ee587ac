"""A function with several outputs: later outputs are conditioned on earlier ones, and each
output is released to its consumers as soon as it is generated.

    python examples/multi_output.py --url http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
import asyncio

import parrot

# chat=True: a two-turn chat (text before each output is a user turn, the output the
# assistant's answer), rendered by the service with the model's chat template; the second turn
# sees the first answer.
plan_and_write = parrot.semantic_function(
    prompt="""\
Task: {{input:task}}
Write a short title for this task.
{{output:title}}
Now write two sentences about the task.
{{output:body}}""", chat=True,
    outputs={"title": {"max_tokens": 16, "stop": ["\n"]}, "body": {"max_tokens": 48}},
    transforms={"title": ["strip"]}, name="plan_and_write")

translate = parrot.semantic_function(prompt="""\
Rewrite this title in capital letters: {{input:title}}
{{output:shout}}""", chat=True, max_tokens=16, name="translate")


async def run(task: str) -> dict[str, str]:
    title, body = plan_and_write(task=task)
    shout = translate(title=title)  # runs as soon as `title` exists, while `body` is generated
    return {"title": await title.aget(), "body": await body.aget(),
            "shout": await shout.aget()}


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:9000")
    parser.add_argument("--task", default="Explain why parrots can imitate speech.")
    args = parser.parse_args(argv)
    async with parrot.Session(args.url):
        for key, value in (await run(args.task)).items():
            print(f"{key}: {value.strip()}")


if __name__ == "__main__":
    asyncio.run(main())
