"""Policy variants used by the benchmarks to test what the built-in ones leave out.

`app_centric_fifo`: app_centric (Algorithm 1) with the ready calls offered in the order their
applications submitted them (the manager's `arrival_seq`), instead of the manager's order
(topological rank first, across sessions). With the manager's order, call k of a chain
(rank k) sorts after every newly arrived single call (rank 0) of any other session, so under
load a long chain is overtaken at every step by background traffic; first-come-first-served
by submission keeps an application's place in line, as an application-centric service
should. Load it as `parrot.sim.policies:AppFifoAppCentricPolicy` (the benchmark CLI also
accepts the short name `app_centric_fifo`).
"""

from __future__ import annotations

from typing import Sequence

from parrot.policies.app_centric import AppCentricPolicy
from parrot.policies.base import CallView, EngineView, Placement


class AppFifoAppCentricPolicy(AppCentricPolicy):
    name = "app_centric_fifo"

    def schedule(self, *, calls: Sequence[CallView],
                 engines: Sequence[EngineView]) -> list[Placement]:
        ordered = sorted(calls, key=lambda c: c.arrival_seq)
        return super().schedule(calls=ordered, engines=engines)


# Short names the benchmark accepts for the policies defined here.
SIM_POLICIES = {"app_centric_fifo": f"{__name__}:AppFifoAppCentricPolicy"}
