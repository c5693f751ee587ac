"""Checking a submit against a session before anything changes: every binding and reference."""

from __future__ import annotations

from dataclasses import dataclass

from parrot.manager.nodes import Variable
from parrot.manager.requests import PlaceholderSpec, SubmitRequest
from parrot.manager.sessions import Session
from parrot.errors import ConflictError, InvalidRequestError
from parrot.template import Template, parse_template


@dataclass(frozen=True)
class CheckedSubmit:
    """A submit whose template parses and whose bindings are all valid in the session."""

    template: Template
    specs: dict[str, PlaceholderSpec]          # by placeholder name
    input_vars: dict[str, Variable]            # inputs bound to existing variables
    output_vars: dict[str, Variable | None]    # outputs bound to existing variables, or None


def check_submit(session: Session, request: SubmitRequest) -> CheckedSubmit:
    """Raise the client's mistake (4xx) or return what the manager needs to build the call."""
    template = parse_template(request.prompt)
    specs = {p.name: p for p in request.placeholders}
    unknown = sorted(set(specs) - set(template.input_names) - set(template.output_names))
    if unknown:
        raise InvalidRequestError(f"placeholder(s) {unknown} are not in the prompt")
    for name in template.input_names:
        if name not in specs or specs[name].is_output:
            raise InvalidRequestError(f"input placeholder {name!r} needs a binding "
                                      "(semantic_var_id or value)")
    for name in template.output_names:
        if name in specs and not specs[name].is_output:
            raise InvalidRequestError(f"placeholder {name!r} is an output in the prompt")
    input_vars = {n: session.variable(var_id) for n in template.input_names
                  if (var_id := specs[n].semantic_var_id) is not None}
    output_vars: dict[str, Variable | None] = {}
    for name in template.output_names:
        spec = specs.get(name)
        var = session.variable(spec.semantic_var_id) if spec and spec.semantic_var_id else None
        if var is not None and (var.producer is not None or var.is_finished):
            raise ConflictError(f"variable {var.var_id} already has a producer or a value")
        output_vars[name] = var
    bound = [v.var_id for v in output_vars.values() if v is not None]
    if len(set(bound)) < len(bound):
        raise ConflictError("two outputs of one call are bound to the same variable")
    session.graph.check_acyclic([v.var_id for v in input_vars.values()], bound)
    return CheckedSubmit(template, specs, input_vars, output_vars)
