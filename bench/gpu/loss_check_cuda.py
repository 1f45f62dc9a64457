#!/usr/bin/env python3
"""The classification layer's loss check on the GPU (bench/RESULTS.md, "GPU step").

Makes a batch (embeddings E, centres W, labels Y with padding, negatives N), runs
`mlcd-worker loss-check` on it (our C++ layer, on the host) and computes the same MLCD loss
(paper Eq. 6, arc margin with PartialFC's gradient convention: the positive logit's value
carries the margin, its derivative is taken as for s*c) densely with PyTorch autograd on the
GPU, in float32 and float64. Compares the loss and both gradients; prints and writes JSON.
--layer passes the worker's layer choice on (`mlcd-worker loss-check --layer`); --device cpu
computes the reference on the CPU (the smoke run of bench/gpu/run_checks.sh).

  python3 bench/gpu/loss_check_cuda.py --worker build-torch2/bin/mlcd-worker --out r.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch


def reference(E, W, Y, N, scale, margin, device, dtype):
    E = torch.tensor(E, device=device, dtype=dtype, requires_grad=True)
    W = torch.tensor(W, device=device, dtype=dtype, requires_grad=True)
    Y = torch.tensor(Y, device=device)
    valid = Y[Y >= 0]
    S = torch.unique(torch.cat([torch.tensor(N, device=device), valid]), sorted=True)
    e = torch.nn.functional.normalize(E, dim=1)
    w = torch.nn.functional.normalize(W[S], dim=1)
    c = (e @ w.t()).clamp(-1, 1)
    B, m = c.shape
    pos = torch.zeros(B, m, dtype=torch.bool, device=device)
    rows = torch.arange(B, device=device).unsqueeze(1).expand_as(Y)
    ok = Y >= 0
    pos[rows[ok], torch.searchsorted(S, Y[ok])] = True
    z = scale * c
    with torch.no_grad():
        delta = scale * torch.cos(torch.acos(c) + margin) - scale * c
    z = z + torch.where(pos, delta, torch.zeros_like(delta))
    neg_inf = torch.tensor(float("-inf"), device=device, dtype=dtype)
    zero = torch.zeros(B, 1, device=device, dtype=dtype)
    lp = torch.logsumexp(torch.cat([zero, torch.where(pos, -z, neg_inf)], 1), 1)
    ln = torch.logsumexp(torch.cat([zero, torch.where(pos, neg_inf, z)], 1), 1)
    loss = (lp + ln).mean()
    loss.backward()
    return loss.item(), E.grad.double().cpu().numpy(), W.grad.double().cpu().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--classes", type=int, default=20000)
    ap.add_argument("--labels", type=int, default=8)
    ap.add_argument("--negatives", type=int, default=2000)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--device", default="cuda", help="where the reference runs: cuda or cpu")
    ap.add_argument("--layer", help="the worker's layer (loss-check --layer); default its own")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("loss_check_cuda: no CUDA device (use --device cpu)")
    rng = np.random.default_rng(0)
    E = rng.standard_normal((a.batch, a.dim)).astype(np.float32)
    W = (0.01 * rng.standard_normal((a.classes, a.dim))).astype(np.float32)
    Y = rng.integers(0, a.classes, (a.batch, a.labels)).astype(np.int64)
    Y[rng.random(Y.shape) < 0.2] = -1  # padding
    # Make the positives learnable: each sample's embedding leans to its first label.
    E += 30 * W[np.maximum(Y[:, 0], 0)]
    N = rng.integers(0, a.classes, a.negatives).astype(np.int64)
    scale, margin = 32.0, 0.3
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for name, arr in (("E", E), ("W", W), ("Y", Y), ("N", N)):
            paths[name] = os.path.join(d, name + ".npy")
            np.save(paths[name], arr)
        out = os.path.join(d, "out")
        os.mkdir(out)
        subprocess.run([a.worker, "loss-check", "--embeddings", paths["E"], "--weights", paths["W"],
                        "--labels", paths["Y"], "--negatives", paths["N"], "--variant", "mlcd",
                        "--scale", str(scale), "--margin", str(margin), "--margin-type", "arc",
                        "--world-size", str(a.world_size), "--out", out] +
                       (["--layer", a.layer] if a.layer else []), check=True)
        ours = {k: np.load(os.path.join(out, k + ".npy")).astype(np.float64)
                for k in ("loss", "grad_embeddings", "grad_weights")}
    device_name = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    result = {"device": device_name, "torch": torch.__version__, "layer": a.layer or "default",
              "batch": a.batch, "dim": a.dim, "classes": a.classes, "world_size": a.world_size,
              "ours_loss": float(ours["loss"])}
    for name, dtype in (("reference_float32", torch.float32), ("reference_float64", torch.float64)):
        loss, gE, gW = reference(E, W, Y, N, scale, margin, a.device, dtype)
        result[name] = {
            "loss": loss,
            "loss_abs_diff": abs(loss - float(ours["loss"])),
            "grad_embeddings_max_abs_diff": float(np.abs(gE - ours["grad_embeddings"]).max()),
            "grad_embeddings_max_abs": float(np.abs(gE).max()),
            "grad_weights_max_abs_diff": float(np.abs(gW - ours["grad_weights"]).max()),
            "grad_weights_max_abs": float(np.abs(gW).max()),
        }
    f64 = result["reference_float64"]
    result["pass"] = bool(f64["loss_abs_diff"] <= 1e-4 * max(1.0, abs(f64["loss"])) and
                          f64["grad_embeddings_max_abs_diff"] <= 1e-4 * f64["grad_embeddings_max_abs"] + 1e-7 and
                          f64["grad_weights_max_abs_diff"] <= 1e-4 * f64["grad_weights_max_abs"] + 1e-7)
    print(json.dumps(result, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
    sys.exit(0 if result["pass"] else 1)


if __name__ == "__main__":
    main()
