#!/usr/bin/python3
"""Writes the MLCD Grafana dashboards (deploy/grafana/dashboards/*.json).

    deploy/grafana/generate_dashboards.py            # rewrite the JSON files
    deploy/grafana/generate_dashboards.py --check    # exit 1 if a file differs from its source

The dashboards are described below as data (rows of panels with PromQL targets) and
rendered into Grafana's dashboard JSON, so every panel follows the same conventions: the
data source is the templated `datasource` variable (its uid, `${datasource}`), job and rank
selectors come from the `job_id` / `rank` variables, rates use `$__rate_interval`, units
are Grafana's. Edit this file, run it, and commit both; tests/deploy checks that the JSON is
current and evaluates every expression against a real Prometheus.
"""

import json
import os
import sys

SCHEMA_VERSION = 39  # Grafana 10.4 / 11.x
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "dashboards")

JOB = 'job_id=~"$job_id"'
# Step time parts of the worker (mlcd_worker_<part>_seconds histograms) and their legends.
STEP_PARTS = [("backbone", "backbone"), ("classification_layer", "classification layer"),
              ("collective", "collectives"), ("label_wait", "label wait"), ("data_wait", "data wait")]
JOB_RANK = 'job_id=~"$job_id", rank=~"$rank"'


def ts(title, targets, unit="short", description="", stack=False, width=12, height=8, legend_calcs=("lastNotNull",),
       min_zero=False):
    """A time series panel. targets: [(expr, legend)]."""
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0, "showPoints": "never",
              "spanNulls": True}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    defaults = {"unit": unit, "custom": custom}
    if min_zero:
        defaults["min"] = 0
    return {"type": "timeseries", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": list(legend_calcs)},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "_w": width, "_h": height}


def stat(title, targets, unit="short", description="", width=6, height=4, thresholds=None):
    steps = [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in (thresholds or [])]
    return {"type": "stat", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"},
            "_w": width, "_h": height}


def bargauge(title, targets, unit="short", description="", width=12, height=8):
    return {"type": "bargauge", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True},
            "_w": width, "_h": height}


def query_var(name, label, query, include_all=True, multi=True):
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
            "includeAll": include_all, "multi": multi, "allValue": ".*", "sort": 3,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0}


DATASOURCE_VAR = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                  "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
                  "regex": ""}
JOB_VAR = query_var("job_id", "Job", "label_values(mlcd_worker_steps_total, job_id)")
RANK_VAR = query_var("rank", "Rank", 'label_values(mlcd_worker_steps_total{job_id=~"$job_id"}, rank)')

