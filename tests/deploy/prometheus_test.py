#!/usr/bin/python3
"""A real Prometheus scrapes a local cluster running a tiny job; every PromQL expression of
the dashboards and rules is evaluated through Prometheus's HTTP API.

    prometheus_test.py --source-dir REPO --bin-dir BUILD/bin [--prometheus /usr/bin/prometheus]
                       [--promtool /usr/bin/promtool] [--keep]

1. `mlcdctl local up --workers 2 --ports auto --detach` starts mlcd-labelstore,
   mlcd-clusterd, mlcd-coordinator and two `mlcd-worker agent` slots on free loopback ports.
2. deploy/prometheus/prometheus-local.yml, with its targets pointed at those ports, a short
   scrape/evaluation interval and rules.yml, is checked with promtool and served by a real
   /usr/bin/prometheus on a free loopback port with its own TSDB in a temp dir.
3. examples/tiny-test-job.yaml (more images, a wider model and 32 steps per epoch, so its training process lives
   for several scrapes) is submitted with `mlcdctl submit --wait` and must SUCCEED.
4. Through /api/v1/query and /api/v1/query_range:
   * every recording rule's expression and every recorded series returns data over the
     run; every alert expression parses and its signal (the expression without the final
     comparison) returns data; every rule is evaluated without error (/api/v1/rules);
   * every dashboard target and query variable returns data, with the dashboard variables
     set to the job that ran (so the job_id/rank labels must be right) and
     $__rate_interval / $__range set to windows that fit the run;
   * the naming scheme (docs/metrics.md) holds for every exported mlcd_* family: the
     service prefix, `_total` exactly on counters, `_seconds` on durations, no other time
     units, documented in docs/metrics.md, no label that clashes with target labels (job,
     instance) and no label with unbounded values; no label value of any series of an MLCD
     target is a path or long free text (/metrics is unauthenticated).
Wall time is about a minute. Exits 0 when all holds, else prints each problem and exits 1.
"""

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_monitoring import dashboard_exprs, dashboards, split_alert  # noqa: E402

SCRAPE = "250ms"
RATE_WINDOW = "5s"  # what $__rate_interval becomes (Grafana: >= 4 scrape intervals)
SERVICES = ("coordinator", "labelstore", "clusterd", "worker", "agent")
# Labels a metric may carry; anything else must be added here and to docs/metrics.md.
ALLOWED_LABELS = {"method", "code", "state", "phase", "variant", "kind", "result", "job_id", "round", "rank",
                  "le", "quantile"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, url):
        self.url = url

    def get(self, path, **params):
        q = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            try:
                return json.loads(body)
            except ValueError:
                return {"status": "error", "error": f"HTTP {e.code}: {body[:300]}"}

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.get("/api/v1/query", **params)

    def query_range(self, expr, start, end, step=0.5):
        return self.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step))


def has_data(result):
    """(True, n) if a successful result has a sample that is a number (not NaN), else (False, why)."""
    if result.get("status") != "success":
        return False, f"error: {result.get('errorType')}: {result.get('error')}"
    data = result["data"]
    series = data.get("result") or []
    if data.get("resultType") == "scalar":
        series = [{"value": series}]
    values = []
    for s in series:
        values += s.get("values") or ([s["value"]] if "value" in s else [])
    finite = [v for _, v in values if not math.isnan(float(v))]
    if not finite:
        return False, f"no data ({len(series)} series, {len(values)} samples, all NaN)" if values else "no data"
    return True, len(series)


