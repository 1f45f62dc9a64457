"""``mlcd.Client``: jobs (submit, get, list, watch, wait, cancel) through the coordinator and
label-set reads through the label store, over gRPC with the settings' TLS and token.

Every method raises :class:`mlcd.MlcdError` (the subclass for the status code) when the
service refuses or cannot be reached; nothing is retried except a broken watch stream.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Sequence, Union

import grpc

from . import label_import, labelsets
from .channel import call_metadata, make_channel
from .errors import (ConfigError, DeadlineExceededError, FieldProblem, InvalidArgumentError,
                     JobNotSucceededError, MlcdError, UnavailableError, error_from_rpc)
from .settings import Settings
from .specs import JobInput, submit_request
from .v1 import (coordinator_pb2, coordinator_pb2_grpc, job_pb2, labelstore_pb2,
                 labelstore_pb2_grpc)

__all__ = ["Client", "job_state", "state_name", "is_terminal"]

Job = coordinator_pb2.Job
JobEvent = coordinator_pb2.JobEvent
JobState = coordinator_pb2.JobState
_TERMINAL = (JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED,
             JobState.JOB_STATE_CANCELLED)
# Pause between reconnects of a broken watch stream (mlcdctl's FollowJob waits as long).
RECONNECT_PAUSE_SECONDS = 0.5
# Jobs per ListJobs page (the coordinator's default; its most is 1000).
LIST_PAGE_SIZE = 100


def job_state(state: Union[int, str]) -> int:
    """A ``JobState`` value from itself, ``"TRAINING"`` or ``"JOB_STATE_TRAINING"`` (any case).
    :class:`InvalidArgumentError` naming ``states`` for anything else."""
    if isinstance(state, int) and not isinstance(state, bool) and state in JobState.values():
        return state
    if isinstance(state, str):
        name = state.upper()
        name = name if name.startswith("JOB_STATE_") else "JOB_STATE_" + name
        if name in JobState.keys():
            return JobState.Value(name)
    known = ", ".join(n.replace("JOB_STATE_", "") for n in JobState.keys()[1:])
    message = f"{state!r} is not a job state ({known})"
    raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, f"states: {message}",
                               problems=(FieldProblem("states", message),))


def state_name(state: int) -> str:
    """``"SUCCEEDED"`` for ``JOB_STATE_SUCCEEDED``, as mlcdctl prints states."""
    return JobState.Name(state).replace("JOB_STATE_", "")


def is_terminal(state: int) -> bool:
    """Whether a job in ``state`` has ended (SUCCEEDED, FAILED or CANCELLED)."""
    return state in _TERMINAL


class Client:
    """A connection to an MLCD cluster.

    ``Client()`` reads the ``MLCD_*`` variables (:class:`mlcd.Settings`); keyword arguments
    (the settings' field names) override them, and ``Client(settings)`` takes them as given::

        with mlcd.Client() as client:                      # after `. .mlcd/local/env`
            job = client.submit("examples/tiny-test-job.yaml", request_id="nightly-2026-11-26")
            final = client.wait(job.id, check=True)

    The token file is read once, here. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, settings: Optional[Settings] = None, **overrides: Any) -> None:
        if settings is None:
            settings = Settings.from_env(**overrides)
        elif overrides:
            settings = settings.replace(**overrides)
        self.settings = settings
        self._metadata = call_metadata(settings.bearer_token())
        self._coordinator_channel = make_channel(settings.coordinator, settings)
        self._jobs = coordinator_pb2_grpc.CoordinatorStub(self._coordinator_channel)
        self._labelstore_channel: Optional[grpc.Channel] = None
        self._labels: Optional[labelstore_pb2_grpc.LabelStoreStub] = None

    def close(self) -> None:
        """Closes the channels."""
        self._coordinator_channel.close()
        if self._labelstore_channel is not None:
            self._labelstore_channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- jobs ---

    def submit(self, job: JobInput, *, request_id: str = "", dry_run: bool = False,
               metadata: Optional[job_pb2.JobMetadata] = None) -> Job:
        """Submits a job: a YAML file's path, a dict of the same document, or a
        ``mlcd.v1.JobSpec`` (with ``metadata``). With a ``request_id`` the call is idempotent
        for this token's user: the same id again returns the job the first call created
        (retry freely). ``dry_run`` validates only. :class:`InvalidArgumentError` with every
        problem's field path (``problems``, ``field_path``) for a bad spec."""
        request = submit_request(job, request_id, dry_run, metadata)
        return self._coordinator_call(self._jobs.SubmitJob, request, "SubmitJob")

    def get(self, job_id: str, *, include_history: bool = False) -> Job:
        """The job's record (state, progress, rounds, evaluation, ...)."""
        request = coordinator_pb2.GetJobRequest(id=job_id, include_history=include_history)
        return self._coordinator_call(self._jobs.GetJob, request, "GetJob")

    def list(self, *, states: Optional[Iterable[Union[int, str]]] = None,
             page_size: int = LIST_PAGE_SIZE) -> Iterator[Job]:
        """Every job (newest first), or those in ``states``; pages are fetched as the
        iterator goes, so errors come from iterating."""
        request = coordinator_pb2.ListJobsRequest(
            states=[job_state(s) for s in (states or ())], page_size=page_size)
        while True:
            page = self._coordinator_call(self._jobs.ListJobs, request, "ListJobs")
            yield from page.jobs
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def cancel(self, job_id: str, reason: str = "") -> Job:
        """Cancels the job (a submitter only its own); returns it as it is now."""
        request = coordinator_pb2.CancelJobRequest(id=job_id, reason=reason)
        return self._coordinator_call(self._jobs.CancelJob, request, "CancelJob")

    def watch(self, job_id: str, *, timeout: Optional[float] = None,
              reconnect_seconds: float = 120.0) -> Iterator[JobEvent]:
        """The job's events: its current state first, then every change of state or progress;
        the iterator ends after the event in which the job ended. A broken stream (the
        coordinator restarting) is reconnected for up to ``reconnect_seconds``, as
        ``mlcdctl watch`` does; :class:`DeadlineExceededError` after ``timeout`` seconds in
        all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lost_since: Optional[float] = None
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise self._watch_timeout(job_id, timeout)
            stream = self._jobs.WatchJob(coordinator_pb2.WatchJobRequest(id=job_id),
                                         timeout=remaining, metadata=self._metadata)
            got_any, failure = False, None
            try:
                for event in stream:
                    got_any, lost_since = True, None
                    yield event
                    if is_terminal(event.job.state):
                        return
            except grpc.RpcError as e:
                failure = e
            finally:
                stream.cancel()
            if failure is not None and failure.code() == grpc.StatusCode.DEADLINE_EXCEEDED \
                    and deadline is not None:
                raise self._watch_timeout(job_id, timeout)
            if failure is not None and failure.code() != grpc.StatusCode.UNAVAILABLE:
                raise error_from_rpc(failure, "WatchJob") from None
            if failure is None and not got_any:
                raise UnavailableError(grpc.StatusCode.UNAVAILABLE,
                                       "the watch stream ended before the job did", "WatchJob")
            now = time.monotonic()
            lost_since = now if lost_since is None else lost_since
            if now - lost_since > reconnect_seconds:
                detail = failure.details() if failure is not None else "stream ended"
                raise UnavailableError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"lost the coordinator at {self.settings.coordinator} for more than "
                    f"{reconnect_seconds:.0f} s: {detail}", "WatchJob")
            time.sleep(RECONNECT_PAUSE_SECONDS)

    def wait(self, job_id: str, *, timeout: Optional[float] = None, check: bool = False,
             on_event: Optional[Callable[[JobEvent], None]] = None) -> Job:
        """Follows the job (:meth:`watch`) until it ends and returns it as it ended.
        ``check``: :class:`JobNotSucceededError` unless it SUCCEEDED. ``on_event`` sees every
        event (progress logging)."""
        final = None
        for event in self.watch(job_id, timeout=timeout):
            if on_event is not None:
                on_event(event)
            final = event.job
        assert final is not None  # watch returns only after a terminal event
        if check and final.state != JobState.JOB_STATE_SUCCEEDED:
            raise JobNotSucceededError(final)
        return final

    # --- label sets ---

    def list_label_sets(self, prefix: str = "") -> Iterator[labelstore_pb2.LabelSetInfo]:
        """Every label set whose name starts with ``prefix`` (a job's are ``job/<id>/``)."""
        request = labelstore_pb2.ListLabelSetsRequest(name_prefix=prefix,
                                                      page_size=labelsets.LIST_PAGE_SIZE)
        while True:
            page = self._labelstore_call("ListLabelSets", request)
            yield from page.label_sets
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def describe_label_set(self, name: str) -> labelstore_pb2.LabelSetInfo:
        """The set's shape (k, l), state and size."""
        request = labelstore_pb2.DescribeLabelSetRequest(name=name)
        return self._labelstore_call("DescribeLabelSet", request)

    def get_labels(self, name: str, sample_ids: Sequence[int], *,
                   with_scores: bool = False) -> labelsets.LabelRows:
        """The labels (and scores) of ``sample_ids`` in set ``name``, in request order; large
        reads are split to the label store's limits."""
        ids = list(sample_ids)
        if not ids:
            return labelsets.LabelRows(self.describe_label_set(name).labels_per_sample)
        if len(ids) * labelsets.MAX_LABELS_PER_SAMPLE <= labelsets.MAX_VALUES_PER_MESSAGE \
                and len(ids) <= labelsets.MAX_IDS_PER_READ:
            size = len(ids)
        else:
            size = labelsets.read_chunk_size(self.describe_label_set(name).labels_per_sample)
        rows: Optional[labelsets.LabelRows] = None
        for chunk in labelsets.chunks(ids, size):
            request = labelstore_pb2.GetLabelsRequest(name=name, sample_ids=chunk,
                                                      with_scores=with_scores)
            response = self._labelstore_call("GetLabels", request)
            if rows is None:
                rows = labelsets.LabelRows(response.labels_per_sample)
            rows.extend(response, with_scores)
        assert rows is not None
        return rows

    def import_labels(self, name: str, k: int, *, jsonl: Optional[str] = None,
                      index: Optional[str] = None,
                      rows: Optional[Sequence[Sequence[int]]] = None,
                      metadata: Optional[Dict[str, str]] = None) -> labelstore_pb2.LabelSetInfo:
        """Makes the SEALED set ``name`` from annotations, as ``mlcdctl labels import``: by key
        (``jsonl``: a JSON lines file of ``{"key", "labels"}`` and ``index``: the dataset index
        directory that numbers the samples) or by id (``rows``: row i = sample i's labels,
        negative = padding). The whole input is checked first (:mod:`mlcd.label_import`); a
        failure after the set was made deletes it again, so a failed import leaves no set."""
        if (jsonl is None) == (rows is None):
            raise ConfigError(grpc.StatusCode.INVALID_ARGUMENT,
                              "give the labels either by key (jsonl= with index=) or by id (rows=)")
        if jsonl is not None:
            if index is None:
                raise ConfigError(grpc.StatusCode.INVALID_ARGUMENT,
                                  "jsonl= matches keys through a dataset index: pass index=")
            with open(jsonl, encoding="utf-8") as f:
                plan = label_import.plan_from_jsonl(f, label_import.read_index_keys(index), k,
                                                    source=jsonl)
        else:
            plan = label_import.plan_from_rows(rows, k)
        create = labelstore_pb2.CreateLabelSetRequest(
            name=name, num_classes=k, labels_per_sample=plan.labels_per_sample,
            metadata=dict(metadata or {}, source="import"))
        self._labelstore_call("CreateLabelSet", create)
        try:
            size = max(1, min(labelsets.MAX_IDS_PER_READ,
                              labelsets.MAX_VALUES_PER_MESSAGE // plan.labels_per_sample))
            l = plan.labels_per_sample

            def requests() -> Iterator[labelstore_pb2.WriteLabelsRequest]:
                for start in range(0, len(plan.ids), size):
                    yield labelstore_pb2.WriteLabelsRequest(
                        name=name, sample_ids=plan.ids[start:start + size],
                        labels=plan.labels[start * l:(start + size) * l])

            self._labelstore_call("WriteLabels", requests())
            return self._labelstore_call("SealLabelSet",
                                         labelstore_pb2.SealLabelSetRequest(name=name))
        except Exception:
            try:  # the original error is what the caller needs; a failed delete adds nothing
                self._labelstore_call("DeleteLabelSet",
                                      labelstore_pb2.DeleteLabelSetRequest(name=name,
                                                                           allow_missing=True))
            except MlcdError:
                pass
            raise

    # --- calls ---

    def _coordinator_call(self, method: Callable, request: Any, name: str) -> Any:
        return self._call(method, request, name, "coordinator", self.settings.coordinator,
                          "MLCD_COORDINATOR")

    def _labelstore_call(self, name: str, request: Any) -> Any:
        if self._labels is None:
            self._labelstore_channel = make_channel(self.settings.labelstore, self.settings)
            self._labels = labelstore_pb2_grpc.LabelStoreStub(self._labelstore_channel)
        return self._call(getattr(self._labels, name), request, name, "label store",
                          self.settings.labelstore, "MLCD_LABELSTORE")

    def _call(self, method: Callable, request: Any, name: str, service: str, address: str,
              variable: str) -> Any:
        try:
            return method(request, timeout=self.settings.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            error = error_from_rpc(e, name)
        if isinstance(error, UnavailableError):
            error = UnavailableError(
                error.code, f"cannot reach the {service} at {address} ({error.message}); is it "
                f"running? (`mlcdctl local up`, or set {variable})", name)
        raise error

    def _watch_timeout(self, job_id: str, timeout: Optional[float]) -> MlcdError:
        return DeadlineExceededError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"job {job_id} did not end within {timeout} s", "WatchJob")
