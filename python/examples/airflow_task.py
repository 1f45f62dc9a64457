"""An MLCD training job driven from an Airflow-style task function.

In a DAG (Airflow 2's TaskFlow API; any orchestrator whose Python step gets a run id works
the same way)::

    from airflow.decorators import task
    from airflow_task import train_encoder

    @task(retries=3)
    def train(**context):
        return train_encoder("/jobs/encoder.yaml", **context)   # dict -> XCom

The task's worker gets the cluster's address, TLS files and token from the ``MLCD_*``
variables (``mlcd.Client()``; on Airflow, set them in the worker's environment and keep
the token file a secret). The request id is made from the DAG, the task and the run, not
the try: a retried try (a worker lost, a scheduler restart) gets the job that the first try
submitted, and follows it from wherever it is, instead of starting a second one. The task
fails (raises) when the job ends FAILED or CANCELLED, with the job's own message.

Run on its own: ``python airflow_task.py JOB.yaml RUN_ID`` (after ``. .mlcd/local/env``).
"""
from __future__ import annotations

import hashlib
import sys
import time
from typing import Any, Callable, Dict, Optional

import mlcd

# The coordinator's limit on a request id (coordinator/input_checks.cc: CheckRequestId).
MAX_REQUEST_ID_CHARS = 200
# Seconds between progress lines in the task's log.
LOG_EVERY_SECONDS = 30.0


def request_id_for(context: Dict[str, Any]) -> str:
    """``airflow/<dag>/<task>/<run>[/<map index>]``: the same for every try of one task
    instance, different for every other. Too long ids are shortened with a digest."""
    ti = context["ti"]
    rid = f"airflow/{ti.dag_id}/{ti.task_id}/{ti.run_id}"
    if getattr(ti, "map_index", -1) >= 0:
        rid += f"/{ti.map_index}"
    if len(rid) > MAX_REQUEST_ID_CHARS:
        rid = rid[:MAX_REQUEST_ID_CHARS - 65] + "/" + hashlib.sha256(rid.encode()).hexdigest()
    return rid


def progress_logger(log: Callable[[str], None]) -> Callable[[mlcd.coordinator_pb2.JobEvent], None]:
    """An on_event callback that logs the state changes and, at most every
    LOG_EVERY_SECONDS, the training progress."""
    last = {"state": None, "at": 0.0}

    def on_event(event: mlcd.coordinator_pb2.JobEvent) -> None:
        job, now = event.job, time.monotonic()
        if job.state != last["state"] or now - last["at"] >= LOG_EVERY_SECONDS:
            p = job.progress
            log(f"job {job.id}: {mlcd.state_name(job.state)} round {p.round + 1}/{max(p.rounds, 1)} "
                f"step {p.total_steps}/{p.job_total_steps} loss {p.loss:.4f} {p.detail}".rstrip())
            last["state"], last["at"] = job.state, now

    return on_event


def train_encoder(spec: Any, *, client: Optional[mlcd.Client] = None,
                  timeout: Optional[float] = None, log: Callable[[str], None] = print,
                  **context: Any) -> Dict[str, Any]:
    """Submits ``spec`` (a YAML path, a dict or a JobSpec) once per task instance, waits for
    the job to end and returns what downstream tasks need (JSON-able, for XCom).

    Raises ``mlcd.JobNotSucceededError`` when the job fails or is cancelled,
    ``mlcd.InvalidArgumentError`` (``.problems``: field paths) when the spec is refused, and
    ``mlcd.MlcdError`` for anything else the cluster refuses."""
    own = client is None
    client = client or mlcd.Client()
    try:
        job = client.submit(spec, request_id=request_id_for(context))
        log(f"job {job.id} ({mlcd.state_name(job.state)}), request id {job.request_id}")
        final = client.wait(job.id, timeout=timeout, check=True, on_event=progress_logger(log))
    finally:
        if own:
            client.close()
    evaluation = final.evaluation
    return {
        "job_id": final.id,
        "state": mlcd.state_name(final.state),
        "checkpoint": final.checkpoint,
        "label_set": final.label_set,
        "steps": final.progress.total_steps,
        "linear_probe_accuracy": evaluation.linear_probe_accuracy,
        "knn_accuracy": evaluation.knn_accuracy,
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: airflow_task.py JOB.yaml RUN_ID")

    class _TaskInstance:  # what Airflow passes as context["ti"]
        dag_id, task_id, run_id, map_index = "manual", "train", sys.argv[2], -1

    print(train_encoder(sys.argv[1], ti=_TaskInstance()))
