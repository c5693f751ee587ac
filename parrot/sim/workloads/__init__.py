"""Workload data for simulations and benchmarks, built offline from files already installed."""

from parrot.sim.workloads.documents import (
    CHARS_PER_TOKEN, chunk_document, estimate_num_tokens, long_document, stdlib_document)

__all__ = ["CHARS_PER_TOKEN", "chunk_document", "estimate_num_tokens", "long_document",
           "stdlib_document"]