def run(cmd, timeout, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--promtool", default="/usr/bin/promtool")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, TSDB)")
    args = parser.parse_args()
    src, bin_dir = os.path.abspath(args.source_dir), os.path.abspath(args.bin_dir)
    mlcdctl = os.path.join(bin_dir, "mlcdctl")
    for tool in (args.prometheus, args.promtool, mlcdctl):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"{tool} is missing: install the Debian package prometheus and build mlcdctl "
                             "(scripts/setup.sh does both)")
    problems = []
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mlcd-prometheus-test-")
    cluster_dir = os.path.join(tmp, "local")
    prom_proc = None
    env = dict(os.environ, MLCD_NO_BLAS_TUNING="1")
    cluster_up = False
    try:
        # 1. The local cluster.
        rc, out, err = run([mlcdctl, "local", "up", "--workers", "2", "--dir", cluster_dir, "--ports", "auto",
                            "--detach", "--bin-dir", bin_dir], timeout=120, env=env)
        if rc != 0:
            raise RuntimeError(f"mlcdctl local up failed ({rc}):\n{out}{err}")
        cluster_up = True
        cluster = json.load(open(os.path.join(cluster_dir, "cluster.json")))
        # Its CA, user certificate and submitter token, as `source <dir>/env` sets them.
        for line in open(os.path.join(cluster_dir, "env")):
            if line.startswith("export ") and "=" in line:
                name, value = line[len("export "):].strip().split("=", 1)
                env[name] = value
        targets = {
            "mlcd-coordinator": [cluster["metrics"]["coordinator"]],
            "mlcd-labelstore": [cluster["metrics"]["labelstore"]],
            "mlcd-clusterd": [cluster["metrics"]["clusterd"]],
            "mlcd-worker": [w["metrics"] for w in cluster["workers"]],
        }
        print(f"local cluster up in {time.time() - t0:.1f} s: {targets}")

        # 2. Prometheus with the local scrape config pointed at it.
        config = yaml.safe_load(open(os.path.join(src, "deploy", "prometheus", "prometheus-local.yml")))
        config["global"].update({"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE, "evaluation_interval": SCRAPE})
        config["rule_files"] = [os.path.join(src, "deploy", "prometheus", f) for f in config.get("rule_files") or []]
        jobs = {j["job_name"] for j in config["scrape_configs"]}
        if jobs != set(targets):
            problems.append(f"prometheus-local.yml scrapes {sorted(jobs)}, the local cluster serves {sorted(targets)}")
        for j in config["scrape_configs"]:
            j["static_configs"] = [{"targets": targets.get(j["job_name"], [])}]
        config_path = os.path.join(tmp, "prometheus.yml")
        yaml.safe_dump(config, open(config_path, "w"))
        rc, out, err = run([args.promtool, "check", "config", config_path], timeout=60)
        if rc != 0:
            problems.append(f"promtool check config (test config) failed:\n{out}{err}")
        port = free_port()
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom_proc = subprocess.Popen(
            [args.prometheus, f"--config.file={config_path}", f"--storage.tsdb.path={tmp}/tsdb",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=prom_log, stderr=subprocess.STDOUT, start_new_session=True)
        prom = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if prom_proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("prometheus did not become ready:\n" + open(prom_log.name).read()[-2000:])
            time.sleep(0.2)
        deadline = time.time() + 20
        while True:
            r = prom.query('count(up{job=~"mlcd-coordinator|mlcd-labelstore|mlcd-clusterd"} == 1)')
            ok = r.get("status") == "success" and r["data"]["result"] and r["data"]["result"][0]["value"][1] == "3"
            if ok:
                break
            if time.time() > deadline:
                raise RuntimeError(f"Prometheus does not see the three services up: {r}")
            time.sleep(0.25)
        print(f"prometheus ready on {prom.url} at {time.time() - t0:.1f} s")

        # 3. The tiny job.
        spec = yaml.safe_load(open(os.path.join(src, "examples", "tiny-test-job.yaml")))
        spec["metadata"]["name"] = "prometheus-test"
        # Train long enough (a few seconds per round) that every worker series is scraped
        # several times while its training process lives, so rates and ratios have data.
        spec["spec"]["dataset"]["limit"] = 2048
        spec["spec"]["model"].update({"width": 64, "depth": 2})
        training = spec["spec"].setdefault("training", {})
        training["max_steps_per_epoch"] = 32
        spec_path = os.path.join(tmp, "job.yaml")
        yaml.safe_dump(spec, open(spec_path, "w"))
        start = time.time() - 1
        # Prometheus's /api/v1/metadata holds only what its targets expose now: the training
        # processes' families leave the agents' /metrics when they exit, so a machine slow
        # enough to take longer than a few scrapes over the checks below found none (a flaky
        # "no mlcd_worker_* metric"). Everything any scrape exposed during the run is kept.
        seen_metadata = {}
        polling = threading.Event()

        def poll_metadata():
            while not polling.is_set():
                try:
                    for name, entries in (prom.get("/api/v1/metadata").get("data") or {}).items():
                        seen_metadata.setdefault(name, entries)
                except Exception:  # noqa: BLE001 - a missed poll is retried
                    pass
                polling.wait(0.5)

        poller = threading.Thread(target=poll_metadata, daemon=True)
        poller.start()
        rc, out, err = run([mlcdctl, "--coordinator", cluster["coordinator"], "--output", "json", "submit", spec_path,
                            "--wait"], timeout=150, env=env)
        try:
            job = json.loads(out)
        except ValueError:
            raise RuntimeError(f"mlcdctl submit --wait exited {rc} without a job as JSON:\n{out}{err}")
        if job.get("state") != "JOB_STATE_SUCCEEDED" and job.get("state") != "SUCCEEDED":
            raise RuntimeError(f"the tiny job ended {job.get('state')}: {job.get('message')}\n{out}{err}")
        job_id = job["id"]
        print(f"job {job_id} SUCCEEDED at {time.time() - t0:.1f} s")
        time.sleep(2)  # a few more scrapes and rule evaluations after the end
        polling.set()
        poller.join()
        end = time.time()
        window = f"{int(end - start) + 1}s"

        # 4a. Rules.
        rules_doc = yaml.safe_load(open(os.path.join(src, "deploy", "prometheus", "rules.yml")))
        checked = 0
        for group in rules_doc["groups"]:
            for rule in group["rules"]:
                expr = rule["expr"]
                if "record" in rule:
                    for what, e in ((f"recording rule {rule['record']}", expr), (f"recorded series {rule['record']}",
                                                                                 rule["record"])):
                        ok, why = has_data(prom.query_range(e, start, end))
                        if not ok:
                            problems.append(f"{what}: {why}\n    {e}")
                        checked += 1
                else:
                    parsed = prom.query(expr)
                    if parsed.get("status") != "success":
                        problems.append(f"alert {rule['alert']}: {parsed.get('error')}\n    {expr}")
                    split = split_alert(expr)
                    if split is None:
                        problems.append(f"alert {rule['alert']}: not `<signal> <comparison> <number>`: {expr}")
                        continue
                    if re.search(r"\bkube(let)?_", split[0]):
                        # The cluster's own metrics (kubelet, kube-state-metrics): a local
                        # cluster has none; rules_test.yml covers these alerts.
                        checked += 1
                        continue
                    ok, why = has_data(prom.query_range(split[0], start, end))
                    if not ok:
                        problems.append(f"alert {rule['alert']}: its signal returns {why}\n    {split[0]}")
                    checked += 2
        for group in prom.get("/api/v1/rules")["data"]["groups"]:
            for rule in group["rules"]:
                if rule.get("health") != "ok":
                    problems.append(f"rule {rule.get('name')} evaluates with {rule.get('health')}: "
                                    f"{rule.get('lastError')}")

        # 4b. Dashboards, with the variables set to what ran.
        # Grafana escapes regex metacharacters of a variable's value; job ids have none.
        job_regex = re.sub(r"([.+*?^$()\[\]{}|\\])", r"\\\\\1", job_id)
        substitutions = {"job_id": job_regex, "rank": "0|1", "__rate_interval": RATE_WINDOW,
                         "__interval": SCRAPE, "__range": window}
        for name, d in dashboards(src).items():
            for where, expr in dashboard_exprs(d):
                e = re.sub(r"\$\{?(\w+)\}?", lambda m: substitutions.get(m.group(1), m.group(0)), expr)
                m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", e, re.DOTALL)
                if m:
                    result = prom.query_range(f"count by ({m.group(2)}) ({m.group(1)})", start, end)
                    ok, why = has_data(result)
                    if ok and m.group(2) == "job_id":
                        values = {s["metric"].get("job_id") for s in result["data"]["result"]}
                        if job_id not in values:
                            ok, why = False, f"job_id values {sorted(values)} lack the job that ran ({job_id})"
                else:
                    ok, why = has_data(prom.query_range(e, start, end))
                if not ok:
                    problems.append(f"dashboard {name}, {where}: {why}\n    {e}")
                checked += 1

        # 4c. Naming scheme of everything exported.
        metadata = dict(seen_metadata)
        metadata.update(prom.get("/api/v1/metadata")["data"])
        metrics_md = open(os.path.join(src, "docs", "metrics.md")).read()
        families = sorted(n for n in metadata if n.startswith("mlcd_"))
        if not any(f.startswith("mlcd_worker_") for f in families):
            problems.append("no mlcd_worker_* metric was scraped: the training processes exported nothing")
        for fam in families:
            kind = metadata[fam][0]["type"]
            if not re.fullmatch(r"mlcd_(%s)_[a-z][a-z0-9_]*" % "|".join(SERVICES), fam):
                problems.append(f"{fam}: not mlcd_<service>_<name> with service one of {SERVICES}")
            if (kind == "counter") != fam.endswith("_total"):
                problems.append(f"{fam} ({kind}): `_total` is for counters and only for counters")
            if re.search(r"_(ms|msec|millis|milliseconds|us|micros|microseconds|ns|minutes|hours|percent)(_|$)", fam):
                problems.append(f"{fam}: use base units (seconds, ratios 0..1)")
            if re.search(r"(duration|latency|_time)(_|$)", fam) and not re.search(r"_seconds(_total)?$", fam):
                problems.append(f"{fam}: a duration must be in seconds and end in _seconds")
            if not re.search(r"(?<![\w:])" + re.escape(fam) + r"(?![\w])", metrics_md):
                problems.append(f"{fam} ({kind}) is exported but not described in docs/metrics.md")
        series = prom.get("/api/v1/series", **{"match[]": '{__name__=~"mlcd_.+"}', "start": f"{start:.3f}",
                                               "end": f"{end:.3f}"})["data"]
        values_by_label = {}
        unlabelled = sorted({re.sub(r"_(bucket|sum|count)$", "", s["__name__"]) for s in series
                             if s["__name__"].startswith("mlcd_worker_") and not {"job_id", "round", "rank"} <= set(s)})
        if unlabelled:
            problems.append(f"worker series without the labels job_id, round and rank (docs/metrics.md): {unlabelled}")
        for s in series:
            for label, value in s.items():
                if label in ("__name__", "job", "instance"):
                    continue
                values_by_label.setdefault(label, set()).add(value)
                if label not in ALLOWED_LABELS:
                    problems.append(f"{s['__name__']} has label {label}={value!r}, which is not one of the bounded "
                                    f"labels of docs/metrics.md ({sorted(ALLOWED_LABELS)})")
        for label, values in values_by_label.items():
            if len(values) > 64:
                problems.append(f"label {label} has {len(values)} values in a tiny run: unbounded?")
        # /metrics is served without authentication (docs/security.md, "The status and metrics
        # ports"): no series of an MLCD target, mlcd_* or not, may carry a path, a spec or a
        # secret in a label value.
        every = prom.get("/api/v1/series", **{"match[]": '{job=~"mlcd-.+"}', "start": f"{start:.3f}",
                                              "end": f"{end:.3f}"})["data"]
        for s in every:
            for label, value in s.items():
                if label not in ("__name__", "job", "instance") and ("/" in value or len(value) > 64):
                    problems.append(f"{s['__name__']} has label {label}={value!r}: a path or free text in an "
                                    "unauthenticated /metrics")
        print(f"evaluated {checked} expressions; {len(families)} mlcd_* families scraped; "
              f"{len(series)} series; labels {sorted(values_by_label)}")
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        problems.append(str(e))
    finally:
        if cluster_up:
            rc, out, err = run([mlcdctl, "local", "down", "--dir", cluster_dir], timeout=90, env=env)
            if rc != 0:
                problems.append(f"mlcdctl local down failed ({rc}): {out}{err}")
        if prom_proc is not None:
            prom_proc.send_signal(signal.SIGTERM)
            try:
                prom_proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prom_proc.kill()
                prom_proc.wait()
        if problems and os.path.isdir(os.path.join(cluster_dir, "logs")):
            for log in sorted(os.listdir(os.path.join(cluster_dir, "logs"))):
                text = open(os.path.join(cluster_dir, "logs", log), errors="replace").read()
                print(f"--- {log} (last 1500 bytes)\n{text[-1500:]}")
        if args.keep or os.environ.get("MLCD_KEEP_TEST_DIRS"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for p in problems:
        print("problem:", p)
    print(f"wall time {time.time() - t0:.1f} s")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        return 1
    print("Prometheus test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
