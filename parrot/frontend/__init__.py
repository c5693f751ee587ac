"""The frontend: semantic functions, Semantic Variables and the Session that submits them."""

from parrot.frontend.function import SemanticFunction, semantic_function
from parrot.frontend.session import Session
from parrot.frontend.transport import HttpTransport, InProcessTransport, Transport
from parrot.frontend.variable import SemanticVariable, gather

__all__ = ["SemanticFunction", "semantic_function", "Session", "SemanticVariable", "gather",
           "Transport", "HttpTransport", "InProcessTransport"]
