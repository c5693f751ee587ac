"""Multi-agent programming (MetaGPT-like): an architect, N coders, N reviewers, revisions.

    architect(task)                         -> design
    coder_i(design)                         -> code_i          (N in parallel)
    round r = 1..spec.rounds:
        reviewer_i(design, code_0..N-1)     -> review_i        (N in parallel)
        reviser_i(design, code_0..N-1, review_i) -> code_i     (N in parallel)

N = `spec.num_clients` files. Every reviewer and reviser sees the shared, growing code
history (the design and all current files) before its own part, so in parrot mode the N calls
of a round share that whole history as a prefix (one context forked N times); a baseline
client renders each prompt itself, so nothing is shared. Each call writes
`spec.output_tokens` tokens on average, drawn per call under a loose cap and hidden from the
service (or exactly that many: `spec.output_lengths`); the length rides on the call's own
input, the file it works on (or the architect's task). The task and role texts are
synthetic; the shape (roles, parallelism, rounds, a history every role reads) follows the
paper's MetaGPT setup.
"""

from __future__ import annotations

import asyncio

import parrot
from parrot.sim.workloads.base import AppRecord, Env, app_session, get_latency, output_length
from parrot.sim.workloads.spec import WorkloadSpec
from parrot.sim.workloads.text import text_window

ARCHITECT = """\
You are the architect of a software team. Read the task and write the design: the modules,
their interfaces and how they work together.
Task: {{input:task}}
Design: {{output:design}}"""

CODER = """\
You are a programmer of a software team. Implement your file of the design.
Design: {{input:design}}
Your file: {{input:file}}
Code: {{output:code}}"""


def history(num_files: int) -> str:
    """The shared part of reviewer and reviser prompts: the design, then every current file."""
    files = "\n".join(f"File {i}:\n{{{{input:code{i}}}}}" for i in range(num_files))
    return ("You are a member of a software team. The team's design and code so far:\n"
            "Design: {{input:design}}\n" + files + "\n")


def reviewer_prompt(num_files: int) -> str:
    return (history(num_files) + "You review {{input:file}}. List its bugs and what to change.\n"
            "Review: {{output:review}}")


def reviser_prompt(num_files: int) -> str:
    return (history(num_files) + "You own {{input:file}}. Rewrite it, addressing this review.\n"
            "Review: {{input:review}}\nRevised code: {{output:code}}")


async def multi_agent(env: Env, spec: WorkloadSpec) -> list[AppRecord]:
    n, out = spec.num_clients, spec.output_tokens
    # one length per call, keyed by its role, round and file (the same in every variant)
    keys = ["architect", *(f"coder|{i}" for i in range(n)),
            *(f"{role}|{r}|{i}" for r in range(spec.rounds) for role in ("reviewer", "reviser")
              for i in range(n))]
    lengths = {key: output_length(spec, out, f"team-0|{key}") for key in keys}
    declared = lengths["architect"].sampling    # every role declares the same cap
    architect = parrot.semantic_function(prompt=ARCHITECT, name="architect", **declared)
    coder = parrot.semantic_function(prompt=CODER, name="coder", **declared)
    reviewer = parrot.semantic_function(prompt=reviewer_prompt(n), name="reviewer", **declared)
    reviser = parrot.semantic_function(prompt=reviser_prompt(n), name="reviser", **declared)
    task = text_window(200, f"task|{spec.seed}")

    def own(key: str, text: str) -> str:
        return text + lengths[key].marker

    async with app_session(env, "team-0", "multi_agent", is_main=True,
                           output_tokens=sum(x.num_tokens for x in lengths.values())) as record:
        design = architect(task=own("architect", task))
        files = [f"file {i} of {n} (module_{i}.py)" for i in range(n)]
        code = [coder(design=design, file=own(f"coder|{i}", files[i])) for i in range(n)]
        for r in range(spec.rounds):
            shared = {"design": design, **{f"code{i}": code[i] for i in range(n)}}
            reviews = [reviewer(file=own(f"reviewer|{r}|{i}", files[i]), **shared)
                       for i in range(n)]
            code = [reviser(file=own(f"reviser|{r}|{i}", files[i]), review=reviews[i], **shared)
                    for i in range(n)]
        # The team is done when every final file exists (the gets run concurrently).
        await asyncio.gather(*(get_latency(value) for value in code))
        record.finished = env.now()
    return [record]
