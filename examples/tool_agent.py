"""An agent in one Parrot session: it plans with a JSON-typed Semantic Variable, calls a tool
chosen in that plan, and summarises; the plan's type makes it valid by construction, so the
client parses it without a fallback, and the summary consumes the plan in the service.

    python examples/tool_agent.py --url http://127.0.0.1:9000

(on the simulated config the plan is a value sampled from its schema; on a builtin engine it
is decoded under the schema's token masks.)
"""

from __future__ import annotations

import argparse
import asyncio
import operator

import parrot

# The plan's type: which tool, with what argument. `arithmetic` arguments are "a op b"
# (a regex the decoder enforces), `lookup` keys one of the known facts (an enum).
FACTS = {"parrot": "Parrots are birds of the order Psittaciformes.",
         "llm": "A large language model predicts the next token of a text.",
         "kv-cache": "The KV cache keeps attention keys and values of past tokens."}
PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "thought": {"type": "string", "maxLength": 80},
        "call": {"anyOf": [
            {"type": "object", "properties": {
                "tool": {"const": "arithmetic"},
                "expression": {"type": "string", "pattern": "^[0-9]{1,4} [-+*] [0-9]{1,4}$"}},
             "required": ["tool", "expression"], "additionalProperties": False},
            {"type": "object", "properties": {
                "tool": {"const": "lookup"}, "key": {"enum": sorted(FACTS)}},
             "required": ["tool", "key"], "additionalProperties": False}]},
    },
    "required": ["thought", "call"],
    "additionalProperties": False,
}

plan_step = parrot.semantic_function(prompt="""\
You are an agent with two tools: arithmetic ("a op b") and lookup (a fact by key).
Question: {{input:question}}
Reply with a JSON plan: your thought and one tool call.
{{output:plan}}""", chat=True, max_tokens=96, temperature=0.7,
    outputs={"plan": parrot.json(PLAN_SCHEMA, name="plan")}, name="plan_step")

summarise = parrot.semantic_function(prompt="""\
Question: {{input:question}}
Your plan was: {{input:plan}}
The tool answered: {{input:observation}}
Answer the question in one sentence.
{{output:answer}}""", chat=True, max_tokens=48, name="summarise")

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def call_tool(call: dict) -> str:
    """Run the planned tool call; the schema guarantees the shape, so no fallback."""
    if call["tool"] == "arithmetic":
        left, op, right = call["expression"].split(" ")
        return str(OPS[op](int(left), int(right)))
    return FACTS[call["key"]]


async def run(question: str) -> dict:
    plan_var = plan_step(question=question)
    plan = await plan_var.aget_json()            # parsed: valid under PLAN_SCHEMA
    observation = call_tool(plan["call"])
    answer = summarise(question=question, plan=plan_var, observation=observation)
    return {"plan": plan, "observation": observation, "answer": await answer.aget()}


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:9000")
    parser.add_argument("--question", default="What is 12 * 34?")
    args = parser.parse_args(argv)
    async with parrot.Session(args.url):
        result = await run(args.question)
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    asyncio.run(main())
