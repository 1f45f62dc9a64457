#!/usr/bin/python3
"""The papers' claims at small scale, through the real system (bench/RESULTS.md, "Multi-label
objectives" and "Multistage contrastive learning").

Every trained row is a job submitted to a local cluster (`mlcdctl local up`: mlcd-labelstore,
mlcd-clusterd, mlcd-coordinator and two `mlcd-worker agent` slots on loopback), trained by a
gang of 2 workers over Gloo and scored by the job's own EVALUATING phase. Datasets are made by
`mlcdctl dataset make` at the start.

  --suite multilabel   Fashion mosaics (docs/data.md): the ground-truth label sets imported with
                       `mlcdctl labels import`; bce, mulcon (two-step and LLCL from the start),
                       mulsupcon, supcon-all, supcon-any and MLCD on the given set, plus MLCD on
                       its own pixel clustering; multi-label linear protocol (mAP, F1s) and, for
                       bce / mulcon, the model's own predictions.
  --suite mcl          Trifeature and fashion-tint: MCL jobs of 3 stages (stage 0 alone is
                       SimCLR: the same computation as a plain infonce job), the first two stages'
                       integration scored by `mlcd-worker eval --stage-checkpoint`, and an MLCD job
                       of 3 rounds whose round checkpoints are scored the same way; one linear
                       probe per attribute.

  bench/experiments/run_papers.py --suite multilabel --seeds 1,2,3
  bench/experiments/run_papers.py --suite mcl --seeds 1,2,3
  bench/experiments/run_papers.py --suite multilabel --smoke        # pipeline check, minutes

Results: bench/results/papers-<suite>.json; --write-md replaces the suite's section of
bench/RESULTS.md.
"""
import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_experiments import META, ROOT, Runner, get, load_average, merge, replace_section, save  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Issue 39's suite: Fashion mosaics, 56 x 56 grey, 10 labels, 1-4 per image.

ML_DATA = {"kind": "fashion-mosaic", "train": 5000, "test": 1000}
ML_BASE = {
    "dataset": {"format": "webdataset", "mean": [0.286], "stddev": [0.353]},
    "loss": {"variant": "mlcd"},
    # ViT-tiny (width 192, depth 6, 3 heads) on 14 x 14 patches: 16 tokens of a 56 x 56 mosaic,
    # each patch a quarter of one Fashion-MNIST item.
    "model": {"preset": "vit-tiny", "image_size": 56, "patch_size": 14, "channels": 1,
              "embed_dim": 256},
    "optimizer": {"lr": 0.001, "weight_decay": 0.05, "warmup_fraction": 0.05},
    "training": {"world_size": 2, "batch_size": 256, "epochs_per_round": 4, "rounds": 1,
                 "threads_per_worker": 1, "seed": 1, "heartbeat_timeout_seconds": 120,
                 "collective_timeout_seconds": 300},
    "evaluation": {"enabled": True, "baselines": True},
}
# (name, claim group, description, spec overrides; "GT" = train on the imported set).
ML_ROWS = [
    ("bce", "mulcon", "image-level BCE (linear head)", {"loss": {"variant": "bce"}}),
    ("mulcon", "mulcon", "MulCon: label-level head, BCE then BCE + LLCL (two steps)",
     {"loss": {"variant": "mulcon", "mulcon": {"label_dim": 64, "heads": 4, "projection_dim": 64}}}),
    ("mulcon-llcl-start", "mulcon", "MulCon: BCE + LLCL from the start",
     {"loss": {"variant": "mulcon",
               "mulcon": {"label_dim": 64, "heads": 4, "projection_dim": 64, "pretrain_fraction": 0}}}),
    ("mulsupcon", "mulsupcon", "MulSupCon (a positive set per label)",
     {"loss": {"variant": "mulsupcon", "temperature": 0.1}}),
    ("supcon-all", "mulsupcon", "SupCon ALL (same label set)",
     {"loss": {"variant": "supcon-all", "temperature": 0.1}}),
    ("supcon-any", "mulsupcon", "SupCon ANY (any label in common)",
     {"loss": {"variant": "supcon-any", "temperature": 0.1}}),
    ("mlcd-gt", "mlcd", "MLCD on the ground-truth label sets (K = 10)",
     {"loss": {"variant": "mlcd", "sample_ratio": 1.0}}),
    ("mlcd-own", "mlcd", "MLCD on its own clustering of the pixels (k = 100, l = 4)",
     {"loss": {"variant": "mlcd", "sample_ratio": 1.0},
      "clustering": {"features": {"kind": "npy"}, "k": 100, "l": 4, "niter": 10}}),
]
# Rows run for every seed (they decide a claim); the others run for the first seed only.
ML_SEEDED = {"bce", "mulcon", "mulcon-llcl-start", "mulsupcon", "supcon-all", "supcon-any"}

