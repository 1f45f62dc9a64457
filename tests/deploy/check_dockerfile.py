#!/usr/bin/python3
"""Checks deploy/Dockerfile and deploy/Dockerfile.cuda (the gpu overlay's -cuda image, built by
the GPU build flavour) without a Docker engine (there is none on the build machines).

    check_dockerfile.py --source-dir REPO [--binary PATH ...]

  * two stages, both Debian 12 (bookworm): `build` and `runtime`;
  * the build stage installs its packages by running scripts/setup.sh (so its package list
    is the set-up script's, by construction) with MLCD_SETUP_PACKAGES_ONLY=1, which the
    script must honour, after copying only the script;
  * it builds, in Release, exactly the executables the components define
    (add_executable(mlcd-...) / mlcdctl in labelstore/, clusterd/, worker/, coordinator/,
    client/) and copies each into the runtime stage;
  * the runtime stage installs no -dev package, installs the packages computed by
    deploy/runtime-packages.sh plus libopenblas0-pthread and tini, runs as the non-root
    uid the Kubernetes manifests use, has an ENTRYPOINT (tini) and EXPOSEs the ports of
    common/flags.h and their metrics ports;
  * with --binary: deploy/runtime-packages.sh, run on the real executables of this build,
    resolves every directly linked library to a Debian package that apt knows, none of them
    a -dev package (the same command the image build runs).
"""

import argparse
import os
import re
import subprocess
import sys

COMPONENT_DIRS = ("labelstore", "clusterd", "worker", "coordinator", "client")


