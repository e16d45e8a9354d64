"""The MBConv search space as data: sampling stays in the space, JSON round-trips, mutation/crossover keep genes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kilobyte.nas.space import DEFAULT_STRIDES, Arch, ArchError, MBSpace, downsampling_schedules, final_map

SPACE = MBSpace(num_classes=10, in_channels=1)


def test_sampled_archs_round_trip_and_stay_in_space():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = SPACE.check(SPACE.sample(rng))
        assert Arch.from_json(a.dumps()) == a
        assert Arch.from_json(a.to_json()).key() == a.key()
        assert SPACE.check(SPACE.mutate(a, rng, prob=0.3))
        b = SPACE.sample(rng)
        child = SPACE.check(SPACE.crossover(a, b, rng))
        for x, y, z in zip(child.depths, a.depths, b.depths):
            assert x in (y, z)


def test_mutation_probability_is_per_gene():
    rng = np.random.default_rng(1)
    a = SPACE.sample(rng)
    genes = lambda arch: [arch.width, arch.resolution, *arch.depths,  # noqa: E731
                          *[g for stage in arch.blocks for kb in stage for g in kb]]
    changed = []
    for _ in range(400):
        m = SPACE.mutate(a, rng, prob=0.1)
        changed.append(np.mean([x != y for x, y in zip(genes(a), genes(m))]))
    # a redrawn gene keeps its value with probability 1/|choices| (1/3 .. 1/12), so 0.1 redraws change ~6-8 %
    assert 0.04 < np.mean(changed) < 0.1


def test_key_ignores_inactive_genes():
    a = SPACE.smallest()
    blocks = list(a.blocks)
    blocks[0] = blocks[0][:2] + ((7, 6),) * (len(blocks[0]) - 2)
    b = Arch(a.width, a.resolution, a.depths, tuple(blocks))
    assert a != b and a.key() == b.key()


def test_space_size_matches_the_thesis():
    # papers/search-specs.md A.1: 2.18e19 = (9^2 + 9^3 + 9^4)^5 per (w, r); the one-block last stage adds x9
    assert MBSpace().size() == (9 ** 2 + 9 ** 3 + 9 ** 4) ** 5 * 9


@pytest.mark.parametrize("bad, what", [
    ({"width": 0.25}, "width"), ({"resolution": 30}, "resolution"), ({"depths": [5, 2, 2, 2, 2, 1]}, "depth"),
])
def test_check_names_the_bad_gene(bad, what):
    data = SPACE.smallest().to_json() | bad
    with pytest.raises(ArchError, match=what):
        SPACE.check(Arch.from_json(data))


def test_bad_json_is_one_line_error():
    for text in ["{", '{"width": 1}', '{"width": 1, "resolution": 2, "depths": [1], "kernels": [[3]], '
                 '"expands": [[3, 4]]}']:
        with pytest.raises(ArchError):
            Arch.from_json(text)


JOINT = MBSpace(num_classes=10, in_channels=1, stage_width_choices=(0.5, 0.75, 1.0), rd_stages=2)


def test_joint_space_archs_round_trip_and_stay_in_space():
    rng = np.random.default_rng(2)
    seen_widths, seen_first, seen_k1 = set(), set(), False
    for _ in range(300):
        a = JOINT.check(JOINT.sample(rng))
        assert Arch.from_json(a.dumps()) == a and Arch.from_json(a.to_json()).key() == a.key()
        m = JOINT.check(JOINT.mutate(a, rng, prob=0.3))
        b = JOINT.sample(rng)
        child = JOINT.check(JOINT.crossover(a, b, rng))
        for x, y, z in zip(child.stage_scales(6), a.stage_scales(6), b.stage_scales(6)):
            assert x in (y, z)
        assert child.first_kernel in (a.first_kernel, b.first_kernel)
        seen_widths.update(m.stage_scales(6))
        seen_first.add(a.first_kernel)
        seen_k1 |= any(k == 1 for _, k, _ in a.active_blocks())
        for s in (0, 1):  # RD stages: the first block keeps its depthwise k3
            assert a.blocks[s][0][0] == 3
    assert seen_widths == {0.5, 0.75, 1.0} and seen_first == {1, 3} and seen_k1


def test_joint_space_choices_and_size():
    assert JOINT.depth_choices == ((1, 2, 3, 4), (1, 2, 3, 4), (2, 3, 4, 5, 6), (2, 3, 4), (2, 3, 4), (1,))
    assert JOINT.kernel_choices(1, 0) == (3,) and JOINT.kernel_choices(1, 3) == (1, 3, 5, 7)
    assert JOINT.kernel_choices(2, 5) == (3, 5, 7)
    rd_stage = 3 * (3 + 3 * 12 + 3 * 12 ** 2 + 3 * 12 ** 3)  # first slot 1 x 3 genes, then 4 kernels x 3 expands
    next_stage = sum(9 ** d for d in (2, 3, 4, 5, 6))
    assert JOINT.size() == 2 * rd_stage ** 2 * (3 * next_stage) * (3 * (9 ** 2 + 9 ** 3 + 9 ** 4)) ** 2 * (3 * 9)
    big, small = JOINT.largest(), JOINT.smallest()
    assert big.stage_widths is None and big.first_kernel == 3 and big.depths == (4, 4, 6, 4, 4, 1)
    assert [k for k, _ in big.blocks[0]] == [3, 7, 7, 7]
    assert small.stage_widths == (0.5,) * 6 and small.first_kernel == 1 and small.depths == (1, 1, 2, 2, 2, 1)
    assert [k for k, _ in small.blocks[0]] == [3, 1, 1, 1]


def test_default_space_json_and_keys_are_unchanged():
    """Stored searches keep loading: the default space's JSON has no joint-search fields, an arch with all stage
    widths 1.0 is the arch without them (same JSON, key and description)."""
    assert "rd_stages" not in MBSpace().to_json() and "stage_width_choices" not in MBSpace().to_json()
    assert MBSpace.from_json(JOINT.to_json()) == JOINT and MBSpace.from_json(MBSpace().to_json()) == MBSpace()
    a = SPACE.sample(np.random.default_rng(4))
    ones = Arch(a.width, a.resolution, a.depths, a.blocks, stage_widths=(1.0,) * 6)
    assert ones == a and ones.dumps() == a.dumps() and ones.key() == a.key()
    assert set(a.to_json()) == {"width", "resolution", "depths", "kernels", "expands"}
    assert len(a.key()) == 4 and "mb1" not in a.describe() and " x" not in a.describe()
    narrow = Arch(a.width, a.resolution, a.depths, a.blocks, stage_widths=(0.5,) + (1.0,) * 5, first_kernel=1)
    assert narrow.key() != a.key() and "x0.5" in narrow.describe() and "mb1 k1" in narrow.describe()


@pytest.mark.parametrize("change, what", [
    (dict(first_kernel=1), "first block kernel"), (dict(stage_widths=(0.5,) * 6), "stage 0 width"),
    (dict(stage_widths=(0.5,) * 5), "5 stage widths"),
])
def test_default_space_rejects_joint_genes(change, what):
    with pytest.raises(ArchError, match=what):
        SPACE.check(dataclasses.replace(SPACE.smallest(), **change))


def test_rd_kernel_1_on_a_strided_slot_is_rejected():
    a = JOINT.smallest()
    blocks = (((1, 3),) + a.blocks[0][1:],) + a.blocks[1:]
    with pytest.raises(ArchError, match="stage 0 block 0 kernel = 1"):
        JOINT.check(dataclasses.replace(a, blocks=blocks))


@pytest.mark.parametrize("bad", [dict(rd_stages=6), dict(rd_stages=-1), dict(stage_width_choices=())])
def test_bad_joint_space_is_one_line_error(bad):
    with pytest.raises(ArchError, match="search space"):
        MBSpace(**bad)


@pytest.mark.parametrize("resolution", [12, 16, 28, 40, 64, 96, 224])
def test_adaptive_schedules_end_at_a_sensible_map(resolution):
    """Each schedule's last stage sees 3..7 pixels (ImageNet's schedule at 224 px ends at 7x7; at 28 px at 1x1),
    the stem downsamples or not, and only the default schedule's stride-2 slots are ever stride 2."""
    space = MBSpace(num_classes=10, in_channels=1, schedules="adaptive")
    schedules = downsampling_schedules(space, resolution)
    assert schedules and len(set(schedules)) == len(schedules)
    for strides in schedules:
        side = resolution
        for s in strides:
            side = (side + s - 1) // s
        assert 3 <= side <= 7 and final_map(strides, resolution) == side
        assert all(s == 1 for s, d in zip(strides, DEFAULT_STRIDES) if d == 1)
    assert (DEFAULT_STRIDES in schedules) == (resolution in (96, 224))
    assert downsampling_schedules(MBSpace(), resolution) == (DEFAULT_STRIDES,)  # "fixed": the space's own


def test_schedule_json_round_trips_and_default_json_is_unchanged():
    space = MBSpace(num_classes=10, in_channels=1, schedules="adaptive").with_config(0.3, 28, (1, 2, 2, 1, 1, 1, 1))
    assert MBSpace.from_json(space.to_json()) == space and space.stem_stride == 1 and space.schedules == "fixed"
    assert "stem_stride" not in MBSpace().to_json() and "schedules" not in MBSpace().to_json()
