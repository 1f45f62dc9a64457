#!/usr/bin/env python3
"""Issue 28's GPU figures for the gang clustering engine, on one GPU, in one run.

  python3 bench/gpu/cluster_gang_gpu.py --worker BIN/mlcd-worker --out DIR [--small]

1. k-means of 1M x 256 rows into 20 000 centres, 25 iterations (`mlcd-worker cluster-gang
   --device cuda`, fp32 and --bf16), time from its stats.json, beside the GEMM floor measured
   in the same run: 25 x the time of one torch.mm of the training sample (1M x 256) against
   the centroids (256 x 20 000), fp32 (TF32 off, as ATen's default) and bf16.
   Target: <= 5 s for 25 iterations on one H100.
2. Top-8 assignment against 100 000 centres of d = 512: rows/s of the assignment pass
   (the command's "assign_seconds"), on --assign-rows rows (default 2M; the issue's 10M at
   the same rate takes 5x as long; --assign-rows 10000000 runs the issue's size), after one
   k-means iteration, beside torch.mm + torch.topk alone on the same chunks (the floor).
Writes DIR/cluster_gang_gpu.json and prints it. --small runs tiny sizes (checks the script
on a CPU: --device cpu).
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np


def write_features(path, n, d, centres, seed, device):
    """n rows around `centres` random centres, made on `device` (torch) block by block."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    c = torch.randn(centres, d, device=device, generator=g)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    step = 1 << 20
    for b in range(0, n, step):
        e = min(n, b + step)
        idx = torch.randint(0, centres, (e - b,), device=device, generator=g)
        block = c[idx] + 0.3 * torch.randn(e - b, d, device=device, generator=g)
        out[b:e] = block.cpu().numpy()
    out.flush()
    del out


def run_gang(worker, features, k, niter, l, device, bf16, out_dir):
    args = [worker, "cluster-gang", "--features", features, "--k", str(k), "--niter", str(niter),
            "--l", str(l), "--out", out_dir, "--device", device, "--workspace-mb", "4096",
            "--threads", str(os.cpu_count() or 1)]
    if bf16:
        args.append("--bf16")
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit("cluster-gang failed (%d): %s" % (p.returncode, p.stderr[-3000:]))
    printed = json.loads(p.stdout.strip().splitlines()[-1])
    with open(os.path.join(out_dir, "stats.json")) as f:
        stats = json.load(f)
    its = stats["iterations"]
    return {"wall_s": wall, "kmeans_s": its[-1]["seconds"] if its else 0.0,
            "per_iteration_s": [i["seconds"] for i in its], "assign_s": printed["assign_seconds"],
            "rows": printed["rows"], "k": k, "bf16": bf16,
            "splits": [i["splits"] for i in its]}


def gemm_floor(n, d, k, device, dtype, repeats=3):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(n, d, device=device, dtype=dtype)
    c = torch.randn(k, d, device=device, dtype=dtype)
    chunk = max(1, (4096 << 20) // (k * 4))  # the engine's 4 GiB score workspace
    best = float("inf")
    for _ in range(repeats):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.time()
        for b in range(0, n, chunk):
            s = x[b:b + chunk] @ c.T
            s.argmax(dim=1)
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, time.time() - t0)
    return best


def topk_floor(n, d, k, l, device, repeats=2):
    """Seconds of torch.mm + torch.topk(l) in bf16 over n rows in the engine's 4 GiB chunks."""
    import torch
    x = torch.randn(n, d, device=device, dtype=torch.bfloat16)
    c = torch.randn(k, d, device=device, dtype=torch.bfloat16)
    chunk = max(1, (4096 << 20) // (k * 4))
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.time()
        for b in range(0, n, chunk):
            torch.topk(x[b:b + chunk] @ c.T, l, dim=1)
        torch.cuda.synchronize()
        best = min(best, time.time() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--assign-rows", type=int, default=2_000_000)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import torch
    dev = a.device
    km_n, km_d, km_k, km_iter = (1_000_000, 256, 20_000, 25) if not a.small else (20_000, 32, 200, 3)
    as_n, as_d, as_k = (a.assign_rows, 512, 100_000) if not a.small else (20_000, 64, 500)
    result = {"device": torch.cuda.get_device_name(0) if dev.startswith("cuda") else "cpu",
              "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        feats = os.path.join(tmp, "km.npy")
        write_features(feats, km_n, km_d, 5000 if not a.small else 50, 1, dev)
        for bf16 in (False, True) if dev.startswith("cuda") else (False,):
            key = "kmeans_bf16" if bf16 else "kmeans_fp32"
            result[key] = run_gang(a.worker, feats, km_k, km_iter, 1, dev, bf16,
                                   os.path.join(tmp, key))
            floor = gemm_floor(km_n, km_d, km_k, dev, torch.bfloat16 if bf16 else torch.float32)
            result[key]["gemm_floor_s"] = floor * km_iter  # the same iterations
        os.remove(feats)
        feats = os.path.join(tmp, "as.npy")
        write_features(feats, as_n, as_d, 10_000 if not a.small else 100, 2, dev)
        bf16 = dev.startswith("cuda")
        r = run_gang(a.worker, feats, as_k, 1, 8, dev, bf16, os.path.join(tmp, "assign"))
        r["rows_per_second"] = r["rows"] / r["assign_s"] if r["assign_s"] > 0 else 0
        r["rows_10m_estimate_s"] = 10_000_000 / r["rows_per_second"] if r["rows_per_second"] else 0
        if bf16:  # torch.mm + torch.topk alone on 2M rows, the same chunks: the rate's floor
            floor_rows = min(as_n, 2_000_000)
            r["topk_floor_rows_per_second"] = floor_rows / topk_floor(floor_rows, as_d, as_k, 8, dev)
        result["assign_top8"] = r
    result["target_kmeans_s"] = 5.0
    best = min(v["kmeans_s"] for k, v in result.items() if k.startswith("kmeans_"))
    result["kmeans_best_s"] = best
    result["kmeans_target_met"] = best <= 5.0
    with open(os.path.join(a.out, "cluster_gang_gpu.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
