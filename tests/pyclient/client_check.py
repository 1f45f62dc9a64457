"""The installed `mlcd` package (python/) against a live local cluster; run by pyclient_test.cc.

    client_check.py CASE     CASE: settings | jobs | airflow | cancel | bad_spec | viewer

The environment is the cluster's (`mlcdctl local up` writes it to <dir>/env: MLCD_COORDINATOR,
MLCD_LABELSTORE, MLCD_TLS_CA/CERT/KEY, MLCD_TOKEN_FILE with the admin token) plus
MLCD_PACKAGE_DIR (where the package was pip-installed; it must be the one imported),
MLCD_SOURCE_DIR, MLCD_BIN_DIR, MLCD_TEST_DIR (scratch) and MLCD_VIEWER_TOKEN_FILE (a token of
role viewer added to the cluster's tokens file). Prints what it checked; exits 1 on the first
failed check.
"""
import json
import os
import subprocess
import sys
import time

import grpc
import yaml

import mlcd
from mlcd.v1 import job_pb2

ENV = os.environ
SRC, BIN, TMP = ENV.get("MLCD_SOURCE_DIR", ""), ENV.get("MLCD_BIN_DIR", ""), ENV.get("MLCD_TEST_DIR", "")
TINY_YAML = os.path.join(SRC, "examples", "tiny-test-job.yaml")
# Seconds any job of these checks may take to end (the tiny job takes a few).
JOB_TIMEOUT = 90


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def raises(exc_type, fn, what):
    try:
        fn()
    except exc_type as e:
        print(f"ok: {what}: {type(e).__name__}: {e}")
        return e
    except Exception as e:  # noqa: BLE001 - report the wrong kind
        raise AssertionError(f"{what}: raised {type(e).__name__}: {e}, not {exc_type.__name__}")
    raise AssertionError(f"{what}: nothing raised, expected {exc_type.__name__}")


def one_rank_job(name, steps_per_epoch=2, epochs=1):
    """A dict job document: the tiny job on one rank."""
    return {"apiVersion": "mlcd/v1", "kind": "TrainingJob",
            "metadata": {"name": name, "labels": {"purpose": "pyclient-test"}},
            "spec": {"dataset": {"limit": 256, "augment": False},
                     "clustering": {"features": {"kind": "pixels"}, "k": 8, "l": 2, "niter": 3},
                     "loss": {"sample_ratio": 0.5},
                     "model": {"width": 32, "depth": 1, "heads": 2, "embed_dim": 16},
                     "training": {"world_size": 1, "batch_size": 32, "epochs_per_round": epochs,
                                  "max_steps_per_epoch": steps_per_epoch, "threads_per_worker": 1,
                                  "seed": 3},
                     "evaluation": {"enabled": False}}}


def case_settings():
    """The settings as mlcdctl reads them; bad token and TLS files refused before any call."""
    s = mlcd.Settings.from_env({"MLCD_COORDINATOR": "h:1", "MLCD_TLS_CA": "", "MLCD_TOKEN_FILE": "t"},
                               labelstore="l:2")
    check((s.coordinator, s.labelstore, s.tls_ca, s.token_file, s.tls) == ("h:1", "l:2", None, "t", False),
          "from_env: variables, empty ones unset, keyword overrides")
    check(mlcd.Settings(tls_cert="c", tls_key="k").tls, "a client certificate without a CA still means TLS")
    path = os.path.join(TMP, "token")
    with open(path, "w") as f:
        f.write("\n  abcdefghijklmnop0123  \n")
    check(mlcd.read_token_file(path) == "abcdefghijklmnop0123", "token file: the token, white space ignored")
    for text, why in (("", "empty"), ("short", "too short"), ("abcdefghijklmnop0123 second", "two words")):
        with open(path, "w") as f:
            f.write(text)
        e = raises(mlcd.ConfigError, lambda: mlcd.Client(token_file=path), f"token file {why}")
        check(e.code == grpc.StatusCode.INVALID_ARGUMENT and e.field_path == "MLCD_TOKEN_FILE",
              f"token file {why}: INVALID_ARGUMENT naming MLCD_TOKEN_FILE")
    e = raises(mlcd.ConfigError, lambda: mlcd.Client(token=None, token_file=None, tls_key=None),
               "a certificate without its key")
    check(e.field_path == "tls_key", "the missing setting is named: tls_key")
    raises(mlcd.ConfigError, lambda: mlcd.Client(tls_ca=path), "a CA file that is not PEM")
    raises(TypeError, lambda: mlcd.Client().submit(42), "submit of something that is no job")
    # mlcd.v1 is generated at build time into the installed package, not taken from elsewhere.
    check(mlcd.__file__.startswith(ENV["MLCD_PACKAGE_DIR"]) and os.path.isfile(
        os.path.join(os.path.dirname(mlcd.__file__), "v1", "coordinator_pb2_grpc.py")),
        f"the pip-installed package is the one imported ({mlcd.__file__}) with its generated stubs")


