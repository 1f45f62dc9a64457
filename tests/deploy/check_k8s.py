#!/usr/bin/python3
"""Renders every overlay of deploy/k8s with `kubectl kustomize` and checks what comes out.

    check_k8s.py --source-dir REPO [--kubectl kubectl] [--binary NAME=PATH ...] [--self-test]

Checks, for every overlay under deploy/k8s/overlays:
  * the expected objects exist (coordinator Deployment + Service, label store StatefulSet
    with a volume claim template + headless Service, clusterd Deployment + Service, worker
    StatefulSet running `mlcd-worker agent` + headless Service, the shared ReadWriteMany
    claim, the ConfigMap, the NetworkPolicies), all in one namespace and labelled
    app.kubernetes.io/part-of: mlcd;
  * every container: pinned image (no :latest; the gpu overlay uses the -cuda tag), the
    right binary, --listen / --metrics-listen on the ports of common/flags.h (metrics = port
    + 1), container ports, gRPC readiness and liveness probes on the plaintext health-only
    port (--health-listen, port + 2: kubelet's grpc probes cannot speak TLS),
    Prometheus annotations on the metrics port, cpu/memory requests <= limits, non-root
    read-only security context, every $(VAR) of the args defined, every volume mounted;
  * TLS (docs/security.md): the ConfigMap sets MLCD_TLS_CERT/KEY/CA under /etc/mlcd/tls,
    every pod mounts the Secret mlcd-tls there read-only, the services (not the workers)
    pass --tokens-file from the Secret mlcd-tokens mounted at /etc/mlcd/tokens; in the
    per-pod certificate overlay (extras/cert-manager-csi, checked like the overlays) the
    workers mount instead a read-only csi.cert-manager.io volume issued for their own pod
    (common name and DNS name <pod>.mlcd-worker.<namespace>.svc, server and client usages,
    readable by the pod's group), the services keep the Secret;
  * Services target named container ports of the pods they select, on the same numbers;
    the ConfigMap's peer addresses name those Services and ports;
  * GPUs: the gpu overlay's workers request nvidia.com/gpu (requests = limits), nothing in
    the cpu overlay does, and no other component ever does;
  * NetworkPolicy: evaluated as Kubernetes would for a matrix of (source pod, destination,
    port): workers and clients (mlcd.io/client: "true") reach what they need, a stranger
    pod reaches nothing, Prometheus reaches only the metrics ports;
  * with --binary NAME=PATH: every flag the manifests pass to NAME appears in its --help.

--self-test copies deploy/k8s to a temp dir, breaks it in several known ways, one at a
time, and requires the checks to catch every one (so this test cannot pass vacuously).
Exits 0 when everything holds; otherwise prints each problem and exits 1.
"""

import argparse
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

NAMESPACE = "mlcd"
PART_OF = ("app.kubernetes.io/part-of", "mlcd")
COMPONENTS = {
    # component: (binary, subcommand, flags.h constant, workload kind)
    "coordinator": ("mlcd-coordinator", None, "kDefaultCoordinatorPort", "Deployment"),
    "labelstore": ("mlcd-labelstore", None, "kDefaultLabelstorePort", "StatefulSet"),
    "clusterd": ("mlcd-clusterd", None, "kDefaultClusterdPort", "Deployment"),
    "worker": ("mlcd-worker", "agent", "kDefaultWorkerPort", "StatefulSet"),
}
# The flag that sets the /metrics address. The worker agent hands its address to the
# training process it runs (`mlcd-worker train --metrics-listen`).
METRICS_FLAG = {"coordinator": "--metrics-listen", "labelstore": "--metrics-listen",
                "clusterd": "--metrics-listen", "worker": "--metrics-listen"}
PEER_ENV = {"MLCD_COORDINATOR": "coordinator", "MLCD_LABELSTORE": "labelstore",
            "MLCD_CLUSTERD": "clusterd"}


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, message):
        self.items.append(f"{where}: {message}")

    def check(self, condition, where, message):
        if not condition:
            self.add(where, message)
        return condition


def read_default_ports(source_dir):
    """The default ports of common/flags.h: {component: port}."""
    text = open(os.path.join(source_dir, "common", "flags.h")).read()
    ports = {}
    for component, (_, _, constant, _) in COMPONENTS.items():
        m = re.search(r"constexpr\s+int\s+" + constant + r"\s*=\s*(\d+)\s*;", text)
        if not m:
            raise SystemExit(f"common/flags.h has no `constexpr int {constant} = N;`")
        ports[component] = int(m.group(1))
    return ports


