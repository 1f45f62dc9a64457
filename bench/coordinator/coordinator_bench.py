#!/usr/bin/env python3
"""Coordinator figures (not a test): time from submit to the first training step, and the
coordinator's overhead per epoch (scheduling + heartbeats) against the epoch's own time.

Runs a local cluster (`mlcdctl local up --ports auto --detach`), submits a tiny job (ViT
width 32, depth 1, Fashion-MNIST subset), polls it twice a second like an orchestrator would,
and samples the CPU time of the coordinator and of the worker agents from /proc. Then:

  submit -> first step   = first_step_unix_ms - created_unix_ms, split into the phases
                           (clustering, assignment, gang formation, trainer start-up)
  epoch time             = mean time between consecutive epoch commits
  coordinator CPU/epoch  = coordinator CPU seconds while training / epochs
  agents CPU/epoch       = the same for the agents (heartbeats, progress relay)
  critical path/epoch    = time the gang waits on the coordinator between epochs (0: the
                           epochs of a round run in one gang; commits are asynchronous)

Prints the figures and writes them as JSON (default bench/results/coordinator.json).

  bench/coordinator/coordinator_bench.py [--build-dir build] [--limit 8192] [--epochs 5]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("MLCD_BUILD_DIR", os.path.join(root, "build")))
    ap.add_argument("--limit", type=int, default=8192, help="training images")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(root, "bench", "results", "coordinator.json"))
    ap.add_argument("--keep", action="store_true", help="keep the cluster's folder")
    args = ap.parse_args()

    mlcdctl = os.path.join(args.build_dir, "bin", "mlcdctl")
    work = tempfile.mkdtemp(prefix="mlcd-coordinator-bench-")
    spec = f"""apiVersion: mlcd/v1
kind: TrainingJob
metadata: {{name: coordinator-bench}}
spec:
  dataset: {{limit: {args.limit}, augment: false}}
  clustering: {{features: {{kind: pixels}}, k: 32, l: 4, niter: 10}}
  loss: {{variant: mlcd, sample_ratio: 0.5}}
  model: {{width: 32, depth: 1, heads: 2, embed_dim: 32}}
  training:
    world_size: {args.workers}
    batch_size: {args.batch}
    epochs_per_round: {args.epochs}
    threads_per_worker: 1
    seed: 1
  evaluation: {{enabled: false}}
