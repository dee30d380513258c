"""The project's error types.

Every caller mistake raises a subclass of :class:`AKVError`, which is a ``ValueError``: its
message names the offending field and value, and the HTTP server turns it into an OpenAI-style
error object with the same message. ``assert`` is reserved for internal invariants.
"""

from __future__ import annotations

from typing import Any


class AKVError(ValueError):
    """Base class of every error this project raises on purpose.

    Attributes:
        field: the request field (dotted path) the error is about, or ``None``.
        value: the offending value (kept short for messages), or ``None``.
        status: the HTTP status the server answers with.
        transient: the failure is the infrastructure's (a server down), not the caller's: retrying
            after a restart may succeed. Evaluators never record it as a policy's failure.
    """

    status: int = 400
    transient: bool = False

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its class, message and attributes (the server's intake process sends errors
        back), whatever keyword arguments a subclass's ``__init__`` requires."""
        return _revive, (type(self), self.args, self.__dict__)


def _revive(cls: type[AKVError], args: tuple[Any, ...], state: dict[str, Any]) -> AKVError:
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


def show(value: Any, limit: int = 80) -> str:
    """A short ``repr`` of ``value`` for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ScheduleError(AKVError):
    """A cache schedule (drop / reposition / drop_rule) that violates the wire-format rules."""


class MessageError(AKVError):
    """A malformed message list (unknown role, bad content, edited history)."""


class ContextLengthError(AKVError):
    """A prompt longer than the model's context window."""

    status = 413


class ModelLoadError(AKVError):
    """A model name or path that cannot be resolved offline."""


class SnapshotError(AKVError):
    """A saved session file that is corrupt or belongs to another model or tokenizer."""


class CapacityError(AKVError):
    """The engine cannot take more work now (queue full); retry later."""

    status = 503


def check_int(value: Any, field: str) -> int:
    """Return ``value`` if it is a plain int (not a bool), else raise :class:`ScheduleError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(f"{field} must be an integer, got {show(value)}", field=field, value=value)
    return value


class RemoteError(AKVError):
    """An engine server answered with an error, or not in the wire format (``engine.remote``).

    Attributes:
        server: the server's base URL.
        code: the error code the server gave (``None`` when it gave none).
    """

    def __init__(self, message: str, *, server: str, status: int = 502, code: str | None = None,
                 field: str | None = None, value: Any = None) -> None:
        super().__init__(message, field=field, value=value)
        self.server = server
        self.status = status
        self.code = code


class RemoteUnavailableError(RemoteError):
    """An engine server cannot be reached (down, crashed, restarting).

    ``transient``: the failure is the infrastructure's, not the request's; evaluators re-raise it
    so that the replica can restart its server and retry instead of recording a failed policy.
    """

    transient: bool = True


class ScoringUnsupportedError(RemoteError):
    """The server has no log-likelihood endpoint (stock or AKV SGLang): use ``eval.scoring: generate``."""