def render(kubectl, overlay_dir):
    try:
        proc = subprocess.run([kubectl, "kustomize", overlay_dir], capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit(f"cannot run {kubectl!r}: install kubectl (Debian package kubernetes-client; "
                         "scripts/setup.sh does)")
    if proc.returncode != 0:
        raise RuntimeError(f"`{kubectl} kustomize {overlay_dir}` failed:\n{proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


# ---- quantities -----------------------------------------------------------------------

_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def quantity(value):
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?", str(value))
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""]


# ---- label selectors and NetworkPolicy --------------------------------------------------

def selector_matches(selector, labels):
    """A LabelSelector (matchLabels + matchExpressions) against a label map. {} matches all."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def ingress_allowed(policies, src, dst, port):
    """Whether NetworkPolicies let pod `src` open TCP `port` on pod `dst`.

    A pod is {"namespace", "namespace_labels", "labels", "ports": {name: number}}."""
    selecting = [p for p in policies
                 if p["metadata"].get("namespace") == dst["namespace"]
                 and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
                 and selector_matches(p["spec"].get("podSelector", {}), dst["labels"])]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            if not port_matches(rule.get("ports"), port, dst):
                continue
            peers = rule.get("from")
            if not peers:
                return True
            for peer in peers:
                if "ipBlock" in peer:
                    continue
                ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
                if ns_sel is None:
                    ns_ok = src["namespace"] == policy["metadata"].get("namespace")
                else:
                    ns_ok = selector_matches(ns_sel, src["namespace_labels"])
                pod_ok = True if pod_sel is None else selector_matches(pod_sel, src["labels"])
                if ns_ok and pod_ok:
                    return True
    return False


def port_matches(ports, port, dst):
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        value = p.get("port")
        if value is None:
            return True
        number = dst["ports"].get(value) if isinstance(value, str) else value
        end = p.get("endPort", number)
        if number is not None and number <= port <= end:
            return True
    return False


# ---- the checks -------------------------------------------------------------------------

def index(docs):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), {})[d["metadata"]["name"]] = d
    return by_kind


def flag_values(args):
    """{"--flag": value} of the --flag=value / --flag value arguments."""
    values = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                values[k] = v
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                values[a] = args[i + 1]
                i += 1
            else:
                values[a] = ""
        i += 1
    return values


def host_port(address):
    host, _, port = address.rpartition(":")
    return host, int(port) if port.isdigit() else None


def check_per_pod_cert(cw, volume, fs_group, problems):
    """A worker's /etc/mlcd/tls from cert-manager's csi-driver: a certificate of its own pod."""
    csi = volume.get("csi") or {}
    attrs = csi.get("volumeAttributes") or {}
    key = "csi.cert-manager.io/"
    problems.check(csi.get("driver") == "csi.cert-manager.io" and csi.get("readOnly") is True, cw,
                   "the per-pod TLS volume must be a read-only csi volume of driver csi.cert-manager.io")
    problems.check(attrs.get(key + "issuer-name") == "mlcd-ca-issuer", cw,
                   "the per-pod certificate must be issued by mlcd-ca-issuer (the CA the services trust)")
    cn = attrs.get(key + "common-name", "")
    problems.check(cn == "${POD_NAME}.mlcd-worker.${POD_NAMESPACE}.svc", cw,
                   f"the per-pod certificate's common name is {cn!r}: it must be "
                   "${POD_NAME}.mlcd-worker.${POD_NAMESPACE}.svc (the coordinator binds a worker to it)")
    dns = [n.strip() for n in attrs.get(key + "dns-names", "").split(",")]
    problems.check(cn in dns, cw, "the per-pod certificate's DNS names must include its common name")
    usages = {u.strip() for u in attrs.get(key + "key-usages", "").split(",")}
    problems.check({"server auth", "client auth"} <= usages, cw,
                   "the per-pod certificate needs key usages server auth and client auth (mTLS)")
    problems.check(attrs.get(key + "fs-group") == str(fs_group), cw,
                   f"csi.cert-manager.io/fs-group must be the pod's fsGroup {fs_group} (the key is read by uid 10001)")
    for attr, default in (("certificate-file", "tls.crt"), ("privatekey-file", "tls.key"), ("ca-file", "ca.crt")):
        problems.check(attrs.get(key + attr, default) == default, cw,
                       f"{key}{attr} must be {default} (the ConfigMap's MLCD_TLS_* name it)")


def check_overlay(name, docs, ports, problems, binaries_flags, per_pod_certs=False):
    where = f"overlay {name}"
    by_kind = index(docs)
    gpu_overlay = name == "gpu"

    # Everything namespaced, labelled.
    for d in docs:
        kind, meta = d["kind"], d["metadata"]
        w = f"{where}: {kind}/{meta['name']}"
        if kind != "Namespace":
            problems.check(meta.get("namespace") == NAMESPACE, w, f"namespace is {meta.get('namespace')!r}, "
                           f"expected {NAMESPACE!r}")
        if kind != "ConfigMap":
            problems.check((meta.get("labels") or {}).get(PART_OF[0]) == PART_OF[1], w,
                           f"missing label {PART_OF[0]}: {PART_OF[1]}")
    # The Namespace is deploy/k8s/namespace, never part of an overlay (deleting an overlay
    # must not delete the namespace and every claim in it).
    problems.check(not by_kind.get("Namespace"), where,
                   "renders a Namespace: it belongs in deploy/k8s/namespace, not in the base or an overlay")
    # Upgrades and disruptions: workers are replaced by hand (OnDelete) after a drain, and
    # budgets keep voluntary disruptions to one worker and away from the stores.
    worker_sts = by_kind.get("StatefulSet", {}).get("mlcd-worker") or {}
    problems.check((worker_sts.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete", where,
                   "StatefulSet mlcd-worker needs updateStrategy OnDelete (a rolling update stops every gang)")
    budgets = by_kind.get("PodDisruptionBudget", {})
    for name in ("mlcd-worker", "mlcd-labelstore", "mlcd-coordinator"):
        problems.check(name in budgets, where, f"no PodDisruptionBudget {name}")
    worker_pod = (worker_sts.get("spec", {}).get("template") or {}).get("spec") or {}
    grace = worker_pod.get("terminationGracePeriodSeconds") or 30
    worker_env = {e.get("name"): e.get("value") for c in worker_pod.get("containers") or [] for e in c.get("env") or []}
    deadline = worker_env.get("MLCD_STOP_DEADLINE_SECONDS")
    problems.check(deadline is not None and deadline.isdigit() and int(deadline) + 10 <= grace, where,
                   f"worker MLCD_STOP_DEADLINE_SECONDS ({deadline}) must be at least 10 s below "
                   f"terminationGracePeriodSeconds ({grace}): the agent reports and deregisters after it")

    configmaps = by_kind.get("ConfigMap", {})
    config = next((c for n, c in configmaps.items() if n.startswith("mlcd-config")), None)
    if not problems.check(config is not None, where, "no ConfigMap mlcd-config"):
        config = {"data": {}, "metadata": {"name": "?"}}
    services = by_kind.get("Service", {})
    pvcs = by_kind.get("PersistentVolumeClaim", {})

    shared = pvcs.get("mlcd-shared")
    if problems.check(shared is not None, where, "no PersistentVolumeClaim mlcd-shared"):
        problems.check("ReadWriteMany" in shared["spec"].get("accessModes", []), where,
                       "PersistentVolumeClaim mlcd-shared must be ReadWriteMany (paths are shared by pods "
                       "on different nodes)")

    pods = {}  # component -> pod description for the NetworkPolicy matrix
    shared_mounts = {}  # component -> {(mountPath, subPath)} of the claim mlcd-shared
    images = set()
    for component, (binary, subcommand, _, kind) in COMPONENTS.items():
        wname = f"mlcd-{component}"
        w = f"{where}: {kind}/{wname}"
        workload = by_kind.get(kind, {}).get(wname)
        if not problems.check(workload is not None, where, f"no {kind} {wname}"):
            continue
        spec = workload["spec"]
        template = spec["template"]
        labels = template["metadata"].get("labels") or {}
        annotations = template["metadata"].get("annotations") or {}
        podspec = template["spec"]
        problems.check(selector_matches(spec.get("selector"), labels), w,
                       "spec.selector does not match the pod template's labels")
        problems.check(labels.get("app.kubernetes.io/component") == component, w,
                       f"pod label app.kubernetes.io/component must be {component}")
        problems.check(labels.get(PART_OF[0]) == PART_OF[1], w, f"pod label {PART_OF[0]}: {PART_OF[1]} missing")
        if component in ("coordinator", "labelstore"):
            problems.check(spec.get("replicas", 1) == 1, w, "must have exactly 1 replica (single-writer RocksDB)")
        if component == "coordinator":
            problems.check((spec.get("strategy") or {}).get("type") == "Recreate", w,
                           "needs strategy Recreate so two pods never open the same database")
        if component == "worker":
            problems.check(spec.get("replicas", 1) >= 1, w, "needs at least one replica")

        # Pod security.
        psc = podspec.get("securityContext") or {}
        problems.check(psc.get("runAsNonRoot") is True, w, "pod securityContext.runAsNonRoot must be true")
        problems.check(isinstance(psc.get("runAsUser"), int) and psc["runAsUser"] > 0, w,
                       "pod securityContext.runAsUser must be a non-zero uid")
        problems.check(podspec.get("automountServiceAccountToken") is False, w,
                       "automountServiceAccountToken must be false (the services never call the API)")

        containers = podspec.get("containers") or []
        main = containers[0] if containers else None
        if not problems.check(len(containers) == 1, w, f"expected one container, found {len(containers)}"):
            if main is None:
                continue
        c = main
        cw = f"{w} container {c.get('name')}"
        image = c.get("image", "")
        images.add(image)
        problems.check(re.fullmatch(r"[a-z0-9.\-]+(:[0-9]+)?/[a-z0-9._/\-]+:[A-Za-z0-9._\-]+", image or "")
                       is not None, cw, f"image {image!r} must be registry/name:tag")
        problems.check(not image.endswith(":latest"), cw, "image must not use the :latest tag")
        problems.check(image.endswith("-cuda") == gpu_overlay, cw,
                       f"image {image!r}: the gpu overlay uses the -cuda tag, the others must not")

        args = list(c.get("command") or []) + list(c.get("args") or [])
        if args and args[0].endswith("tini"):
            args = args[2:] if len(args) > 1 and args[1] == "--" else args[1:]
        problems.check(bool(args) and args[0] == binary, cw, f"runs {args[:1]}, expected {binary}")
        if subcommand:
            problems.check(len(args) > 1 and args[1] == subcommand, cw, f"expected `{binary} {subcommand}`")
        flags = flag_values(args)
        port = ports[component]
        listen = flags.get("--listen", "")
        metrics = flags.get(METRICS_FLAG[component], "")
        problems.check(host_port(listen) == ("0.0.0.0", port), cw,
                       f"--listen is {listen!r}, expected 0.0.0.0:{port} (common/flags.h)")
        problems.check(host_port(metrics) == ("0.0.0.0", port + 1), cw,
                       f"{METRICS_FLAG[component]} is {metrics!r}, expected 0.0.0.0:{port + 1}")
        problems.check("--data-dir" in flags and flags["--data-dir"].startswith("/"), cw,
                       "needs --data-dir with an absolute path")
        problems.check("--log-level" in flags, cw, "needs --log-level (from MLCD_LOG_LEVEL)")

        # Every $(VAR) in the args comes from env or the ConfigMap.
        env_names = {e["name"] for e in c.get("env") or []}
        for ef in c.get("envFrom") or []:
            ref = (ef.get("configMapRef") or {}).get("name")
            if problems.check(ref in configmaps, cw, f"envFrom names ConfigMap {ref!r}, which is not rendered"):
                env_names |= set((configmaps[ref].get("data") or {}).keys())
        for a in args:
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                problems.check(var in env_names, cw, f"argument {a!r} uses $({var}), which no env entry defines")
        for peer_env in PEER_ENV:
            problems.check(peer_env in env_names, cw, f"environment lacks {peer_env} (peer address)")

        cports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        problems.check(cports.get("grpc") == port, cw, f"container port grpc must be {port}, is {cports.get('grpc')}")
        problems.check(cports.get("metrics") == port + 1, cw,
                       f"container port metrics must be {port + 1}, is {cports.get('metrics')}")
        for probe_name in ("readinessProbe", "livenessProbe"):
            probe = c.get(probe_name)
            if problems.check(probe is not None, cw, f"no {probe_name}"):
                grpc_probe = probe.get("grpc")
                if problems.check(grpc_probe is not None, cw, f"{probe_name} must be a gRPC health probe (grpc:)"):
                    problems.check(grpc_probe.get("port") == port + 2, cw,
                                   f"{probe_name} probes port {grpc_probe.get('port')}, the health-only "
                                   f"listener is on {port + 2}")
        startup = c.get("startupProbe")
        if startup is not None and "grpc" in startup:
            problems.check(startup["grpc"].get("port") == port + 2, cw, "startupProbe probes the wrong port")
        problems.check(host_port(flags.get("--health-listen", "")) == ("0.0.0.0", port + 2), cw,
                       f"--health-listen is {flags.get('--health-listen')!r}, expected 0.0.0.0:{port + 2} "
                       "(the grpc probes' plaintext health port)")
        problems.check(cports.get("health") == port + 2, cw, f"container port health must be {port + 2}")
        problems.check(annotations.get("prometheus.io/scrape") == "true", w, "annotation prometheus.io/scrape "
                       "must be \"true\"")
        problems.check(annotations.get("prometheus.io/port") == str(port + 1), w,
                       f"annotation prometheus.io/port must be \"{port + 1}\", is {annotations.get('prometheus.io/port')!r}")
        problems.check(annotations.get("prometheus.io/path", "/metrics") == "/metrics", w,
                       "annotation prometheus.io/path must be /metrics")

        # Resources.
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if problems.check(r in req and r in lim, cw, f"needs {r} requests and limits"):
                try:
                    problems.check(quantity(req[r]) <= quantity(lim[r]), cw,
                                   f"{r} request {req[r]} exceeds its limit {lim[r]}")
                except ValueError as e:
                    problems.add(cw, str(e))
        gpus_req, gpus_lim = req.get("nvidia.com/gpu"), lim.get("nvidia.com/gpu")
        if component == "worker" and gpu_overlay:
            problems.check(gpus_lim is not None and int(gpus_lim) >= 1, cw,
                           "gpu overlay: workers must have an nvidia.com/gpu limit >= 1")
            problems.check(gpus_req is None or gpus_req == gpus_lim, cw,
                           "nvidia.com/gpu requests must equal limits")
        else:
            problems.check(gpus_req is None and gpus_lim is None, cw,
                           "must not request nvidia.com/gpu" + ("" if gpu_overlay else " in the cpu overlay"))

        # Container security.
        csc = c.get("securityContext") or {}
        problems.check(csc.get("allowPrivilegeEscalation") is False, cw, "allowPrivilegeEscalation must be false")
        problems.check(csc.get("readOnlyRootFilesystem") is True, cw, "readOnlyRootFilesystem must be true")
        problems.check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), cw,
                       "capabilities must drop ALL")

        # Volumes: every mount backed, PVCs exist, data dir and /tmp writable.
        volumes = {v["name"]: v for v in podspec.get("volumes") or []}
        claim_templates = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        problems.check(len(mounts) == len(c.get("volumeMounts") or []), cw, "two volumeMounts share a mountPath")
        for path, vname in mounts.items():
            if vname in claim_templates:
                continue
            if not problems.check(vname in volumes, cw, f"mount {path} names volume {vname!r}, which is not declared"):
                continue
            pvc = (volumes[vname].get("persistentVolumeClaim") or {}).get("claimName")
            if pvc is not None:
                problems.check(pvc in pvcs, cw, f"volume {vname} claims {pvc!r}, which is not rendered")
        data_dir = flags.get("--data-dir", "")
        problems.check(any(data_dir == p or data_dir.startswith(p.rstrip("/") + "/") for p in mounts), cw,
                       f"--data-dir {data_dir} is not on a mounted volume (the root filesystem is read-only)")
        problems.check("/tmp" in mounts, cw, "/tmp must be a mounted volume (read-only root filesystem)")
        # TLS material and tokens from Secrets.
        secret_mounts = {m["mountPath"]: ((volumes.get(m["name"]) or {}).get("secret") or {}).get("secretName")
                         for m in c.get("volumeMounts") or [] if m.get("readOnly")}
        if component == "worker" and per_pod_certs:
            tls_volume = next((volumes.get(m["name"]) or {} for m in c.get("volumeMounts") or []
                               if m["mountPath"] == "/etc/mlcd/tls"), {})
            check_per_pod_cert(cw, tls_volume, psc.get("fsGroup"), problems)
        else:
            problems.check(secret_mounts.get("/etc/mlcd/tls") == "mlcd-tls", cw,
                           "must mount the Secret mlcd-tls read-only at /etc/mlcd/tls (TLS certificate, key, CA)")
        if component != "worker":
            problems.check(flags.get("--tokens-file") == "/etc/mlcd/tokens/tokens", cw,
                           "needs --tokens-file=/etc/mlcd/tokens/tokens (callers are checked)")
            problems.check(secret_mounts.get("/etc/mlcd/tokens") == "mlcd-tokens", cw,
                           "must mount the Secret mlcd-tokens read-only at /etc/mlcd/tokens")
        if component in ("coordinator", "clusterd", "worker"):
            shared = {(m["mountPath"], m.get("subPath", "")) for m in c.get("volumeMounts") or []
                      if (volumes.get(m["name"], {}).get("persistentVolumeClaim") or {}).get("claimName")
                      == "mlcd-shared"}
            problems.check(("/var/lib/mlcd/shared", "") in shared, cw,
                           "must mount the shared claim mlcd-shared at /var/lib/mlcd/shared")
            shared_mounts[component] = shared
            # Every subPath folder of the claim is made by an init container running as the
            # service user, before the kubelet would make it as root (NFS, root_squash).
            made = set()
            for ic in podspec.get("initContainers") or []:
                icw = f"{w} init container {ic.get('name')}"
                isc = ic.get("securityContext") or {}
                problems.check(isc.get("allowPrivilegeEscalation") is False and isc.get("readOnlyRootFilesystem") is True
                               and "ALL" in ((isc.get("capabilities") or {}).get("drop") or []), icw,
                               "needs the main container's restricted securityContext")
                problems.check(ic.get("image") == image, icw, "must use the pod's image")
                cmd = list(ic.get("command") or []) + list(ic.get("args") or [])
                if cmd[:2] == ["mkdir", "-p"]:
                    made.update(cmd[2:])
            for _, sub in shared:
                if sub:
                    problems.check("/var/lib/mlcd/shared/" + sub in made, cw,
                                   f"subPath {sub} of mlcd-shared is not made by an init container (`mkdir -p "
                                   f"/var/lib/mlcd/shared/{sub}` as uid 10001)")
            if component == "coordinator":
                # Paths the coordinator hands to clusterd and the workers live under these.
                for sub in ("jobs", "features"):
                    problems.check(any(p == data_dir.rstrip("/") + "/" + sub for p, _ in shared), cw,
                                   f"{data_dir}/{sub} (job directories, round-0 features) must be on mlcd-shared")
        if component == "labelstore":
            problems.check("data" in claim_templates and mounts.get(data_dir) == "data", cw,
                           "the label store's --data-dir must be its volumeClaimTemplate `data`")
        if component == "coordinator":
            vol = volumes.get(mounts.get(data_dir, ""), {})
            problems.check("persistentVolumeClaim" in vol, cw,
                           "the coordinator's --data-dir must be on a PersistentVolumeClaim (job state survives restarts)")

        if component == "worker":
            problems.check(spec.get("serviceName") in services, w, "serviceName must name a rendered Service")
            env = {e["name"]: e for e in c.get("env") or []}
            problems.check(((env.get("POD_IP") or {}).get("valueFrom") or {}).get("fieldRef", {})
                           .get("fieldPath") == "status.podIP", cw, "needs POD_IP from status.podIP (advertised host)")
            problems.check(flags.get("--host") == "$(POD_IP)", cw,
                           "the agent must advertise its pod IP (--host=$(POD_IP)) for the rendezvous")
            gpus_env = (env.get("MLCD_GPUS") or {}).get("value")
            problems.check(gpus_env == str(gpus_lim or 0), cw,
                           f"MLCD_GPUS (--gpus, the capacity reported) is {gpus_env!r} but the container has "
                           f"{gpus_lim or 0} GPU(s)")
        if component == "labelstore":
            problems.check(spec.get("serviceName") in services, w, "serviceName must name a rendered Service")

        # The flags exist in the binary.
        help_text = binaries_flags.get(binary)
        if help_text is not None:
            key = f"{binary} {subcommand}" if subcommand else binary
            for f in flags:
                problems.check(re.search(r"(^|[\s,])" + re.escape(f) + r"\b", help_text[subcommand or ""]) is not None,
                               cw, f"passes {f}, which `{key} --help` does not list")

        pods[component] = {"namespace": NAMESPACE, "namespace_labels": {"kubernetes.io/metadata.name": NAMESPACE},
                           "labels": labels, "ports": {k: v for k, v in cports.items()},
                           "service_port": port}

        # The Service in front of it.
        service = services.get(wname)
        if problems.check(service is not None, where, f"no Service {wname}"):
            sw = f"{where}: Service/{wname}"
            problems.check(selector_matches({"matchLabels": service["spec"].get("selector") or {}}, labels)
                           and service["spec"].get("selector"), sw, f"selector does not select the {wname} pods")
            for sp in service["spec"].get("ports") or []:
                target = sp.get("targetPort", sp.get("port"))
                number = cports.get(target) if isinstance(target, str) else target
                problems.check(number is not None and number == sp.get("port"), sw,
                               f"port {sp.get('name')} {sp.get('port')} -> targetPort {target!r} resolves to {number}")
            sports = {sp.get("name"): sp.get("port") for sp in service["spec"].get("ports") or []}
            problems.check(sports.get("grpc") == port, sw, f"needs port grpc {port}")
            if component in ("labelstore", "worker"):
                problems.check(service["spec"].get("clusterIP") == "None", sw, "must be headless (clusterIP: None)")

    # Paths on shared storage mean the same file in every pod that passes them around.
    if len(shared_mounts) == 3:
        problems.check(shared_mounts["coordinator"] == shared_mounts["clusterd"] == shared_mounts["worker"], where,
                       f"coordinator, clusterd and workers must mount mlcd-shared at the same paths: {shared_mounts}")

    # One image everywhere.
    problems.check(len(images) == 1, where, f"all containers must use the same image, found {sorted(images)}")

    # Peer addresses in the ConfigMap point at the Services.
    data = config.get("data") or {}
    for env_name, component in PEER_ENV.items():
        value = data.get(env_name, "")
        host, port = host_port(value)
        problems.check(host == f"mlcd-{component}" and port == ports[component], where,
                       f"ConfigMap {config['metadata']['name']}: {env_name}={value!r}, expected "
                       f"mlcd-{component}:{ports[component]}")
    problems.check(data.get("MLCD_LOG_LEVEL") in ("debug", "info", "warning", "error"), where,
                   "ConfigMap: MLCD_LOG_LEVEL must be debug|info|warning|error")
    for env_name, file_name in (("MLCD_TLS_CERT", "tls.crt"), ("MLCD_TLS_KEY", "tls.key"), ("MLCD_TLS_CA", "ca.crt")):
        problems.check(data.get(env_name) == "/etc/mlcd/tls/" + file_name, where,
                       f"ConfigMap: {env_name} must be /etc/mlcd/tls/{file_name} (TLS on for every process)")

    check_network_policies(where, by_kind.get("NetworkPolicy", {}), pods, problems)


def check_network_policies(where, policies_by_name, pods, problems):
    policies = list(policies_by_name.values())
    problems.check(bool(policies), where, "no NetworkPolicy")
    if len(pods) != len(COMPONENTS):
        return
    deny_all = [p for p in policies
                if not p["spec"].get("ingress") and "Ingress" in (p["spec"].get("policyTypes") or [])
                and selector_matches(p["spec"].get("podSelector"), {PART_OF[0]: PART_OF[1]})]
    problems.check(bool(deny_all), where, "needs a default-deny ingress policy selecting every mlcd pod")

    ns = {"kubernetes.io/metadata.name": NAMESPACE}
    sources = {name: {"namespace": NAMESPACE, "namespace_labels": ns, "labels": p["labels"]}
               for name, p in pods.items()}
    sources["client"] = {"namespace": NAMESPACE, "namespace_labels": ns,
                         "labels": {"mlcd.io/client": "true", "app": "mlcdctl"}}
    sources["stranger"] = {"namespace": NAMESPACE, "namespace_labels": ns, "labels": {"app": "something-else"}}
    sources["other-namespace"] = {"namespace": "default", "namespace_labels": {"kubernetes.io/metadata.name": "default"},
                                  "labels": {"mlcd.io/client": "true"}}
    sources["prometheus"] = {"namespace": "monitoring",
                             "namespace_labels": {"kubernetes.io/metadata.name": "monitoring"},
                             "labels": {"app.kubernetes.io/name": "prometheus"}}
    allowed_grpc = {
        "coordinator": {"worker", "client"},
        "labelstore": {"worker", "clusterd", "coordinator", "client"},
        "clusterd": {"coordinator", "client"},
        "worker": {"coordinator", "client", "worker"},
    }
    for dst_name, dst in pods.items():
        port = dst["service_port"]
        for src_name, src in sources.items():
            expected = src_name in allowed_grpc[dst_name]
            got = ingress_allowed(policies, src, dst, port)
            problems.check(got == expected, where,
                           f"NetworkPolicy: {src_name} -> {dst_name}:{port} is {'allowed' if got else 'denied'}, "
                           f"expected {'allowed' if expected else 'denied'}")
            # Workers reach each other on every port (collectives), their metrics included.
            expected_metrics = src_name == "prometheus" or (src_name == dst_name == "worker")
            got = ingress_allowed(policies, src, dst, port + 1)
            problems.check(got == expected_metrics, where,
                           f"NetworkPolicy: {src_name} -> {dst_name} metrics :{port + 1} is "
                           f"{'allowed' if got else 'denied'}, expected {'allowed' if expected_metrics else 'denied'}")
    # Collectives between workers use ports nobody can predict; nobody else gets them.
    worker = pods["worker"]
    for port in (29500, 45000, 61000):
        for src_name, src in sources.items():
            expected = src_name == "worker"
            got = ingress_allowed(policies, src, worker, port)
            problems.check(got == expected, where,
                           f"NetworkPolicy: {src_name} -> worker:{port} is {'allowed' if got else 'denied'}, "
                           f"expected {'allowed' if expected else 'denied'}")


def read_binary_help(binaries):
    """{binary: {subcommand or "": help text}} for the --binary NAME=PATH arguments."""
    out = {}
    for spec in binaries:
        name, _, path = spec.partition("=")
        subcommand = COMPONENTS.get(name.replace("mlcd-", ""), (None, None))[1]
        texts = {}
        for sub in ([""] + ([subcommand] if subcommand else [])):
            cmd = [path] + ([sub] if sub else []) + ["--help"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                  env=dict(os.environ, MLCD_NO_BLAS_TUNING="1"))
            if proc.returncode != 0:
                raise SystemExit(f"`{' '.join(cmd)}` exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
            texts[sub] = proc.stdout + proc.stderr
        out[name] = texts
    return out


def run_checks(k8s_dir, source_dir, kubectl, binaries_flags, extras=True):
    """All problems found in the overlays under k8s_dir (and the extras), a list of strings."""
    problems = Problems()
    ports = read_default_ports(source_dir)
    overlays_dir = os.path.join(k8s_dir, "overlays")
    overlays = sorted(d for d in os.listdir(overlays_dir) if os.path.isdir(os.path.join(overlays_dir, d)))
    for required in ("cpu", "gpu"):
        problems.check(required in overlays, k8s_dir, f"missing overlay {required}")
    # The per-pod certificate overlay is a whole application too (the cpu overlay, workers
    # with certificates of their own): it gets every check.
    targets = [(name, os.path.join(overlays_dir, name), False) for name in overlays]
    targets.append(("cert-manager-csi", os.path.join(k8s_dir, "extras", "cert-manager-csi"), True))
    for name, path, per_pod_certs in targets:
        try:
            docs = render(kubectl, path)
        except (RuntimeError, yaml.YAMLError) as e:
            problems.add(f"overlay {name}", str(e))
            continue
        check_overlay(name, docs, ports, problems, binaries_flags, per_pod_certs)
    if extras:
        check_extras(k8s_dir, kubectl, problems)
    return problems.items


def check_extras(k8s_dir, kubectl, problems):
    """The Prometheus Operator and cert-manager extras and the Grafana dashboards ConfigMap render, in the
    namespace; cert-manager's Certificate fills the Secret mlcd-tls the pods mount."""
    expected = {os.path.join(k8s_dir, "extras", "prometheus-operator"): {"PodMonitor", "PrometheusRule"},
                os.path.join(k8s_dir, "namespace"): {"Namespace"},
                os.path.join(k8s_dir, "jobs"): {"Job"},
                os.path.join(k8s_dir, "backup"): {"CronJob", "PersistentVolumeClaim"},
                os.path.join(k8s_dir, "extras", "cert-manager"): {"Issuer", "Certificate"},
                os.path.join(k8s_dir, "..", "grafana"): {"ConfigMap"}}
    for path, kinds in expected.items():
        where = os.path.relpath(path, os.path.join(k8s_dir, ".."))
        try:
            docs = render(kubectl, path)
        except (RuntimeError, yaml.YAMLError) as e:
            problems.add(where, str(e))
            continue
        problems.check({d["kind"] for d in docs} == kinds, where, f"renders {sorted(d['kind'] for d in docs)}, "
                       f"expected {sorted(kinds)}")
        for d in docs:
            if d["kind"] == "Namespace":
                problems.check(d["metadata"].get("name") == NAMESPACE, where, f"the Namespace must be {NAMESPACE}")
                continue
            problems.check(d["metadata"].get("namespace") == NAMESPACE, where,
                           f"{d['kind']}/{d['metadata']['name']} is not in namespace {NAMESPACE}")
            if d["kind"] == "Certificate" and not d["spec"].get("isCA"):
                problems.check(d["spec"].get("secretName") == "mlcd-tls", where,
                               "the service Certificate must fill the Secret mlcd-tls (mounted by every pod)")
                problems.check({"server auth", "client auth"} <= set(d["spec"].get("usages") or []), where,
                               "the service Certificate needs usages server auth and client auth (mTLS)")
            if d["kind"] == "PodMonitor":
                problems.check([e.get("port") for e in d["spec"].get("podMetricsEndpoints", [])] == ["metrics"], where,
                               "the PodMonitor must scrape the container port named metrics")
                problems.check(d["spec"].get("jobLabel") == "app.kubernetes.io/name", where,
                               "the PodMonitor's jobLabel must be app.kubernetes.io/name (the rules' job names)")
            if d["kind"] == "ConfigMap":
                problems.check((d["metadata"].get("labels") or {}).get("grafana_dashboard") == "1", where,
                               "the dashboards ConfigMap needs the label grafana_dashboard: \"1\"")
                dashboards = os.listdir(os.path.join(path, "dashboards"))
                problems.check(sorted(d.get("data", {})) == sorted(dashboards), where,
                               f"the ConfigMap holds {sorted(d.get('data', {}))}, the folder has {sorted(dashboards)}")


# Each mutation: (description, file relative to deploy/k8s, old text, new text, a substring
# the resulting problem list must contain).
MUTATIONS = [
    ("workers roll on a template change", "base/worker.yaml", "    type: OnDelete\n", "    type: RollingUpdate\n",
     "updateStrategy OnDelete"),
    ("no disruption budgets", "base/kustomization.yaml", "  - disruption-budgets.yaml\n", "",
     "no PodDisruptionBudget mlcd-worker"),
    ("stop deadline as long as the grace period", "base/worker.yaml", 'value: "100"', 'value: "120"',
     "MLCD_STOP_DEADLINE_SECONDS (120)"),
    ("shared subPath folder not made before the mount", "base/worker.yaml",
     "            - /var/lib/mlcd/shared/coordinator/features\n", "", "subPath coordinator/features"),
    ("probe on the wrong port", "base/coordinator.yaml",
     "readinessProbe:\n            grpc:\n              port: 7602", "readinessProbe:\n            grpc:\n              port: 7700",
     "readinessProbe probes port 7700"),
    ("listen port that does not match flags.h", "base/labelstore.yaml", "--listen=0.0.0.0:7610",
     "--listen=0.0.0.0:7619", "--listen is '0.0.0.0:7619'"),
    ("GPU request dropped from the gpu overlay", "overlays/gpu/worker-gpu.yaml",
     "            limits:\n              cpu: \"8\"\n              memory: 32Gi\n              nvidia.com/gpu: \"1\"\n",
     "            limits:\n              cpu: \"8\"\n              memory: 32Gi\n",
     "nvidia.com/gpu limit"),
    ("GPU requested in the cpu overlay", "overlays/cpu/worker-cpu.yaml",
     "            limits:\n              cpu: \"4\"\n", "            limits:\n              nvidia.com/gpu: \"1\"\n              cpu: \"4\"\n",
     "must not request nvidia.com/gpu"),
    ("NetworkPolicy lets workers reach clusterd", "base/networkpolicy.yaml",
     "      app.kubernetes.io/component: clusterd\n      app.kubernetes.io/part-of: mlcd\n  policyTypes:\n    - Ingress\n"
     "  ingress:\n    - from:\n",
     "      app.kubernetes.io/component: clusterd\n      app.kubernetes.io/part-of: mlcd\n  policyTypes:\n    - Ingress\n"
     "  ingress:\n    - from:\n        - podSelector:\n            matchLabels:\n"
     "              app.kubernetes.io/component: worker\n",
     "worker -> clusterd:7620 is allowed"),
    ("default deny removed", "base/networkpolicy.yaml", "  name: mlcd-default-deny-ingress\n  labels:\n"
     "    app.kubernetes.io/part-of: mlcd\nspec:\n  podSelector:\n    matchLabels:\n      app.kubernetes.io/part-of: mlcd\n",
     "  name: mlcd-default-deny-ingress\n  labels:\n    app.kubernetes.io/part-of: mlcd\nspec:\n  podSelector:\n"
     "    matchLabels:\n      app.kubernetes.io/name: nothing\n",
     "default-deny"),
    ("Service targets a port name the pod does not have", "base/clusterd.yaml",
     "      port: 7620\n      targetPort: grpc", "      port: 7620\n      targetPort: grpcx",
     "resolves to None"),
    ("image left at :latest", "overlays/cpu/kustomization.yaml", "newTag: 0.1.0", "newTag: latest",
     "must not use the :latest tag"),
    ("container runs as root", "base/worker.yaml", "runAsNonRoot: true", "runAsNonRoot: false",
     "runAsNonRoot must be true"),
    ("metrics annotation on the wrong port", "base/clusterd.yaml", 'prometheus.io/port: "7621"',
     'prometheus.io/port: "7620"', 'prometheus.io/port must be "7621"'),
    ("broken YAML", "base/worker.yaml", "  serviceName: mlcd-worker\n", "  serviceName: [mlcd-worker\n",
     "kustomize"),
    ("workers mount the shared job directories elsewhere", "base/worker.yaml",
     "              mountPath: /var/lib/mlcd/coordinator/jobs\n", "              mountPath: /var/lib/mlcd/jobs\n",
     "must mount mlcd-shared at the same paths"),
    ("TLS turned off", "base/kustomization.yaml", "      - MLCD_TLS_CA=/etc/mlcd/tls/ca.crt\n", "",
     "MLCD_TLS_CA must be"),
    ("tokens file dropped", "base/labelstore.yaml", "            - --tokens-file=/etc/mlcd/tokens/tokens\n", "",
     "needs --tokens-file"),
    ("memory request above its limit", "base/labelstore.yaml", "              memory: 1Gi\n",
     "              memory: 9Gi\n", "memory request 9Gi exceeds its limit"),
    ("per-pod certificates shared again (no pod name in the common name)", "extras/cert-manager-csi/worker-per-pod-cert.yaml",
     "common-name: ${POD_NAME}.mlcd-worker.${POD_NAMESPACE}.svc", "common-name: mlcd-worker.${POD_NAMESPACE}.svc",
     "the per-pod certificate's common name is 'mlcd-worker.${POD_NAMESPACE}.svc'"),
    ("per-pod certificate without client auth", "extras/cert-manager-csi/worker-per-pod-cert.yaml",
     "key encipherment,server auth,client auth", "key encipherment,server auth", "server auth and client auth"),
    ("per-pod overlay left on the shared Secret", "extras/cert-manager-csi/kustomization.yaml",
     "patchesStrategicMerge:\n  - worker-per-pod-cert.yaml\n", "", "read-only csi volume of driver csi.cert-manager.io"),
]


# Checked only when the binaries' --help is available (--binary).
FLAG_MUTATIONS = [
    ("a flag the worker agent does not have", "base/worker.yaml", "            - --host=$(POD_IP)\n",
     "            - --host=$(POD_IP)\n            - --advertise-address=$(POD_IP)\n",
     "passes --advertise-address, which `mlcd-worker agent --help` does not list"),
]


def self_test(k8s_dir, source_dir, kubectl, binaries_flags):
    failures = []
    mutations = MUTATIONS + (FLAG_MUTATIONS if "mlcd-worker" in binaries_flags else [])
    with tempfile.TemporaryDirectory(prefix="mlcd-k8s-selftest-") as tmp:
        for description, rel, old, new, expect in mutations:
            copy_dir = os.path.join(tmp, "k8s")
            shutil.rmtree(copy_dir, ignore_errors=True)
            shutil.copytree(k8s_dir, copy_dir)
            path = os.path.join(copy_dir, rel)
            text = open(path).read()
            if text.count(old) != 1:
                failures.append(f"self-test `{description}`: the text to break was not found exactly once in {rel} "
                                f"(update MUTATIONS in {os.path.basename(__file__)})")
                continue
            open(path, "w").write(text.replace(old, new))
            found = run_checks(copy_dir, source_dir, kubectl, binaries_flags, extras=False)
            if not any(expect in p for p in found):
                failures.append(f"self-test `{description}`: the checks did not catch it (wanted a problem containing "
                                f"{expect!r}; got {found[:3]})")
            else:
                print(f"self-test ok: {description} -> caught")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                        help="check the flags the manifests pass against NAME's --help")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()

    k8s_dir = os.path.join(args.source_dir, "deploy", "k8s")
    binaries_flags = read_binary_help(args.binary)
    problems = run_checks(k8s_dir, args.source_dir, args.kubectl, binaries_flags)
    for p in problems:
        print("problem:", p)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in deploy/k8s")
        return 1
    print(f"deploy/k8s (and extras, deploy/grafana): all overlays render and pass the checks ({', '.join(sorted(os.listdir(os.path.join(k8s_dir, 'overlays'))) + ['extras/cert-manager-csi'])})"
          + (f"; flags checked against {', '.join(sorted(binaries_flags))}" if binaries_flags else ""))
    if args.self_test:
        failures = self_test(k8s_dir, args.source_dir, args.kubectl, binaries_flags)
        for f in failures:
            print("problem:", f)
        if failures:
            return 1
        print("self-test: every broken variant was caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
