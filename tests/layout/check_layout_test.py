"""The rules of scripts/check_layout.py on small trees and texts made here: which comments name
an issue or a stop by number (and which uses of the words are left alone), where comments are
found in each language, and that a long file warns while a numbered comment fails."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
import check_layout  # noqa: E402


@pytest.mark.parametrize("comment,found", [
    (" See issue 27.", ["issue 27"]),
    (" (issue 28): the gang engine", ["issue 28"]),
    (" fixed in Issue #27", ["Issue #27"]),
    (" issues 17 and 30 moved this", ["issues 17"]),
    (" written at stop 12, kept", ["stop 12"]),
    (" Drafts of stops 26 and 27", ["stops 26"]),
    (" Before issue 17 the server took one connection", ["issue 17"]),
    (" the issue 28 changes", ["issue 28"]),
    (" Issue 27's device layer", ["Issue 27"]),
    (" issue 28 CPU bench", ["issue 28"]),
    (" wip/issue27-device-layer.patch", ["issue27"]),
    (" the race (#27) is gone", ["(#27)"]),
    (" stop #3 of the plan", ["stop #3"]),
])
def test_numbered_references_are_found(comment, found):
    assert check_layout.comment_problems(comment) == found


@pytest.mark.parametrize("comment", [
    " Stop 2 workers, then restart one.",
    " the client issues 4 calls at once",
    " we issue 3 reads per block",
    " the capability was issued for this set; the issuer signs it",
    " reissue 3 certificates", " nonstop 2 days", " stopped 3 times", " rank #0 writes",
    " an issue with the stop condition", " kStop3 and issue_27 are names",
    " stops 2 of the 4 ranks",
])
def test_other_uses_of_the_words_are_left_alone(comment):
    assert check_layout.comment_problems(comment) == []


def test_c_comments_skip_strings_characters_and_raw_strings():
    text = ('int a = 1\'000; // line one\n'
            'const char* s = "// issue 1 in a string";  /* block\n'
            '   two */ char c = \'"\';\n'
            'auto r = R"x(// issue 2 "raw"\n)x"; // after raw\n'
            'auto q = "escaped \\" // still a string"; // last\n')
    assert check_layout.c_comments(text) == [
        (1, " line one"), (2, " block"), (3, "   two "), (5, " after raw"), (6, " last")]


def test_hash_comments_skip_quotes_and_shell_expansions():
    text = ('n=${#items[@]} args=$#  # count\n'
            'echo "a # not a comment" \'# nor this\'  # yes\n'
            "echo don't # apostrophe in a word\n"
            '#!/bin/sh\n'
            'url=http://host/#anchor\n')
    assert check_layout.hash_comments(text) == [
        (1, " count"), (2, " yes"), (3, " apostrophe in a word"), (4, "!/bin/sh")]


def test_python_comments_are_comments_and_docstrings_only():
    text = ('"""Module doc\nsecond line."""\n'
            'x = "issue 1 in a value"  # trailing\n'
            'def f():\n'
            '    """Function doc."""\n'
            '    return "not a docstring"\n')
    assert check_layout.python_comments(text) == [
        (1, '"""Module doc'), (2, 'second line."""'), (3, " trailing"), (5, '"""Function doc."""')]


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(root, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["check_layout.py", str(root)])
    rc = check_layout.main()
    return rc, capsys.readouterr().out


def test_a_numbered_comment_fails_and_bench_is_not_checked(tmp_path, capsys, monkeypatch):
    write(tmp_path, "common/a.h", "// Holds the cache (issue 27).\nint a();\n")
    write(tmp_path, "scripts/run.sh", "#!/bin/sh\n# Kept from stop 12.\n")
    write(tmp_path, "bench/b.cc", "// issue 28: the benchmark\n")
    write(tmp_path, "tests/fuzz/corpus/npy/seed", "\x00\xff issue 3")
    rc, out = run(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert "common/a.h:1: comment names 'issue 27'" in out
    assert "scripts/run.sh:2: comment names 'stop 12'" in out
    assert "bench/" not in out and "corpus" not in out
    assert out.strip().endswith("check_layout: 2 problem(s), 0 warning(s)")


def test_a_long_file_only_warns(tmp_path, capsys, monkeypatch):
    write(tmp_path, "coordinator/big.cc", "int x;\n" * (check_layout.MAX_FILE_LINES + 1))
    write(tmp_path, "coordinator/ok.cc", "int y;\n" * check_layout.MAX_FILE_LINES)
    rc, out = run(tmp_path, capsys, monkeypatch)
    assert rc == 0
    assert f"warning: coordinator/big.cc: {check_layout.MAX_FILE_LINES + 1} lines" in out
    assert "ok.cc" not in out
    assert out.strip().endswith("check_layout: 0 problem(s), 1 warning(s)")


def test_a_long_function_and_a_cross_service_include_still_fail(tmp_path, capsys, monkeypatch):
    body = "  x();\n" * check_layout.MAX_FUNCTION_LINES
    write(tmp_path, "worker/f.cc", '#include "coordinator/x.h"\nvoid F() {\n' + body + "}\n")
    rc, out = run(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert "worker/f.cc:1: includes coordinator/" in out
    assert "worker/f.cc:2: function of" in out