"""
    spec_path = os.path.join(work, "job.yaml")
    with open(spec_path, "w") as f:
        f.write(spec)
    cluster_dir = os.path.join(work, "cluster")
    run([mlcdctl, "local", "up", "--workers", str(args.workers), "--dir", cluster_dir, "--ports", "auto", "--detach"])
    try:
        info = json.load(open(os.path.join(cluster_dir, "cluster.json")))
        env = dict(os.environ, MLCD_COORDINATOR=info["coordinator"])
        # TLS and the admin token of the local cluster (its env file, as `source` sets them).
        for line in open(os.path.join(cluster_dir, "env")):
            if line.startswith("export ") and "=" in line:
                name, value = line[len("export "):].strip().split("=", 1)
                env[name] = value
        coordinator_pid = info["pids"]["coordinator"]
        agent_pids = [info["pids"][w["name"]] for w in info["workers"]]

        submitted = json.loads(run([mlcdctl, "-o", "json", "submit", spec_path], env=env))
        job_id = submitted["id"]
        samples = []  # (unix time, coordinator cpu, agents cpu)
        job = submitted
        while job.get("state") not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
            samples.append((time.time(), cpu_seconds(coordinator_pid), sum(cpu_seconds(p) or 0 for p in agent_pids)))
            time.sleep(0.5)
            job = json.loads(run([mlcdctl, "-o", "json", "get", job_id], env=env))
        samples.append((time.time(), cpu_seconds(coordinator_pid), sum(cpu_seconds(p) or 0 for p in agent_pids)))
        if job["state"] != "JOB_STATE_SUCCEEDED":
            sys.exit(f"job ended {job['state']}: {job.get('message')}")
        job = json.loads(run([mlcdctl, "-o", "json", "get", job_id, "--history"], env=env))
        metrics = urllib.request.urlopen(f"http://{info['metrics']['coordinator']}/metrics").read().decode()
    finally:
        subprocess.run([mlcdctl, "local", "down", "--dir", cluster_dir], capture_output=True)

    created = int(job["created_unix_ms"]) / 1000
    first_step = int(job["first_step_unix_ms"]) / 1000
    history = job["history"]

    def when(kind, state=None):
        for h in history:
            if h["kind"] == kind and (state is None or h.get("state") == state):
                return int(h["unix_ms"]) / 1000
        return None

    training_entered = when("state", "JOB_STATE_TRAINING")
    gang_started = when("gang_started")
    commits = [int(h["unix_ms"]) / 1000 for h in history if h["kind"] == "epoch_committed"]
    finished = int(job["finished_unix_ms"]) / 1000
    epoch_times = [b - a for a, b in zip([first_step] + commits[:-1], commits)]
    # Epoch 0 starts at the first step; later epochs between commits (includes checkpoint writes).
    epoch_seconds = sum(epoch_times[1:]) / max(1, len(epoch_times) - 1) if len(epoch_times) > 1 else epoch_times[0]

    def cpu_at(t, index):
        best = min(samples, key=lambda s: abs(s[0] - t))
        return best[index]

    train_wall = commits[-1] - first_step
    coord_cpu = cpu_at(commits[-1], 1) - cpu_at(first_step, 1)
    agents_cpu = cpu_at(commits[-1], 2) - cpu_at(first_step, 2)
    epochs = len(commits)
    heartbeats = sum(float(v) for v in re.findall(r"^mlcd_coordinator_heartbeats_total (\S+)$", metrics, re.M))
    hb_count = re.search(r'^mlcd_coordinator_request_duration_seconds_count\{method="Heartbeat"\} (\S+)$', metrics, re.M)
    hb_sum = re.search(r'^mlcd_coordinator_request_duration_seconds_sum\{method="Heartbeat"\} (\S+)$', metrics, re.M)
    phases = job.get("phase_seconds", {})

    result = {
        "limit": args.limit,
        "batch_size": args.batch,
        "epochs": epochs,
        "workers": args.workers,
        "steps": int(job["progress"]["total_steps"]),
        "submit_to_first_step_seconds": round(first_step - created, 3),
        "breakdown_seconds": {
            "clustering (features + k-means)": round(phases.get("CLUSTERING", 0), 3),
            "assignment (top-l into the label store)": round(phases.get("ASSIGNING", 0), 3),
            "gang formation (TRAINING entered -> gang started)": round(gang_started - training_entered, 3),
            "trainer start-up (gang started -> first step)": round(first_step - gang_started, 3),
        },
        "epoch_seconds": round(epoch_seconds, 3),
        "coordinator_cpu_seconds_per_epoch": round(coord_cpu / epochs, 4),
        "coordinator_cpu_fraction_of_epoch": round(coord_cpu / train_wall, 5),
        "agents_cpu_seconds_per_epoch": round(agents_cpu / epochs, 4),
        "agents_cpu_fraction_of_epoch": round(agents_cpu / train_wall, 5),
        "heartbeats_per_epoch": round(heartbeats / epochs, 1),
        "heartbeat_rpc_mean_ms": round(1000 * float(hb_sum.group(1)) / max(1.0, float(hb_count.group(1))), 3)
        if hb_count and hb_sum else None,
        "critical_path_seconds_per_epoch": 0.0,
        "finish_after_last_commit_seconds": round(finished - commits[-1], 3),
        "total_seconds": round(finished - created, 3),
    }
    print(f"coordinator bench: {args.workers} workers, {args.limit} images, batch {args.batch}, "
          f"{epochs} epochs ({result['steps']} steps)")
    print(f"  submit -> first training step   {result['submit_to_first_step_seconds']:.2f} s")
    for k, v in result["breakdown_seconds"].items():
        print(f"    {k:50s} {v:.3f} s")
    print(f"  epoch time                        {result['epoch_seconds']:.3f} s")
    print(f"  coordinator CPU per epoch         {result['coordinator_cpu_seconds_per_epoch']:.4f} s "
          f"({100 * result['coordinator_cpu_fraction_of_epoch']:.3f}% of the epoch)")
    print(f"  agents CPU per epoch              {result['agents_cpu_seconds_per_epoch']:.4f} s "
          f"({100 * result['agents_cpu_fraction_of_epoch']:.3f}% of the epoch)")
    print(f"  heartbeats per epoch              {result['heartbeats_per_epoch']}, "
          f"mean Heartbeat RPC {result['heartbeat_rpc_mean_ms']} ms")
    print(f"  coordinator on the critical path  {result['critical_path_seconds_per_epoch']} s per epoch "
          f"(commits are asynchronous); last commit -> SUCCEEDED {result['finish_after_last_commit_seconds']:.3f} s")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
