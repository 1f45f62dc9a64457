#!/usr/bin/env python3
"""Gang k-means on the CPU (issue 28, "Benchmark"; not a test): in one run, on the same
synthetic features (a mixture of Gaussians on the unit sphere written by
`mlcd-clusterd features --kind synthetic` into a temporary folder, removed afterwards):

  sgemm 1t, 2t   the machine's sgemm ceiling for the gang engine's search GEMM (chunk rows x d
                 times d x k: at::mm, which calls the system OpenBLAS, the BLAS FAISS calls
                 too), 1 and 2 threads (gang_kmeans_probe sgemm)
  gang 1x1       `mlcd-worker cluster-gang --world-size 1 --threads 1`
  gang 2x1       `mlcd-worker cluster-gang --world-size 2 --threads 1` (2 ranks over Gloo)
  faiss 1t       clusterd's FAISS k-means (clusterd/kmeans.h) with 1 thread, same rows, k,
                 seed and max_points_per_centroid, hence the same training sample
                 (gang_kmeans_probe faiss-kmeans)

Time per iteration = mean of iterations 2..niter (the first carries the warm-up), from the
per-iteration seconds of stats.json / the probe. The configurations are interleaved --repeats
times (one round runs each once, the order rotating) and each figure is the median over rounds,
so load on the machine hits all of them alike. Targets:

  scaling   = (gang 1x1 / gang 2x1) / (sgemm 2t / sgemm 1t)   >= 0.9
  vs FAISS  = gang 1x1 / faiss 1t                             <= 1.1

Prints the figures and writes JSON (default bench/results/gang_kmeans_cpu.json).

  bench/clusterd/gang_kmeans_bench.py [--small] [--repeats 3] [--build-dir build]

Default size 2M x 128 -> k = 4096, 4 iterations (12-14 minutes on 2 cores); --small is
200k x 128 -> 1024, 3 iterations (under a minute).
"""
import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def cpu_summary():
    model, flags = "", []
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
            elif key.strip() == "Flags":
                flags = value.split()
    except (OSError, subprocess.CalledProcessError):
        pass
    simd = [f for f in flags if f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                     "avx512_vnni", "avx512_bf16", "amx_tile")]
    return {"model": model or platform.processor(), "simd_flags": simd,
            "cores": os.cpu_count(), "load_average": os.getloadavg()}


class Runner:
    """Runs one configuration as a child process; wall and CPU seconds of the child."""

    def __init__(self, env):
        self.env = env

    def __call__(self, cmd):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return p.stdout, wall, cpu


def per_iteration(seconds):
    """Mean seconds per iteration after the first, from cumulative seconds per iteration."""
    if len(seconds) < 2:
        sys.exit("error: need --niter >= 2 to leave out the first iteration")
    return (seconds[-1] - seconds[0]) / (len(seconds) - 1)


