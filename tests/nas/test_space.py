"""The MBConv search space as data: sampling stays in the space, JSON round-trips, mutation/crossover keep genes."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.nas.space import Arch, ArchError, MBSpace

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