DASHBOARDS = [
    {
        "uid": "mlcd-training-overview",
        "title": "MLCD / Training overview",
        "description": "Jobs, gangs and the training curves of every job (loss, throughput, the paper's Fig. 3 "
                       "cosines, learning rate).",
        "variables": [DATASOURCE_VAR, JOB_VAR],
        "rows": [
            ("Jobs and workers", [
                stat("Jobs training", [('sum(mlcd_coordinator_jobs{state="TRAINING"})', "training")]),
                stat("Jobs waiting for workers", [("sum(mlcd_coordinator_jobs_waiting_for_workers)", "waiting")],
                     thresholds=[(1, "yellow")],
                     description="Jobs that need a gang (TRAINING, EXTRACTING, EVALUATING) and wait for enough "
                                 "idle workers that can run it."),
                stat("Workers idle / busy", [('sum(mlcd_coordinator_workers{state="idle"})', "idle"),
                                             ('sum(mlcd_coordinator_workers{state="busy"})', "busy")]),
                stat("Alerts firing", [('count(ALERTS{alertstate="firing", alertname=~"Mlcd.*"}) or vector(0)',
                                        "alerts")], thresholds=[(1, "red")],
                     description="MLCD alerts firing now (deploy/prometheus/rules.yml)."),
                ts("Jobs by state", [("sum by (state) (mlcd_coordinator_jobs)", "{{state}}")], stack=True,
                   description="Jobs the coordinator knows, by state."),
                ts("Workers by state", [("sum by (state) (mlcd_coordinator_workers)", "{{state}}")], stack=True,
                   description="Registered worker agents: idle, busy (in a gang), draining, lost."),
                ts("Gang size", [("sum(mlcd_coordinator_gang_size)", "workers in gangs")], min_zero=True,
                   description="Workers in the gangs running now."),
                ts("Gang starts and restarts", [
                    ("sum(increase(mlcd_coordinator_gang_starts_total[$__rate_interval]))", "started"),
                    ("sum(increase(mlcd_coordinator_gang_restarts_total[$__rate_interval]))", "restarted (failure)"),
                    ("sum(increase(mlcd_coordinator_restarts_total[$__rate_interval]))", "coordinator recoveries"),
                ], description="Restarts count against the job's max_restarts."),
                ts("Mean time in each phase (time range)", [
                    ("sum by (phase) (increase(mlcd_coordinator_phase_seconds_sum[$__range])) / "
                     "sum by (phase) (increase(mlcd_coordinator_phase_seconds_count[$__range]))", "{{phase}}")],
                   unit="s", description="Average seconds jobs spent in each state before leaving it, over the "
                                         "dashboard's time range (increase, so coordinator restarts do not skew it)."),
                ts("Epochs committed", [("sum(increase(mlcd_coordinator_epochs_committed_total[$__rate_interval]))",
                                         "epochs")], description="Epoch-end checkpoints committed."),
            ]),
            ("Training", [
                ts("Loss", [(f"avg by (job_id, variant) (mlcd_worker_loss{{{JOB}}})", "{{job_id}} {{variant}}")],
                   description="Training loss (batch mean) by job and loss variant (mlcd, mlc, softmax)."),
                ts("Throughput", [(f"avg by (job_id) (rate(mlcd_worker_samples_total{{{JOB}}}[$__rate_interval]))",
                                   "{{job_id}}")], unit="none", min_zero=True,
                   description="Training samples per second of each job (every rank counts the global batch)."),
                ts("Mean positive / negative cosine", [
                    (f"avg by (job_id) (mlcd_worker_mean_positive_cosine{{{JOB}}})", "{{job_id}} positive"),
                    (f"avg by (job_id) (mlcd_worker_mean_negative_cosine{{{JOB}}})", "{{job_id}} negative"),
                ], description="The paper's Fig. 3: mean cosine of embeddings to their positive class centres "
                               "and to the sampled negative centres."),
                ts("Learning rate", [(f"max by (job_id) (mlcd_worker_learning_rate{{{JOB}}})", "{{job_id}}")],
                   description="Backbone learning rate (warmup, then cosine)."),
                ts("Optimizer steps", [(f"max by (job_id) (mlcd_worker_global_step{{{JOB}}})", "{{job_id}}")],
                   description="Global optimizer step of each job (counts all rounds)."),
                ts("Checkpoint time", [
                    (f"max by (job_id) (rate(mlcd_worker_checkpoint_seconds_sum{{{JOB}}}[$__rate_interval]) / "
                     f"rate(mlcd_worker_checkpoint_seconds_count{{{JOB}}}[$__rate_interval]))", "{{job_id}}")],
                   unit="s", description="Seconds to write a checkpoint (slowest rank)."),
            ]),
        ],
    },
    {
        "uid": "mlcd-step-breakdown",
        "title": "MLCD / Per-rank step breakdown",
        "description": "Where each rank's step time goes: backbone, classification layer, collectives, label wait, "
                       "data wait.",
        "variables": [DATASOURCE_VAR, JOB_VAR, RANK_VAR],
        "rows": [
            ("Step time", [
                ts("Mean step time by part", [
                    (f"sum by (job_id, rank) (rate(mlcd_worker_{part}_seconds_sum{{{JOB_RANK}}}[$__rate_interval])) / "
                     f"sum by (job_id, rank) (rate(mlcd_worker_{part}_seconds_count{{{JOB_RANK}}}[$__rate_interval]))",
                     f"{{{{job_id}}}} rank {{{{rank}}}} {label}")
                    for part, label in STEP_PARTS], unit="s", stack=True, width=24,
                   description="Mean seconds per step of each part, stacked per rank; the rest of "
                               "mlcd_worker_step_seconds is bookkeeping."),
                ts("Step time p50 / p95", [
                    (f"histogram_quantile(0.5, sum by (job_id, rank, le) "
                     f"(rate(mlcd_worker_step_seconds_bucket{{{JOB_RANK}}}[$__rate_interval])))",
                     "{{job_id}} rank {{rank}} p50"),
                    (f"histogram_quantile(0.95, sum by (job_id, rank, le) "
                     f"(rate(mlcd_worker_step_seconds_bucket{{{JOB_RANK}}}[$__rate_interval])))",
                     "{{job_id}} rank {{rank}} p95"),
                ], unit="s"),
                ts("Label wait (fraction of step time)", [
                    (f"mlcd:worker_label_wait_fraction:rate5m{{{JOB_RANK}}}", "{{job_id}} rank {{rank}}")],
                   unit="percentunit", min_zero=True,
                   description="Alert MlcdLabelWaitHigh fires above 5% for 10 minutes."),
                ts("Share of step time by part", [
                    (f"sum by (job_id) (rate(mlcd_worker_{part}_seconds_sum{{{JOB_RANK}}}[$__rate_interval])) / "
                     f"sum by (job_id) (rate(mlcd_worker_step_seconds_sum{{{JOB_RANK}}}[$__rate_interval]))",
                     f"{{{{job_id}}}} {label}")
                    for part, label in STEP_PARTS], unit="percentunit", stack=True,
                   description="Share of the selected ranks' step time per part, per job."),
                ts("Steps per second", [
                    (f"sum by (job_id, rank) (rate(mlcd_worker_steps_total{{{JOB_RANK}}}[$__rate_interval]))",
                     "{{job_id}} rank {{rank}}")], unit="none", min_zero=True),
                ts("Gradient norm", [(f"max by (job_id, rank) (mlcd_worker_grad_norm{{{JOB_RANK}}})",
                                      "{{job_id}} rank {{rank}}")],
                   description="Backbone gradient norm before clipping."),
            ]),
        ],
    },
    {
        "uid": "mlcd-labelstore",
        "title": "MLCD / Label store",
        "description": "mlcd-labelstore: requests, latency, ids read and missing, writes.",
        "variables": [DATASOURCE_VAR],
        "rows": [
            ("Requests", [
                ts("Requests by method and code", [
                    ("sum by (method, code) (rate(mlcd_labelstore_requests_total[$__rate_interval]))",
                     "{{method}} {{code}}")], unit="reqps"),
                ts("Latency p50 / p99 by method", [
                    ("histogram_quantile(0.5, sum by (method, le) "
                     "(rate(mlcd_labelstore_request_duration_seconds_bucket[$__rate_interval])))", "{{method}} p50"),
                    ("histogram_quantile(0.99, sum by (method, le) "
                     "(rate(mlcd_labelstore_request_duration_seconds_bucket[$__rate_interval])))", "{{method}} p99"),
                ], unit="s"),
                ts("GetLabels p99 (alert signal)", [("mlcd:labelstore_get_labels_p99_seconds:rate5m", "p99")],
                   unit="s", description="Alert MlcdLabelStoreSlowReads fires above 50 ms for 10 minutes."),
                ts("Ids per GetLabels (p50 / p99)", [
                    ("histogram_quantile(0.5, sum by (le) (rate(mlcd_labelstore_get_batch_ids_bucket"
                     "[$__rate_interval])))", "p50"),
                    ("histogram_quantile(0.99, sum by (le) (rate(mlcd_labelstore_get_batch_ids_bucket"
                     "[$__rate_interval])))", "p99"),
                ]),
            ]),
            ("Rows", [
                ts("Ids read / missing per second", [
                    ("sum(rate(mlcd_labelstore_ids_read_total[$__rate_interval]))", "read"),
                    ("sum(rate(mlcd_labelstore_ids_missing_total[$__rate_interval]))", "missing"),
                ], unit="none"),
                ts("Rows written per second", [
                    ("sum(rate(mlcd_labelstore_rows_written_total[$__rate_interval]))", "written")], unit="none"),
                stat("Label sets", [("sum(mlcd_labelstore_label_sets)", "sets")]),
                stat("Missing ids (share of reads)", [
                    ("sum(increase(mlcd_labelstore_ids_missing_total[$__range])) / "
                     "clamp_min(sum(increase(mlcd_labelstore_ids_read_total[$__range])), 1)", "missing")],
                    unit="percentunit", thresholds=[(0.0001, "yellow")]),
            ]),
        ],
    },
    {
        "uid": "mlcd-clustering",
        "title": "MLCD / Clustering",
        "description": "mlcd-clusterd: spherical k-means per iteration, top-l assignment, label quality.",
        "variables": [DATASOURCE_VAR],
        "rows": [
            ("k-means", [
                ts("Objective", [("max(mlcd_clusterd_kmeans_objective)", "objective")],
                   description="Sum of inner products to the nearest centroid, after each iteration."),
                ts("Mean similarity to the nearest centroid", [("max(mlcd_clusterd_kmeans_mean_similarity)",
                                                                 "mean similarity")]),
                ts("Imbalance factor", [("max(mlcd_clusterd_kmeans_imbalance_factor)", "imbalance")],
                   description="1 = perfectly balanced clusters."),
                ts("Iterations done of target, and iteration time", [
                    ("max(mlcd_clusterd_kmeans_iteration) + 1", "iterations done"),
                    ("max(mlcd_clusterd_kmeans_target_iterations)", "target iterations"),
                    ("sum(rate(mlcd_clusterd_kmeans_iteration_seconds_sum[$__rate_interval])) / "
                     "sum(rate(mlcd_clusterd_kmeans_iteration_seconds_count[$__rate_interval]))", "seconds/iteration"),
                ]),
            ]),
            ("Assignment and label quality", [
                ts("Assignment rows per second", [
                    ("max(mlcd_clusterd_assign_rows_per_second)", "current pass"),
                    ("sum(rate(mlcd_clusterd_assign_rows_total[$__rate_interval]))", "average")], unit="none"),
                ts("Feature rows read per second", [("sum(rate(mlcd_clusterd_rows_read_total[$__rate_interval]))",
                                                     "rows")], unit="none"),
                ts("Label quality (with class labels)", [
                    ("max(mlcd_clusterd_label_top1_recall)", "top-1 recall"),
                    ("max(mlcd_clusterd_label_topl_recall)", "top-l recall"),
                    ("max(mlcd_clusterd_label_nmi)", "NMI"),
                ], unit="percentunit",
                   description="Paper appendix A.8: recall of the true class among an image's top-1 / top-l "
                               "clusters, and NMI of the top-1 assignment (only when class labels are known)."),
                ts("Jobs running / queued", [("sum(mlcd_clusterd_jobs_running)", "running"),
                                             ("sum(mlcd_clusterd_jobs_queued)", "queued")]),
                ts("Mean call duration by method (time range)", [
                    ("sum by (method) (increase(mlcd_clusterd_request_duration_seconds_sum[$__range])) / "
                     "sum by (method) (increase(mlcd_clusterd_request_duration_seconds_count[$__range]))", "{{method}}")],
                   unit="s", description="Cluster and Assign calls are few and long: their mean duration over the "
                                         "dashboard's time range (a rate-based quantile would be empty most of the "
                                         "time)."),
                ts("Calls by method and code (time range)", [
                    ("sum by (method, code) (increase(mlcd_clusterd_requests_total[$__range]))",
                     "{{method}} {{code}}")]),
            ]),
        ],
    },
]