# ---------------------------------------------------------------------------------------------
# Issue 40's suite: Trifeature (32 x 32 RGB; shape, texture, colour) and fashion-tint (28 x 28
# RGB; class, colour).

MCL_DATA = [{"kind": "trifeature", "train": 5000, "test": 1000, "image_size": 32},
            {"kind": "fashion-tint", "train": 5000, "test": 1000}]
MCL_BASE = {
    # SimCLR's augmentations, colour jitter off (the paper's feature-suppression setting: jitter
    # would erase the colour feature the stages are meant to move past).
    "dataset": {"format": "webdataset", "augment": True, "horizontal_flip": True,
                "color_jitter_prob": 0.0, "grayscale_prob": 0.0, "crop_min_scale": 0.5},
    "loss": {"variant": "infonce", "temperature": 0.25, "projection_dim": 64,
             "projection_hidden_dim": 128},
    # A ViT smaller than ViT-tiny: width 128, depth 4, 4 heads, 8 x 8 patches (16 tokens).
    "model": {"width": 128, "depth": 4, "heads": 4, "patch_size": 8, "channels": 3,
              "embed_dim": 128},
    "optimizer": {"lr": 0.001, "weight_decay": 0.05, "warmup_fraction": 0.05},
    # K = 3 clusters per stage (the paper: 5), N = 3 stages, b = 128: K^N = 27 <= M / b = 39
    # (5^3 = 125 would need b <= 40, too small a batch for 2 CPU cores' step time).
    "clustering": {"k": 3, "niter": 20},
    "training": {"world_size": 2, "batch_size": 128, "epochs_per_round": 4, "threads_per_worker": 1,
                 "seed": 1, "heartbeat_timeout_seconds": 120, "collective_timeout_seconds": 300},
    "mcl": {"stages": 3, "stage_init": "scratch"},
    "evaluation": {"enabled": True, "baselines": True},
}
MLCD_ROUNDS = {"loss": {"variant": "mlcd", "sample_ratio": 1.0},
               "clustering": {"features": {"kind": "npy"}, "k": 100, "l": 4, "niter": 10},
               "training": {"rounds": 3, "batch_size": 128}, "mcl": None}


def image_size_of(data):
    return data.get("image_size", 28 if data["kind"] == "fashion-tint" else 56)


def patch_size_of(data):
    return 7 if image_size_of(data) == 28 else 8


