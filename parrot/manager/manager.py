"""The manager: sessions, the call lifecycle over each session's DAG, and the engines.

One asyncio loop, event-driven: a call becomes READY when its last input arrives → the
scheduler asks the policy where ready calls go → `_dispatch` starts a task that lowers the call
onto its engine → each output value set wakes exactly the consumers of that variable. Every
state change goes through `lifecycle.transition`.
Engine failures (engine_health.py): a call whose engine dies or freezes is re-dispatched, up to
`max_call_retries` times; with no engine left it fails after `no_engine_grace_s`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
from dataclasses import dataclass, field
from collections.abc import Callable, Coroutine
from typing import Any

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.admission import Slices
from parrot.manager.deduction import deduce, deduce_changed
from parrot.manager.engine_health import EngineHealth
from parrot.manager.events import EngineUp, HealthEvent, NoEngine
from parrot.manager.engine_pool import EnginePool, EngineState
from parrot.manager.executor import run_call, shareable_hashes
from parrot.manager.lifecycle import transition
from parrot.manager.nodes import Call, InputBinding, OutputBinding, Variable
from parrot.manager.output_lengths import OutputLengthEstimator
from parrot.manager.prefill_ahead import plan_ahead, prefill_ahead
from parrot.manager.prefix import PrefixIndex, estimate_prompt
from parrot.manager.requests import SubmitRequest
from parrot.manager.scheduler import Decision, Scheduler
from parrot.manager.sessions import IdleExpiry, Session, SessionStore
from parrot.manager.submission import check_submit
from parrot.engines.protocol import Engine
from parrot.errors import (CallFailedError, ConflictError, EngineUnavailableError,
                           GetTimeoutError, InvalidRequestError, NotFoundError, ParrotError,
                           PromptTooLongError, TooManyRequestsError)
from parrot.policies.base import Policy
from parrot.template import Template
from parrot.manager.transform_budget import TenantTransformBuckets, TransformJobs
from parrot.transforms import TransformError
from parrot.types import CallState, Criterion, strongest
from parrot.wire_types.service import Graph

log = logging.getLogger(__name__)
# The error of a call cancelled on its engine (session deleted, client gone, drain): what the
# metrics count as aborted work.
CANCELLED = "cancelled (session deleted or manager stopped)"


@dataclass
class CallRun:
    """One run of a call on an engine: the outputs the executor has reported so far."""

    session: Session
    call: Call
    engine: EngineState
    published: list[str] = field(default_factory=list)


class Manager:
    def __init__(self, policy: Policy, config: ManagerConfig | None = None) -> None:
        self.config = config or ManagerConfig()
        self.sessions = SessionStore()
        self._expiry = IdleExpiry(self.sessions, self.config.session_idle_timeout_s,
                                  self.delete_session)
        self.engines = EnginePool(self.config.engine_max_calls)
        self.prefix_index = PrefixIndex()
        # Output lengths learnt per function: calls are costed with them, not max_tokens.
        self.output_lengths = OutputLengthEstimator()
        self.transform_buckets = TenantTransformBuckets()
        self.scheduler = Scheduler(policy, self.engines)
        self._dirty: set[Session] = set()
        self._arrivals = itertools.count()
        self._scheduler_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.health = EngineHealth(self.engines, self.config, spawn=self._spawn_background,
                                   notify=self.handle)
        # Called with every call that leaves an engine (done, failed or re-queued): /metrics.
        self.call_observers: list[Callable[[Call], None]] = []

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._scheduler_task is None:
            self._scheduler_task = asyncio.create_task(self._schedule_forever(),
                                                       name="parrot-scheduler")

    # --- the scheduling step ------------------------------------------------------------------

    def step(self) -> int:
        """One scheduling round: deduce the objectives that changed → the policy places the
        ready calls (views in, checked placements out) → dispatch each onto its engine, all
        at once. Returns how many calls were dispatched."""
        decision = self._decide()
        for d in decision.dispatches:
            self._dispatch(d.call, d.engine, d.criterion)
        self._fail_unplaced(decision)
        return len(decision.dispatches)

    async def step_in_slices(self) -> int:
        """The round as the scheduling loop runs it: the same decision, its placements
        dispatched in their order in slices (`admission.Slices`: at most CALLS_PER_SLICE calls
        or SLICE_S of the loop's clock each) with the loop yielded between them, so that a
        round placing thousands of calls (and their runs' first steps) does not hold every
        other request. On a simulation's virtual clock the slices go by count alone. A call
        failed meanwhile (its session deleted) is skipped; one whose engine went down
        meanwhile is queued again for the next round."""
        decision = self._decide()
        slices = Slices()
        dispatched = 0
        for d in decision.dispatches:
            await slices.next()
            if d.call.state is not CallState.READY or not d.engine.is_healthy:
                if d.call.state is CallState.READY:
                    self.scheduler.enqueue(d.call)
                continue
            self._dispatch(d.call, d.engine, d.criterion)
            dispatched += 1
        self._fail_unplaced(decision)
        return dispatched

    def _decide(self) -> Decision:
        if not self.scheduler.has_work:
            return Decision()
        self.deduce_changed()
        return self.scheduler.decide()

    def _fail_unplaced(self, decision: Decision) -> None:
        """The calls of a policy that kept failing (the scheduler gave up on them)."""
        if decision.error is not None:
            self._fail_calls(decision.failed, decision.error)

    async def _schedule_forever(self) -> None:
        while True:
            await self.scheduler.wait()
            try:
                await self.step_in_slices()
            except Exception:  # noqa: BLE001 - a deduction or dispatch bug must not stop
                # scheduling forever (a policy's own failures are handled by the scheduler).
                log.exception("scheduling round failed")

    async def close(self) -> None:
        for session in self.sessions:
            self._drop_session(session)
        self.health.close()
        for task in list(self._background):
            task.cancel()
        if self._scheduler_task is not None:
            self._scheduler_task.cancel()
            await asyncio.gather(self._scheduler_task, return_exceptions=True)
            self._scheduler_task = None

    def cancel_running_calls(self) -> None:
        """Cancel every running call's task (stopping: their variables have failed)."""
        for session in self.sessions:
            for task in session.tasks.values():
                task.cancel()

    async def add_engine(self, spec: EngineSpec, engine: Engine) -> EngineState:
        """Register a started engine (in-process, launched, or joining by URL); the same name
        again re-admits it (EngineHealth.admit)."""
        return await self.health.admit(spec, engine)

    # --- sessions and variables -----------------------------------------------------------

    def create_session(self) -> Session:
        session = self.sessions.create()
        self._expiry.arm(session)
        return session

    def authenticate(self, session_id: str, token: str | None) -> Session:
        return self.sessions.authenticate(session_id, token)

    def delete_session(self, session: Session) -> None:
        self.sessions.pop(session.session_id)
        if session.expiry_timer is not None:
            session.expiry_timer.cancel()
        self._drop_session(session)

    def _drop_session(self, session: Session) -> None:
        gone = NotFoundError(f"session {session.session_id} was deleted")
        for call in session.calls.values():
            self.scheduler.discard(call)
            if call.state in (CallState.PENDING, CallState.READY):
                transition(call, CallState.FAILED)
        for task in session.tasks.values():
            task.cancel()
        for var in session.variables.values():
            var.fail(gone)
        self._dirty.discard(session)
        for engine in self.engines:  # prefix contexts only this session's calls used
            self._spawn_background(engine.contexts.release_session(session.session_id),
                                   f"release-{session.session_id}-{engine.engine_id}")

    def create_variable(self, session: Session, name: str, value: str | None) -> Variable:
        if not isinstance(name, str) or not name or len(name) > 256:
            raise InvalidRequestError("variable 'name' must be a string of 1 to 256 characters")
        var = Variable(f"v-{secrets.token_hex(8)}", session.session_id, name)
        session.variables[var.var_id] = var
        session.graph.add_variable(var)
        if value is not None:
            self._publish_value(session, var, value)
        return var

    def set_variable(self, session: Session, var_id: str, value: str) -> None:
        var = session.variable(var_id)
        if var.producer is not None:
            raise ConflictError(f"variable {var_id} is produced by call {var.producer}; "
                                "it cannot be set by the client")
        if var.is_finished:
            raise ConflictError(f"variable {var_id} already has a value")
        self._publish_value(session, var, value)

    async def get(self, session: Session, var_id: str, criterion: Criterion,
                  timeout: float | None = None) -> str:
        var = session.variable(var_id)
        self._seed_criterion(session, var, criterion)
        limit = min(timeout or self.config.default_get_timeout_s, self.config.max_get_timeout_s)
        if not var.is_finished:
            session.num_waiters += 1
            try:
                async with asyncio.timeout(limit):  # in this task: no task per waiting get
                    await var.wait_finished()
            except TimeoutError:
                raise GetTimeoutError(f"variable {var_id} not ready after {limit:g} s") from None
            finally:
                session.num_waiters -= 1
                session.last_active = asyncio.get_running_loop().time()
        if var.error is not None:
            raise var.error
        assert var.value is not None
        return var.value

    def _seed_criterion(self, session: Session, var: Variable, criterion: Criterion) -> None:
        """A `get`'s criterion on `var` (or the one a submit says its get will have): the
        seed objective deduction starts from; a latency get outranks a throughput one."""
        seed = strongest((var.criterion, criterion))
        if seed is not var.criterion:
            var.criterion = seed
            session.graph.note_seed(var.var_id)
            self._mark_dirty(session)

    def graph(self, session: Session) -> Graph:
        deduce(session.graph, active_only=False)  # the whole DAG, finished calls included
        return session.graph.to_node_link()

    # --- submit -------------------------------------------------------------------------------

    def submit(self, session: Session, request: SubmitRequest) -> Call:
        checked = check_submit(session, request)  # every mistake is raised before any change
        template, specs = checked.template, checked.specs
        samplings = {name: request.output_sampling(name) for name in template.output_names}
        self.health.check_can_take({  # the engines' windows bound max_tokens up front
            name: sampling.max_tokens for name, sampling in samplings.items()})
        prompt_chars = self._check_prompt_chars(session, checked.template, {
            name: len(value) for name in template.input_names
            if not specs[name].transforms  # a transform may shorten it: counted when known
            and (value := (specs[name].value if name not in checked.input_vars
                           else checked.input_vars[name].value)) is not None})
        call_id = f"r-{secrets.token_hex(8)}"
        inputs: dict[str, InputBinding] = {}
        for name in template.input_names:
            spec = specs[name]
            var = checked.input_vars.get(name)
            if var is None:  # a literal value becomes a ready variable of its own
                var = self.create_variable(session, name, None)
                var.set_value(spec.value)  # type: ignore[arg-type]
            inputs[name] = InputBinding(name, var.var_id, spec.transforms)
        outputs: dict[str, OutputBinding] = {}
        for name in template.output_names:
            out_spec = specs.get(name)
            var = checked.output_vars[name] or self.create_variable(session, name, None)
            outputs[name] = OutputBinding(
                name, var.var_id, samplings[name],
                out_spec.transforms if out_spec else (), stream=var.stream)
        call = Call(call_id, session.session_id, template, inputs, outputs,
                    arrival_seq=next(self._arrivals))
        session.graph.add_call(call)
        for name, binding in outputs.items():
            var = session.variable(binding.var_id)
            var.producer = call_id
            if (out_spec := specs.get(name)) is not None and out_spec.criteria is not None:
                self._seed_criterion(session, var, out_spec.criteria)
        session.calls[call_id] = call
        call.prompt_account = session.prompt_chars
        call.account_prompt(prompt_chars)
        call.mark("submitted", asyncio.get_running_loop().time())
        self._mark_dirty(session)
        failed = [session.variables[b.var_id] for b in inputs.values()
                  if session.variables[b.var_id].error is not None]
        # Per variable, not per placeholder: a publish wakes each consumer once.
        call.num_missing_inputs = len({b.var_id for b in inputs.values()
                                       if not session.variables[b.var_id].is_ready})
        if failed:
            self._fail_call(session, call, CallFailedError(
                f"input {failed[0].name!r} failed: {failed[0].error}"))
        elif call.num_missing_inputs == 0:
            self._make_ready(session, call)
        return call

    def _check_prompt_chars(self, session: Session, template: Template,
                            value_chars: dict[str, int]) -> int:
        """The rendered size of a new call's prompt as far as its inputs are known, from the
        lengths alone (nothing is rendered): over `max_prompt_chars` it is a 400, and over
        what the session's unfinished calls may render together a 429. A 210 KB submit
        naming a 100 KB value 9,999 times would otherwise render a 1 GB prompt."""
        chars = template.rendered_chars(value_chars)
        limit = self.config.max_prompt_chars
        if chars > limit:
            raise PromptTooLongError(f"the prompt renders to at least {chars} characters; at "
                                     f"most {limit} are allowed (manager.max_prompt_chars)")
        in_flight = session.prompt_chars.chars
        if in_flight + chars > self.config.max_session_prompt_chars:
            raise TooManyRequestsError(
                f"this session's unfinished calls render {in_flight} prompt characters; with "
                f"this call's {chars} that is over {self.config.max_session_prompt_chars} "
                "(manager.max_session_prompt_chars); retry when calls finish",
                self.config.retry_after_s)
        return chars

    # --- the call lifecycle ------------------------------------------------------------------

    def _make_ready(self, session: Session, call: Call) -> None:
        if (error := self.health.no_engine_error()) is not None:
            self._fail_call(session, call, CallFailedError(str(error)))
            return
        values = {name: (b.transforms, session.variables[b.var_id].value or "")
                  for name, b in call.inputs.items()}
        if any(transforms for transforms, _ in values.values()):
            # User transforms run in a worker, never on the loop (transform_budget.py): the
            # call stays PENDING until they are done.
            self._spawn_background(self._transform_inputs(session, call, values),
                                   f"transforms-{call.call_id}")
            return
        self._render_ready(session, call, {name: value for name, (_, value) in values.items()})

    async def _transform_inputs(self, session: Session, call: Call,
                                values: TransformJobs) -> None:
        try:
            rendered = await self.transform_buckets.apply(session.tenant, values)
        except TransformError as exc:
            if call.state is CallState.PENDING:
                self._fail_call(session, call, CallFailedError(f"input transform failed: {exc}"))
            return
        # Meanwhile the session may have been deleted (its calls failed with it).
        if call.state is CallState.PENDING and self.sessions.find(session.session_id) is session:
            self._render_ready(session, call, rendered)

    def _render_ready(self, session: Session, call: Call, rendered: dict[str, str]) -> None:
        call.rendered_inputs = rendered
        chars = call.template.rendered_chars({name: len(value) for name, value
                                              in call.rendered_inputs.items()})
        call.account_prompt(chars)
        if chars > self.config.max_prompt_chars:  # inputs that arrived after the submit
            self._fail_call(session, call, CallFailedError(
                f"PromptTooLongError: the prompt would render to {chars} characters; at most "
                f"{self.config.max_prompt_chars} are allowed (manager.max_prompt_chars)"))
            call.rendered_inputs = {}
            return
        prompt = estimate_prompt(call.template, call.rendered_inputs, session.prefix_salt,
                                 call.input_token_counts(session.variables))
        call.prefix_pieces = prompt.pieces
        # Only boundaries far enough in to be worth a context are advertised to the policy:
        # affinity to a prefix no engine would cache only piles unrelated calls together.
        call.prefix_hashes = shareable_hashes(call.prefix_pieces)
        call.num_output_estimate = sum(
            self.output_lengths.estimate(call.output_length_key(name), b.sampling.max_tokens)
            for name, b in call.outputs.items())
        call.num_tokens = prompt.num_tokens + call.num_output_estimate
        transition(call, CallState.READY)
        self.prefix_index.add(call.prefix_hashes)
        self.scheduler.enqueue(call)

    def _dispatch(self, call: Call, engine: EngineState, criterion: Criterion | None) -> None:
        session = self._session_of(call)
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
                    self._spawn_background(prefill_ahead(consumer, engine, pieces),
                                           f"prefill-ahead-{consumer.call_id}")

    async def _output_produced(self, run: CallRun, binding: OutputBinding, text: str) -> None:
        """The executor's report of one output's final text (its OutputSink): transformed,
        observed for the function's length estimate, and published to its consumers."""
        session, call, engine = run.session, run.call, run.engine
        value = text if not binding.transforms else (await self.transform_buckets.apply(
            session.tenant, {binding.name: (binding.transforms, text)}))[binding.name]
        run.published.append(binding.name)
        if len(run.published) == len(call.outputs):
            # Its work on the engine is done (what is left is freeing its context): the
            # calls this output unblocks are placed against the load without it, not in
            # the window before its `finally` runs (measured live: a phase of 8 reviewers
            # placed 6 against the previous phase's stale load, the other 2 a phase later).
            engine.remove_call(call)
        self.output_lengths.observe(call.output_length_key(binding.name),
                                    binding.stream.num_tokens, binding.sampling.max_tokens)
        # The generated tokens, unless a transform changed the text.
        num_tokens = None if binding.transforms else binding.stream.num_tokens
        self._publish_value(session, session.variables[binding.var_id], value, num_tokens)

    async def _run(self, session: Session, call: Call, engine: EngineState) -> None:
        run = CallRun(session, call, engine)
        requeue = False
        try:
            # a slot of the engine's (call_slots.py), the latency-critical first
            async with engine.call_slots.held(engine.request_priority(call.call_id)):
                await run_call(call, engine, functools.partial(self._output_produced, run),
                               self.prefix_index.occurrences)
            transition(call, CallState.DONE)
            engine.num_calls_done += 1
        except asyncio.CancelledError:
            transition(call, CallState.FAILED)
            call.error = CANCELLED
            raise
        except EngineUnavailableError as exc:
            try:
                await self.health.confirm_down(engine, exc)
            except asyncio.CancelledError:  # cancelled while probing: it ends like any cancel
                transition(call, CallState.FAILED)
                call.error = CANCELLED
                raise
            call.attempts += 1
            requeue = not run.published and call.attempts <= self.config.max_call_retries \
                and self.health.no_engine_error() is None
            if not requeue:
                self._fail_call(session, call, CallFailedError(f"engine {engine.engine_id} "
                                                               f"failed: {exc}"))
        except (ParrotError, TransformError) as exc:
            failure = CallFailedError(f"{type(exc).__name__}: {exc}")
            # kept as the cause, so that a front door can answer in its own terms (the OpenAI
            # routes answer a prompt over the window with a 400 context_length_exceeded)
            failure.__cause__ = exc
            self._fail_call(session, call, failure)
        except Exception as exc:  # noqa: BLE001 - one bad call must not take the manager down
            log.exception("call %s crashed", call.call_id)
            self._fail_call(session, call, CallFailedError(f"internal error: {exc!r}"))
        finally:
            call.mark("finished", asyncio.get_running_loop().time())
            for observe in self.call_observers:
                observe(call)
            engine.remove_call(call)
            session.tasks.pop(call.call_id, None)
            if requeue:
                transition(call, CallState.READY)   # ready (queued) again from now
                call.engine_id = None
                self.scheduler.enqueue(call)
            self.scheduler.wake()

    def _publish_value(self, session: Session, var: Variable, value: str,
                       num_tokens: int | None = None) -> None:
        var.set_value(value, num_tokens)
        for consumer in session.graph.get_consumers(var.var_id):
            consumer.num_missing_inputs -= 1
            if consumer.num_missing_inputs == 0 and consumer.state is CallState.PENDING:
                self._make_ready(session, consumer)

    def _fail_call(self, session: Session, call: Call, error: ParrotError) -> None:
        """Fail a call and, transitively, every call and variable downstream of it."""
        pending = [(call, error)]
        while pending:
            failing, cause = pending.pop()
            if failing.state.is_finished:
                continue
            self.scheduler.discard(failing)
            transition(failing, CallState.FAILED)
            failing.error = str(cause)
            for var in session.graph.output_variables(failing):
                var.fail(cause)
                for consumer in session.graph.get_consumers(var.var_id):
                    if consumer.state in (CallState.PENDING, CallState.READY):
                        pending.append((consumer, CallFailedError(
                            f"input {var.name!r} failed: {cause}")))

    def _spawn_background(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """A task the manager owns (kept referenced, cancelled on close)."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def handle(self, event: HealthEvent) -> None:
        """Every engine-health event enters here (events.py): an engine up wakes the
        scheduler (ready calls may now be placed); no engine past the grace period fails what
        waits for one."""
        match event:
            case EngineUp():
                self.scheduler.wake()
            case NoEngine(error=error):
                self._fail_ready_calls(error)

    def _fail_ready_calls(self, error: EngineUnavailableError) -> None:
        """No engine came back within the grace period: fail what waits for one."""
        self._fail_calls([call for session in self.sessions for call in session.calls.values()
                          if call.state is CallState.READY], CallFailedError(str(error)))

    def _fail_calls(self, calls: list[Call], error: ParrotError) -> None:
        for call in calls:
            self._fail_call(self._session_of(call), call, error)

    # --- deduction -------------------------------------------------------------------------

    def _mark_dirty(self, session: Session) -> None:
        # Deduced lazily, once per scheduling round. Before any `get` reaches a call it has no
        # criterion and no task group (the policy's default applies).
        session.needs_deduction = True
        self._dirty.add(session)
        self.scheduler.wake()

    def deduce_changed(self) -> None:
        while self._dirty:
            self._deduce(self._dirty.pop())

    def _deduce(self, session: Session) -> None:
        deduce_changed(session.graph)  # the calls whose objectives can have changed
        session.needs_deduction = False
        self._dirty.discard(session)

    def _session_of(self, call: Call) -> Session:
        return self.sessions.get(call.session_id)