def render(d):
    panels, next_id, y = [], 1, 0
    for row_title, row_panels in d["rows"]:
        panels.append({"type": "row", "title": row_title, "id": next_id, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        next_id += 1
        y += 1
        x, row_h = 0, 0
        for p in row_panels:
            w, h = p.pop("_w"), p.pop("_h")
            if x + w > 24:
                x, y = 0, y + row_h
                row_h = 0
            panel = {"id": next_id, "gridPos": {"h": h, "w": w, "x": x, "y": y}, "datasource": DATASOURCE}
            panel.update(p)
            panel["targets"] = [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr,
                                 "legendFormat": legend, "range": True, "editorMode": "code"}
                                for i, (expr, legend) in enumerate(p["targets"])]
            panels.append(panel)
            next_id += 1
            x += w
            row_h = max(row_h, h)
        y += row_h
    return {
        "uid": d["uid"], "title": d["title"], "description": d["description"],
        "tags": ["mlcd"], "timezone": "browser", "editable": True, "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "timepicker": {},
        "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "MLCD dashboards", "type": "dashboards", "tags": ["mlcd"], "asDropdown": True,
                   "includeVars": True, "keepTime": True}],
        "templating": {"list": d["variables"]},
        "panels": panels,
    }


def files():
    import copy
    out = {}
    for d in copy.deepcopy(DASHBOARDS):
        name = d["uid"].replace("mlcd-", "") + ".json"
        out[name] = json.dumps(render(d), indent=2, sort_keys=False) + "\n"
    return out


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, text in files().items():
        path = os.path.join(OUT_DIR, name)
        current = open(path).read() if os.path.exists(path) else None
        if current != text:
            if check:
                stale.append(name)
            else:
                with open(path, "w") as f:
                    f.write(text)
                print("wrote", os.path.relpath(path))
    extra = sorted(set(os.listdir(OUT_DIR)) - set(files()))
    if check and (stale or extra):
        print("deploy/grafana/dashboards is not what generate_dashboards.py writes: "
              f"differs {stale}, not generated {extra}; run deploy/grafana/generate_dashboards.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
