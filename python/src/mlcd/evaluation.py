"""The evaluation of a job (``Job.evaluation``, a ``mlcd.v1.EvaluationResult``) as tables, the
way ``mlcdctl get`` prints it (docs/evaluation.md):

    job = client.get(job_id)
    print(mlcd.evaluation_table(job.evaluation))
    rows = mlcd.multi_label_rows(job.evaluation)   # [{"model": "trained", "mAP": 0.71, ...}]

``evaluation_table`` gives the single-label probe and kNN beside the baselines, then the
multi-label metrics (the one-vs-rest probe, the model's own predictions where it has a
multi-label head, the baselines) and the per-attribute probes, each part only when the result
holds it. The row functions give the same numbers as dicts, for notebooks and dataframes.
"""
from __future__ import annotations

from typing import Dict, List

from .v1 import job_pb2

__all__ = ["evaluation_table", "multi_label_rows", "attribute_rows", "MULTI_LABEL_METRICS"]

# (column, field of MultiLabelMetrics), in the MulSupCon slides' order.
MULTI_LABEL_METRICS = (("mAP", "mean_average_precision"), ("Hamming", "hamming_accuracy"),
                       ("example-F1", "example_f1"), ("macro-F1", "macro_f1"),
                       ("micro-F1", "micro_f1"), ("P@1", "precision_at_1"))
_DISPLAY = {"random-init": "random init", "raw-pixels": "raw pixels"}


def _display(name: str) -> str:
    return _DISPLAY.get(name, name)


def multi_label_rows(result: job_pb2.EvaluationResult) -> List[Dict[str, object]]:
    """One dict per scored model ("trained", "predictions" for the model's own head, then each
    baseline): ``model`` and the six metrics as fractions. Empty without label sets."""
    sources = []
    if result.HasField("multi_label"):
        sources.append(("trained", result.multi_label))
    if result.HasField("model_predictions"):
        sources.append(("predictions", result.model_predictions))
    sources += [(_display(b.name), b.multi_label) for b in result.baselines
                if b.HasField("multi_label")]
    return [dict([("model", name)] + [(col, getattr(m, field)) for col, field in
                                      MULTI_LABEL_METRICS]) for name, m in sources]


def attribute_rows(result: job_pb2.EvaluationResult) -> List[Dict[str, object]]:
    """One dict per attribute: ``attribute``, ``classes``, ``trained`` and each baseline's
    probe accuracy (``None`` where a baseline did not score it)."""
    rows = []
    for i, a in enumerate(result.attributes):
        row = {"attribute": a.name, "classes": a.num_classes, "trained": a.linear_probe_accuracy}
        for b in result.baselines:
            same = i < len(b.attributes) and b.attributes[i].name == a.name
            row[_display(b.name)] = b.attributes[i].linear_probe_accuracy if same else None
        rows.append(row)
    return rows


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def evaluation_table(result: job_pb2.EvaluationResult) -> str:
    """The whole evaluation as text, one line per model or attribute."""
    lines = []
    # Single-label figures exist when a probe ran (it always picks lambda > 0) or kNN did: not
    # for a dataset with annotations and no classes.
    if result.linear_probe_lambda > 0 or result.knn_accuracy > 0:
        lines.append(f"{'model':<14}{'linear probe':>14}{'kNN':>11}")
        lines.append(f"{'trained':<14}{_percent(result.linear_probe_accuracy):>14}"
                     f"{_percent(result.knn_accuracy):>11}")
        for b in result.baselines:
            lines.append(f"{_display(b.name):<14}{_percent(b.linear_probe_accuracy):>14}"
                         f"{_percent(b.knn_accuracy):>11}" + ("   (cached)" if b.cached else ""))
    rows = multi_label_rows(result)
    if rows:
        m = result.multi_label if result.HasField("multi_label") else result.model_predictions
        lines.append(f"{'multi-label':<14}" + "".join(f"{c:>12}" for c, _ in MULTI_LABEL_METRICS)
                     + f"   {m.num_labels} labels ({m.labels_scored} with test positives), "
                       f"threshold {m.threshold:g}")
        for row in rows:
            lines.append(f"{row['model']:<14}" +
                         "".join(f"{_percent(row[c]):>12}" for c, _ in MULTI_LABEL_METRICS))
    attributes = attribute_rows(result)
    if attributes:
        columns = ["trained"] + [_display(b.name) for b in result.baselines]
        lines.append(f"{'attribute':<14}" + "".join(f"{c:>14}" for c in columns))
        for row in attributes:
            lines.append(f"{row['attribute']:<14}" +
                         "".join(f"{_percent(row[c]):>14}" for c in columns) +
                         f"   ({row['classes']} classes)")
    return "\n".join(lines) + ("\n" if lines else "")
