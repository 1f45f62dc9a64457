#!/usr/bin/env python3
"""Float64 NumPy oracle of the multi-label protocol (docs/evaluation.md, "Multi-label
protocol"), written from the definitions, for tests/eval/multilabel_test.cc.

  multilabel_oracle.py DIR

For every DIR/<case>.logits.npy (float64 [n, L]) with DIR/<case>.targets.npy (uint8 [n, L])
it writes DIR/<case>.oracle.json with the six metrics. For DIR/probe.json ({"lambda": λ'})
with probe.train_x.npy, probe.train_y.npy, probe.test_x.npy it fits each label's binary
L2-regularised logistic regression by Newton's method (penalty λ'/2 on the binary weights
after the two-class convention, bias free, rows L2-normalised) and writes
DIR/probe.oracle_logits.npy (float64 [n_test, L]).
"""
import glob
import json
import os
import sys

import numpy as np


def average_precision(scores, y):
    """Mean over positives of the precision among all samples scoring at least as high."""
    pos = np.flatnonzero(y)
    if len(pos) == 0:
        return None
    precisions = [np.sum(y[scores >= scores[i]]) / np.sum(scores >= scores[i]) for i in pos]
    return float(np.mean(precisions))


def metrics(logits, targets):
    n, L = targets.shape
    y = targets.astype(bool)
    p = logits > 0.0  # sigma(s) > 0.5
    aps, f1s = [], []
    for j in range(L):
        if not y[:, j].any():
            continue
        aps.append(average_precision(logits[:, j], y[:, j]))
        tp = np.sum(y[:, j] & p[:, j])
        f1s.append(2 * tp / (np.sum(y[:, j]) + np.sum(p[:, j])))
    tp = np.sum(y & p)
    micro_den = np.sum(y) + np.sum(p)
    example = []
    top_hits = []
    for i in range(n):
        t, q = np.sum(y[i]), np.sum(p[i])
        example.append(1.0 if t + q == 0 else 2 * np.sum(y[i] & p[i]) / (t + q))
        if t > 0:
            top = int(np.argmax(logits[i]))  # first maximum: the lowest label id
            top_hits.append(float(y[i, top]))
    return {
        "mean_average_precision": float(np.mean(aps)) if aps else 0.0,
        "hamming_accuracy": float(np.mean(y == p)),
        "example_f1": float(np.mean(example)),
        "macro_f1": float(np.mean(f1s)) if f1s else 0.0,
        "micro_f1": float(2 * tp / micro_den) if micro_den else 0.0,
        "precision_at_1": float(np.mean(top_hits)) if top_hits else 0.0,
        "labels_scored": len(aps),
    }


def newton_binary(x, y, lam, iterations=100):
    """argmin sum_i BCE(sigma(w.x_i + b), y_i) + lam/2 |w|^2 by Newton's method."""
    n, d = x.shape
    a = np.hstack([x, np.ones((n, 1))])
    theta = np.zeros(d + 1)
    reg = np.full(d + 1, lam)
    reg[d] = 0.0
    for _ in range(iterations):
        z = a @ theta
        prob = 1.0 / (1.0 + np.exp(-z))
        grad = a.T @ (prob - y) + reg * theta
        hess = (a * (prob * (1 - prob))[:, None]).T @ a + np.diag(reg)
        # A label seen in one class only has no finite bias; the ridge keeps the step finite.
        step = np.linalg.solve(hess + 1e-10 * np.eye(d + 1), grad)
        theta -= step
        if np.max(np.abs(step)) < 1e-12:
            break
    return theta


def probe(directory):
    lam2 = json.load(open(os.path.join(directory, "probe.json")))["lambda"]
    normalise = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-300)
    x = normalise(np.load(os.path.join(directory, "probe.train_x.npy")).astype(np.float64))
    t = normalise(np.load(os.path.join(directory, "probe.test_x.npy")).astype(np.float64))
    y = np.load(os.path.join(directory, "probe.train_y.npy")).astype(np.float64)
    out = np.zeros((t.shape[0], y.shape[1]))
    for j in range(y.shape[1]):
        theta = newton_binary(x, y[:, j], lam2 / 2.0)
        out[:, j] = t @ theta[:-1] + theta[-1]
    np.save(os.path.join(directory, "probe.oracle_logits.npy"), out)


def main():
    directory = sys.argv[1]
    for path in sorted(glob.glob(os.path.join(directory, "*.logits.npy"))):
        case = path[: -len(".logits.npy")]
        result = metrics(np.load(path).astype(np.float64), np.load(case + ".targets.npy"))
        with open(case + ".oracle.json", "w") as f:
            json.dump(result, f)
    if os.path.exists(os.path.join(directory, "probe.json")):
        probe(directory)


if __name__ == "__main__":
    main()
