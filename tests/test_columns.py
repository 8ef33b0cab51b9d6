"""The searches' vectorised column machinery against the one-column definitions it speeds
up: every column's member intervals, and the sweep that makes a
group's halo reads disjoint."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.partition import totals
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.shares import Columns, member_intervals

HIERARCHIES = [(2,), (3,), (2, 2), (3, 2), (2, 3, 2), (5, 3), (2, 2, 2, 2)]


def test_column_parts_are_the_member_intervals():
    """`Columns.parts` (all columns at once) equals `member_intervals` column by column,
    uneven shares and levels of any size included."""
    for sizes in HIERARCHIES:
        hierarchy = Hierarchy(sizes)
        columns = list(itertools.product(("batch", "in", "out", "spatial"),
                                         repeat=hierarchy.levels))
        many = Columns(columns, hierarchy.levels)
        for total in (1, 5, 7, 64, 100):
            for dim in (Dim.N, Dim.C, Dim.K, Dim.P):
                expected = np.stack([member_intervals(total, c, hierarchy, dim)
                                     for c in columns])
                assert np.array_equal(many.parts(total, hierarchy, dim), expected)


@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12), st.integers(0, 2)),
                     min_size=1, max_size=8))
def test_clipped_intervals_are_disjoint_with_the_same_union(data):
    """Within each group, the clipped intervals cover exactly the cells the intervals do,
    each cell once."""
    intervals = np.array([[start, start + length] for start, length, _ in data])
    groups = np.array([group for _, _, group in data])
    clipped = totals._clipped(intervals, groups)
    assert (clipped[:, 1] >= clipped[:, 0]).all()
    for group in set(groups.tolist()):
        mine = groups == group
        cells = set().union(*(range(a, b) for a, b in intervals[mine].tolist()))
        pieces = [range(a, b) for a, b in clipped[mine].tolist()]
        assert sum(len(p) for p in pieces) == len(cells)
        assert set().union(*pieces) == cells
