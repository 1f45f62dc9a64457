#!/usr/bin/env python3
"""Reads a job's TensorBoard folder with TensorBoard's own EventAccumulator and compares every
run's scalar tags, steps and values with what the test expects (tests/coordinator/
tensorboard_test.cc writes the expectation from the job record and the workers' progress).

  tensorboard_check.py --logdir DIR --expect expect.json
expect.json: {"<run>": {"<tag>": [[step, value], ...], ...}, ...}; every run is a subfolder.
Exit 0 when everything matches, 1 with the differences otherwise.
"""
import argparse
import json
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def check_run(path, expected):
    problems = []
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    if acc.file_version != 2.0:
        problems.append(f"{path}: file_version {acc.file_version}, want 2.0 (brain.Event:2)")
    tags = sorted(acc.Tags()["scalars"])
    if tags != sorted(expected):
        problems.append(f"{path}: tags {tags}, want {sorted(expected)}")
    for tag, points in expected.items():
        if tag not in tags:
            continue
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        if [s for s, _ in got] != [s for s, _ in points]:
            problems.append(f"{path} {tag}: steps {[s for s, _ in got]}, want {[s for s, _ in points]}")
            continue
        for (step, value), (_, want) in zip(got, points):
            if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-7):
                problems.append(f"{path} {tag} step {step}: {value}, want {want}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--expect", required=True)
    args = ap.parse_args()
    with open(args.expect) as f:
        expect = json.load(f)
    runs = sorted(d for d in os.listdir(args.logdir) if os.path.isdir(os.path.join(args.logdir, d)))
    problems = []
    if runs != sorted(expect):
        problems.append(f"runs {runs}, want {sorted(expect)}")
    for run, expected in expect.items():
        problems += check_run(os.path.join(args.logdir, run), expected)
    for p in problems:
        print(p)
    if not problems:
        print(f"tensorboard_check: {len(expect)} runs, "
              f"{sum(len(v) for v in expect.values())} tags match")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
