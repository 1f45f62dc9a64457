"""From a gRPC status to the package's exceptions (python/src/mlcd/errors.py): the class for each
status code, and the field problems read from the coordinator's INVALID_ARGUMENT messages in
the forms common/spec_validation.cc (SpecProblemsToStatus) writes them."""
import grpc
import pytest

import mlcd
from mlcd.errors import error_for, error_from_rpc
from mlcd.v1 import coordinator_pb2

C = grpc.StatusCode

MAPPED = [
    (C.INVALID_ARGUMENT, mlcd.InvalidArgumentError), (C.NOT_FOUND, mlcd.NotFoundError),
    (C.ALREADY_EXISTS, mlcd.AlreadyExistsError),
    (C.PERMISSION_DENIED, mlcd.PermissionDeniedError),
    (C.UNAUTHENTICATED, mlcd.UnauthenticatedError),
    (C.FAILED_PRECONDITION, mlcd.FailedPreconditionError),
    (C.UNAVAILABLE, mlcd.UnavailableError), (C.DEADLINE_EXCEEDED, mlcd.DeadlineExceededError)]
UNMAPPED = [c for c in C if c not in dict(MAPPED) and c != C.OK]

SPEC_REFUSAL = ("invalid job spec (3 problems):\n"
                "  spec.model.widht (line 23): unknown field; did you mean width?\n"
                "  spec.training.batch_size: 63 is not divisible by training.world_size (2)\n"
                "  spec.dataset.paths[2]: no such file: /data/c.npy")


@pytest.mark.parametrize("code,cls", MAPPED)
def test_each_mapped_code_has_its_class(code, cls):
    e = error_for(code, "spec.x: bad", "SubmitJob")
    assert type(e) is cls and isinstance(e, mlcd.MlcdError)
    assert (e.code, e.message, e.method) == (code, "spec.x: bad", "SubmitJob")
    assert str(e) == f"SubmitJob: {code.name}: spec.x: bad"


@pytest.mark.parametrize("code", UNMAPPED)
def test_other_codes_are_the_base_class(code):
    e = error_for(code, "boom")
    assert type(e) is mlcd.MlcdError and e.code == code and str(e) == f"{code.name}: boom"
    assert e.problems == () and e.field_path is None


def test_the_classes_are_distinct():
    assert len({cls for _, cls in MAPPED}) == len(MAPPED)


def test_field_problems_only_for_invalid_argument():
    assert error_for(C.NOT_FOUND, "spec.dataset.index: no such file").problems == ()
    assert error_for(C.FAILED_PRECONDITION, SPEC_REFUSAL).field_paths == ()
    e = error_for(C.INVALID_ARGUMENT, "spec.dataset.index: no such file")
    assert e.field_path == "spec.dataset.index"
    assert e.problems == (mlcd.FieldProblem("spec.dataset.index", "no such file"),)


def test_spec_refusal_lists_every_problem_in_order():
    e = error_for(C.INVALID_ARGUMENT, SPEC_REFUSAL, "SubmitJob")
    assert e.field_paths == ("spec.model.widht", "spec.training.batch_size",
                             "spec.dataset.paths[2]")
    assert e.field_path == "spec.model.widht"
    assert e.problems[0] == mlcd.FieldProblem(
        "spec.model.widht", "unknown field; did you mean width?", 23)
    assert e.problems[1].line is None
    assert e.problems[1].message == "63 is not divisible by training.world_size (2)"
    assert e.problems[2].message == "no such file: /data/c.npy"


def test_spec_refusal_of_one_problem_and_the_left_out_line():
    message = ("invalid job spec (1 problem):\n  spec.clustering.l (line 4): must be at most k")
    assert mlcd.field_problems(message) == (
        mlcd.FieldProblem("spec.clustering.l", "must be at most k", 4),)
    message = ("invalid job spec (5 problems):\n  spec.a: one\n  spec.b: two\n"
               "  ... and 3 more problems left out")
    assert [p.path for p in mlcd.field_problems(message)] == ["spec.a", "spec.b"]


@pytest.mark.parametrize("message,path,line,text", [
    ("request_id: longer than 200 characters", "request_id", None,
     "longer than 200 characters"),
    ("spec.dataset.paths[0] (line 9): empty", "spec.dataset.paths[0]", 9, "empty"),
    ("spec.model: bad\nsecond line", "spec.model", None, "bad\nsecond line"),
    ("states: 'X' is not a job state", "states", None, "'X' is not a job state")])
def test_single_field_refusals(message, path, line, text):
    assert mlcd.field_problems(message) == (mlcd.FieldProblem(path, text, line),)


@pytest.mark.parametrize("message", [
    "", "job not found", "cannot parse: bad YAML", "spec.model :bad", "9spec: x",
    "spec..model: x", "invalid job spec (2 problems):\nspec.a: not indented",
    "spec.model:no space", "http://host: refused"])
def test_messages_naming_no_field(message):
    assert mlcd.field_problems(message) == ()


def test_config_error_is_an_invalid_argument_naming_the_setting():
    e = mlcd.ConfigError("tls_ca", "cannot read it")
    assert isinstance(e, mlcd.InvalidArgumentError) and e.code == C.INVALID_ARGUMENT
    assert e.message == "tls_ca: cannot read it" and e.method == ""
    assert e.problems == (mlcd.FieldProblem("tls_ca", "cannot read it"),)


class FailedCall(grpc.RpcError):
    """What a failed call raises: an RpcError that is also a grpc.Call (code, details)."""

    def __init__(self, code, details):
        super().__init__()
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


def test_error_from_rpc_uses_the_code_and_details():
    e = error_from_rpc(FailedCall(C.INVALID_ARGUMENT, SPEC_REFUSAL), "SubmitJob")
    assert type(e) is mlcd.InvalidArgumentError and e.method == "SubmitJob"
    assert e.message == SPEC_REFUSAL and len(e.problems) == 3
    e = error_from_rpc(FailedCall(C.PERMISSION_DENIED, None), "CancelJob")
    assert type(e) is mlcd.PermissionDeniedError and e.message == ""


def test_error_from_rpc_without_a_status_is_unknown():
    e = error_from_rpc(grpc.RpcError("channel closed"), "GetJob")
    assert type(e) is mlcd.MlcdError and e.code == C.UNKNOWN and e.message == "channel closed"


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED"])
def test_job_not_succeeded_error_names_the_job_and_its_end(state):
    job = coordinator_pb2.Job(id="job-7", message="worker lost",
                              state=coordinator_pb2.JobState.Value(f"JOB_STATE_{state}"))
    e = mlcd.JobNotSucceededError(job)
    assert e.job is job and str(e) == f"job job-7 ended {state}: worker lost"
    assert not isinstance(e, mlcd.MlcdError)
