"""Tests for schedule/arena.py. Oracles: an exhaustive search over offsets for tiny problems; properties (no two
buffers alive at one step overlap, arena >= peak, offsets aligned, exact <= greedy)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.schedule.arena import plan_arena, plan_groups, plan_offsets

requests = st.lists(st.tuples(st.integers(0, 64), st.integers(0, 8), st.integers(0, 4)).map(
    lambda r: (r[0], r[1], r[1] + r[2])), min_size=0, max_size=14)


def _overlaps(reqs, offsets):
    for (s1, f1, l1, o1), (s2, f2, l2, o2) in itertools.combinations(
            [(*r, o) for r, o in zip(reqs, offsets)], 2):
        if f1 <= l2 and f2 <= l1 and o1 < o2 + s2 and o2 < o1 + s1 and s1 and s2:
            return True
    return False


def _live_peak(reqs):
    return max((sum(s for s, f, last in reqs if f <= t <= last) for _, t, _ in reqs), default=0)


@settings(max_examples=150)
@given(requests, st.sampled_from(["auto", "greedy", "exact"]), st.sampled_from([1, 4, 16]))
def test_live_buffers_never_overlap_and_the_arena_holds_them(reqs, strategy, alignment):
    r = plan_arena(reqs, strategy, alignment)
    assert not _overlaps(reqs, r.offsets)
    assert all(o % alignment == 0 for o in r.offsets)
    assert r.peak_bytes == _live_peak(reqs)
    assert r.arena_bytes >= r.peak_bytes
    assert r.arena_bytes >= max((o + s for (s, _, _), o in zip(reqs, r.offsets)), default=0)
    assert r.fragmentation == pytest.approx((r.arena_bytes - r.peak_bytes) / r.arena_bytes if r.arena_bytes else 0)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 6), st.integers(0, 3)).map(
    lambda r: (r[0], r[1], r[1] + r[2])), max_size=8), st.sampled_from([1, 4]))
def test_exact_is_never_worse_than_greedy(reqs, alignment):
    exact = plan_arena(reqs, "exact", alignment)
    assert exact.arena_bytes <= plan_arena(reqs, "greedy", alignment).arena_bytes
    assert exact.strategy == "exact"


def _brute_force_arena(reqs) -> int:
    """Smallest arena over all offsets drawn from subset sums of the sizes (a compacted optimum uses only those)."""
    sums = sorted({sum(c) for k in range(len(reqs)) for c in itertools.combinations([s for s, _, _ in reqs], k)})
    best = sum(s for s, _, _ in reqs)
    for offsets in itertools.product(sums, repeat=len(reqs)):
        top = max(o + s for o, (s, _, _) in zip(offsets, reqs))
        if top < best and not _overlaps(reqs, offsets):
            best = top
    return best


@settings(max_examples=25)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 4), st.integers(0, 2)).map(
    lambda r: (r[0], r[1], r[1] + r[2])), min_size=1, max_size=4))
def test_exact_equals_brute_force_on_tiny_problems(reqs):
    r = plan_arena(reqs, "exact", alignment=1)
    assert r.arena_bytes == _brute_force_arena(reqs)
    assert r.optimal


def test_exact_beats_greedy_by_size_where_it_strands_a_gap():
    reqs = [(8, 2, 2), (24, 0, 1), (24, 1, 3), (20, 2, 4)]
    greedy = plan_arena(reqs, "greedy")
    exact = plan_arena(reqs, "exact")
    assert (greedy.arena_bytes, exact.arena_bytes, exact.peak_bytes) == (56, 52, 52)
    assert exact.optimal and plan_arena(reqs).strategy == "exact"  # auto: small, so exact


def test_tflm_style_example_and_column_form():
    r = plan_arena([(100, 0, 1), (50, 1, 2), (100, 2, 3)], strategy="greedy")
    assert r.offsets == (0, 100, 0) and r.arena_bytes == 152 and r.peak_bytes == 150
    assert plan_offsets([100, 50, 100], [0, 1, 2], [1, 2, 3], alignment=4, strategy="greedy") == r.offsets


def test_groups_share_one_offset_and_count_their_largest_live_lifetime():
    # an in-place pair: input (64 B, steps 0-1) and output (16 B, steps 1-2) in one group, plus a neighbour
    r = plan_groups([[(64, 0, 1), (16, 1, 2)], [(32, 1, 1)], [(48, 2, 3)]], "exact", 4)
    assert r.peak_bytes == 96  # step 1: max(64, 16) + 32
    assert r.arena_bytes == 96


def test_large_problems_use_greedy_orders_and_bad_arguments_fail():
    reqs = [(8 + k % 5, k, k + 2) for k in range(30)]
    r = plan_arena(reqs)
    assert r.strategy.startswith("greedy") and not _overlaps(reqs, r.offsets)
    with pytest.raises(ValueError, match="strategy"):
        plan_arena(reqs, "best-fit")
    with pytest.raises(ValueError, match="alignment"):
        plan_arena(reqs, alignment=0)
