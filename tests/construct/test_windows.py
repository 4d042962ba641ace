"""History windowing: the merge rule, splitting with a stride, and the expanded-context union."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lazymem.construct.windows import (
    Window,
    build_windows,
    expanded_indices,
    maximal_windows,
    split_window,
)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 120))
    retrieved = draw(st.lists(st.integers(0, n - 1), max_size=40))
    radius = draw(st.integers(0, 6))
    max_len = draw(st.integers(1, 12))
    stride = draw(st.integers(1, max_len))
    return retrieved, n, radius, max_len, stride


def _idx(windows):
    return [w.idx for w in windows]


# ---- hand-computed examples -------------------------------------------------------------------


def test_paper_defaults_merge_within_2w():
    # w=2: 10 and 14 are 4 apart (<= 2w) and merge; 19 is 5 past 14 and starts a new window.
    ws = maximal_windows([14, 10, 19, 10], n_messages=30, radius=2)
    assert _idx(ws) == [tuple(range(8, 17)), tuple(range(17, 22))]
    assert [w.core for w in ws] == [(10, 14), (19,)]
    assert [w.group for w in ws] == [0, 1]
    assert ws[0].bridges == (8, 9, 11, 12, 13, 15, 16)


def test_merge_is_transitive():
    # 0-4-8-12 chain pairwise within 2w=4 although 0 and 12 are far apart.
    ws = maximal_windows([0, 4, 8, 12], n_messages=20, radius=2)
    assert _idx(ws) == [tuple(range(0, 15))]


def test_split_with_paper_stride_overlaps_one_message():
    # One maximal window 8..16 (9 messages) -> [8..15] and [15..16].
    ws = build_windows([10, 14], n_messages=30, radius=2, max_len=8, stride=7)
    assert _idx(ws) == [tuple(range(8, 16)), (15, 16)]
    assert [w.core for w in ws] == [(10, 14), ()]
    assert [(w.group, w.part) for w in ws] == [(0, 0), (0, 1)]


def test_split_stops_when_a_part_reaches_the_end():
    w = Window(idx=tuple(range(15)), core=(7,), group=0)
    parts = split_window(w, max_len=8, stride=7)
    assert _idx(parts) == [tuple(range(0, 8)), tuple(range(7, 15))]  # no third part (14,)
    assert [p.core for p in parts] == [(7,), (7,)]


def test_split_short_last_part():
    w = Window(idx=tuple(range(100, 117)), core=(100, 116), group=3)
    parts = split_window(w, max_len=8, stride=7)
    assert _idx(parts) == [tuple(range(100, 108)), tuple(range(107, 115)), (114, 115, 116)]
    assert [p.core for p in parts] == [(100,), (), (116,)]
    assert {p.group for p in parts} == {3}


def test_clipping_at_history_edges():
    ws = maximal_windows([0, 9], n_messages=10, radius=3)
    assert _idx(ws) == [(0, 1, 2, 3), (6, 7, 8, 9)]


def test_radius_zero_gives_one_window_per_message():
    ws = build_windows([5, 3, 4, 4], n_messages=10, radius=0)
    assert _idx(ws) == [(3,), (4,), (5,)]
    assert [w.core for w in ws] == [(3,), (4,), (5,)]


def test_all_messages_retrieved_covers_history_then_splits():
    ws = build_windows(range(20), n_messages=20, radius=2, max_len=8, stride=7)
    assert _idx(ws) == [tuple(range(0, 8)), tuple(range(7, 15)), tuple(range(14, 20))]
    assert {w.group for w in ws} == {0}
    assert [len(w.bridges) for w in ws] == [0, 0, 0]


def test_empty_retrieval_gives_no_windows():
    assert build_windows([], n_messages=0, radius=2) == []
    assert expanded_indices([], n_messages=5, radius=2) == set()


def test_numpy_style_integers_are_accepted():
    class IntLike:  # stands in for numpy.int64: has __index__, is not an int
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    assert _idx(build_windows([IntLike(3)], n_messages=10, radius=1)) == [(2, 3, 4)]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"retrieved": [10], "n_messages": 10, "radius": 1}, "outside the history"),
        ({"retrieved": [-1], "n_messages": 10, "radius": 1}, "outside the history"),
        ({"retrieved": [1], "n_messages": 10, "radius": -1}, "radius"),
        ({"retrieved": [1], "n_messages": 10, "radius": 1, "max_len": 0}, "max_len"),
        ({"retrieved": [1], "n_messages": 10, "radius": 1, "max_len": 4, "stride": 5}, "stride"),
        ({"retrieved": [1], "n_messages": 10, "radius": 1, "stride": 0}, "stride"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_windows(**kwargs)


def test_float_index_is_rejected():
    with pytest.raises(TypeError):
        build_windows([1.0], n_messages=10, radius=1)


def test_window_rejects_gaps_and_stray_core():
    with pytest.raises(ValueError, match="contiguous"):
        Window(idx=(1, 2, 4), core=(2,), group=0)
    with pytest.raises(ValueError, match="core"):
        Window(idx=(1, 2, 3), core=(5,), group=0)
    with pytest.raises(ValueError, match="at least one"):
        Window(idx=(), core=(), group=0)


# ---- properties ----------------------------------------------------------------------------


@given(cases())
def test_maximal_windows_are_disjoint_ordered_and_separated(case):
    retrieved, n, radius, _, _ = case
    ws = maximal_windows(retrieved, n, radius)
    assert [w.group for w in ws] == list(range(len(ws)))
    assert sorted(c for w in ws for c in w.core) == sorted(set(retrieved))
    for a, b in zip(ws, ws[1:], strict=False):
        assert a.end < b.start  # disjoint and chronological
        assert b.core[0] - a.core[-1] > 2 * radius  # the merge rule would not join them
    for w in ws:
        assert all(y - x <= 2 * radius for x, y in zip(w.core, w.core[1:], strict=False))
        assert w.start == max(0, w.core[0] - radius)
        assert w.end == min(n - 1, w.core[-1] + radius)


@given(cases())
def test_windows_cover_exactly_the_expanded_set(case):
    retrieved, n, radius, max_len, stride = case
    ws = build_windows(retrieved, n, radius, max_len, stride)
    covered = {i for w in ws for i in w.idx}
    assert covered == expanded_indices(retrieved, n, radius)
    assert covered == {i for w in maximal_windows(retrieved, n, radius) for i in w.idx}
    for r in set(retrieved):
        assert any(r in w.core for w in ws)
    for w in ws:
        assert set(w.core) == set(retrieved) & set(w.idx)


@given(cases())
def test_sub_windows_respect_length_and_stride(case):
    retrieved, n, radius, max_len, stride = case
    ws = build_windows(retrieved, n, radius, max_len, stride)
    assert all(1 <= len(w) <= max_len for w in ws)
    by_group: dict[int, list[Window]] = {}
    for w in ws:
        by_group.setdefault(w.group, []).append(w)
    for parts in by_group.values():
        assert [p.part for p in parts] == list(range(len(parts)))
        assert all(len(p) == max_len for p in parts[:-1])  # only the last may be shorter
        for a, b in zip(parts, parts[1:], strict=False):
            assert b.start - a.start == stride
            assert len(set(a.idx) & set(b.idx)) == max_len - stride
            assert not set(b.idx) <= set(a.idx)  # never a part contained in the one before


@given(st.integers(1, 60), st.integers(0, 5))
def test_radius_zero_and_full_retrieval(n, radius):
    # w = 0 merges only identical indices: even neighbouring retrieved messages stay apart.
    assert _idx(maximal_windows(range(n), n, 0)) == [(i,) for i in range(n)]
    if radius > 0:
        assert _idx(maximal_windows(range(n), n, radius)) == [tuple(range(n))]
    ends = maximal_windows([0, n - 1], n, radius)
    assert ends[0].start == 0 and ends[-1].end == n - 1
