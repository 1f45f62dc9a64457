"""What ``Client.submit`` accepts as a job, turned into a ``SubmitJobRequest``.

* a path (``str`` or ``os.PathLike``) to a YAML job file, as ``mlcdctl submit`` takes;
* a ``dict`` of the same document (``apiVersion``, ``kind``, ``metadata``, ``spec``; field
  names in snake_case), sent as YAML text (JSON, indented, which is YAML) so the coordinator
  validates it exactly as a file and names problems by field path and line;
* a ``mlcd.v1.JobSpec`` message, with an optional ``mlcd.v1.JobMetadata``.

The coordinator applies the defaults and checks everything; nothing is checked twice here.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Union

from .v1 import coordinator_pb2, job_pb2

__all__ = ["JobInput", "submit_request"]

JobInput = Union[str, "os.PathLike[str]", Mapping[str, Any], job_pb2.JobSpec]


def submit_request(job: JobInput, request_id: str = "", dry_run: bool = False,
                   metadata: Optional[job_pb2.JobMetadata] = None
                   ) -> coordinator_pb2.SubmitJobRequest:
    """The request for ``job``. ``TypeError`` for anything else, or for ``metadata`` with a
    YAML path or dict (which carry their own ``metadata:`` section)."""
    request = coordinator_pb2.SubmitJobRequest(request_id=request_id or "", dry_run=dry_run)
    if isinstance(job, job_pb2.JobSpec):
        request.spec.CopyFrom(job)
        if metadata is not None:
            request.metadata.CopyFrom(metadata)
        return request
    if metadata is not None:
        raise TypeError("metadata= goes with a JobSpec message; a YAML file or dict carries its "
                        "own 'metadata:' section")
    if isinstance(job, Mapping):
        request.spec_yaml = json.dumps(job, indent=2, allow_nan=False) + "\n"
    elif isinstance(job, (str, os.PathLike)):
        with open(job, encoding="utf-8") as f:
            request.spec_yaml = f.read()
    else:
        raise TypeError(f"submit takes a YAML path, a dict or a mlcd.v1.JobSpec, not "
                        f"{type(job).__name__}")
    return request
