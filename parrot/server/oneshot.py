"""Request-level traffic (an OpenAI completion) as one-call DAGs inside the manager.

`OneShot` opens a private session, submits one call `{{input:prompt}}{{output:completion}}`
per prompt and choice (the prompt is bound as a literal value, so text that looks like a
placeholder stays text), and reads the outputs like any Semantic Variable: the policy schedules
these calls beside semantic-variable traffic, the prefix cache sees their prompts, and deleting
the session (the client went away) cancels whatever still runs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from collections.abc import AsyncGenerator, Sequence

from parrot.manager.admission import Admission, Slices
from parrot.manager.manager import Manager
from parrot.manager.nodes import Call, Variable
from parrot.manager.requests import PlaceholderSpec, SubmitRequest
from parrot.manager.sessions import Session
from parrot.manager.streams import follow_as_get
from parrot.server.tenants import TenantGrant
from parrot.errors import NotFoundError, ParrotError
from parrot.sampling import SamplingParams
from parrot.types import Criterion, estimate_num_tokens

PROMPT_TEMPLATE = "{{input:prompt}}{{output:completion}}"
_FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    finish_reason: str   # OpenAI's: "stop" | "length"


@dataclass(frozen=True)
class Delta:
    """A piece of choice `index`'s text; the last one of a choice has `finish_reason`."""

    index: int
    text: str
    finish_reason: str | None = None


class OneShot:
    def __init__(self, manager: Manager, prompts: Sequence[str], n: int,
                 sampling: SamplingParams, criterion: Criterion,
                 session: Session | None = None, output: str = "completion",
                 inputs: Sequence[tuple[str, str]] = (), stream: bool = False,
                 grant: TenantGrant | None = None, admission: Admission | None = None) -> None:
        """`len(prompts) * n` calls, submitted by `start()`; choice `i * n + j` is prompt i's
        j-th sample.

        Without `session` the calls run in a private session deleted by `close()`, and the
        prompt is a literal value. In a client's `session` the output variables stay (named
        `output`) and the prompt is a template whose `{{input:x}}` placeholders `inputs` binds
        to the session's variables. `stream` marks the outputs as read while generated before
        any call can start (the executor then streams their Generates). `admission` holds
        the calls to the service's limits on unfinished calls like the wire API's submits
        (429 + Retry-After past them)."""
        self._manager = manager
        self._criterion = criterion
        self._prompts = tuple(prompts)
        self._n = n
        self._owns_session = session is None
        self._joined = session
        self._sampling, self._inputs, self._stream = sampling, tuple(inputs), stream
        self._admission = admission
        self.session = manager.create_session() if session is None else session
        if session is None and grant is not None:  # the private session is its tenant's
            manager.sessions.assign(self.session, grant.tenant, grant.prefix_salt)
        self._output = output if session is not None else "completion"
        self.calls: list[Call] = []
        try:
            if admission is not None:
                admission.check(self.session, len(self._prompts) * n)
        except BaseException:
            self.close()
            raise

    async def start(self) -> None:
        """Submit the calls in slices (`admission.Slices`) with the loop yielded in between (256
        prompts x n=16 are 4,096 submits); a failure, or the client leaving meanwhile,
        deletes the private session."""
        slices = Slices()
        try:
            for prompt in self._prompts:
                if self._joined is None:
                    template = PROMPT_TEMPLATE
                    bindings: tuple[PlaceholderSpec, ...] = (
                        PlaceholderSpec("prompt", "input", value=prompt),)
                else:
                    template = prompt + "{{output:" + self._output + "}}"
                    bindings = tuple(PlaceholderSpec(name, "input", semantic_var_id=var_id)
                                     for name, var_id in self._inputs)
                for j in range(self._n):
                    if self.calls and await slices.next():
                        if self._manager.sessions.find(self.session.session_id) \
                                is not self.session:
                            raise NotFoundError(f"session {self.session.session_id} was "
                                                "deleted")
                    self.calls.append(self._manager.submit(self.session, SubmitRequest(
                        self.session.session_id, template,
                        (*bindings, PlaceholderSpec(self._output, "output")),
                        _nth_sample(self._sampling, j))))
                    if self._admission is not None:
                        self._admission.admitted(self.session, self.calls[-1])
                    if self._stream:
                        self.outputs[-1].stream.wanted = True
        except BaseException:
            self.close()
            raise

    @property
    def owns_session(self) -> bool:
        return self._owns_session

    @property
    def outputs(self) -> list[Variable]:
        return [self.session.variables[c.outputs[self._output].var_id] for c in self.calls]

    async def choices(self) -> list[Choice]:
        """Wait for every choice (a `get` of each output, at this request's criterion)."""
        values = await asyncio.gather(*(
            self._manager.get(self.session, var.var_id, self._criterion)
            for var in self.outputs))
        return [Choice(i, value, self._finish_reason(var))
                for i, (value, var) in enumerate(zip(values, self.outputs))]

    async def deltas(self) -> AsyncGenerator[Delta, None]:
        """The choices' text as it is generated, interleaved as it arrives; each choice ends
        with a `Delta` carrying its finish_reason. A failed call raises its error."""
        queue: asyncio.Queue[Delta | BaseException] = asyncio.Queue()
        tasks = [asyncio.create_task(self._pump(i, var, queue))
                 for i, var in enumerate(self.outputs)]
        try:
            for _ in range(len(tasks)):
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    yield item
                    if item.finish_reason is not None:
                        break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _pump(self, index: int, var: Variable,
                    queue: asyncio.Queue[Delta | BaseException]) -> None:
        try:
            async for piece in follow_as_get(self._manager, self.session, var, self._criterion):
                await queue.put(Delta(index, piece))
            await queue.put(Delta(index, "", self._finish_reason(var)))
        except ParrotError as exc:
            await queue.put(exc)

    def usage(self) -> Usage:
        """Prompt tokens (the engine's count; estimated where the engine gave none) once per
        prompt, as OpenAI counts them, and the tokens generated for every choice."""
        prompt_tokens = 0
        for i, prompt in enumerate(self._prompts):
            counted = self.calls[i * self._n].num_prompt_tokens
            prompt_tokens += counted if counted is not None else estimate_num_tokens(prompt)
        return Usage(prompt_tokens, sum(var.stream.num_tokens for var in self.outputs))

    @staticmethod
    def _finish_reason(var: Variable) -> str:
        return _FINISH_REASONS.get(var.stream.finish_reason or "stop", "stop")

    async def aclose(self) -> None:
        """`close()`, after letting calls whose outputs all exist finish their clean-up (they
        free their engine contexts after publishing; deleting the session would cancel that)."""
        if self._owns_session and all(var.is_finished for var in self.outputs):
            await asyncio.gather(*list(self.session.tasks.values()), return_exceptions=True)
        self.close()

    def close(self) -> None:
        """Delete the private session (cancelling what still runs); idempotent. A client's
        session is left as it is: its variables are the client's."""
        if self._owns_session and \
                self._manager.sessions.find(self.session.session_id) is self.session:
            self._manager.delete_session(self.session)


def _nth_sample(sampling: SamplingParams, j: int) -> SamplingParams:
    """Sample j of n: a seeded request gets seeds seed, seed+1, ... so its n choices differ
    yet the whole reply is reproducible."""
    if j == 0 or sampling.seed is None:
        return sampling
    return replace(sampling, seed=(sampling.seed + j) % 2**63)
