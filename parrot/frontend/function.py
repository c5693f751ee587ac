"""`@semantic_function`: a prompt template with Semantic Variables, called like a function.

    @parrot.semantic_function(max_tokens=100)
    def summarize(doc, summary):
        '''Summarize this document: {{input:doc}}
        Summary: {{output:summary}}'''

    with parrot.Session(url) as s:
        summary = summarize(doc=text)        # returns a SemanticVariable at once
        print(summary.get(perf=parrot.LATENCY))

Inputs are plain strings or SemanticVariables returned by earlier calls (the value then flows
inside the service). A function with several outputs returns a tuple in template order.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from parrot.constraints import CONSTRAINT_TYPES, Constraint
from parrot.errors import InvalidRequestError
from parrot.frontend.active import current_session
from parrot.sampling import SamplingParams
from parrot.template import Template, parse_template
from parrot.transforms import Transform, parse_transforms
from parrot.wire_types import ChatSpec, PlaceholderSpec, SamplingOverride


@dataclass(frozen=True)
class SemanticFunction:
    name: str
    template: Template
    sampling: SamplingParams = field(default_factory=SamplingParams)
    output_sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    transforms: Mapping[str, list[Any]] = field(default_factory=dict)
    # chat=True: the prompt is a chat (text before an output = the user's turn, the output =
    # the assistant's), rendered by the service with the model's own chat template.
    chat: bool = False
    system: str | None = None           # the system message of a chat function
    # `transforms` parsed once (the baseline client applies input transforms itself).
    parsed_transforms: Mapping[str, tuple[Transform, ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        names = set(self.template.input_names) | set(self.template.output_names)
        for key in (*self.output_sampling, *self.transforms):
            if key not in names:
                raise InvalidRequestError(f"{self.name}: {key!r} is not a placeholder of the "
                                          f"prompt (placeholders: {sorted(names)})")
        # Parsed at definition, so a bad spec fails here, not at run time.
        object.__setattr__(self, "parsed_transforms", {
            key: parse_transforms(spec, f"{self.name}.{key}")
            for key, spec in self.transforms.items()})
        if self.system is not None and not (self.chat and isinstance(self.system, str)):
            raise InvalidRequestError(f"{self.name}: system= is a string, for chat=True "
                                      "functions")
        for key, override in self.output_sampling.items():
            if key not in self.template.output_names:
                raise InvalidRequestError(f"{self.name}: sampling given for input {key!r}")
            self.sampling.merged(override)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map positional and keyword arguments onto the input placeholders."""
        inputs = self.template.input_names
        if len(args) > len(inputs):
            raise TypeError(f"{self.name}() takes {len(inputs)} inputs {list(inputs)}, "
                            f"got {len(args)} positional arguments")
        bound = dict(zip(inputs, args))
        for key, value in kwargs.items():
            if key not in inputs:
                raise TypeError(f"{self.name}() got an unexpected input {key!r}; "
                                f"inputs: {list(inputs)}")
            if key in bound:
                raise TypeError(f"{self.name}() got input {key!r} twice")
            bound[key] = value
        missing = [n for n in inputs if n not in bound]
        if missing:
            raise TypeError(f"{self.name}() is missing input(s) {missing}")
        return bound

    def output_placeholders(self) -> tuple[PlaceholderSpec, ...]:
        """The output placeholders of a submit (per-output sampling and transforms)."""
        return tuple(
            PlaceholderSpec(name, "output", transforms=self.parsed_transforms.get(name, ()),
                            sampling=SamplingOverride.of(self.output_sampling[name])
                            if name in self.output_sampling else None)
            for name in self.template.output_names)

    def output_constraint(self, name: str) -> Constraint | None:
        """The constraint output `name` is decoded under (its own, else the function's); None
        when the output has transforms (its value is then theirs, not the constrained text)."""
        if self.parsed_transforms.get(name):
            return None
        override = self.output_sampling.get(name)
        return (SamplingOverride.of(override).apply(self.sampling) if override
                else self.sampling).constraint

    def chat_spec(self) -> ChatSpec | None:
        """The submit's `chat` field (None for plain prompts)."""
        return ChatSpec(self.system) if self.chat else None

    def options(self, **sampling: Any) -> SemanticFunction:
        """This function with some sampling fields replaced (e.g. `fn.options(max_tokens=20)`)."""
        return dataclasses.replace(self, sampling=self.sampling.merged(sampling))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Submit a call; returns its output variable(s) at once. `criteria=` (LATENCY or
        THROUGHPUT, unless the prompt has an input of that name) declares how its outputs
        will be fetched: it travels with the submission, so the service places the call
        under it (as a get begun before the call was sent does)."""
        criteria = None
        if "criteria" in kwargs and "criteria" not in self.template.input_names:
            criteria = kwargs.pop("criteria")
        outputs = current_session().call_function(self, self.bind(args, kwargs))
        if criteria is not None:
            for var in outputs:
                var.declare(criteria)
        return outputs[0] if len(outputs) == 1 else outputs


def semantic_function(fn: Callable[..., Any] | None = None, *, prompt: str | None = None,
                      outputs: Mapping[str, Mapping[str, Any] | Constraint] | None = None,
                      transforms: Mapping[str, list[Any]] | None = None,
                      chat: bool = False, system: str | None = None,
                      **sampling: Any) -> Any:
    """Decorator (bare or with arguments) or factory: `semantic_function(prompt=..., name=...)`.

    Keyword arguments that are sampling fields (max_tokens, temperature, ...) apply to every
    output; `outputs={"name": {...}}` overrides them per output, and an output given a
    constraint (`outputs={"plan": parrot.json(PlanModel)}`, `parrot.regex(...)`,
    `parrot.choice([...])`, or `{"constraint": ..., "max_tokens": ...}`) is decoded under it
    (`await var.aget_json()` parses it); `transforms={"placeholder":
    [...]}` sets per-placeholder transforms. `chat=True` (optionally with `system=`) makes the
    prompt a chat rendered with the model's chat template: no model-specific markup.
    """
    if not isinstance(chat, bool):
        raise InvalidRequestError(f"chat must be a boolean, got {chat!r}")
    name = sampling.pop("name", None)
    params = SamplingParams.from_json(sampling)

    def build(func: Callable[..., Any] | None) -> SemanticFunction:
        source = prompt if prompt is not None else inspect.getdoc(func) if func else None
        if not source:
            raise InvalidRequestError("a semantic function needs a prompt (docstring or prompt=)")
        if prompt is not None:
            source = textwrap.dedent(prompt).strip("\n")
        return SemanticFunction(name or (func.__name__ if func else "semantic_function"),
                                parse_template(source), params, _output_sampling(outputs),
                                dict(transforms or {}), chat, system)

    if fn is not None:
        return build(fn)
    if prompt is not None:
        return build(None)
    return build


def _output_sampling(outputs: Mapping[str, Mapping[str, Any] | Constraint] | None
                     ) -> dict[str, Mapping[str, Any]]:
    """Per-output sampling overrides; a bare constraint stands for {"constraint": it}."""
    return {name: {"constraint": spec} if isinstance(spec, CONSTRAINT_TYPES) else spec
            for name, spec in (outputs or {}).items()}
