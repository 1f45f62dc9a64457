#!/usr/bin/env python3
"""`mlcd-worker loss-check --variant infonce|mulsupcon|supcon-all|supcon-any` against a float64
NumPy oracle written here from the definitions (docs/loss.md, "Contrastive losses"), its
gradient by central differences of its own loss, at world sizes 1 and 3 (real processes over
Gloo; 3 ranks get unequal numbers of images). The batch has padded labels, a repeated label,
rows without labels (no positive in mulsupcon with one view) and a label only one image carries.

  contrastive_oracle_test.py MLCD_WORKER
Exits 1 naming the first difference.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

VARIANTS = ["infonce", "mulsupcon", "supcon-all", "supcon-any"]
LABELS = np.array([[1, 2, -1], [1, 2, -1], [2, -1, -1], [2, 2, -1], [-1, -1, -1], [-1, -1, -1],
                   [1, 3, 9], [1, 3, 9], [3, -1, -1], [3, -1, -1], [2, 1, -1], [2, 1, -1],
                   [4, -1, -1], [4, -1, -1]], dtype=np.int64)


def oracle_loss(variant, x, labels, tau, views):
    z = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    n = len(z)
    s = z @ z.T / tau
    sets = [set(int(v) for v in row if v >= 0) for row in labels]
    total, anchors = 0.0, 0
    for i in range(n):
        others = [a for a in range(n) if a != i]
        log_den = np.log(np.sum(np.exp(s[i, others])))

        def mean_neg_log_p(positive):
            members = [a for a in others if positive(a) or (views == 2 and a == i ^ 1)]
            if not members:
                return None
            return float(np.mean([log_den - s[i, a] for a in members]))

        if variant == "infonce":
            li = mean_neg_log_p(lambda a: False)
        elif variant == "supcon-all":
            li = mean_neg_log_p(lambda a: bool(sets[i]) and sets[a] == sets[i])
        elif variant == "supcon-any":
            li = mean_neg_log_p(lambda a: bool(sets[i] & sets[a]))
        else:
            per_label = [mean_neg_log_p(lambda a, j=j: j in sets[a]) for j in sorted(sets[i])]
            per_label = [v for v in per_label if v is not None]
            li = float(np.mean(per_label)) if per_label else None
        if li is not None:
            total += li
            anchors += 1
    return total / anchors if anchors else 0.0


def oracle_gradient(variant, x, labels, tau, views, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        g[idx] = (oracle_loss(variant, plus, labels, tau, views) -
                  oracle_loss(variant, minus, labels, tau, views)) / (2 * h)
    return g


def fail(message):
    print("contrastive_oracle_test: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    worker = sys.argv[1]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((len(LABELS), 5)).astype(np.float32)
    tau = 0.25
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "E.npy"), x)
        np.save(os.path.join(d, "Y.npy"), LABELS)
        checked = 0
        for views in (2, 1):
            for variant in VARIANTS:
                if variant == "infonce" and views == 1:
                    continue
                x64 = x.astype(np.float64)
                loss = oracle_loss(variant, x64, LABELS, tau, views)
                grad = oracle_gradient(variant, x64, LABELS, tau, views)
                for world in (1, 3):
                    out = os.path.join(d, f"{variant}-{views}-{world}")
                    cmd = [worker, "loss-check", "--variant", variant, "--embeddings",
                           os.path.join(d, "E.npy"), "--temperature", str(tau), "--views",
                           str(views), "--world-size", str(world), "--out", out]
                    if variant != "infonce":
                        cmd += ["--labels", os.path.join(d, "Y.npy")]
                    run = subprocess.run(cmd, capture_output=True, text=True)
                    what = f"{variant}, views {views}, world size {world}"
                    if run.returncode != 0:
                        fail(f"{what}: exit {run.returncode}: {run.stderr[-2000:]}")
                    ours = float(np.load(os.path.join(out, "loss.npy")))
                    ours_grad = np.load(os.path.join(out, "grad_embeddings.npy"))
                    if abs(ours - loss) > 1e-5 * max(1.0, abs(loss)):
                        fail(f"{what}: loss {ours}, oracle {loss}")
                    scale = np.abs(grad).max()
                    diff = np.abs(ours_grad - grad).max()
                    if not scale > 1e-3 or diff > 1e-4 * scale:
                        fail(f"{what}: gradient differs by {diff} (largest {scale})")
                    print(f"{what}: loss {ours:.6f} (oracle {loss:.6f}), gradient max diff "
                          f"{diff:.2e} of {scale:.2e}")
                    checked += 1
        # The refusals name what was wrong.
        bad = subprocess.run([worker, "loss-check", "--variant", "mulsupcon", "--embeddings",
                              os.path.join(d, "E.npy"), "--out", os.path.join(d, "bad")],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "--labels is required" not in bad.stderr:
            fail(f"missing --labels: exit {bad.returncode}, {bad.stderr}")
        bad = subprocess.run([worker, "loss-check", "--variant", "infonce", "--embeddings",
                              os.path.join(d, "E.npy"), "--temperature", "0", "--out",
                              os.path.join(d, "bad")], capture_output=True, text=True)
        if bad.returncode != 2 or "temperature" not in bad.stderr:
            fail(f"temperature 0: exit {bad.returncode}, {bad.stderr}")
        bad = subprocess.run([worker, "loss-check", "--variant", "simclr", "--embeddings",
                              os.path.join(d, "E.npy"), "--out", os.path.join(d, "bad")],
                             capture_output=True, text=True)
        if bad.returncode != 2 or "infonce" not in bad.stderr or "mlcd" not in bad.stderr:
            fail(f"unknown variant: exit {bad.returncode}, {bad.stderr}")
    print(f"contrastive_oracle_test: {checked} runs agree with the oracle")


if __name__ == "__main__":
    main()
