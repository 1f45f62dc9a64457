"""mlcd: the Python client of the MLCD training system's gRPC API (docs/python-client.md).

    import mlcd
    with mlcd.Client() as client:       # MLCD_COORDINATOR, MLCD_TLS_*, MLCD_TOKEN_FILE
        job = client.submit("job.yaml", request_id="my-run-1")
        for event in client.watch(job.id):
            print(mlcd.state_name(event.job.state), event.job.progress.step)

``mlcd.v1`` holds the messages and stubs generated from proto/mlcd/v1 when the package was
built (``mlcd.v1.job_pb2.JobSpec``, ``mlcd.v1.coordinator_pb2.Job``, ...).
"""
from .client import Client, is_terminal, job_state, state_name
from .errors import (AlreadyExistsError, ConfigError, DeadlineExceededError,
                     FailedPreconditionError, FieldProblem, InvalidArgumentError,
                     JobNotSucceededError, MlcdError, NotFoundError, PermissionDeniedError,
                     UnauthenticatedError, UnavailableError, field_problems)
from .evaluation import attribute_rows, evaluation_table, multi_label_rows
from .labelsets import LabelRows
from .settings import Settings, read_token_file
from .v1 import coordinator_pb2, job_pb2, labelstore_pb2

__version__ = "0.1.0"

__all__ = [
    "Client", "Settings", "LabelRows", "read_token_file", "is_terminal", "job_state",
    "state_name", "MlcdError", "ConfigError", "InvalidArgumentError", "NotFoundError",
    "AlreadyExistsError", "PermissionDeniedError", "UnauthenticatedError",
    "FailedPreconditionError", "UnavailableError", "DeadlineExceededError",
    "JobNotSucceededError", "FieldProblem", "field_problems", "coordinator_pb2", "job_pb2",
    "labelstore_pb2", "evaluation_table", "multi_label_rows", "attribute_rows",
]
