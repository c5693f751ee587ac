"""Parrot: application-aware LLM serving with Semantic Variables.

    import parrot

    @parrot.semantic_function(max_tokens=64)
    def summarize(doc, summary):
        '''Summarize: {{input:doc}} Summary: {{output:summary}}'''
"""

__version__ = "0.1.0"

from parrot.constraints import choice, json_output as json, regex
from parrot.frontend import (SemanticFunction, SemanticVariable, Session, gather,
                             semantic_function)
from parrot.types import Criterion

LATENCY = Criterion.LATENCY
THROUGHPUT = Criterion.THROUGHPUT

__all__ = ["__version__", "semantic_function", "SemanticFunction", "SemanticVariable", "Session",
           "Criterion", "LATENCY", "THROUGHPUT", "gather", "json", "regex", "choice"]
