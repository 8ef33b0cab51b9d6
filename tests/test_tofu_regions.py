"""Tofu's per-tensor cost on regions (`planner.tofu_regions`): known values by hand, and
splits that cover their box."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hypar_sim.planner.tofu_regions import meet, near_equal_parts, size, tensor_cost

WHOLE = (((0, 4), (0, 4)),)  # a 4 x 4 weight tensor (K, C)


def test_two_replicas_of_a_gradient_are_reduced_and_gathered():
    """A batch split: both workers write a partial dW of all 16 cells and read all of W.
    Owners take 8 cells each: 8 partial sums travel to each owner and 8 cells back to each
    reader, 32 elements in all (an all-reduce's 2 (k - 1) / k of 16 on each of k = 2)."""
    assert tensor_cost(WHOLE, WHOLE, [WHOLE, WHOLE], [WHOLE, WHOLE], 1, 2) == 32
    # read by two operators each (forward and backward-data): the gathers twice
    assert tensor_cost(WHOLE, WHOLE, [WHOLE, WHOLE], [WHOLE, WHOLE], 2, 2) == 48


def test_disjoint_halves_move_nothing():
    """An in split: each worker writes and reads its own half of C; owning along C costs 0."""
    halves = [(((0, 4), (0, 2)),), (((0, 4), (2, 4)),)]
    assert tensor_cost(WHOLE, WHOLE, halves, halves, 2, 2) == 0


def test_partial_sums_scale_and_what_other_groups_read():
    """`write_scale` prices the partial sums (pooled outputs); of cells other groups make,
    a group fetches again only what a second reader needs (Tofu's extra input tensors)."""
    halves = [(((0, 4), (0, 2)),), (((0, 4), (2, 4)),)]
    # every worker wrote a partial of all 16 cells at half price; each reads its own half
    assert tensor_cost(WHOLE, WHOLE, [WHOLE, WHOLE], halves, 1, 2, 0.5) == 8
    # two readers need two columns beyond the 4 the group makes: each gets the other's
    # half of what is made (8 + 8), and the 8 cells made elsewhere come once more (8)
    wider = (((0, 4), (0, 6)),)
    assert tensor_cost(WHOLE, wider, halves, [wider, wider], 1, 2) == 24


def test_near_equal_parts_are_whole_and_larger_first():
    parts = near_equal_parts(((0, 10), (0, 3)), 0, 3)
    assert [p[0][0] for p in parts] == [(0, 4), (4, 7), (7, 10)]


@given(st.integers(0, 50), st.integers(1, 40), st.integers(1, 7), st.integers(0, 1))
def test_splits_cover_their_box_exactly(start, length, parts, axis):
    box = ((start, start + length), (0, 5))
    pieces = near_equal_parts(box, axis, parts)
    assert len(pieces) == parts
    assert sum(size(p) for p in pieces) == size((box,))
    assert all(not meet(a, b) for i, a in enumerate(pieces) for b in pieces[i + 1:])
