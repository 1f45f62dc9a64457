#!/usr/bin/env python3
"""Checks the layout rules of the tree (docs/architecture.md, "Code layers"):

  * no service folder includes another service folder's headers (they talk through clients/
    and proto/); mlcdctl (client/) includes clients/ and common/ only;
  * no source file in the service folders and common/ over MAX_FILE_LINES lines;
  * no function over MAX_FUNCTION_LINES lines (a definition starts at column 0 and ends at
    the matching closing brace at column 0, as clang-format lays them out).

Prints every violation and exits 1 when there is one. Usage: scripts/check_layout.py [ROOT]
"""
import os
import re
import sys

SERVICES = ["labelstore", "clusterd", "coordinator", "worker", "client"]
CHECKED = SERVICES + ["clients", "common"]
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
# A definition's first line: starts at column 0, is not a preprocessor line, comment,
# namespace, class/struct/enum or access label, and opens a body on this or a following line.
NOT_FUNCTION = re.compile(r"^(#|//|/\*|\*|namespace\b|class\b|struct\b|enum\b|union\b|"
                          r"template\s*<[^>]*>\s*(class|struct)\b|extern\b|using\b|typedef\b|"
                          r"public:|private:|protected:|\}|\{)")


def sources(root, folder):
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for name in sorted(files):
            if name.endswith((".cc", ".h")):
                yield os.path.join(dirpath, name)


def long_functions(lines):
    """(start line, length, signature) of each column-0 definition longer than the limit."""
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line[:1].strip() and not NOT_FUNCTION.match(line) and "(" in line:
            # Find the body: the first line at or after i ending the signature with '{'.
            j = i
            while j < len(lines) and j < i + 12 and not lines[j].rstrip().endswith("{"):
                if lines[j].rstrip().endswith(";"):
                    j = -1
                    break
                j += 1
            if j >= 0 and j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                length = k - i + 1
                if length > MAX_FUNCTION_LINES:
                    out.append((i + 1, length, line.strip()))
                i = k + 1
                continue
        i += 1
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    problems = []
    for folder in CHECKED:
        for path in sources(root, folder):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if folder in SERVICES and target in SERVICES and target != folder:
                    problems.append(f"{rel}:{n}: includes {target}/ (go through clients/ and proto/)")
                if folder == "clients" and target in SERVICES:
                    problems.append(f"{rel}:{n}: the client libraries include {target}/")
                if folder == "common" and target in SERVICES + ["clients"]:
                    problems.append(f"{rel}:{n}: common/ includes {target}/ (common is the bottom floor)")
            count = len(lines) - (1 if lines and lines[-1] == "" else 0)
            if count > MAX_FILE_LINES:
                problems.append(f"{rel}: {count} lines (at most {MAX_FILE_LINES}: one file per concept)")
            for start, length, sig in long_functions(lines):
                problems.append(f"{rel}:{start}: function of {length} lines "
                                f"(at most {MAX_FUNCTION_LINES}): {sig[:70]}")
    for p in problems:
        print(p)
    print(f"check_layout: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
