"""Targets stage (Cortex-M): build a compiled model into firmware, run it under QEMU, measure and count it.

    build = build_firmware(model_dir, "cortex-m4", device="STM32F412")   # DoesNotFitError when over budget
    result = run_qemu(build, x)              # output (int8), stack high-water mark
    sizes = measure(build)                   # Flash / SRAM split into weights, kernels, arena, stack, other
    counts = count_instructions(build, x)    # deterministic instruction count and modelled cycles, per function and
                                             # per layer (cycles.py: the core's cycle model)

Needs arm-none-eabi-gcc + newlib and qemu-system-arm (`toolchain.APT_INSTALL`), and `pip install kilobyte[arm]`
(unicorn, pyelftools). Boards: mps2-an386 (Cortex-M4), mps2-an500 (Cortex-M7), mps3-an547 (Cortex-M55).
"""

from .cycles import CycleModel, cycle_model
from .firmware import FirmwareBuild, build_firmware, select_sources
from .icount import IcountResult, count_code, count_instructions
from .measure import measure
from .qemu import QemuResult, run_qemu
from .toolchain import BOARDS, Board, get_board, have_tools

__all__ = [
    "BOARDS", "Board", "CycleModel", "FirmwareBuild", "IcountResult", "QemuResult", "build_firmware", "count_code",
    "count_instructions", "cycle_model",
    "get_board", "have_tools", "measure", "run_qemu", "select_sources",
]