def last_json_line(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MLCD_BUILD_DIR",
                                                          os.path.join(root, "build")))
    ap.add_argument("--small", action="store_true", help="200k x 128 -> 1024 (under a minute)")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--centres", type=int, default=0,
                    help="mixture components (default 2 * k)")
    ap.add_argument("--niter", type=int, default=None, help="default 4, 3 with --small")
    ap.add_argument("--max-points-per-centroid", type=int, default=256)
    ap.add_argument("--workspace-mb", type=int, default=0,
                    help="the engine's --workspace-mb (default: the engine's own default)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--sgemm-seconds", type=float, default=None,
                    help="per sgemm measurement (default 3, 0.5 with --small)")
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="where the features go")
    ap.add_argument("--out", default=os.path.join(root, "bench", "results",
                                                  "gang_kmeans_cpu.json"))
    args = ap.parse_args()
    if args.small:
        args.rows, args.k = 200_000, 1024
    if args.niter is None:
        args.niter = 3 if args.small else 4
    if args.sgemm_seconds is None:
        args.sgemm_seconds = 0.5 if args.small else 3.0
    if args.repeats < 1:
        sys.exit("error: --repeats must be >= 1")
    bindir = os.path.join(args.build_dir, "bin")
    for b in ("mlcd-worker", "mlcd-clusterd", "gang_kmeans_probe"):
        if not os.access(os.path.join(bindir, b), os.X_OK):
            sys.exit(f"error: {bindir}/{b} is missing; build it: cmake --build {args.build_dir} "
                     "--target mlcd-worker mlcd-clusterd gang_kmeans_probe")
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # the programs set their threads
        env.pop(var, None)
    run = Runner(env)
    machine = cpu_summary()
    # SIGTERM unwinds like Ctrl-C: subprocess.run kills the running child, the folder goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix="mlcd-gang-kmeans-bench-", dir=args.tmp)
    try:
        result = measure(args, bindir, work, run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["machine"] = machine
    report(result)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {args.out}")


def measure(args, bindir, work, run):
    feats = os.path.join(work, "features")
    t0 = time.monotonic()
    run([os.path.join(bindir, "mlcd-clusterd"), "features", "--kind", "synthetic",
         "--rows", str(args.rows), "--dim", str(args.d),
         "--centres", str(args.centres or 2 * args.k), "--noise", "1.0", "--seed", "28",
         "--out", feats])
    shard = os.path.join(feats, "shard-00000.npy")
    print(f"features: {args.rows} x {args.d} float32 in {time.monotonic() - t0:.1f} s",
          flush=True)
    probe = os.path.join(bindir, "gang_kmeans_probe")
    common = ["--k", str(args.k), "--niter", str(args.niter), "--seed", "1234",
              "--max-points-per-centroid", str(args.max_points_per_centroid)]
    workspace = ["--workspace-mb", str(args.workspace_mb)] if args.workspace_mb else []

    def sgemm(threads):
        out, _, _ = run([probe, "sgemm", "--k", str(args.k), "--d", str(args.d),
                         "--threads", str(threads), "--seconds", str(args.sgemm_seconds)]
                        + workspace)
        return last_json_line(out)

    def gang(world):
        out_dir = os.path.join(work, f"gang{world}")
        _, wall, cpu = run([os.path.join(bindir, "mlcd-worker"), "cluster-gang",
                            "--features", shard, "--out", out_dir, "--threads", "1",
                            "--world-size", str(world), "--l", "1"] + common + workspace)
        with open(os.path.join(out_dir, "stats.json")) as f:
            stats = json.load(f)
        shutil.rmtree(out_dir)
        secs = [it["seconds"] for it in stats["iterations"]]
        return {"per_iter": per_iteration(secs), "iteration_seconds": secs,
                "train_rows": stats["train_rows"], "wall": wall, "cpu": cpu}

    def faiss():
        out, wall, cpu = run([probe, "faiss-kmeans", "--features", shard, "--threads", "1"]
                             + common)
        j = last_json_line(out)
        secs = [it["seconds"] for it in j["iterations"]]
        return {"per_iter": per_iteration(secs), "iteration_seconds": secs,
                "train_rows": j["train_rows"], "wall": wall, "cpu": cpu}

    configs = [("sgemm_1t", lambda: sgemm(1)), ("sgemm_2t", lambda: sgemm(2)),
               ("gang_1x1", lambda: gang(1)), ("gang_2x1", lambda: gang(2)),
               ("faiss_1t", faiss)]
    rounds = {name: [] for name, _ in configs}
    for r in range(args.repeats):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, fn in order:
            rounds[name].append(fn())
            print(f"round {r + 1}/{args.repeats} {name}: {summary(rounds[name][-1])}",
                  flush=True)
    return summarise(args, rounds)


def summary(m):
    if "gflops" in m:
        return f"{m['gflops']:.1f} GFLOP/s ({m['rows']} x {m['d']} x {m['k']})"
    return f"{m['per_iter']:.3f} s/iteration (wall {m['wall']:.1f} s, cpu {m['cpu']:.1f} s)"


def summarise(args, rounds):
    med = statistics.median
    s1 = med(m["gflops"] for m in rounds["sgemm_1t"])
    s2 = med(m["gflops"] for m in rounds["sgemm_2t"])
    g1 = med(m["per_iter"] for m in rounds["gang_1x1"])
    g2 = med(m["per_iter"] for m in rounds["gang_2x1"])
    f1 = med(m["per_iter"] for m in rounds["faiss_1t"])
    train_rows = rounds["gang_1x1"][0]["train_rows"]
    search_gflop = 2.0 * train_rows * args.d * args.k / 1e9
    shape = rounds["sgemm_1t"][0]
    return {
        "config": {"rows": args.rows, "d": args.d, "k": args.k, "niter": args.niter,
                   "max_points_per_centroid": args.max_points_per_centroid,
                   "train_rows": train_rows, "repeats": args.repeats, "small": args.small,
                   "workspace_mb": args.workspace_mb or None,
                   "sgemm_seconds": args.sgemm_seconds,
                   "sgemm_shape": [shape["rows"], shape["d"], shape["k"]],
                   "blas": "system OpenBLAS (libblas.so.3, openblas-pthread) via at::mm"},
        "sgemm_gflops_1t": s1, "sgemm_gflops_2t": s2, "sgemm_ceiling_ratio": s2 / s1,
        "gang_1x1_seconds_per_iter": g1, "gang_2x1_seconds_per_iter": g2,
        "faiss_1t_seconds_per_iter": f1,
        "gang_1x1_search_gflops": search_gflop / g1,
        "speedup_2_ranks": g1 / g2,
        "scaling_efficiency": (g1 / g2) / (s2 / s1),
        "gang_over_faiss": g1 / f1,
        "targets": {"scaling_efficiency_min": 0.9, "gang_over_faiss_max": 1.1},
        "rounds": rounds,
    }


def report(r):
    c = r["config"]
    print(f"\ngang k-means on the CPU: {c['rows']} x {c['d']} -> k = {c['k']}, "
          f"{c['train_rows']} training rows, {c['niter']} iterations, "
          f"medians of {c['repeats']} interleaved rounds")
    print(f"  sgemm ceiling ({c['sgemm_shape'][0]} x {c['d']} x {c['k']}): "
          f"1 thread {r['sgemm_gflops_1t']:.1f} GFLOP/s, 2 threads {r['sgemm_gflops_2t']:.1f} "
          f"GFLOP/s, ratio {r['sgemm_ceiling_ratio']:.2f}")
    print(f"  gang 1 rank x 1 thread : {r['gang_1x1_seconds_per_iter']:.3f} s/iteration "
          f"({r['gang_1x1_search_gflops']:.1f} GFLOP/s of search GEMM)")
    print(f"  gang 2 ranks x 1 thread: {r['gang_2x1_seconds_per_iter']:.3f} s/iteration "
          f"(speed-up {r['speedup_2_ranks']:.2f})")
    print(f"  FAISS 1 thread         : {r['faiss_1t_seconds_per_iter']:.3f} s/iteration")
    print(f"  scaling efficiency = speed-up / sgemm ratio = {r['scaling_efficiency']:.2f} "
          f"(target >= 0.9)")
    print(f"  gang 1x1 / FAISS 1t = {r['gang_over_faiss']:.2f} (target <= 1.1)")


if __name__ == "__main__":
    main()
