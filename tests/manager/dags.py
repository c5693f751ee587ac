"""A tiny DAG factory for graph and deduction tests (no manager, no engines)."""

from __future__ import annotations

from parrot.manager.deduction import deduce
from parrot.manager.dag import SessionGraph
from parrot.manager.nodes import Call, InputBinding, OutputBinding, Variable
from parrot.sampling import SamplingParams
from parrot.template import parse_template
from parrot.types import Criterion


class Dag:
    """Tiny factory: `dag.call("B", ["a"], ["b"])` adds call B reading var a, writing var b."""

    def __init__(self) -> None:
        self.graph = SessionGraph()
        self.vars: dict[str, Variable] = {}
        self.calls: dict[str, Call] = {}

    def var(self, name: str) -> Variable:
        if name not in self.vars:
            self.vars[name] = Variable(name, "s", name)
            self.graph.add_variable(self.vars[name])
        return self.vars[name]

    def call(self, name: str, inputs: list[str], outputs: list[str]) -> Call:
        prompt = " ".join([f"{{{{input:{i}}}}}" for i in inputs] +
                          [f"{{{{output:{o}}}}}" for o in outputs])
        call = Call(name, "s", parse_template(prompt),
                    {i: InputBinding(i, self.var(i).var_id) for i in inputs},
                    {o: OutputBinding(o, self.var(o).var_id, SamplingParams()) for o in outputs})
        self.graph.add_call(call)
        self.calls[name] = call
        return call

    def get(self, var: str, criterion: Criterion) -> None:
        self.vars[var].criterion = criterion

    def criteria(self) -> dict[str, Criterion | None]:
        deduce(self.graph)
        return {name: c.criterion for name, c in self.calls.items()}

    def groups(self) -> dict[str, str | None]:
        return {name: c.task_group for name, c in self.calls.items()}
