"""Exceptions of the MLCD client.

Every failed call raises an :class:`MlcdError` (or the subclass for its status code) that
carries the gRPC status code, the service's message and, for ``INVALID_ARGUMENT``, the
field paths the message names.

The coordinator reports a refused job spec as one ``INVALID_ARGUMENT`` whose message lists
every problem, one per line, each with its field path and, for YAML input, the line
(common/spec_validation.h, ``SpecProblemsToStatus``)::

    invalid job spec (2 problems):
      spec.model.widht (line 23): unknown field; did you mean width?
      spec.training.batch_size: 63 is not divisible by training.world_size (2)

Other refusals of a single field name it first (``"request_id: longer than 200
characters"``, ``"spec.dataset.index: ..."``). :func:`field_problems` reads both forms.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Type

import grpc

__all__ = [
    "FieldProblem", "MlcdError", "ConfigError", "InvalidArgumentError", "NotFoundError",
    "AlreadyExistsError", "PermissionDeniedError", "UnauthenticatedError",
    "FailedPreconditionError", "UnavailableError", "DeadlineExceededError",
    "JobNotSucceededError", "field_problems", "error_from_rpc",
]

# The head of the coordinator's spec refusal ("invalid job spec (N problem[s]):").
_SPEC_HEAD = re.compile(r"^invalid job spec \(\d+ problems?\):")
# One problem line: "  PATH[ (line N)]: MESSAGE". A path has no spaces.
_PROBLEM_LINE = re.compile(r"^  (?P<path>[^\s:]+)(?: \(line (?P<line>\d+)\))?: (?P<message>.*)$")
# A single-field refusal: "PATH[ (line N)]: MESSAGE", PATH a dotted identifier path.
_FIELD_HEAD = re.compile(
    r"^(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)"
    r"(?: \(line (?P<line>\d+)\))?: (?P<message>.*)$", re.DOTALL)


@dataclass(frozen=True)
class FieldProblem:
    """One problem of a request, as the service named it."""

    path: str
    """Field path, e.g. ``"spec.clustering.l"`` or ``"spec.dataset.paths[2]"``."""
    message: str
    """What is wrong, and often what would be right."""
    line: Optional[int] = None
    """Line of the YAML text the problem is on (1-based), when the spec was YAML."""


def field_problems(message: str) -> Tuple[FieldProblem, ...]:
    """The field problems an ``INVALID_ARGUMENT`` message names (empty when it names none)."""
    lines = message.split("\n")
    if _SPEC_HEAD.match(lines[0]):
        found = []
        for text in lines[1:]:
            m = _PROBLEM_LINE.match(text)
            if m:
                line = int(m.group("line")) if m.group("line") else None
                found.append(FieldProblem(m.group("path"), m.group("message"), line))
        return tuple(found)
    m = _FIELD_HEAD.match(message)
    if not m:
        return ()
    line = int(m.group("line")) if m.group("line") else None
    return (FieldProblem(m.group("path"), m.group("message"), line),)


class MlcdError(Exception):
    """A call refused or failed: the gRPC status code, the service's message, the fields."""

    def __init__(self, code: grpc.StatusCode, message: str, method: str = "",
                 problems: Sequence[FieldProblem] = ()) -> None:
        self.code = code
        self.message = message
        self.method = method
        self.problems: Tuple[FieldProblem, ...] = tuple(problems)
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{code.name}: {message}")

    @property
    def field_path(self) -> Optional[str]:
        """The first field path the error names (``None`` when it names none)."""
        return self.problems[0].path if self.problems else None

    @property
    def field_paths(self) -> Tuple[str, ...]:
        """Every field path the error names, in the service's order."""
        return tuple(p.path for p in self.problems)


class InvalidArgumentError(MlcdError):
    """INVALID_ARGUMENT: a bad spec or request; ``problems`` names the fields."""


class NotFoundError(MlcdError):
    """NOT_FOUND: no such job or label set."""


class AlreadyExistsError(MlcdError):
    """ALREADY_EXISTS."""


class PermissionDeniedError(MlcdError):
    """PERMISSION_DENIED: the token's role may not call this (e.g. a viewer submitting)."""


class UnauthenticatedError(MlcdError):
    """UNAUTHENTICATED: no token, or one the service does not know or that expired."""


class FailedPreconditionError(MlcdError):
    """FAILED_PRECONDITION: the request cannot be served in the current state."""


class UnavailableError(MlcdError):
    """UNAVAILABLE: the service cannot be reached (not running, wrong address, TLS refused)."""


class DeadlineExceededError(MlcdError):
    """DEADLINE_EXCEEDED: the call or the wait took longer than its timeout."""


class ConfigError(InvalidArgumentError):
    """The client's own settings are unusable (a token file, a TLS file); ``field_path`` is
    the setting (``"MLCD_TOKEN_FILE"``, ``"tls_ca"``, ...). Raised before any call."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, f"{setting}: {message}",
                         problems=(FieldProblem(setting, message),))


class JobNotSucceededError(Exception):
    """A job that was waited for ended FAILED or CANCELLED; ``job`` is its final record."""

    def __init__(self, job) -> None:  # job: mlcd.v1.coordinator_pb2.Job
        self.job = job
        from .v1 import coordinator_pb2
        state = coordinator_pb2.JobState.Name(job.state).replace("JOB_STATE_", "")
        super().__init__(f"job {job.id} ended {state}: {job.message}")


_BY_CODE: Dict[grpc.StatusCode, Type[MlcdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def error_for(code: grpc.StatusCode, message: str, method: str = "") -> MlcdError:
    """The exception for a status: its class by code; field problems for INVALID_ARGUMENT."""
    problems = field_problems(message) if code == grpc.StatusCode.INVALID_ARGUMENT else ()
    return _BY_CODE.get(code, MlcdError)(code, message, method, problems)


def error_from_rpc(error: grpc.RpcError, method: str = "") -> MlcdError:
    """The exception for a failed gRPC call (a ``grpc.RpcError`` that is a ``grpc.Call``)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for(code, details or "", method)
