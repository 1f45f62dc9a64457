#!/usr/bin/python3
"""Unit tests of the alerting rules with synthetic series (`promtool test rules`).

    alert_rules_test.py --source-dir REPO [--promtool /usr/bin/promtool]

Runs tests/deploy/rules_test.yml against deploy/prometheus/rules.yml (a copy without the
annotations: `promtool check rules` validates their templates, the unit tests are about when
an alert fires and with which labels) and checks the tests themselves: every alert of
rules.yml has a case where it fires and a case where it must stay quiet. Exits 1 on any
failure, printing promtool's report.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import yaml


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--promtool", default="/usr/bin/promtool")
    args = parser.parse_args()
    src = os.path.abspath(args.source_dir)
    if not os.access(args.promtool, os.X_OK):
        raise SystemExit(f"{args.promtool} is missing: install the Debian package prometheus (scripts/setup.sh does)")
    rules = yaml.safe_load(open(os.path.join(src, "deploy", "prometheus", "rules.yml")))
    tests_path = os.path.join(src, "tests", "deploy", "rules_test.yml")
    tests = yaml.safe_load(open(tests_path))
    problems = []

    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    fires, quiet = set(), set()
    for case in tests.get("tests") or []:
        for t in case.get("alert_rule_test") or []:
            (fires if t.get("exp_alerts") else quiet).add(t["alertname"])
            if t["alertname"] not in alerts:
                problems.append(f"rules_test.yml tests {t['alertname']}, which rules.yml does not define")
    for name in alerts:
        if name not in fires:
            problems.append(f"alert {name}: no test case where it fires (tests/deploy/rules_test.yml)")
        if name not in quiet:
            problems.append(f"alert {name}: no test case where it stays quiet (tests/deploy/rules_test.yml)")

    with tempfile.TemporaryDirectory(prefix="mlcd-rules-test-") as tmp:
        for g in rules["groups"]:
            for r in g["rules"]:
                r.pop("annotations", None)
        yaml.safe_dump(rules, open(os.path.join(tmp, "rules.yml"), "w"), sort_keys=False)
        shutil.copy(tests_path, os.path.join(tmp, "rules_test.yml"))
        proc = subprocess.run([args.promtool, "test", "rules", "rules_test.yml"], cwd=tmp, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0:
            problems.append(f"promtool test rules failed:\n{proc.stdout}{proc.stderr}")

    for p in problems:
        print("problem:", p)
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        return 1
    print(f"{len(alerts)} alerts: each fires and stays quiet as its unit tests say")
    return 0


if __name__ == "__main__":
    sys.exit(main())
