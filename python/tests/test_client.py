"""The client's pure parts (python/src/mlcd/client.py, labelsets.py): job states by name, what
is refused before any call, the label store's read limits and how responses are put together,
and the error for a coordinator that is not there."""
import math
import socket

import grpc
import pytest

import mlcd
from mlcd.client import LIST_PAGE_SIZE
from mlcd.labelsets import (MAX_IDS_PER_READ, MAX_LABELS_PER_SAMPLE, MAX_VALUES_PER_MESSAGE,
                            chunks, read_chunk_size)
from mlcd.v1 import coordinator_pb2, labelstore_pb2

JobState = coordinator_pb2.JobState


@pytest.mark.parametrize("given", ["TRAINING", "training", "Job_State_Training",
                                   "JOB_STATE_TRAINING", JobState.JOB_STATE_TRAINING])
def test_job_state_by_name_or_value(given):
    assert mlcd.job_state(given) == JobState.JOB_STATE_TRAINING


def test_every_state_round_trips_through_its_name():
    for value in JobState.values():
        assert mlcd.job_state(mlcd.state_name(value)) == value


@pytest.mark.parametrize("given", ["TRAINED", "", "STATE_TRAINING", 10, -1, True, 4.0, None])
def test_job_state_refusal_names_states_and_lists_them(given):
    with pytest.raises(mlcd.InvalidArgumentError) as e:
        mlcd.job_state(given)
    assert e.value.field_path == "states" and e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert repr(given) in e.value.message
    assert "PENDING, CLUSTERING, ASSIGNING, TRAINING" in e.value.message
    assert "UNSPECIFIED" not in e.value.message


def test_state_name():
    assert mlcd.state_name(JobState.JOB_STATE_SUCCEEDED) == "SUCCEEDED"
    assert mlcd.state_name(JobState.JOB_STATE_UNSPECIFIED) == "UNSPECIFIED"


def test_terminal_states():
    ended = {v for v in JobState.values() if mlcd.is_terminal(v)}
    assert ended == {JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED,
                     JobState.JOB_STATE_CANCELLED}


def unused_loopback_address():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def client():
    with mlcd.Client(coordinator=unused_loopback_address(),
                     labelstore=unused_loopback_address(), timeout=10) as c:
        yield c


def test_list_refuses_a_bad_state_before_calling(client):
    jobs = client.list(states=["TRAINING", "RUNNING"])
    with pytest.raises(mlcd.InvalidArgumentError, match="'RUNNING' is not a job state"):
        next(jobs)


def test_watch_with_no_time_left_ends_before_calling(client):
    with pytest.raises(mlcd.DeadlineExceededError) as e:
        next(client.watch("job-1", timeout=0))
    assert e.value.method == "WatchJob" and "job job-1 did not end within 0 s" in e.value.message


def test_a_coordinator_that_is_not_there_is_unavailable_naming_the_fix(client):
    with pytest.raises(mlcd.UnavailableError) as e:
        client.get("job-1")
    err = e.value
    assert err.method == "GetJob" and err.code == grpc.StatusCode.UNAVAILABLE
    assert f"cannot reach the coordinator at {client.settings.coordinator}" in err.message
    assert "mlcdctl local up" in err.message and "MLCD_COORDINATOR" in err.message


def test_a_label_store_that_is_not_there_is_unavailable_naming_the_fix(client):
    with pytest.raises(mlcd.UnavailableError) as e:
        client.describe_label_set("job/1/labels")
    assert e.value.method == "DescribeLabelSet"
    assert f"cannot reach the label store at {client.settings.labelstore}" in e.value.message
    assert "MLCD_LABELSTORE" in e.value.message


def test_list_page_size_is_within_the_coordinators_bounds():
    assert 1 <= LIST_PAGE_SIZE <= 1000


@pytest.mark.parametrize("labels_per_sample,size", [
    (1, MAX_IDS_PER_READ), (256, MAX_IDS_PER_READ), (257, MAX_VALUES_PER_MESSAGE // 257),
    (MAX_LABELS_PER_SAMPLE, MAX_VALUES_PER_MESSAGE // MAX_LABELS_PER_SAMPLE),
    (0, MAX_IDS_PER_READ), (MAX_VALUES_PER_MESSAGE * 2, 1)])
def test_read_chunk_size_keeps_each_read_within_the_limits(labels_per_sample, size):
    assert read_chunk_size(labels_per_sample) == size
    assert size <= MAX_IDS_PER_READ
    assert size == 1 or size * max(1, labels_per_sample) <= MAX_VALUES_PER_MESSAGE


def test_chunks_cover_the_ids_in_order():
    ids = list(range(10))
    assert [list(c) for c in chunks(ids, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [list(c) for c in chunks(ids, 10)] == [ids]
    assert list(chunks([], 3)) == []


def test_label_rows_put_responses_together_in_request_order():
    rows = mlcd.LabelRows(2)
    rows.extend(labelstore_pb2.GetLabelsResponse(
        labels_per_sample=2, labels=[3, 1, -1, -1], scores=[0.9, 0.5, math.nan, math.nan],
        missing_indices=[1], missing_ids=[17]), with_scores=True)
    rows.extend(labelstore_pb2.GetLabelsResponse(
        labels_per_sample=2, labels=[0, 5], scores=[0.25, 0.125]), with_scores=True)
    assert rows.labels == [[3, 1], [-1, -1], [0, 5]]
    assert rows.missing_ids == [17]
    assert rows.scores[0] == pytest.approx([0.9, 0.5]) and rows.scores[2] == [0.25, 0.125]
    assert all(math.isnan(s) for s in rows.scores[1])


def test_label_rows_without_scores():
    rows = mlcd.LabelRows(3)
    rows.extend(labelstore_pb2.GetLabelsResponse(labels_per_sample=3, labels=[1, 2, 3]),
                with_scores=False)
    assert rows.labels == [[1, 2, 3]] and rows.scores is None and rows.missing_ids == []
