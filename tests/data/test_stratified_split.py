from collections import Counter

import pytest

from lazymem.data.schema import Question
from lazymem.data.stratified_split import allocate, count_table, make_split, split_sizes

from helpers import TABLE_9


def questions_like_longmemeval(seed_offset=0):
    qs = []
    for t, (n, *_rest) in TABLE_9.items():
        for k in range(n):
            qs.append(
                Question(
                    id=f"{t}-{(k * 7919 + seed_offset) % 100003:06d}",
                    type=t,
                    text="?",
                    answer="a",
                    history_id="h",
                )
            )
    return qs


def test_reproduces_table_9_exactly():
    split, table = make_split(questions_like_longmemeval())
    counts = count_table(table)
    for t, (total, train, val, test) in TABLE_9.items():
        assert counts[t] == {"train": train, "val": val, "test": test, "total": total}
    assert counts["total"] == {"train": 360, "val": 40, "test": 100, "total": 500}
    assert {k: len(v) for k, v in split.items()} == {"train": 360, "val": 40, "test": 100}


def test_split_is_a_partition_stratified_by_type():
    qs = questions_like_longmemeval()
    split, _ = make_split(qs)
    all_ids = split["train"] + split["val"] + split["test"]
    assert sorted(all_ids) == sorted(q.id for q in qs)
    type_of = {q.id: q.type for q in qs}
    test_types = Counter(type_of[i] for i in split["test"])
    assert test_types == {t: v[3] for t, v in TABLE_9.items()}


def test_deterministic_and_seeded():
    qs = questions_like_longmemeval()
    assert make_split(qs)[0] == make_split(list(reversed(qs)))[0]  # input order does not matter
    other = make_split(qs, seed=7)[0]
    assert other != make_split(qs)[0]
    assert {k: len(v) for k, v in other.items()} == {"train": 360, "val": 40, "test": 100}


def test_split_sizes_and_allocation_edge_cases():
    assert split_sizes(500, [0.72, 0.08, 0.2]) == [360, 40, 100]
    assert split_sizes(7, [0.5, 0.5]) == [4, 3]
    with pytest.raises(ValueError):
        split_sizes(10, [0.5, 0.4])
    assert allocate({"a": 1}, [0.72, 0.08, 0.2]) == {"a": [1, 0, 0]}
    assert sum(map(sum, allocate({"a": 3, "b": 5, "c": 1}, [0.72, 0.08, 0.2]).values())) == 9
