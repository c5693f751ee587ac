"""A function with several outputs: later outputs are conditioned on earlier ones, and each
output is released to its consumers as soon as it is generated.

    python examples/multi_output.py --url http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
import asyncio

import parrot

# Chat markup of the default model (SmolLM2-Instruct, ChatML): the first output ends with the
# model's end-of-turn token, which stays in the context, and the conversation goes on.
plan_and_write = parrot.semantic_function(
    prompt="""\
<|im_start|>user
Task: {{input:task}}
Write a short title for this task.<|im_end|>
<|im_start|>assistant
{{output:title}}
<|im_start|>user
Now write two sentences about the task.<|im_end|>
<|im_start|>assistant
{{output:body}}""",
    outputs={"title": {"max_tokens": 16, "stop": ["\n"]}, "body": {"max_tokens": 48}},
    transforms={"title": ["strip"]}, name="plan_and_write")

translate = parrot.semantic_function(prompt="""\
<|im_start|>user
Rewrite this title in capital letters: {{input:title}}<|im_end|>
<|im_start|>assistant
{{output:shout}}""", max_tokens=16, name="translate")


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
