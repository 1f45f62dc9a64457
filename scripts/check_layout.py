#!/usr/bin/env python3
"""Checks the layout rules of the tree (docs/architecture.md, "Code layers"):

  * no service folder includes another service folder's headers (they talk through clients/
    and proto/); mlcdctl (client/) includes clients/ and common/ only;
  * no function over MAX_FUNCTION_LINES lines (a definition starts at column 0 and ends at
    the matching closing brace at column 0, as clang-format lays them out);
  * no comment in the code outside bench/ (COMMENT_FOLDERS and the top-level CMakeLists.txt)
    names an issue or a stop by number ("issue N", "issues N and M", "issue #N", "stop N",
    "(#N)", N a number): a comment states what is true and why, not the history
    (comment_problems has the forms it reads as such and the verbs it leaves alone);
  * a source file in the service folders and common/ over MAX_FILE_LINES lines is a
    warning: printed, not failing (one file per concept; split it when the concepts part).

Prints every problem and warning; exits 1 when there is a problem.
Usage: scripts/check_layout.py [ROOT]
"""
import io
import os
import re
import sys
import tokenize

SERVICES = ["labelstore", "clusterd", "coordinator", "worker", "client"]
CHECKED = SERVICES + ["clients", "common"]
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120
# Where comments are checked for issue and stop numbers: every folder of code but bench/.
COMMENT_FOLDERS = SERVICES + ["clients", "common", "proto", "tests", "python", "scripts",
                              "cmake", "deploy", "examples", ".ci"]
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "build", "dist", "corpus"}
C_FAMILY = (".cc", ".h", ".cpp", ".hpp", ".proto")
RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")
HASH_COMMENTED = (".sh", ".cmake", ".yaml", ".yml", ".toml", ".supp", ".cfg", ".ini",
                  ".dockerignore", ".yamllint", "CMakeLists.txt", "requirements.txt")
# "issue N", "Issues N and M", "issue #N", "stop N", "stops N-M", "issueN" (N, M numbers).
NUMBERED = re.compile(r"\b(?P<word>issues?|stops?)\s*(?P<hash>#\s*)?(?P<num>\d+)\b",
                      re.IGNORECASE)
# After the number, a lowercase word makes "issue"/"stop" read as a verb ("stop N workers"),
# unless it continues a list of numbers ("issues N and M").
VERB_OBJECT = re.compile(r"\s+(?!(?:and|or|to)\s+#?\d)[a-z]")
# Before the word, these make it a noun ("before issue N the server ...", "(stop N ...").
NOUN_BEFORE = re.compile(r"(?:\(|\b(?:before|after|since|until|in|of|from|for|per|see|by|"
                         r"the|this|that|its|an?)\s+)$", re.IGNORECASE)
# A bare pull-request or issue number in parentheses: "(#N)".
BARE_NUMBER = re.compile(r"\(#\d+\)")
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


def walk_files(root, folder):
    for dirpath, dirnames, files in os.walk(os.path.join(root, folder)):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            yield os.path.join(dirpath, name)


def string_prefix(text, quote):
    """The identifier characters right before text[quote] (R of a raw string literal)."""
    start = quote
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return text[start:quote]


def c_comments(text):
    """(line, text) of each comment of C++ or proto source: // and /* */ outside string,
    character and raw string literals."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((line, text[i + 2:end]))
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            for k, part in enumerate(text[i + 2:end].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, end)
            i = end + 2
            continue
        elif c == '"' and string_prefix(text, i) in RAW_PREFIXES:
            open_paren = text.find("(", i)
            close = ")" + text[i + 1:open_paren] + '"'
            end = text.find(close, open_paren)
            end = n if end < 0 else end + len(close)
            line += text.count("\n", i, end)
            i = end
            continue
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or
                                                       text[i - 1] == "_"))):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1 if j < n and text[j] == c else j
            continue
        i += 1
    return out


def hash_comments(text):
    """(line, text) of each # comment of a shell, CMake, YAML, TOML or Dockerfile text: a #
    at the start of a line or after white space, outside quotes (an apostrophe inside a word
    opens nothing)."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        quote = None
        for i, c in enumerate(line):
            if quote:
                if c == "\\" and quote == '"':
                    continue
                if c == quote:
                    quote = None
            elif c == '"' or (c == "'" and not (i > 0 and line[i - 1].isalnum())):
                quote = c
            elif c == "#" and (i == 0 or line[i - 1].isspace()):
                out.append((number, line[i + 1:]))
                break
    return out


def python_comments(text):
    """(line, text) of each comment and docstring line of Python source; hash_comments for
    text tokenize cannot read."""
    out, previous = [], tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string[1:]))
            elif tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT,
                                                              tokenize.DEDENT):
                for k, part in enumerate(tok.string.split("\n")):
                    out.append((tok.start[0] + k, part))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                previous = tok.type
    except (tokenize.TokenError, SyntaxError):
        return hash_comments(text)
    return out


def comments_of(path, text):
    name = os.path.basename(path)
    if name.endswith(C_FAMILY):
        return c_comments(text)
    if name.endswith(".py"):
        return python_comments(text)
    if name.endswith(HASH_COMMENTED) or name.startswith("Dockerfile") or text.startswith("#!"):
        return hash_comments(text)
    return []


def comment_problems(comment):
    """The issue and stop numbers a comment's text names: "issue N", "issue #N", "stop N",
    "(#N)". "issue"/"stop" followed by a number and a lowercase word is read as a verb ("stop
    N workers", "issues N reads"), unless a preposition or article before it makes it a noun
    ("before issue N the server ..."), or a # precedes the number."""
    found = []
    for m in NUMBERED.finditer(comment):
        noun = (m.group("hash") or not VERB_OBJECT.match(comment, m.end()) or
                NOUN_BEFORE.search(comment, 0, m.start()))
        if noun:
            found.append(m.group(0))
    found.extend(BARE_NUMBER.findall(comment))
    return found


def numbered_comments(root):
    """Problems: every comment outside bench/ that names an issue or stop by number."""
    paths = [p for folder in COMMENT_FOLDERS for p in walk_files(root, folder)]
    paths.append(os.path.join(root, "CMakeLists.txt"))
    problems = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue  # binary data (fuzz corpora, .npy files), or gone
        rel = os.path.relpath(path, root)
        for line, comment in comments_of(path, text):
            for ref in comment_problems(comment):
                problems.append(f"{rel}:{line}: comment names {ref!r}: state what is true and "
                                "why, without issue or stop numbers")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    problems, warnings = [], []
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
                warnings.append(f"{rel}: {count} lines (over {MAX_FILE_LINES}: one file per "
                                "concept; split it when the concepts part)")
            for start, length, sig in long_functions(lines):
                problems.append(f"{rel}:{start}: function of {length} lines "
                                f"(at most {MAX_FUNCTION_LINES}): {sig[:70]}")
    problems += numbered_comments(root)
    for w in warnings:
        print(f"warning: {w}")
    for p in problems:
        print(p)
    print(f"check_layout: {len(problems)} problem(s), {len(warnings)} warning(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