def case_jobs():
    """Submit a YAML file idempotently, watch it to SUCCEEDED, get, list, its label set."""
    with mlcd.Client() as client:
        rid = f"pyclient-jobs-{os.getpid()}"
        first = client.submit(TINY_YAML, request_id=rid)
        again = client.submit(TINY_YAML, request_id=rid)
        check(first.id and again.id == first.id and again.created_unix_ms == first.created_unix_ms,
              f"the same request id twice gives the same job ({first.id})")
        with open(TINY_YAML) as f:
            doc = yaml.safe_load(f)
        check(client.submit(doc, request_id=rid).id == first.id,
              "the same spec as a dict: the same job (a dict is read as its YAML file is)")
        doc["spec"]["training"]["seed"] = 8
        raises(mlcd.AlreadyExistsError, lambda: client.submit(doc, request_id=rid),
               "the same request id with another spec")
        events = list(client.watch(first.id, timeout=JOB_TIMEOUT))
        states = [mlcd.state_name(e.job.state) for e in events]
        print(f"states watched: {states}")
        check(states[-1] == "SUCCEEDED" and not any(mlcd.is_terminal(e.job.state) for e in events[:-1]),
              f"watch ends with the event in which the job SUCCEEDED ({len(events)} events)")
        check(events[-1].job.progress.total_steps == 6, "it trained 2 epochs x 3 steps")
        job = client.get(first.id, include_history=True)
        check(job.state == mlcd.coordinator_pb2.JOB_STATE_SUCCEEDED and job.history and job.label_set,
              f"get: SUCCEEDED, with history and label set {job.label_set}")
        check(first.id in [j.id for j in client.list()], "list has it")
        check(first.id in [j.id for j in client.list(states=["succeeded"], page_size=1)],
              "list by state, one job per page, has it")
        check(first.id not in [j.id for j in client.list(states=[mlcd.coordinator_pb2.JOB_STATE_FAILED])],
              "list of FAILED jobs does not")
        labels(client, job)


def labels(client, job):
    info = client.describe_label_set(job.label_set)
    check((info.num_classes, info.labels_per_sample, info.num_samples) == (16, 4, 384)
          and info.state == mlcd.labelstore_pb2.LABEL_SET_STATE_SEALED,
          "describe_label_set: sealed, k 16, l 4, 384 samples")
    check(job.label_set in [s.name for s in client.list_label_sets(f"job/{job.id}/")],
          "list_label_sets by the job's prefix has it")
    ids = [0, 1, 383, 10**9]
    rows = client.get_labels(job.label_set, ids, with_scores=True)
    check(rows.missing_ids == [10**9] and rows.labels[3] == [-1] * 4, "get_labels: the unknown id is missing")
    check(all(len(r) == 4 and all(0 <= c < 16 for c in r) for r in rows.labels[:3]) and len(rows.scores) == 4,
          "get_labels: l labels in [0, k) and l scores per row")
    out = subprocess.run([os.path.join(BIN, "mlcdctl"), "-o", "json", "labels", "get", "--name",
                          job.label_set, "--ids", "0,1,383"], capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"mlcdctl labels get ran: {out.stderr.strip()}")
    cli_rows = [r["labels"] for r in json.loads(out.stdout)["rows"]]
    check(cli_rows == rows.labels[:3], f"the same rows as mlcdctl labels get: {cli_rows}")
    e = raises(mlcd.NotFoundError, lambda: client.describe_label_set("job/none/r0"), "an unknown label set")
    check(e.code == grpc.StatusCode.NOT_FOUND, "NOT_FOUND carried as the code")
    import_labels(client)


