"""mlcd.label_import: the rows an import writes and every refusal (no server needed)."""
import pytest

from mlcd.errors import InvalidArgumentError
from mlcd.label_import import plan_from_jsonl, plan_from_rows, read_index_keys

KEYS = ["a", "b", "c", "d", "e"]


def test_jsonl_rows_are_sorted_by_id_and_padded_with_the_first_label():
    lines = ['{"key": "c", "labels": [4, 1, 4]}', "", '{"key": "a", "labels": [2]}',
             '{"key": "e", "labels": [0, 9, 3]}']
    plan = plan_from_jsonl(lines, KEYS, 10)
    assert plan.ids == [0, 2, 4]
    assert plan.labels_per_sample == 3
    assert plan.labels == [2, 2, 2, 4, 1, 4, 0, 9, 3]
    assert (plan.min_labels, plan.max_labels) == (1, 3)
    assert plan.mean_labels == pytest.approx(2.0)  # c has 2 distinct labels


def test_rows_by_id_with_padding():
    plan = plan_from_rows([[5, -1, 6], [7, -1, -1], [1, 1, 8]], 10)
    assert plan.ids == [0, 1, 2]
    assert plan.labels == [5, 6, 7, 7, 1, 8]


def test_every_problem_is_counted_and_the_first_named():
    lines = ['{"key": "a", "labels": [1]}', '{"key": "zz", "labels": [1]}',
             '{"key": "a", "labels": [2]}', '{"key": "b", "labels": [10]}',
             '{"key": "c", "labels": []}', "not json", '{"key": "c", "labels": ["x"]}',
             '{"key": "d", "labels": [true]}']
    with pytest.raises(InvalidArgumentError) as e:
        plan_from_jsonl(lines, KEYS, 10, source="tags.jsonl")
    message = str(e.value)
    for part in ["tags.jsonl: ", "1 keys the dataset index does not have ('zz' line 2)",
                 "1 keys given twice ('a' line 3 (first on line 1))",
                 "1 labels outside [0, 10) (10 at 'b' line 4)",
                 "1 samples without a label ('c' line 5)",
                 "3 lines that are not", "nothing was imported"]:
        assert part in message


def test_more_than_three_of_a_kind_are_counted_not_all_named():
    with pytest.raises(InvalidArgumentError) as e:
        plan_from_rows([[11], [12], [13], [14], [1]], 10)
    assert "4 labels outside [0, 10) (11 at sample 0, 12 at sample 1, 13 at sample 2, ...)" \
        in str(e.value)


def test_empty_input_and_bad_k_are_refused():
    with pytest.raises(InvalidArgumentError, match="holds no sample"):
        plan_from_jsonl(["", "  "], KEYS, 10)
    with pytest.raises(InvalidArgumentError, match="must be in"):
        plan_from_rows([[1]], 0)


def test_index_keys(tmp_path):
    (tmp_path / "keys.txt").write_text("a\nb/c\n")
    assert read_index_keys(str(tmp_path)) == ["a", "b/c"]
    with pytest.raises(InvalidArgumentError, match="keys.txt"):
        read_index_keys(str(tmp_path / "missing"))
