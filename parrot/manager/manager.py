"""The manager: sessions, submit, the scheduling loop, deduction and the engines.

One asyncio loop, event-driven: `submit` checks and builds a call into its session's DAG; a
call becomes READY when its last input arrives → the scheduler asks the policy where ready
calls go → each placement is dispatched onto its engine. What happens to a call from READY on
(dispatch, the run on its engine, publishing its outputs, failing downstream) is
`call_flow.CallFlow`'s. Engine failures (engine_health.py): a call whose engine dies or freezes
is re-dispatched, up to `max_call_retries` times; with no engine left it fails after
`no_engine_grace_s`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import Any

from parrot.serve_config import EngineSpec, ManagerConfig
from parrot.manager.call_flow import CallFlow
from parrot.manager.deduction import deduce, deduce_changed
from parrot.manager.engine_health import EngineHealth
from parrot.manager.events import EngineUp, HealthEvent, NoEngine
from parrot.manager.engine_pool import EnginePool, EngineState
from parrot.manager.admission import Slices
from parrot.manager.lifecycle import transition
from parrot.manager.nodes import Call, InputBinding, OutputBinding, Variable
from parrot.manager.output_lengths import OutputLengthEstimator
from parrot.manager.prefix import PrefixIndex
from parrot.manager.requests import SubmitRequest
from parrot.manager.scheduler import Decision, Scheduler
from parrot.manager.sessions import IdleExpiry, Session, SessionStore
from parrot.manager.submission import check_submit
from parrot.manager.transform_budget import TenantTransformBuckets
from parrot.engines.protocol import Engine
from parrot.errors import (CallFailedError, ConflictError, GetTimeoutError,
                           InvalidRequestError, NotFoundError, PromptTooLongError,
                           TooManyRequestsError)
from parrot.policies.base import Policy
from parrot.template import Template
from parrot.types import CallState, Criterion, strongest
from parrot.wire_types.service import Graph

log = logging.getLogger(__name__)
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
        self.scheduler = Scheduler(policy, self.engines,
                                   coalesce_s=self.config.round_coalesce_ms / 1000)
        self._dirty: set[Session] = set()
        self._arrivals = itertools.count()
        self._scheduler_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self.health = EngineHealth(self.engines, self.config, spawn=self._spawn_background,
                                   notify=self.handle)
        self.flow = CallFlow(self.sessions, self.config, self.health, self.scheduler,
                             self.prefix_index, self.output_lengths, self.transform_buckets,
                             self._spawn_background)

    @property
    def call_observers(self) -> list[Callable[[Call], None]]:
        """Called with every call that leaves an engine (done, failed or re-queued): /metrics.
        (The call flow's list: it is the flow that reports them.)"""
        return self.flow.observers

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
            self.flow.dispatch(d.call, d.engine, d.criterion)
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
            self.flow.dispatch(d.call, d.engine, d.criterion)
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
            self.flow.fail_calls(decision.failed, decision.error)

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
            self.flow.publish_value(session, var, value)
        return var

    def set_variable(self, session: Session, var_id: str, value: str) -> None:
        var = session.variable(var_id)
        if var.producer is not None:
            raise ConflictError(f"variable {var_id} is produced by call {var.producer}; "
                                "it cannot be set by the client")
        if var.is_finished:
            raise ConflictError(f"variable {var_id} already has a value")
        self.flow.publish_value(session, var, value)

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
            self.flow.fail_call(session, call, CallFailedError(
                f"input {failed[0].name!r} failed: {failed[0].error}"))
        elif call.num_missing_inputs == 0:
            self.flow.make_ready(session, call)
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
                self.flow.fail_ready_calls(error)

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