def import_labels(client):
    """import_labels by id makes a sealed set mlcdctl reads back; a bad input leaves none."""
    name = f"pyclient/import-{os.getpid()}"
    info = client.import_labels(name, 10, rows=[[5, -1, 6], [7, -1, -1], [1, 1, 8]],
                                metadata={"by": "pyclient"})
    check(info.state == mlcd.labelstore_pb2.LABEL_SET_STATE_SEALED and info.labels_per_sample == 2
          and info.num_samples == 3, f"import_labels: a sealed set of 3 samples, l 2: {info}")
    out = subprocess.run([os.path.join(BIN, "mlcdctl"), "-o", "json", "labels", "get", "--name", name,
                          "--ids", "0:3"], capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"mlcdctl labels get ran: {out.stderr.strip()}")
    rows = [r["labels"] for r in json.loads(out.stdout)["rows"]]
    check(rows == [[5, 6], [7, 7], [1, 8]], f"imported rows as mlcdctl reads them: {rows}")
    raises(mlcd.InvalidArgumentError, lambda: client.import_labels(name + "-bad", 10, rows=[[1], [12]]),
           "a label outside [0, k)")
    raises(mlcd.NotFoundError, lambda: client.describe_label_set(name + "-bad"),
           "a refused import leaves no set")


def case_airflow():
    """The example task twice with one task instance: one job, followed to SUCCEEDED."""
    sys.path.insert(0, os.path.join(SRC, "python", "examples"))
    import airflow_task

    class TI:
        dag_id, task_id, run_id, map_index = "encoders", "train", f"manual__{os.getpid()}", -1

    lines = []
    first = airflow_task.train_encoder(one_rank_job("airflow"), ti=TI(), timeout=JOB_TIMEOUT, log=lines.append)
    retry = airflow_task.train_encoder(one_rank_job("airflow"), ti=TI(), timeout=JOB_TIMEOUT, log=lines.append)
    print("\n".join(lines))
    check(first["state"] == "SUCCEEDED" and first["steps"] == 2 and first["checkpoint"],
          f"the task returned the SUCCEEDED job: {first}")
    check(retry["job_id"] == first["job_id"], "a retried try gets the job of the first try")
    with mlcd.Client() as client:
        job = client.get(first["job_id"])
    check(job.request_id == f"airflow/encoders/train/{TI.run_id}", f"request id from the task instance: {job.request_id}")


def case_cancel():
    """Cancel: the job ends CANCELLED; wait(check=True) raises with the job."""
    with mlcd.Client() as client:
        job = client.submit(one_rank_job("to-cancel", steps_per_epoch=1000, epochs=50),
                            request_id=f"pyclient-cancel-{os.getpid()}")
        cancelled = client.cancel(job.id, reason="pyclient test")
        check(cancelled.id == job.id, f"cancel returned the job ({mlcd.state_name(cancelled.state)})")
        e = raises(mlcd.JobNotSucceededError, lambda: client.wait(job.id, timeout=JOB_TIMEOUT, check=True),
                   "wait(check=True) on a cancelled job")
        check(e.job.state == mlcd.coordinator_pb2.JOB_STATE_CANCELLED, "it ended CANCELLED")
        raises(mlcd.NotFoundError, lambda: client.get("no-such-job"), "get of an unknown job")


