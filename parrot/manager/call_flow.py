"""A call's way through the manager once it is submitted (`Manager.submit` checks and builds it):

READY when its last input arrives (its user transforms run first, in a worker) → dispatched
onto the engine a scheduling round placed it on → run there by the executor → each output
published, which wakes exactly the consumers of that variable; or failed, and the failure
carried to every call and variable downstream. A call whose engine fails is queued again, up to
`max_call_retries` times. Every state change goes through `lifecycle.transition`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from parrot.errors import CallFailedError, EngineUnavailableError, ParrotError
from parrot.manager.engine_health import EngineHealth
from parrot.manager.engine_pool import EngineState
from parrot.manager.executor import run_call, shareable_hashes
from parrot.manager.lifecycle import transition
from parrot.manager.nodes import Call, OutputBinding, Variable
from parrot.manager.output_lengths import OutputLengthEstimator
from parrot.manager.prefill_ahead import plan_ahead, prefill_ahead
from parrot.manager.prefix import PrefixIndex, estimate_prompt
from parrot.manager.scheduler import Scheduler
from parrot.manager.sessions import Session, SessionStore
from parrot.manager.transform_budget import TenantTransformBuckets, TransformJobs
from parrot.serve_config import ManagerConfig
from parrot.transforms import TransformError
from parrot.types import CallState, Criterion

log = logging.getLogger(__name__)
# The error of a call cancelled on its engine (session deleted, client gone, drain): what the
# metrics count as aborted work.
CANCELLED = "cancelled (session deleted or manager stopped)"

Spawn = Callable[[Coroutine[Any, Any, Any], str], None]


@dataclass
class CallRun:
    """One run of a call on an engine: the outputs the executor has reported so far."""

    session: Session
    call: Call
    engine: EngineState
    published: list[str] = field(default_factory=list)


class CallFlow:
    """The call lifecycle over the sessions' DAGs (see the module docstring); the manager owns
    one and hands it what each step needs."""

    def __init__(self, sessions: SessionStore, config: ManagerConfig, health: EngineHealth,
                 scheduler: Scheduler, prefix_index: PrefixIndex,
                 output_lengths: OutputLengthEstimator,
                 transform_buckets: TenantTransformBuckets, spawn: Spawn) -> None:
        self._sessions, self._config, self._health = sessions, config, health
        self._scheduler, self._prefix_index = scheduler, prefix_index
        self._output_lengths, self._transform_buckets = output_lengths, transform_buckets
        self._spawn = spawn       # a task the manager owns (kept referenced, cancelled on close)
        # Called with every call that leaves an engine (done, failed or re-queued): /metrics.
        self.observers: list[Callable[[Call], None]] = []

    def make_ready(self, session: Session, call: Call) -> None:
        if (error := self._health.no_engine_error()) is not None:
            self.fail_call(session, call, CallFailedError(str(error)))
            return
        values = {name: (b.transforms, session.variables[b.var_id].value or "")
                  for name, b in call.inputs.items()}
        if any(transforms for transforms, _ in values.values()):
            # User transforms run in a worker, never on the loop (transform_budget.py): the
            # call stays PENDING until they are done.
            self._spawn(self._transform_inputs(session, call, values),
                                   f"transforms-{call.call_id}")
            return
        self._render_ready(session, call, {name: value for name, (_, value) in values.items()})

    async def _transform_inputs(self, session: Session, call: Call,
                                values: TransformJobs) -> None:
        try:
            rendered = await self._transform_buckets.apply(session.tenant, values)
        except TransformError as exc:
            if call.state is CallState.PENDING:
                self.fail_call(session, call, CallFailedError(f"input transform failed: {exc}"))
            return
        # Meanwhile the session may have been deleted (its calls failed with it).
        if call.state is CallState.PENDING and self._sessions.find(session.session_id) is session:
            self._render_ready(session, call, rendered)

    def _render_ready(self, session: Session, call: Call, rendered: dict[str, str]) -> None:
        call.rendered_inputs = rendered
        chars = call.template.rendered_chars({name: len(value) for name, value
                                              in call.rendered_inputs.items()})
        call.account_prompt(chars)
        if chars > self._config.max_prompt_chars:  # inputs that arrived after the submit
            self.fail_call(session, call, CallFailedError(
                f"PromptTooLongError: the prompt would render to {chars} characters; at most "
                f"{self._config.max_prompt_chars} are allowed (manager.max_prompt_chars)"))
            call.rendered_inputs = {}
            return
        prompt = estimate_prompt(call.template, call.rendered_inputs, session.prefix_salt,
                                 call.input_token_counts(session.variables))
        call.prefix_pieces = prompt.pieces
        # Only boundaries far enough in to be worth a context are advertised to the policy:
        # affinity to a prefix no engine would cache only piles unrelated calls together.
        call.prefix_hashes = shareable_hashes(call.prefix_pieces)
        call.num_output_estimate = sum(
            self._output_lengths.estimate(call.output_length_key(name), b.sampling.max_tokens)
            for name, b in call.outputs.items())
        call.num_tokens = prompt.num_tokens + call.num_output_estimate
        transition(call, CallState.READY)
        self._prefix_index.add(call.prefix_hashes)
        self._scheduler.enqueue(call)

    def dispatch(self, call: Call, engine: EngineState, criterion: Criterion | None) -> None:
        session = self._sessions.get(call.session_id)
        transition(call, CallState.RUNNING)
        call.engine_id = engine.engine_id
        engine.add_call(call, criterion)
        session.tasks[call.call_id] = asyncio.create_task(
            self._run(session, call, engine), name=f"call-{call.call_id}")
        for var in session.graph.output_variables(call):
            for consumer in session.graph.get_consumers(var.var_id):
                if consumer.state is not CallState.PENDING or consumer.prefill_ahead_decided:
                    continue
                # Decided once, at its first producer's dispatch.
                consumer.prefill_ahead_decided = True
                pieces = plan_ahead(session, consumer, engine, call)
                if pieces:
                    self._spawn(prefill_ahead(consumer, engine, pieces),
                                           f"prefill-ahead-{consumer.call_id}")

    async def _output_produced(self, run: CallRun, binding: OutputBinding, text: str) -> None:
        """The executor's report of one output's final text (its OutputSink): transformed,
        observed for the function's length estimate, and published to its consumers."""
        session, call, engine = run.session, run.call, run.engine
        value = text if not binding.transforms else (await self._transform_buckets.apply(
            session.tenant, {binding.name: (binding.transforms, text)}))[binding.name]
        run.published.append(binding.name)
        if len(run.published) == len(call.outputs):
            # Its work on the engine is done (what is left is freeing its context): the
            # calls this output unblocks are placed against the load without it, not in
            # the window before its `finally` runs (measured live: a phase of 8 reviewers
            # placed 6 against the previous phase's stale load, the other 2 a phase later).
            engine.remove_call(call)
        self._output_lengths.observe(call.output_length_key(binding.name),
                                    binding.stream.num_tokens, binding.sampling.max_tokens)
        # The generated tokens, unless a transform changed the text.
        num_tokens = None if binding.transforms else binding.stream.num_tokens
        self.publish_value(session, session.variables[binding.var_id], value, num_tokens)

    async def _run(self, session: Session, call: Call, engine: EngineState) -> None:
        run = CallRun(session, call, engine)
        requeue = False
        try:
            # a slot of the engine's (call_slots.py), the latency-critical first
            async with engine.call_slots.held(engine.request_priority(call.call_id)):
                await run_call(call, engine, functools.partial(self._output_produced, run),
                               self._prefix_index.occurrences)
            transition(call, CallState.DONE)
            engine.num_calls_done += 1
        except asyncio.CancelledError:
            transition(call, CallState.FAILED)
            call.error = CANCELLED
            raise
        except EngineUnavailableError as exc:
            try:
                await self._health.confirm_down(engine, exc)
            except asyncio.CancelledError:  # cancelled while probing: it ends like any cancel
                transition(call, CallState.FAILED)
                call.error = CANCELLED
                raise
            call.attempts += 1
            requeue = not run.published and call.attempts <= self._config.max_call_retries \
                and self._health.no_engine_error() is None
            if not requeue:
                self.fail_call(session, call, CallFailedError(f"engine {engine.engine_id} "
                                                               f"failed: {exc}"))
        except (ParrotError, TransformError) as exc:
            failure = CallFailedError(f"{type(exc).__name__}: {exc}")
            # kept as the cause, so that a front door can answer in its own terms (the OpenAI
            # routes answer a prompt over the window with a 400 context_length_exceeded)
            failure.__cause__ = exc
            self.fail_call(session, call, failure)
        except Exception as exc:  # noqa: BLE001 - one bad call must not take the manager down
            log.exception("call %s crashed", call.call_id)
            self.fail_call(session, call, CallFailedError(f"internal error: {exc!r}"))
        finally:
            call.mark("finished", asyncio.get_running_loop().time())
            for observe in self.observers:
                observe(call)
            engine.remove_call(call)
            session.tasks.pop(call.call_id, None)
            if requeue:
                transition(call, CallState.READY)   # ready (queued) again from now
                call.engine_id = None
                self._scheduler.enqueue(call)
            self._scheduler.wake()

    def publish_value(self, session: Session, var: Variable, value: str,
                       num_tokens: int | None = None) -> None:
        var.set_value(value, num_tokens)
        for consumer in session.graph.get_consumers(var.var_id):
            consumer.num_missing_inputs -= 1
            if consumer.num_missing_inputs == 0 and consumer.state is CallState.PENDING:
                self.make_ready(session, consumer)

    def fail_call(self, session: Session, call: Call, error: ParrotError) -> None:
        """Fail a call and, transitively, every call and variable downstream of it."""
        pending = [(call, error)]
        while pending:
            failing, cause = pending.pop()
            if failing.state.is_finished:
                continue
            self._scheduler.discard(failing)
            transition(failing, CallState.FAILED)
            failing.error = str(cause)
            for var in session.graph.output_variables(failing):
                var.fail(cause)
                for consumer in session.graph.get_consumers(var.var_id):
                    if consumer.state in (CallState.PENDING, CallState.READY):
                        pending.append((consumer, CallFailedError(
                            f"input {var.name!r} failed: {cause}")))

    def fail_ready_calls(self, error: EngineUnavailableError) -> None:
        """No engine came back within the grace period: fail what waits for one."""
        self.fail_calls([call for session in self._sessions for call in session.calls.values()
                          if call.state is CallState.READY], CallFailedError(str(error)))

    def fail_calls(self, calls: list[Call], error: ParrotError) -> None:
        for call in calls:
            self.fail_call(self._sessions.get(call.session_id), call, error)