class PapersRunner(Runner):
    def make_dataset(self, data, seed=1):
        d = os.path.join(self.work, f"{data['kind']}-{data['train']}-{data['test']}-s{seed}")
        if not os.path.exists(os.path.join(d, "dataset.json")):
            args = ["dataset", "make", data["kind"], "--out", d, "--seed", str(seed),
                    "--train", str(data["train"]), "--test", str(data["test"])]
            if "image_size" in data:
                args += ["--image-size", str(data["image_size"])]
            self.mlcdctl(*args, timeout=1800)
        return d

    def pixel_npy(self, d):
        """The train split's raw pixels (n x side^2 x channels float32 in [0, 1], sample-id order:
        shard order, then member order) for round-0 k-means: clusterd makes pixel features
        from Fashion-MNIST only."""
        import tarfile
        import numpy as np
        from PIL import Image
        path = os.path.join(d, "train-pixels.npy")
        if not os.path.exists(path):
            rows = []
            shards = sorted(f for f in os.listdir(os.path.join(d, "train")) if f.endswith(".tar"))
            for shard in shards:
                with tarfile.open(os.path.join(d, "train", shard)) as tar:
                    for member in tar:
                        if member.name.endswith(".png"):
                            img = Image.open(tar.extractfile(member))
                            rows.append(np.asarray(img, dtype=np.float32).reshape(-1) / 255.0)
            np.save(path, np.stack(rows))
        return path

    def import_labels(self, d, name):
        out = self.mlcdctl("labels", "import", "--name", name, "--k", "10", "--jsonl",
                           os.path.join(d, "train-labels.jsonl"), "--index",
                           os.path.join(d, "train-index"), check=False, timeout=600)
        if out.returncode != 0 and "already" not in (out.stdout + out.stderr):
            raise RuntimeError(f"labels import: {out.stdout}\n{out.stderr}")

    def stage_eval(self, name, checkpoints, spec_path, limits):
        args = []
        for c in checkpoints:
            args += ["--stage-checkpoint", c]
        return self.worker_eval(name, [*args, "--spec", spec_path, *limits])


def dataset_spec(d):
    return {"index": os.path.join(d, "train-index")}


def eval_dataset(d, base_dataset):
    e = {"format": "webdataset", "index": os.path.join(d, "train-index"),
         "test_index": os.path.join(d, "test-index")}
    for key in ("mean", "stddev"):
        if key in base_dataset:
            e[key] = base_dataset[key]
    return e


def multi_label_row(m):
    if not m:
        return {}
    keys = ["mean_average_precision", "hamming_accuracy", "example_f1", "macro_f1", "micro_f1",
            "precision_at_1"]
    return {k: float(get(m, k)) for k in keys}


def attributes_row(attrs):
    return {get(a, "name", default=""): float(get(a, "linear_probe_accuracy", default=0)) for a in attrs or []}


def job_figures(job):
    e = get(job, "evaluation", default={})
    p = get(job, "progress", default={})
    phases = get(job, "phase_seconds", default={})
    return {
        "state": get(job, "state", default=""),
        "message": get(job, "message", default="")[:500],
        "job_id": get(job, "id", default=""),
        "multi_label": multi_label_row(get(e, "multi_label", default={})),
        "predictions": multi_label_row(get(e, "model_predictions", default={})),
        "attributes": attributes_row(get(e, "attributes", default=[])),
        "stages": [{"attributes": attributes_row(get(s, "attributes", default=[])),
                    "multi_label": multi_label_row(get(s, "multi_label", default={}))}
                   for s in get(e, "stages", default=[])],
        "baselines": {get(b, "name", default=""): {"multi_label": multi_label_row(get(b, "multi_label", default={})),
                                                   "attributes": attributes_row(get(b, "attributes", default=[]))}
                      for b in get(e, "baselines", default=[])},
        "optimizer_steps": int(get(p, "total_steps")),
        "phase_seconds": {k: float(v) for k, v in phases.items()},
        "rounds": [{"checkpoint": get(r, "checkpoint", default=""),
                    "cluster_sizes": [int(x) for x in get(r, "cluster_sizes", default=[])],
                    "adjusted_mutual_info": float(get(r, "adjusted_mutual_info", default=0))}
                   for r in get(job, "rounds", default=[])],
    }


def eval_file_figures(result):
    return {"multi_label": multi_label_row(result.get("multi_label", {})),
            "attributes": attributes_row(result.get("attributes", [])),
            "stages": [{"attributes": attributes_row(s.get("attributes", []))} for s in result.get("stages", [])]}


# ---------------------------------------------------------------------------------------------

