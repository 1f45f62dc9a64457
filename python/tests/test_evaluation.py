"""The evaluation tables of python/src/mlcd/evaluation.py on results built here: the
single-label table with baselines, the multi-label metrics of the probe, the model's own
predictions and the baselines, the attribute probes side by side, and empty results."""
import mlcd
from mlcd.v1 import job_pb2


def _metrics(base):
    return job_pb2.MultiLabelMetrics(
        mean_average_precision=base, hamming_accuracy=base + 0.2, example_f1=base - 0.1,
        macro_f1=base - 0.2, micro_f1=base - 0.05, precision_at_1=base + 0.1, threshold=0.5,
        num_labels=10, labels_scored=9)


def _result():
    r = job_pb2.EvaluationResult(linear_probe_accuracy=0.8, linear_probe_lambda=0.1,
                                 knn_accuracy=0.75)
    r.multi_label.CopyFrom(_metrics(0.7))
    r.model_predictions.CopyFrom(_metrics(0.65))
    r.attributes.add(name="shape", num_classes=10, linear_probe_accuracy=0.81)
    r.attributes.add(name="colour", num_classes=10, linear_probe_accuracy=0.99)
    b = r.baselines.add(name="random-init", linear_probe_accuracy=0.5, knn_accuracy=0.4)
    b.multi_label.CopyFrom(_metrics(0.4))
    b.attributes.add(name="shape", num_classes=10, linear_probe_accuracy=0.3)
    b.attributes.add(name="colour", num_classes=10, linear_probe_accuracy=0.6)
    r.baselines.add(name="raw-pixels", linear_probe_accuracy=0.6, knn_accuracy=0.55, cached=True)
    return r


def test_multi_label_rows_name_every_scored_model():
    rows = mlcd.multi_label_rows(_result())
    assert [row["model"] for row in rows] == ["trained", "predictions", "random init"]
    assert rows[0]["mAP"] == 0.7 and rows[1]["P@1"] == 0.75 and rows[2]["Hamming"] == 0.4 + 0.2
    assert list(rows[0]) == ["model", "mAP", "Hamming", "example-F1", "macro-F1", "micro-F1",
                             "P@1"]


def test_attribute_rows_put_the_baselines_beside_the_model():
    rows = mlcd.attribute_rows(_result())
    assert rows == [
        {"attribute": "shape", "classes": 10, "trained": 0.81, "random init": 0.3,
         "raw pixels": None},
        {"attribute": "colour", "classes": 10, "trained": 0.99, "random init": 0.6,
         "raw pixels": None}]


def test_the_table_has_each_part():
    lines = mlcd.evaluation_table(_result()).splitlines()
    assert lines[0].split() == ["model", "linear", "probe", "kNN"]
    assert lines[1].split() == ["trained", "80.00", "%", "75.00", "%"]
    assert lines[3].endswith("(cached)")
    assert lines[4].startswith("multi-label") and "10 labels (9 with test positives)" in lines[4]
    assert "threshold 0.5" in lines[4]
    assert lines[5].split()[:3] == ["trained", "70.00", "%"]
    assert lines[6].split()[0] == "predictions"
    assert lines[7].split()[:4] == ["random", "init", "40.00", "%"]
    assert lines[8].split() == ["attribute", "trained", "random", "init", "raw", "pixels"]
    assert lines[9].split() == ["shape", "81.00", "%", "30.00", "%", "-", "(10", "classes)"]
    assert len(lines) == 11


def test_no_single_label_rows_without_classes():
    r = _result()
    r.linear_probe_accuracy = r.linear_probe_lambda = r.knn_accuracy = 0
    lines = mlcd.evaluation_table(r).splitlines()
    assert lines[0].startswith("multi-label") and len(lines) == 7


def test_an_empty_result_has_no_table():
    assert mlcd.evaluation_table(job_pb2.EvaluationResult()) == ""
    assert mlcd.multi_label_rows(job_pb2.EvaluationResult()) == []
