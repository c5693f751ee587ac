"""Scheduling policies: one ABC (`Policy`), read-only views, and a registry by name."""

from parrot.errors import PolicyConfigError
from parrot.policies.base import CallView, EngineView, Placement, Policy, PolicyParams
from parrot.policies.registry import PolicyRegistry, default_registry


def builtin_policies() -> list[type[Policy]]:
    """Every policy shipped with Parrot (registered by `default_registry`)."""
    from parrot.policies.app_centric import AppCentricPolicy
    from parrot.policies.latency_centric import LatencyCentricPolicy
    from parrot.policies.least_queue import LeastQueuePolicy
    from parrot.policies.throughput_centric import ThroughputCentricPolicy

    policies: list[type[Policy]] = [AppCentricPolicy, LeastQueuePolicy, LatencyCentricPolicy,
                                    ThroughputCentricPolicy]
    return policies


__all__ = ["CallView", "EngineView", "Placement", "Policy", "PolicyParams", "PolicyConfigError",
           "PolicyRegistry", "default_registry", "builtin_policies"]
