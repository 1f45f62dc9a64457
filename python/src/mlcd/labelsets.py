"""Label-set reads through the label store's API (proto/mlcd/v1/labelstore.proto): list,
describe, and batched reads of per-sample labels, split to the service's limits
(clients/labelstore_limits.h)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence

from .v1 import labelstore_pb2

__all__ = ["LabelRows", "read_chunk_size"]

# Ids per GetLabels request (kMaxIdsPerRead).
MAX_IDS_PER_READ = 65536
# n * l per message (kMaxValuesPerMessage).
MAX_VALUES_PER_MESSAGE = 1 << 24
# The largest l of any set (kMaxLabelsPerSample, common/limits.h).
MAX_LABELS_PER_SAMPLE = 1024
# Page size of ListLabelSets (the service's default is 100, its most 1000).
LIST_PAGE_SIZE = 1000


@dataclass
class LabelRows:
    """Labels of the requested sample ids, in request order."""

    labels_per_sample: int
    """l: labels of each row."""
    labels: List[List[int]] = field(default_factory=list)
    """One row of l cluster ids per requested id; ``[-1] * l`` for an id with no row."""
    scores: Optional[List[List[float]]] = None
    """One row of l scores per id when read ``with_scores`` (NaN for missing ids)."""
    missing_ids: List[int] = field(default_factory=list)
    """Requested ids the set has no row for."""

    def extend(self, response: labelstore_pb2.GetLabelsResponse, with_scores: bool) -> None:
        l = response.labels_per_sample
        self.labels.extend(list(response.labels[i:i + l]) for i in range(0, len(response.labels), l))
        if with_scores:
            rows = [list(response.scores[i:i + l]) for i in range(0, len(response.scores), l)]
            self.scores = (self.scores or []) + rows
        self.missing_ids.extend(response.missing_ids)


def read_chunk_size(labels_per_sample: int) -> int:
    """Ids per GetLabels request for a set with ``labels_per_sample`` labels."""
    return max(1, min(MAX_IDS_PER_READ, MAX_VALUES_PER_MESSAGE // max(1, labels_per_sample)))


def chunks(ids: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start:start + size]
