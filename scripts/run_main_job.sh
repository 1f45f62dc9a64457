#!/usr/bin/env bash
# The main job of README.md, end to end on the embedded defaults:
#   set-up (packages + build) -> local cluster up (label store, clusterd, coordinator, worker
#   agents on loopback) -> submit the Fashion-MNIST job (examples/fashion-mnist.yaml: round-0
#   clustering of the images, MLCD training on 2 workers for the spec's time budget, linear
#   probe + kNN beside a random-init ViT and the raw pixels) -> watch it -> print the result
#   (`mlcdctl get`: the round's step count and the trained / random init / raw pixels table)
#   -> cluster down.
#
#   scripts/run_main_job.sh
#   MLCD_MAIN_JOB_SPEC=examples/paper.yaml MLCD_WORKERS=2 scripts/run_main_job.sh
#   MLCD_BUILD_DIR=dir MLCD_STATE_DIR=dir scripts/run_main_job.sh
#
# State and logs stay under $MLCD_STATE_DIR/local (default ./.mlcd/local): the coordinator's
# database, features, checkpoints (coordinator/jobs/<id>/ckpt) and every process's log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"

build_dir=${MLCD_BUILD_DIR:-$root/build}
bin=$build_dir/bin
state_dir=${MLCD_STATE_DIR:-$root/.mlcd}
cluster=$state_dir/local
spec=${MLCD_MAIN_JOB_SPEC:-$root/examples/fashion-mnist.yaml}
workers=${MLCD_WORKERS:-2}
mlcdctl=$bin/mlcdctl

echo "main job: starting a local cluster with $workers workers in $cluster"
# Free ports, so a service already on the default ports does not get in the way.
"$mlcdctl" local up --workers "$workers" --dir "$cluster" --ports auto --detach
stop_cluster() { "$mlcdctl" local down --dir "$cluster" || true; }
trap stop_cluster EXIT
# shellcheck disable=SC1091
. "$cluster/env"

job=$("$mlcdctl" submit "$spec" --request-id "main-job-$(date +%s)")
echo "main job: submitted $job ($spec); following it (Ctrl-C stops watching; the cluster goes down with it)"
set +e
"$mlcdctl" watch "$job"
rc=$?
set -e

echo
"$mlcdctl" get "$job"
echo
echo "main job: checkpoints under $cluster/coordinator/jobs/$job/ckpt, logs under $cluster/logs"
"$mlcdctl" local status --dir "$cluster" | sed -n '/metrics/p'
case $rc in
  0) echo "main job: SUCCEEDED" ;;
  10) echo "main job: FAILED (see the message above and $cluster/logs)" >&2 ;;
  11) echo "main job: CANCELLED" >&2 ;;
  *) echo "main job: watching failed (exit code $rc)" >&2 ;;
esac
exit $rc