def run_row(args, runner, results, row, label, work, summary):
    """Runs work(row), which fills the row in; a failure is recorded in the row (state ERROR
    unless the job had one, and the message) and the suite goes on. Times, logs, appends and
    saves the row."""
    start = time.time()
    runner.log(f"=== {label}")
    try:
        work(row)
    except Exception as exc:  # record and go on
        row.update({"state": row.get("state", "ERROR") if "job_id" in row else "ERROR",
                    "message": str(exc)[-2000:]})
    row["wall_seconds"] = time.time() - start
    runner.log(f"=== {label}: {summary(row)} {row['wall_seconds']:.0f} s {row.get('state')} "
               f"{row.get('message', '')[:300]}")
    results.append(row)
    save(args, results)


def run_multilabel(args, runner, results):
    data = dict(ML_DATA)
    base = copy.deepcopy(ML_BASE)
    if args.smoke:
        data.update({"train": 600, "test": 200})
        base["training"].update({"epochs_per_round": 1, "max_steps_per_epoch": 2, "batch_size": 64})
        base["model"].update({"preset": "", "width": 32, "depth": 1, "heads": 2, "embed_dim": 32})
    d = runner.make_dataset(data)
    runner.import_labels(d, "bench/mosaics-gt")
    base["dataset"].update(dataset_spec(d))
    base["evaluation"]["dataset"] = eval_dataset(d, base["dataset"])
    for seed in args.seeds:
        for name, group, desc, overrides in ML_ROWS:
            if args.only and name not in args.only:
                continue
            if seed != args.seeds[0] and name not in ML_SEEDED:
                continue
            spec = merge(base, overrides)
            spec["training"]["seed"] = seed
            if "clustering" not in overrides:
                spec["clustering"] = {"label_set": "bench/mosaics-gt"}
            else:
                spec["clustering"]["seed"] = seed
                spec["clustering"]["features"]["paths"] = [runner.pixel_npy(d)]
            row = {"name": name, "group": group, "description": desc, "seed": seed, "spec": spec}
            run_row(args, runner, results, row, f"{name} seed {seed} ({desc})",
                    lambda r, name=name, seed=seed, spec=spec:
                        r.update(job_figures(runner.job(f"{name}-s{seed}", spec))),
                    lambda r: f"mAP {r.get('multi_label', {}).get('mean_average_precision', 0):.4f}")


def run_mcl(args, runner, results):
    for data in MCL_DATA:
        if args.only_data and data["kind"] not in args.only_data:
            continue
        data = dict(data)
        base = copy.deepcopy(MCL_BASE)
        if args.smoke:
            data.update({"train": 640, "test": 200})
            base["training"].update({"epochs_per_round": 1, "max_steps_per_epoch": 2, "batch_size": 32})
            base["model"].update({"width": 32, "depth": 1, "heads": 2, "embed_dim": 32})
            base["clustering"]["k"] = 2
        d = runner.make_dataset(data)
        base["model"]["image_size"] = image_size_of(data)
        base["model"]["patch_size"] = patch_size_of(data)
        base["dataset"].update(dataset_spec(d))
        base["evaluation"]["dataset"] = eval_dataset(d, base["dataset"])
        # MLCD's rounds right after the first MCL seed: a cut-short run still has both. A job
        # keeps only its last round's checkpoints, so 1 and 2 rounds are jobs of their own.
        kinds = ([("mcl", args.seeds[0])] + [(f"mlcd-rounds-{r}", args.seeds[0]) for r in (1, 2, 3)]
                 + [("mcl", s) for s in args.seeds[1:]])
        for kind, seed in kinds:
            name = f"{data['kind']}-{kind}-s{seed}"
            if args.only and kind not in args.only:
                continue
            spec = copy.deepcopy(base)
            if kind.startswith("mlcd-rounds"):
                spec = merge(spec, MLCD_ROUNDS)
                spec.pop("mcl")
                spec["training"]["rounds"] = int(kind.rsplit("-", 1)[1])
                spec["clustering"]["features"]["paths"] = [runner.pixel_npy(d)]
                if args.smoke:
                    spec["clustering"].update({"k": 10, "l": 2})
            spec["training"]["seed"] = seed
            spec["clustering"]["seed"] = seed
            row = {"name": name, "dataset": data["kind"], "kind": kind, "seed": seed, "spec": spec}

            def work(r, name=name, kind=kind, spec=spec):
                r.update(job_figures(runner.job(name, spec)))
                # The first two stages' integration.
                checkpoints = [x["checkpoint"] for x in r["rounds"]]
                if kind == "mcl" and len(checkpoints) >= 2:
                    spec_path = os.path.join(runner.work, f"{name}.yaml")
                    result, _ = runner.stage_eval(f"{name}-first2", checkpoints[:2], spec_path, [])
                    r["first_two"] = eval_file_figures(result)

            run_row(args, runner, results, row, name, work, lambda r: str(r.get("attributes")))


