#!/usr/bin/python3
"""Static checks of deploy/prometheus and deploy/grafana (no server needed).

    check_monitoring.py --source-dir REPO [--promtool promtool]

  * `promtool check rules` on rules.yml and `promtool check config` on the local
    configuration; the Kubernetes configuration too, with its kubernetes_sd_configs swapped
    for a static target (Debian's Prometheus is built without Kubernetes discovery, so
    promtool cannot load that section; everything else, relabelling included, is checked);
  * every alert is `<signal> <comparison> <number>` (what prometheus_test.py relies on) and
    has a severity and a summary; every alert and recorded series is explained in
    docs/deploy.md and docs/metrics.md;
  * the PrometheusRule of deploy/k8s/extras and the dashboard JSON are what their
    generators write;
  * each dashboard: a current schemaVersion, a unique uid, the templated `datasource`
    variable of type datasource (prometheus), every panel and target using its uid
    `${datasource}`, unique panel ids, panels within the 24-column grid, a PromQL expr on
    every target, and only variables the dashboard defines (or Grafana's built-ins).
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

MIN_SCHEMA_VERSION = 36  # Grafana 9.x; the generator writes 39
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s", "__range_ms"}


def split_alert(expr):
    """(signal, op, threshold) of `<signal> <op> <number>` at parenthesis depth 0, else None."""
    m = re.fullmatch(r"(?s)\s*(.*?)\s*(==|!=|>=|<=|>|<)\s*(bool\s+)?(-?[0-9.]+(?:e-?[0-9]+)?)\s*", expr)
    if not m:
        return None
    signal = m.group(1)
    depth = 0
    for ch in signal:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return None
    if depth != 0 or re.search(r"(==|!=|>=|<=|[<>])\s*(bool\s+)?-?[0-9.]+\s*$", signal):
        return None
    return signal, m.group(2), float(m.group(4))


def load_rules(source_dir):
    return yaml.safe_load(open(os.path.join(source_dir, "deploy", "prometheus", "rules.yml")))


def dashboards(source_dir):
    d = os.path.join(source_dir, "deploy", "grafana", "dashboards")
    return {name: json.load(open(os.path.join(d, name))) for name in sorted(os.listdir(d)) if name.endswith(".json")}


def dashboard_exprs(dash):
    """[(where, expr)] of every target and query variable of a dashboard."""
    out = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            out.append((f"variable {v['name']}", q.get("query") if isinstance(q, dict) else q))
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            out.append((f"panel {p.get('id')} '{p.get('title')}' target {t.get('refId')}", t.get("expr", "")))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--promtool", default="promtool")
    args = parser.parse_args()
    src = os.path.abspath(args.source_dir)
    prom_dir = os.path.join(src, "deploy", "prometheus")
    problems = []

    def check(cond, msg):
        if not cond:
            problems.append(msg)
        return cond

    def run(cmd, what):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise SystemExit(f"cannot run {cmd[0]!r}: install the Debian package prometheus (scripts/setup.sh does)")
        check(proc.returncode == 0, f"{what} failed:\n{proc.stdout}{proc.stderr}")

    run([args.promtool, "check", "rules", os.path.join(prom_dir, "rules.yml")], "promtool check rules rules.yml")
    run([args.promtool, "check", "config", os.path.join(prom_dir, "prometheus-local.yml")],
        "promtool check config prometheus-local.yml")
    k8s = yaml.safe_load(open(os.path.join(prom_dir, "prometheus-k8s.yml")))
    k8s_jobs = k8s.get("scrape_configs") or []
    check(bool(k8s_jobs) and all("kubernetes_sd_configs" in j for j in k8s_jobs),
          "prometheus-k8s.yml: every scrape config must discover pods with kubernetes_sd_configs")
    for j in k8s_jobs:
        for sd in j.get("kubernetes_sd_configs") or []:
            check(sd.get("role") == "pod", f"prometheus-k8s.yml job {j.get('job_name')}: role must be pod")
        relabel = {r.get("target_label"): r for r in j.get("relabel_configs") or []}
        check((relabel.get("job") or {}).get("source_labels") == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
              "prometheus-k8s.yml: the job label must come from the pod label app.kubernetes.io/name "
              "(the local config's job names, which rules and dashboards use)")
    with tempfile.TemporaryDirectory(prefix="mlcd-promcfg-") as tmp:
        swapped = copy.deepcopy(k8s)
        for j in swapped.get("scrape_configs") or []:
            j.pop("kubernetes_sd_configs", None)
            j["static_configs"] = [{"targets": ["127.0.0.1:7601"]}]
        swapped["rule_files"] = [os.path.join(prom_dir, f) for f in swapped.get("rule_files") or []]
        path = os.path.join(tmp, "prometheus-k8s-static.yml")
        yaml.safe_dump(swapped, open(path, "w"))
        run([args.promtool, "check", "config", path], "promtool check config prometheus-k8s.yml (static targets)")
    local = yaml.safe_load(open(os.path.join(prom_dir, "prometheus-local.yml")))
    local_jobs = sorted(j["job_name"] for j in local.get("scrape_configs") or [])
    check(local_jobs == ["mlcd-clusterd", "mlcd-coordinator", "mlcd-labelstore", "mlcd-worker"],
          f"prometheus-local.yml scrapes jobs {local_jobs}")

    # Rules: alert shape, documentation.
    deploy_md = open(os.path.join(src, "docs", "deploy.md")).read() if os.path.exists(
        os.path.join(src, "docs", "deploy.md")) else ""
    metrics_md = open(os.path.join(src, "docs", "metrics.md")).read() if os.path.exists(
        os.path.join(src, "docs", "metrics.md")) else ""
    rules = load_rules(src)
    for group in rules.get("groups") or []:
        for rule in group.get("rules") or []:
            if "alert" in rule:
                name = rule["alert"]
                check(split_alert(rule["expr"]) is not None,
                      f"alert {name}: expr must be `<signal> <comparison> <number>`, is {rule['expr']!r}")
                check((rule.get("labels") or {}).get("severity") in ("critical", "warning", "info"),
                      f"alert {name}: needs a severity label critical|warning|info")
                check(bool((rule.get("annotations") or {}).get("summary")), f"alert {name}: needs a summary")
                check(name in deploy_md, f"alert {name} is not explained in docs/deploy.md")
            else:
                check(rule["record"].startswith("mlcd:"), f"recorded series {rule['record']} must start with mlcd:")
                check(rule["record"] in metrics_md, f"recorded series {rule['record']} is not in docs/metrics.md")

    # Generated files are current.
    for script in (os.path.join(prom_dir, "make_prometheusrule.py"),
                   os.path.join(src, "deploy", "grafana", "generate_dashboards.py")):
        proc = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
        check(proc.returncode == 0, proc.stdout + proc.stderr)
    rule_doc = yaml.safe_load(open(os.path.join(src, "deploy", "k8s", "extras", "prometheus-operator",
                                                "prometheusrule.yaml")))
    check(rule_doc["spec"]["groups"] == rules["groups"], "the PrometheusRule's groups differ from rules.yml")

    # Dashboards.
    uids = set()
    dash = dashboards(src)
    check(len(dash) >= 4, f"expected the four dashboards, found {sorted(dash)}")
    for name, d in dash.items():
        w = f"dashboard {name}"
        check(isinstance(d.get("schemaVersion"), int) and d["schemaVersion"] >= MIN_SCHEMA_VERSION, f"{w}: "
              f"schemaVersion {d.get('schemaVersion')} is older than {MIN_SCHEMA_VERSION}")
        check(bool(d.get("uid")) and d["uid"] not in uids and len(d["uid"]) <= 40, f"{w}: needs a unique uid")
        uids.add(d.get("uid"))
        check(bool(d.get("title")), f"{w}: needs a title")
        check("id" not in d or d["id"] is None, f"{w}: must not carry a database id")
        variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
        ds = variables.get("datasource")
        check(ds is not None and ds.get("type") == "datasource" and ds.get("query") == "prometheus",
              f"{w}: needs the templated variable `datasource` (type datasource, query prometheus)")
        ids = []
        for p in d.get("panels", []):
            ids.append(p.get("id"))
            gp = p.get("gridPos") or {}
            check(gp.get("x", -1) >= 0 and gp.get("w", 0) > 0 and gp["x"] + gp["w"] <= 24 and gp.get("h", 0) > 0,
                  f"{w}: panel {p.get('id')} gridPos {gp} is outside the 24-column grid")
            if p.get("type") == "row":
                continue
            check(p.get("datasource") == {"type": "prometheus", "uid": "${datasource}"},
                  f"{w}: panel {p.get('id')} must use the datasource variable's uid (${{datasource}})")
            check(bool(p.get("targets")), f"{w}: panel {p.get('id')} has no targets")
            for t in p.get("targets", []):
                check(t.get("datasource") == {"type": "prometheus", "uid": "${datasource}"},
                      f"{w}: panel {p.get('id')} target {t.get('refId')} must use ${{datasource}}")
        check(len(ids) == len(set(ids)), f"{w}: panel ids are not unique")
        for where, expr in dashboard_exprs(d):
            check(bool(expr and expr.strip()), f"{w}: {where} has no expression")
            for var in re.findall(r"\$\{?(\w+)", expr or ""):
                check(var in variables or var in BUILTIN_VARS, f"{w}: {where} uses ${var}, which is not defined")
            for metric in re.findall(r"\b(mlcd_[a-z0-9_]+)", expr or ""):
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                check(base in metrics_md or metric in metrics_md,
                      f"{w}: {where} uses {metric}, which docs/metrics.md does not describe")

    for p in problems:
        print("problem:", p)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in deploy/prometheus or deploy/grafana")
        return 1
    print(f"deploy/prometheus and deploy/grafana: rules, configs and {len(dash)} dashboards pass the static checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