def parse_dockerfile(text):
    """[(instruction, argument)] with line continuations joined and comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        instr, _, arg = current.partition(" ")
        lines.append((instr.upper(), arg.strip()))
        current = ""
    return lines


def stages(instructions):
    """[(name, base image, [(instr, arg)])]."""
    result, args = [], {}
    for instr, arg in instructions:
        if instr == "ARG" and not result:
            k, _, v = arg.partition("=")
            args[k] = v
        elif instr == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", arg, re.IGNORECASE)
            image = re.sub(r"\$\{(\w+)\}", lambda mm: args.get(mm.group(1), ""), m.group(1))
            result.append((m.group(2), image, []))
        elif result:
            result[-1][2].append((instr, arg))
    return result


def component_executables(source_dir):
    exes = set()
    for d in COMPONENT_DIRS:
        path = os.path.join(source_dir, d, "CMakeLists.txt")
        if os.path.exists(path):
            exes |= set(re.findall(r"add_executable\(\s*(mlcd-[\w-]+|mlcdctl)\b", open(path).read()))
    return exes



def check_one(src, dockerfile, cuda, check):
    """The structure of one Dockerfile (cuda: the GPU flavour's, deploy/Dockerfile.cuda)."""
    text = open(os.path.join(src, "deploy", dockerfile)).read()
    orig_check = check

    def check(cond, msg):  # noqa: F811 - every problem names its Dockerfile
        return orig_check(cond, f"deploy/{dockerfile}: {msg}")

    st = stages(parse_dockerfile(text))
    check([s[0] for s in st] == ["build", "runtime"], f"stages are {[s[0] for s in st]}, expected ['build', 'runtime']")
    for name, image, _ in st:
        check(re.fullmatch(r"debian:bookworm(-slim)?", image) is not None,
              f"stage {name} is based on {image!r}, expected debian:bookworm or debian:bookworm-slim (Debian 12)")
    by_name = {s[0]: s[2] for s in st}
    build, runtime = by_name.get("build", []), by_name.get("runtime", [])

    # Build stage: packages from scripts/setup.sh.
    runs = [a for i, a in build if i == "RUN"]
    copies = [a for i, a in build if i == "COPY"]
    setup_runs = [i for i, a in enumerate(runs) if "scripts/setup.sh" in a]
    if check(bool(setup_runs), "the build stage must install its packages by running scripts/setup.sh"):
        check("MLCD_SETUP_PACKAGES_ONLY=1" in runs[setup_runs[0]],
              "the build stage must run scripts/setup.sh with MLCD_SETUP_PACKAGES_ONLY=1")
        if cuda:
            check(all("MLCD_TORCH=pip" in runs[k] for k in setup_runs),
                  "every scripts/setup.sh run must select the GPU flavour (MLCD_TORCH=pip)")
        check(bool(copies) and copies[0].split()[0] == "scripts/setup.sh",
              "the first COPY of the build stage must be scripts/setup.sh alone (cached package layer)")
    setup = open(os.path.join(src, "scripts", "setup.sh")).read()
    check(re.search(r'MLCD_SETUP_PACKAGES_ONLY:-0}"\s*=\s*1', setup) is not None,
          "scripts/setup.sh does not honour MLCD_SETUP_PACKAGES_ONLY=1 (the Dockerfile relies on it)")
    m = re.search(r"^packages=\((.*?)^\)", setup, re.MULTILINE | re.DOTALL)
    if check(m is not None, "scripts/setup.sh has no packages=( ... ) list"):
        setup_packages = {w for line in m.group(1).splitlines() for w in line.split("#")[0].split()}
        for needed in ("cmake", "ninja-build", "libtorch-dev", "libgrpc++-dev", "librocksdb-dev", "libfaiss-dev",
                       "prometheus-cpp-dev", "libopenblas0-pthread"):
            check(needed in setup_packages, f"scripts/setup.sh's package list lacks {needed}")
    build_text = " ".join(runs)
    check("-DCMAKE_BUILD_TYPE=Release" in build_text, "the build stage must configure with -DCMAKE_BUILD_TYPE=Release")
    exes = component_executables(src)
    target_m = re.search(r"--target\s+((?:[\w-]+\s*)+)", build_text)
    targets = set(target_m.group(1).split()) if target_m else set()
    loop_m = re.search(r"for exe in ([\w\s-]+?);", build_text)
    copied = set(loop_m.group(1).split()) if loop_m else set()
    expected = {"mlcd-coordinator", "mlcd-labelstore", "mlcd-clusterd", "mlcd-worker", "mlcdctl"} | exes
    check(targets == expected, f"the build stage builds {sorted(targets)}, the components define {sorted(expected)}")
    check(copied == expected, f"the build stage installs {sorted(copied)} into /out/bin, expected {sorted(expected)}")
    check("deploy/runtime-packages.sh" in build_text,
          "the build stage must compute the runtime packages with deploy/runtime-packages.sh")
    if cuda:
        check("--shipped-under" in build_text and "cuda-nvcc" in build_text,
              "the build stage must install nvcc and skip the wheel's libraries (runtime-packages.sh "
              "--shipped-under)")

    # Runtime stage.
    rruns = " ".join(a for i, a in runtime if i == "RUN")
    installs = re.findall(r"apt-get install ([^&|;]*)", rruns)
    words = {w for inst in installs for w in inst.split() if not w.startswith("-")}
    check(not [w for w in words if w.endswith("-dev")], f"the runtime stage installs -dev packages: {sorted(words)}")
    for pkg in ("libopenblas0-pthread", "tini"):
        check(pkg in words, f"the runtime stage must install {pkg}")
    check(any("runtime-packages.txt" in w for w in words),
          "the runtime stage must install the packages listed by deploy/runtime-packages.sh")
    check(any(i == "COPY" and "--from=build" in a and "/out/bin" in a for i, a in runtime),
          "the runtime stage must copy the executables from the build stage")
    if cuda:
        check(any(i == "COPY" and "--from=build" in a and "/out/wheel" in a for i, a in runtime),
              "the runtime stage must copy the wheel's libraries (/out/wheel) from the build stage")
    users = [a for i, a in runtime if i == "USER"]
    k8s_uid = None
    worker_yaml = os.path.join(src, "deploy", "k8s", "base", "worker.yaml")
    if os.path.exists(worker_yaml):
        mm = re.search(r"runAsUser:\s*(\d+)", open(worker_yaml).read())
        k8s_uid = mm.group(1) if mm else None
    if check(bool(users), "the runtime stage must set USER (non-root)"):
        uid = users[-1].split(":")[0]
        check(uid.isdigit() and uid != "0", f"USER {users[-1]} must be a numeric non-root uid (runAsNonRoot needs it)")
        check(k8s_uid is None or uid == k8s_uid, f"USER {uid} differs from the manifests' runAsUser {k8s_uid}")
    entry = [a for i, a in runtime if i == "ENTRYPOINT"]
    check(bool(entry) and "tini" in entry[-1], "the runtime stage needs ENTRYPOINT [\"/usr/bin/tini\", \"--\"]")
    flags_h = open(os.path.join(src, "common", "flags.h")).read()
    ports = [int(p) for p in re.findall(r"constexpr\s+int\s+kDefault\w+Port\s*=\s*(\d+)", flags_h)]
    exposed = {int(p) for i, a in runtime if i == "EXPOSE" for p in a.split()}
    for p in ports:
        check(p in exposed and p + 1 in exposed, f"EXPOSE must list {p} and {p + 1} (common/flags.h)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--binary", action="append", default=[])
    args = parser.parse_args()
    src = args.source_dir
    problems = []

    def check(cond, msg):
        if not cond:
            problems.append(msg)
        return cond

    for name in ("Dockerfile", "Dockerfile.cuda"):
        check_one(src, name, name.endswith(".cuda"), check)

    # The runtime package computation, on this build's executables.
    if args.binary:
        script = os.path.join(src, "deploy", "runtime-packages.sh")
        proc = subprocess.run([script] + args.binary, capture_output=True, text=True)
        if check(proc.returncode == 0, f"deploy/runtime-packages.sh failed: {proc.stderr.strip()}"):
            pkgs = proc.stdout.split()
            check(bool(pkgs), "deploy/runtime-packages.sh printed no package")
            check(not [p for p in pkgs if p.endswith("-dev")], f"runtime packages include -dev packages: {pkgs}")
            known = subprocess.run(["apt-cache", "show", "--no-all-versions"] + pkgs, capture_output=True, text=True)
            if known.returncode != 0:
                for p in pkgs:
                    one = subprocess.run(["apt-cache", "show", "--no-all-versions", p], capture_output=True, text=True)
                    check(one.returncode == 0 and one.stdout.strip() != "", f"runtime package {p} is unknown to apt")
            print("runtime packages of this build:", " ".join(pkgs))

    for p in problems:
        print("problem:", p)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in deploy/Dockerfile")
        return 1
    print("deploy/Dockerfile and Dockerfile.cuda: consistent with scripts/setup.sh, the components' executables and the manifests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