# ---------------------------------------------------------------------------------------------

def run_ensemble_controls(args, runner, results):
    """The control for cross-stage integration: the stage-0 encoders (plain SimCLR) of the MCL
    jobs of different seeds, concatenated as MCL concatenates its stages, so the table can tell
    what the stages add from what a concatenation of independent encoders adds."""
    for data in MCL_DATA:
        mcl = [r for r in results if r.get("dataset") == data["kind"] and r.get("kind") == "mcl" and ok(r)]
        checkpoints = [r["rounds"][0]["checkpoint"] for r in mcl if r.get("rounds")]
        if len(checkpoints) < 2 or any(not os.path.isdir(c) for c in checkpoints):
            continue
        name = f"{data['kind']}-simclr-ensemble"
        spec_path = os.path.join(runner.work, f"{mcl[0]['name']}.yaml")
        row = {"name": name, "dataset": data["kind"], "kind": "simclr-ensemble",
               "seeds": [r["seed"] for r in mcl], "checkpoints": checkpoints}

        def work(r, name=name, checkpoints=checkpoints, spec_path=spec_path):
            result, _ = runner.stage_eval(name, checkpoints, spec_path, [])
            r.update(eval_file_figures(result))
            r["state"] = "SUCCEEDED"

        run_row(args, runner, results, row, name, work, lambda r: str(r.get("attributes")))