def case_bad_spec():
    """A bad spec raises INVALID_ARGUMENT with each problem's field path (and YAML line)."""
    with open(TINY_YAML) as f:
        text = f.read()
    bad = os.path.join(TMP, "bad.yaml")
    with open(bad, "w") as f:
        f.write(text.replace("    l: 4\n", "    l: 40\n").replace("    width: 32\n", "    widht: 32\n"))
    line_of_width = text.splitlines().index("    width: 32") + 1
    with mlcd.Client() as client:
        e = raises(mlcd.InvalidArgumentError, lambda: client.submit(bad, request_id="pyclient-bad"), "a bad YAML file")
        check(e.code == grpc.StatusCode.INVALID_ARGUMENT and isinstance(e, mlcd.MlcdError), "code INVALID_ARGUMENT")
        paths = {p.path: p for p in e.problems}
        check("spec.model.widht" in paths and "spec.clustering.l" in paths, f"both field paths: {sorted(paths)}")
        check(paths["spec.model.widht"].line == line_of_width, f"the YAML line of the unknown field: {line_of_width}")
        doc = one_rank_job("bad")
        doc["spec"]["training"]["batch_size"] = 33
        doc["spec"]["training"]["world_size"] = 2
        e = raises(mlcd.InvalidArgumentError, lambda: client.submit(doc), "a bad dict")
        check("spec.training.batch_size" in e.field_paths, f"dict: field path {e.field_paths}")
        spec = job_pb2.JobSpec()
        spec.clustering.k = 8
        spec.clustering.l = 9
        e = raises(mlcd.InvalidArgumentError, lambda: client.submit(spec, dry_run=True), "a bad JobSpec message")
        check(e.field_path == "spec.clustering.l", f"message: field path {e.field_path}")
        before = len(list(client.list()))
        client.submit(TINY_YAML, dry_run=True)
        check(len(list(client.list())) == before, "a good spec's dry run passes and creates nothing")
        e = raises(mlcd.InvalidArgumentError, lambda: client.submit(TINY_YAML, request_id="x" * 201),
                   "a request id too long")
        check(e.field_path == "request_id", "request_id named")


def case_viewer():
    """A viewer token reads but cannot submit or cancel; no token and no TLS are refused; the
    token is not sent in plaintext."""
    viewer_file = ENV["MLCD_VIEWER_TOKEN_FILE"]
    deadline = time.monotonic() + 20  # the services reload their tokens file on SIGHUP
    while True:
        try:
            with mlcd.Client(token_file=viewer_file) as viewer:
                jobs = list(viewer.list())
            break
        except mlcd.UnauthenticatedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    check(True, f"a viewer lists jobs ({len(jobs)})")
    with mlcd.Client(token_file=viewer_file) as viewer:
        e = raises(mlcd.PermissionDeniedError, lambda: viewer.submit(TINY_YAML, request_id="viewer-1"),
                   "a viewer submits")
        check(e.code == grpc.StatusCode.PERMISSION_DENIED and "viewer" in e.message, "PERMISSION_DENIED, role named")
        if jobs:
            raises(mlcd.PermissionDeniedError, lambda: viewer.cancel(jobs[0].id), "a viewer cancels")
            check(viewer.get(jobs[0].id).id == jobs[0].id, "a viewer gets a job")
        check(isinstance(list(viewer.list_label_sets()), list), "a viewer lists label sets")
    with mlcd.Client(token_file=None) as anonymous:
        e = raises(mlcd.UnauthenticatedError, lambda: list(anonymous.list()), "no token")
        check(e.code == grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    e = raises(mlcd.ConfigError, lambda: mlcd.Client(tls_ca=None, tls_cert=None, tls_key=None),
               "the token in plaintext without insecure=True")
    check(e.field_path == "tls_ca" and "insecure=True" in e.message, "tls_ca and insecure=True named")
    with mlcd.Client(tls_ca=None, tls_cert=None, tls_key=None, token_file=None, timeout=3) as plaintext:
        e = raises(mlcd.UnavailableError, lambda: list(plaintext.list()), "plaintext to a TLS coordinator")
        check(ENV["MLCD_COORDINATOR"] in e.message, "the message names the address")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: client_check.py {{{'|'.join(CASES)}}}")
    CASES[sys.argv[1]]()
    print(f"{sys.argv[1]}: all checks passed")
