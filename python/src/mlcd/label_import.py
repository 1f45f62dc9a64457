"""Annotations in, as the rows of a sealed label set (``Client.import_labels``; the same rules
as ``mlcdctl labels import``, client/label_import.h).

By sample key: JSON lines ``{"key": ..., "labels": [...]}`` matched through a dataset index's
``keys.txt`` (sample id = the key's line). By sample id: rows of integers, row i = sample i,
negative values = padding. A set has one width l and no padding value, so l is the most labels
any sample has and a shorter row repeats its first label (every loss counts a label once per
sample). Every problem is counted and the first ``MAX_NAMED_PROBLEMS`` of each kind named; any
problem refuses the whole import with :class:`~mlcd.errors.InvalidArgumentError`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Sequence, Tuple

import grpc

from .errors import InvalidArgumentError

__all__ = ["ImportPlan", "plan_from_jsonl", "plan_from_rows", "read_index_keys"]

# Examples of one kind of problem a refusal names (kMaxNamedProblems).
MAX_NAMED_PROBLEMS = 3
# The most labels one imported sample may have (kMaxImportedLabelsPerSample).
MAX_LABELS_PER_IMPORTED_SAMPLE = 64
_MALFORMED = 'lines that are not {"key": string, "labels": [integers]}'


@dataclass
class ImportPlan:
    """Rows ready to write: ``ids[i]``'s labels are ``labels[i*l:(i+1)*l]``."""

    ids: List[int]
    labels: List[int]
    labels_per_sample: int
    min_labels: int
    max_labels: int
    mean_labels: float


@dataclass
class _Problems:
    kinds: Dict[str, Tuple[int, List[str]]] = field(default_factory=dict)

    def add(self, kind: str, example: str) -> None:
        count, examples = self.kinds.get(kind, (0, []))
        if count < MAX_NAMED_PROBLEMS:
            examples.append(example)
        self.kinds[kind] = (count + 1, examples)

    def refuse(self, source: str) -> None:
        if not self.kinds:
            return
        parts = []
        for kind in sorted(self.kinds):
            count, examples = self.kinds[kind]
            more = ", ..." if count > len(examples) else ""
            parts.append(f"{count} {kind} ({', '.join(examples)}{more})")
        raise InvalidArgumentError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{source}: {'; '.join(parts)}; nothing was imported: fix the input and import again")


def _check_k(k: int) -> None:
    if not 1 <= k <= 2**31 - 1:
        raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"k {k} must be in [1, 2^31-1]")


def _sample(given: Iterable[int], k: int, where: str, problems: _Problems) -> List[int]:
    labels: List[int] = []
    ok = True
    for v in given:
        if v < 0:
            continue
        if v >= k:
            problems.add(f"labels outside [0, {k})", f"{v} at {where}")
            ok = False
        elif v not in labels:
            labels.append(v)
    if ok and not labels:
        problems.add("samples without a label", where)
        ok = False
    if ok and len(labels) > MAX_LABELS_PER_IMPORTED_SAMPLE:
        problems.add(f"samples with more than {MAX_LABELS_PER_IMPORTED_SAMPLE} labels", where)
        ok = False
    return labels if ok else []


def _finish(samples: Dict[int, List[int]], problems: _Problems, source: str) -> ImportPlan:
    """The plan, or the refusal naming every kind of problem (or an input without samples)."""
    problems.refuse(source)
    if not samples:
        raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, f"{source}: holds no sample")
    return _pack(samples)


def _pack(samples: Dict[int, List[int]]) -> ImportPlan:
    ids = sorted(samples)
    width = max(len(samples[i]) for i in ids)
    labels: List[int] = []
    for i in ids:
        row = samples[i]
        labels.extend(row[j] if j < len(row) else row[0] for j in range(width))
    counts = [len(samples[i]) for i in ids]
    return ImportPlan(ids, labels, width, min(counts), max(counts), sum(counts) / len(counts))


def read_index_keys(index_dir: str) -> List[str]:
    """The sample keys of a dataset index directory (``mlcdctl dataset index``), in id order."""
    path = os.path.join(index_dir, "keys.txt")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().split("\n")[:-1]
    except OSError as e:
        raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"{path}: cannot read the dataset index's keys ({e})") from e


def plan_from_jsonl(lines: Iterable[str], keys: Sequence[str], k: int,
                    source: str = "JSON lines") -> ImportPlan:
    """The rows of JSON lines of ``{"key", "labels"}``, keys numbered by ``keys``."""
    _check_k(k)
    id_of = {key: i for i, key in enumerate(keys)}
    first_line: Dict[int, int] = {}
    samples: Dict[int, List[int]] = {}
    problems = _Problems()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"line {number}"
        try:
            j = json.loads(text)
        except ValueError:
            j = None
        if (not isinstance(j, dict) or not isinstance(j.get("key"), str)
                or not isinstance(j.get("labels"), list)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in j["labels"])):
            problems.add(_MALFORMED, where)
            continue
        named = f"'{j['key']}' {where}"
        sample_id = id_of.get(j["key"])
        if sample_id is None:
            problems.add("keys the dataset index does not have", named)
            continue
        if sample_id in first_line:
            problems.add("keys given twice", f"{named} (first on line {first_line[sample_id]})")
            continue
        first_line[sample_id] = number
        row = _sample(j["labels"], k, named, problems)
        if row:
            samples[sample_id] = row
    return _finish(samples, problems, source)


def plan_from_rows(rows: Sequence[Sequence[int]], k: int, source: str = "rows") -> ImportPlan:
    """The rows of labels by sample id (row i = sample i; negative values are padding)."""
    _check_k(k)
    samples: Dict[int, List[int]] = {}
    problems = _Problems()
    for i, given in enumerate(rows):
        row = _sample([int(v) for v in given], k, f"sample {i}", problems)
        if row:
            samples[i] = row
    return _finish(samples, problems, source)
