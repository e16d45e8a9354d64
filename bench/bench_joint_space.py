"""Benchmark: MCUNetV2's patch figures from the TinyNAS search space (issue #17, papers/search-specs.md B.1, B.2).

An `MBSpace` configured as MobileNetV2 (MbV2's widths, strides and depths, expand 6, kernel 3, a 1280 head, 224 px)
holds exactly one network, the zoo's MobileNetV2; the same space with receptive-field redistribution
(`rd_stages=2`) holds MbV2-RD: MB1 without depthwise, stage 0's second block moved to stage 2. For each, the int8
structure is planned per layer and with `PlanOptions(patch="auto")`; prints the per-layer peak, the stage auto
picks (nodes, grid, input patch, its MACs per layer -> with overlap, border patches clipped) and the total peak and
MACs. tests/nas/test_joint_space.py asserts the same figures; docs/benchmarks.md lists them.

    PYTHONPATH=. python3 bench/bench_joint_space.py
"""

from __future__ import annotations

import dataclasses

from kilobyte.nas.build import build_graph
from kilobyte.nas.space import Arch, MBSpace
from kilobyte.quant.quantize import int8_structure
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions

MBV2 = MBSpace(stage_widths=(24, 32, 64, 96, 160, 320), stage_depths=((2,), (3,), (4,), (3,), (3,), (1,)),
               kernels=(3,), expands=(6,), widths=(1.0,), resolutions=(224,), head_scales=False)
MBV2_RD = dataclasses.replace(MBV2, rd_stages=2)
RD_ARCH = Arch(1.0, 224, (1, 3, 5, 3, 3, 1), tuple(((3, 6),) * d for d in MBV2_RD.max_depths), first_kernel=1)


def main() -> None:
    for name, space, arch in (("MbV2", MBV2, MBV2.largest()), ("MbV2-RD", MBV2_RD, RD_ARCH)):
        g = int8_structure(build_graph(space, arch))
        per_layer, plan = make_plan(g, PlanOptions()), make_plan(g, PlanOptions(patch="auto"))
        s = plan.patch
        print(f"{name}: {arch.describe()}")
        print(f"  per layer {per_layer.peak_bytes / 1024:.1f} KiB, {per_layer.macs / 1e6:.1f} M MACs | auto: "
              f"{s.n_nodes} nodes, {s.grid}x{s.grid}, input patch {s.input_patch}², stage {s.base_macs / 1e6:.1f} -> "
              f"{s.macs / 1e6:.1f} M MACs, peak {plan.peak_bytes / 1024:.1f} KiB, {plan.macs / 1e6:.1f} M MACs "
              f"(+{plan.mac_overhead:.1%})")


if __name__ == "__main__":
    main()
