"""Typed errors shared by the manager, the engines and the frontend.

Every error a client can cause maps to a 4xx status and the wire form
`{"error": {"type": <class name>, "message": ...}}`; `error_from_wire` turns that form back into
the same exception class on the other side of an HTTP hop.
"""

from __future__ import annotations

from typing import Any


class ParrotError(Exception):
    """Base class; `status` is the HTTP status the error is served with."""

    status: int = 500

    def to_wire(self) -> dict[str, Any]:
        return {"error": {"type": type(self).__name__, "message": str(self)}}

    @classmethod
    def from_wire(cls, error: dict[str, Any]) -> ParrotError:
        """The exception back from the `error` object of its wire form."""
        return cls(str(error["message"]))


class InvalidRequestError(ParrotError):
    """The request is malformed: bad JSON, a missing field, an invalid value."""

    status = 400


class ConfigError(InvalidRequestError):
    """A configuration value is invalid, or a key unknown or missing.

    Every configuration error of the project is one of these (engine, policy, serve, simulation
    and workload configs subclass it), with one message form that names the key path:

        <key>: <problem>[; allowed: <what is allowed>]

    e.g. `manager.port: 70000 is out of range; allowed: integer >= 0 and <= 65535`. `key` is
    also sent on the wire next to the message. Build them with `parrot.validation`.
    """

    def __init__(self, key: str, problem: str | None = None, allowed: str | None = None) -> None:
        if problem is None:
            # One preformatted message (how user policies raised these before): the key is
            # what precedes its first ": ", so the form stays the same.
            key, sep, problem = key.partition(": ")
            if not sep:
                key, problem = "<config>", key
        self.key, self.problem, self.allowed = key, problem, allowed
        super().__init__(f"{key}: {problem}" + ("" if allowed is None else f"; allowed: {allowed}"))

    def to_wire(self) -> dict[str, Any]:
        wire = super().to_wire()
        wire["error"]["key"] = self.key
        return wire

    @classmethod
    def from_wire(cls, error: dict[str, Any]) -> ParrotError:
        # The message is rebuilt verbatim; the wire's key wins over splitting at ": ".
        key, message = error.get("key"), str(error["message"])
        if isinstance(key, str) and message.startswith(f"{key}: "):
            return cls(key, message[len(key) + 2:])
        return cls(message)


class EngineConfigError(ConfigError):
    """An engine's parameters (any kind) have an unknown key or an invalid value."""


class PolicyConfigError(ConfigError):
    """A policy name or parameter is invalid."""


class TemplateSyntaxError(InvalidRequestError):
    """The prompt template does not parse (unclosed `{{`, unknown kind, duplicate output...)."""


class UnauthorizedError(ParrotError):
    """Missing or wrong bearer token."""

    status = 401


class NotFoundError(ParrotError):
    """An unknown session, variable, call or engine context."""

    status = 404


class MethodNotAllowedError(ParrotError):
    """The path exists but not with this HTTP method."""

    status = 405


class RequestTimeoutError(ParrotError):
    """The client did not send its request (headers or body) in time."""

    status = 408


class TooManyRequestsError(ParrotError):
    """Over a queue or session limit; retry after `retry_after_s` seconds (`Retry-After`)."""

    status = 429

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDownError(ParrotError):
    """The service is stopping: it admits nothing new, and work it could not finish fails."""

    status = 503


class ConflictError(ParrotError):
    """The request contradicts existing state (second producer, cycle, value already set)."""

    status = 409


class PayloadTooLargeError(ParrotError):
    status = 413


class StreamResetError(ConflictError):
    """A stream cannot go on truthfully: the call was re-run (its engine failed) and the new
    attempt's text differs from what the stream already sent. The variable's value is sound;
    `get` it."""


class CallFailedError(ParrotError):
    """A variable cannot get a value because the call producing it (or one upstream) failed."""

    status = 424


class SchedulingFailedError(CallFailedError):
    """The scheduling policy kept failing (raising, or placing calls invalidly) while the call
    waited, so the call was failed rather than left queued until its `get` timed out."""


class GetTimeoutError(ParrotError):
    """A `get` waited longer than its timeout; the variable may still become ready later."""

    status = 408


class EngineError(ParrotError):
    """An engine could not carry out a protocol operation."""

    status = 500


class UnknownContextError(EngineError, NotFoundError):
    status = 404


class ContextExistsError(EngineError, ConflictError):
    status = 409


class PromptTooLongError(EngineError, InvalidRequestError):
    status = 400


class OutOfKVCacheError(EngineError):
    """The engine cannot hold the context even after waiting; retry elsewhere or later."""

    status = 503


class EngineUnavailableError(EngineError):
    """The engine process is down or unreachable."""

    status = 503


class ManagerUnavailableError(ParrotError):
    """The frontend cannot reach the manager."""

    status = 503


_WIRE_TYPES: dict[str, type[ParrotError]] = {
    cls.__name__: cls
    for cls in (
        ParrotError, InvalidRequestError, ConfigError, EngineConfigError, PolicyConfigError,
        TemplateSyntaxError, UnauthorizedError, NotFoundError,
        MethodNotAllowedError, RequestTimeoutError, TooManyRequestsError, ShuttingDownError,
        ConflictError, PayloadTooLargeError, CallFailedError, GetTimeoutError, EngineError,
        UnknownContextError, ContextExistsError, PromptTooLongError, OutOfKVCacheError,
        EngineUnavailableError, ManagerUnavailableError,
        SchedulingFailedError, StreamResetError,
    )
}


def error_from_wire(payload: Any, status: int) -> ParrotError:
    """Rebuild the typed error from a JSON error body (unknown shapes become ParrotError)."""
    try:
        err = payload["error"]
        cls = _WIRE_TYPES.get(err["type"], ParrotError)
        exc = cls.from_wire(err)
    except (KeyError, TypeError):
        exc = ParrotError(f"HTTP {status}: {payload!r}")
    if type(exc) is ParrotError:
        exc.status = status
    return exc
