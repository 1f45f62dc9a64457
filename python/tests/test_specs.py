"""What ``Client.submit`` sends for each kind of job it accepts, and what it refuses
(python/src/mlcd/specs.py). The coordinator checks the spec itself; these check the request."""
import math
import os
import pathlib

import pytest
import yaml

import mlcd
from mlcd.specs import submit_request
from mlcd.v1 import coordinator_pb2, job_pb2

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY_YAML = REPO / "examples" / "tiny-test-job.yaml"

DOCUMENT = {"apiVersion": "mlcd/v1", "kind": "TrainingJob",
            "metadata": {"name": "tiny", "labels": {"team": "vision"}},
            "spec": {"clustering": {"k": 16, "l": 4, "features": {"kind": "pixels"}},
                     "loss": {"sample_ratio": 0.5}, "dataset": {"augment": False},
                     "training": {"world_size": 2, "batch_size": 64}}}


def test_a_yaml_path_is_sent_as_its_text():
    text = TINY_YAML.read_text(encoding="utf-8")
    for job in (str(TINY_YAML), TINY_YAML):  # str and os.PathLike
        request = submit_request(job, "run-1")
        assert isinstance(request, coordinator_pb2.SubmitJobRequest)
        assert request.spec_yaml == text and request.request_id == "run-1"
        assert not request.HasField("spec") and not request.HasField("metadata")
        assert not request.dry_run


def test_a_yaml_path_keeps_non_ascii_text(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("metadata:\n  name: größe\n", encoding="utf-8")
    assert submit_request(os.fspath(path)).spec_yaml == "metadata:\n  name: größe\n"


def test_a_dict_is_sent_as_yaml_text_that_reads_back_the_same():
    request = submit_request(DOCUMENT, dry_run=True)
    assert request.dry_run and request.request_id == ""
    assert request.spec_yaml.endswith("}\n")
    assert yaml.safe_load(request.spec_yaml) == DOCUMENT
    # One key per line, so the coordinator's line numbers point at a field.
    assert '\n      "k": 16,\n' in request.spec_yaml


def test_a_spec_message_is_copied_with_its_metadata():
    spec = job_pb2.JobSpec()
    spec.clustering.k = 1000
    spec.training.world_size = 4
    metadata = job_pb2.JobMetadata(name="k1000", labels={"team": "vision"})
    request = submit_request(spec, "run-3", False, metadata)
    assert request.HasField("spec") and request.spec == spec and request.metadata == metadata and request.spec_yaml == ""
    spec.clustering.k = 5  # a copy: the caller's message may change afterwards
    assert request.spec.clustering.k == 1000
    assert not submit_request(spec).HasField("metadata")


def test_none_request_id_is_empty():
    assert submit_request(DOCUMENT, None).request_id == ""


@pytest.mark.parametrize("job", [DOCUMENT, str(TINY_YAML)])
def test_metadata_goes_only_with_a_spec_message(job):
    with pytest.raises(TypeError, match="metadata= goes with a JobSpec message"):
        submit_request(job, metadata=job_pb2.JobMetadata(name="x"))


@pytest.mark.parametrize("job,name", [
    (b"apiVersion: mlcd/v1\n", "bytes"), (42, "int"), (None, "NoneType"),
    ([("spec", {})], "list"), (job_pb2.JobMetadata(name="x"), "JobMetadata"),
    (coordinator_pb2.SubmitJobRequest(), "SubmitJobRequest")])
def test_anything_else_is_a_type_error_naming_it(job, name):
    with pytest.raises(TypeError, match=f"not {name}$"):
        submit_request(job)


def test_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        submit_request(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_dict_with_a_non_finite_number_is_refused(value):
    with pytest.raises(ValueError):
        submit_request({"spec": {"optimizer": {"lr": value}}})


def test_a_dict_with_a_value_json_cannot_write_is_refused():
    with pytest.raises(TypeError):
        submit_request({"spec": {"dataset": {"paths": {"a", "b"}}}})


def test_mlcd_exports_the_generated_messages():
    assert mlcd.job_pb2 is job_pb2 and mlcd.coordinator_pb2 is coordinator_pb2
    assert mlcd.labelstore_pb2.GetLabelsRequest.DESCRIPTOR.full_name == "mlcd.v1.GetLabelsRequest"


def test_a_given_label_set_travels_in_the_spec_and_in_the_yaml():
    """clustering.label_set (train on a sealed label set instead of clustering): the
    coordinator fills k and l from the set, so a request may leave them out."""
    spec = job_pb2.JobSpec()
    spec.clustering.label_set = "team/tags"
    request = submit_request(spec)
    assert request.spec.clustering.label_set == "team/tags"
    assert request.spec.clustering.k == 0 and request.spec.clustering.l == 0

    document = {"apiVersion": "mlcd/v1", "kind": "TrainingJob", "metadata": {"name": "given"},
                "spec": {"clustering": {"label_set": "team/tags"}}}
    sent = yaml.safe_load(submit_request(document).spec_yaml)
    assert sent["spec"]["clustering"] == {"label_set": "team/tags"}