def mean_sd(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def ok(row):
    return row.get("state") in ("SUCCEEDED", "JOB_STATE_SUCCEEDED")


def markdown_multilabel(args, results):
    lines = [f"Command: `bench/experiments/run_papers.py --suite multilabel --seeds "
             f"{','.join(map(str, args.seeds))}` (JSON: `{os.path.relpath(args.json, ROOT)}`), "
             f"{META['date']}, load average {META['load_average_start']} at the start.", "",
             "Budget of every row: " + META["budget"], "",
             "Linear protocol on frozen embeddings (mean ± sd over the seeds run; mAP etc. in %):", "",
             "| row | seeds | mAP | micro-F1 | macro-F1 | example-F1 | P@1 | model's own mAP | steps | train s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, group, desc, _ in ML_ROWS:
        rows = [r for r in results if r["name"] == name and ok(r)]
        failed = [r for r in results if r["name"] == name and not ok(r)]
        if not rows:
            if failed:
                lines.append(f"| {desc} | **{failed[0].get('state')}** | | | | | | | | |")
            continue

        def col(key, source="multi_label"):
            return mean_sd([r.get(source, {}).get(key) for r in rows if r.get(source, {}).get(key) is not None])
        lines.append(f"| {desc} | {len(rows)} | {col('mean_average_precision')} | {col('micro_f1')} | "
                     f"{col('macro_f1')} | {col('example_f1')} | {col('precision_at_1')} | "
                     f"{col('mean_average_precision', 'predictions') if rows[0].get('predictions') else '-'} | "
                     f"{rows[0].get('optimizer_steps')} | {rows[0].get('phase_seconds', {}).get('TRAINING', 0):.0f} |")
    first = next((r for r in results if ok(r) and r.get("baselines")), None)
    if first:
        for b, fig in first["baselines"].items():
            m = fig.get("multi_label", {})
            if m:
                lines.append(f"| baseline: {b} | 1 | {mean_sd([m.get('mean_average_precision')])} | "
                             f"{mean_sd([m.get('micro_f1')])} | {mean_sd([m.get('macro_f1')])} | "
                             f"{mean_sd([m.get('example_f1')])} | {mean_sd([m.get('precision_at_1')])} | - | 0 | 0 |")
    lines.append("")
    return "\n".join(lines)


def markdown_mcl(args, results):
    lines = [f"Command: `bench/experiments/run_papers.py --suite mcl --seeds "
             f"{','.join(map(str, args.seeds))}` (JSON: `{os.path.relpath(args.json, ROOT)}`), "
             f"{META['date']}, load average {META['load_average_start']} at the start.", "",
             "Budget: " + META["budget"], ""]
    for data in MCL_DATA:
        mcl = [r for r in results if r.get("dataset") == data["kind"] and r.get("kind") == "mcl" and ok(r)]
        mlcd = sorted([r for r in results if r.get("dataset") == data["kind"]
                       and r.get("kind", "").startswith("mlcd-rounds") and ok(r)],
                      key=lambda r: r["spec"]["training"]["rounds"])
        if not mcl and not mlcd:
            continue
        attrs = list((mcl or mlcd)[0].get("attributes", {}).keys())
        lines.append(f"**{data['kind']}** ({data['train']} train / {data['test']} test images), linear probe "
                     f"accuracy % per attribute (mean ± sd over {len(mcl)} seeds for MCL rows):")
        lines.append("")
        lines.append("| row | " + " | ".join(attrs) + " |")
        lines.append("|---|" + "---:|" * len(attrs))

        def line(label, dicts):
            lines.append(f"| {label} | " + " | ".join(mean_sd([d.get(a) for d in dicts if d]) for a in attrs) + " |")
        ensemble = [r for r in results if r.get("dataset") == data["kind"] and r.get("kind") == "simclr-ensemble"
                    and ok(r)]
        if mcl:
            line("SimCLR (stage 0 alone)", [r["stages"][0]["attributes"] for r in mcl if r.get("stages")])
        for r in ensemble:
            line(f"{len(r['checkpoints'])} SimCLR encoders concatenated (stage 0 of seeds "
                 f"{', '.join(map(str, r['seeds']))})", [r.get("attributes")])
        if mcl:
            line("MCL, 2 stages integrated", [r.get("first_two", {}).get("attributes") for r in mcl])
            line("MCL, 3 stages integrated", [r.get("attributes") for r in mcl])
            for j in (1, 2):
                line(f"MCL stage {j} alone", [r["stages"][j]["attributes"] for r in mcl if len(r.get("stages", [])) > j])
        for r in mlcd:
            rounds = r["spec"]["training"]["rounds"]
            line(f"MLCD, {rounds} round{'s' if rounds > 1 else ''}", [r.get("attributes")])
        first = (mcl or mlcd)[0]
        for b, fig in first.get("baselines", {}).items():
            line(f"baseline: {b}", [fig.get("attributes")])
        if mcl:
            ami = [[round(x["adjusted_mutual_info"], 3) for x in r["rounds"]] for r in mcl]
            sizes = [r["rounds"][0]["cluster_sizes"] for r in mcl]
            phases = mcl[0].get("phase_seconds", {})
            lines.append("")
            lines.append(f"AMI between consecutive stages' clusterings, per seed: {ami}; stage-0 cluster sizes: "
                         f"{sizes}. Phase seconds of the first MCL job: "
                         + ", ".join(f"{k} {v:.0f}" for k, v in sorted(phases.items())) + ".")
        lines.append("")
    return "\n".join(lines)


def write_markdown(section_title, body):
    marker = f"### {section_title}: figures"
    replace_section(marker, marker + "\n\n" + body, r"\n#{2,3} ")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=["multilabel", "mcl"], required=True)
    ap.add_argument("--seeds", default="1", help="comma-separated training seeds")
    ap.add_argument("--only", default="", help="comma-separated row names (multilabel) or kinds (mcl: mcl, mlcd-rounds-1, -2, -3)")
    ap.add_argument("--only-data", default="", help="mcl: comma-separated dataset kinds")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work-dir", default=os.path.join(ROOT, ".mlcd", "papers"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the pipeline only")
    ap.add_argument("--write-md", action="store_true")
    ap.add_argument("--append", action="store_true", help="keep the rows of the JSON a run left and add these")
    ap.add_argument("--ensemble", action="store_true",
                    help="mcl: first score the MCL jobs' stage-0 encoders of the seeds concatenated (needs the "
                         "jobs' checkpoints: with --append after a run)")
    ap.add_argument("--from-json", action="store_true",
                    help="run nothing: print (and with --write-md write) the table of the JSON a run left")
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.only = [x for x in args.only.split(",") if x]
    args.only_data = [x for x in args.only_data.split(",") if x]
    args.json = args.json or os.path.join(ROOT, "bench", "results",
                                          f"papers-{args.suite}{'-smoke' if args.smoke else ''}.json")
    if args.suite == "multilabel":
        t = ML_BASE["training"]
        budget = (f"Fashion mosaics {ML_DATA['train']} train / {ML_DATA['test']} test images, model {ML_BASE['model']}, "
                  f"{t['epochs_per_round']} epochs, global batch {t['batch_size']} images (contrastive rows: two views "
                  f"each), {t['world_size']} workers x {t['threads_per_worker']} thread, AdamW lr "
                  f"{ML_BASE['optimizer']['lr']}; evaluation on all train / test images.")
    else:
        t = MCL_BASE["training"]
        budget = (f"model {MCL_BASE['model']}, InfoNCE τ = {MCL_BASE['loss']['temperature']}, global batch "
                  f"{t['batch_size']} images x 2 views, {t['epochs_per_round']} epochs per stage, K = "
                  f"{MCL_BASE['clustering']['k']}, {MCL_BASE['mcl']['stages']} stages from scratch; MLCD rows: "
                  f"k-means of the pixels k = 100, l = 4, 3 rounds of {t['epochs_per_round']} epochs, batch 128; "
                  f"{t['world_size']} workers x {t['threads_per_worker']} thread; evaluation on all train / test "
                  f"images, one linear probe per attribute.")
    META.update({"suite": args.suite, "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                 "load_average_start": load_average(), "cpus": os.cpu_count(), "budget": budget,
                 "seeds": args.seeds, "smoke": args.smoke})
    args.work_dir = os.path.join(args.work_dir, args.suite + ("-smoke" if args.smoke else ""))
    args.extra_features = []
    if args.from_json:
        with open(args.json) as f:
            doc = json.load(f)
        results = doc["rows"]
        META.update({k: doc[k] for k in ("date", "load_average_start", "budget") if k in doc})
        args.seeds = doc.get("seeds", args.seeds)
    else:
        runner = PapersRunner(args)
        results = []
        if args.append and os.path.exists(args.json):
            with open(args.json) as f:
                results = json.load(f)["rows"]
        try:
            if args.suite == "mcl" and args.ensemble:  # before cluster_up, which clears the jobs' folders
                run_ensemble_controls(args, runner, results)
            runner.cluster_up()
            (run_multilabel if args.suite == "multilabel" else run_mcl)(args, runner, results)
        finally:
            runner.cluster_down()
        save(args, results)
    body = markdown_multilabel(args, results) if args.suite == "multilabel" else markdown_mcl(args, results)
    print(body)
    if args.write_md:
        write_markdown("Multi-label objectives" if args.suite == "multilabel" else
                       "Multistage contrastive learning", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
