"""Targets stage (Cortex-M): a deterministic executed-instruction count of one inference, per function and layer.

The `unicorn` emulator (Thumb-2, Cortex-M4/M7 CPU models) runs the firmware's `kb_invoke(fw_input, fw_output)`
directly: the ELF's loadable segments are written to FLASH and RAM (so .data holds its initial values and .bss is
zero, as after reset), SP is the top of the firmware's stack, LR a magic address where the emulation stops. A
basic-block hook records how often each block ran under which layer; at the end each block's instructions are
counted by decoding Thumb lengths (a halfword whose top five bits are 0b11101, 0b11110 or 0b11111 starts a 32-bit
instruction). Counting whole blocks includes instructions skipped inside IT blocks, which a per-instruction hook
would miss. The count is a proxy for time; beside it, each block's modelled cycles (`cycles.py`: its instructions priced
by the core's model, plus a pipeline refill each time the block was left by a taken branch, i.e. the next block did
not start where it ended) give `cycles`.

Per layer: a block at the entry of a `kb_layer_*` function pushes (layer, LR); reaching that return address pops
it; every block counts for the innermost layer on that stack (kb_invoke's own code counts for no layer). Cortex-M55
builds cannot be counted here: GCC 12 emits v8.1-M low-overhead loops (DLS/LE) that unicorn does not implement
(`run_qemu(count=True)` counts them with Kilobyte's QEMU plugin instead, `targets/qemu`).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

import numpy as np

from kilobyte.errors import KilobyteError

from .cycles import CycleModel, cycle_model, decode
from .firmware import model_interface
from .measure import CLONE_SUFFIX, elf_symbol_values, elf_symbols
from .qemu import as_input_bytes
from .toolchain import get_board

MAGIC_RETURN = 0x0F000000  # outside every board's FLASH and RAM: kb_invoke returns here and the emulation stops
_PAGE = 0x1000


@dataclass(frozen=True)
class IcountResult:
    total: int  # instructions executed by kb_invoke and everything it called
    per_function: dict[str, int]  # by innermost function symbol (GCC clone suffixes such as .constprop.0 removed)
    per_layer: dict[str, int]  # by kb_layer_* function, in call order; sums to at most `total`
    output: np.ndarray  # (KB_OUTPUT_BYTES,) int8, what kb_invoke wrote (equals QEMU's output)
    cycles: int  # modelled cycles of the same run (cycles.py: the core's model, zero wait states)
    per_layer_cycles: dict[str, int]  # as per_layer
    per_function_cycles: dict[str, int]  # as per_function


def _unicorn():
    try:
        import unicorn
        from unicorn import arm_const
    except ImportError:
        raise KilobyteError("unicorn is not installed: pip install kilobyte[arm]") from None
    return unicorn, arm_const


class _Functions:
    """The ELF's function symbols, sorted, for "which function is this address in"."""

    def __init__(self, symbols):
        spans = {(s.address, s.address + s.size, CLONE_SUFFIX.sub("", s.name)) for s in symbols if s.kind == "func"}
        self.spans = sorted(spans)  # (start, end, name), end exclusive
        self.starts = [start for start, _, _ in self.spans]

    def name_at(self, address: int) -> str:
        i = bisect.bisect_right(self.starts, address) - 1
        return self.spans[i][2] if i >= 0 and address < self.spans[i][1] else f"<0x{address:08x}>"

    def entries(self, prefix: str) -> dict[int, str]:
        """Start address -> name of the functions whose name starts with `prefix`."""
        return {start: name for start, _, name in self.spans if name.startswith(prefix)}


class _Tracker:
    """Block hook state: hits per (block address, block size, current layer), how often each was left by a taken
    branch (the next block did not start at its end), and the stack of active layers."""

    def __init__(self, layer_entries: dict[int, str], lr_register: int):
        self.layer_entries = layer_entries
        self.lr_register = lr_register
        self.stack: list[tuple[str, int]] = []  # (layer, return address)
        self.hits: Counter = Counter()
        self.taken: Counter = Counter()
        self.last: tuple | None = None  # the previous block's key
        self.last_end = -1

    def on_block(self, uc, address: int, size: int, _user) -> None:
        layer = self.layer_entries.get(address)
        if layer is not None:
            frame = (layer, uc.reg_read(self.lr_register) & ~1)
            if not self.stack or self.stack[-1] != frame:  # not a loop branching back to the entry
                self.stack.append(frame)
        elif self.stack and address == self.stack[-1][1]:
            self.stack.pop()
        key = (address, size, self.stack[-1][0] if self.stack else None)
        self.hits[key] += 1
        if address != self.last_end and self.last is not None:
            self.taken[self.last] += 1
        self.last, self.last_end = key, address + size


def _map_image(uc, build) -> None:
    """Map the board's FLASH, RAM and the magic return page; write every PT_LOAD segment at its VMA and LMA."""
    from elftools.elf.elffile import ELFFile

    board = build.board
    uc.mem_map(board.flash_origin, board.flash_bytes)
    uc.mem_map(board.ram_origin, board.ram_bytes)
    uc.mem_map(MAGIC_RETURN, _PAGE)
    with open(build.elf, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_filesz"] > 0:
                data = seg.data()
                for address in {seg["p_vaddr"], seg["p_paddr"]}:
                    uc.mem_write(address, data)


@dataclass(frozen=True)
class _Totals:
    total: int
    per_function: dict[str, int]
    per_layer: dict[str, int]
    cycles: int
    per_function_cycles: dict[str, int]
    per_layer_cycles: dict[str, int]


def _summarise(uc, tracker: _Tracker, functions: _Functions, model: CycleModel | None) -> _Totals:
    """Instructions (and modelled cycles) per block, decoded once per block, times its hits, summed per function and
    per layer; a block's taken exits add the model's refill each."""
    blocks: dict[tuple[int, int], tuple[int, int]] = {}  # (address, size) -> (instructions, cycles of one pass)
    per_function, per_layer, function_cycles, layer_cycles = Counter(), Counter(), Counter(), Counter()
    for key, n in tracker.hits.items():
        address, size, layer = key
        if (address, size) not in blocks:
            insns = decode(bytes(uc.mem_read(address, size)))
            blocks[address, size] = (len(insns), model.block(insns) if model else 0)
        per_pass, per_pass_cycles = blocks[address, size]
        count = per_pass * n
        cost = per_pass_cycles * n + (model.refill * tracker.taken[key] if model else 0)
        name = functions.name_at(address)
        per_function[name] += count
        function_cycles[name] += cost
        if layer is not None:
            per_layer[layer] += count
            layer_cycles[layer] += cost
    return _Totals(sum(per_function.values()), dict(per_function.most_common()), dict(per_layer),
                   sum(function_cycles.values()), dict(function_cycles.most_common()), dict(layer_cycles))


def _run(uc, where: str, entry: int, timeout: float, pc_register: int, funcs: _Functions) -> None:
    """Emulate from `entry` until the routine returns to MAGIC_RETURN; a fault or a timeout is a KilobyteError
    (`where`: "<elf>: kb_invoke", or what else ran)."""
    unicorn, _ = _unicorn()
    try:
        uc.emu_start(entry | 1, MAGIC_RETURN, timeout=int(timeout * 1e6))
    except unicorn.UcError as e:
        pc = uc.reg_read(pc_register)
        raise KilobyteError(f"{where}: emulation stopped at pc 0x{pc:08x} ({funcs.name_at(pc)}): {e}") from None
    pc = uc.reg_read(pc_register)
    if pc != MAGIC_RETURN:
        raise KilobyteError(f"{where} did not return within {timeout:g} s (stopped at pc 0x{pc:08x}, "
                            f"{funcs.name_at(pc)}); it may loop forever")


def _output_args(build, arm, fw_output: int) -> list[tuple[int, int]]:
    """(register, address) of each output pointer the invoke takes after the input: r1.. (AAPCS: up to r3)."""
    offsets = [o.get("offset", 0) for o in model_interface(build.model_dir)["outputs"]]
    if len(offsets) > 3:
        raise KilobyteError(f"{build.elf}: counting a model with {len(offsets)} outputs (more than r1-r3 pass) is "
                            "not supported; count it under QEMU instead")
    regs = (arm.UC_ARM_REG_R1, arm.UC_ARM_REG_R2, arm.UC_ARM_REG_R3)
    return [(reg, fw_output + offset) for reg, offset in zip(regs, offsets)]


def count_code(code: bytes, target: str, *, registers: dict[str, int] | None = None,
               timeout: float = 10) -> IcountResult:
    """Run a bare Thumb routine on `target`'s core and count it as `count_instructions` counts a firmware.

    `code` (machine code, as the assembler emits it) is placed at address 0 and called with LR = the magic return,
    so it must end by returning (`bx lr`); 64 KB of RAM at 0x20000000 hold the stack (SP at its top) and whatever the
    routine addresses. `registers` ("r0".."r12") are set first. This is how the cycle model is checked on instruction
    sequences whose timing the core's TRM gives. The routine's last return is not a counted block exit, as
    kb_invoke's is not.
    """
    cpu = get_board(target).unicorn_cpu
    if cpu is None:
        raise KilobyteError(f"count_code: unicorn cannot run {target} code; count on cortex-m4 or cortex-m7")
    unicorn, arm = _unicorn()
    uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
    uc.ctl_set_cpu_model(getattr(arm, cpu))
    ram, ram_bytes = 0x20000000, 0x10000
    uc.mem_map(0, max(_PAGE, -(-len(code) // _PAGE) * _PAGE))
    uc.mem_map(ram, ram_bytes)
    uc.mem_map(MAGIC_RETURN, _PAGE)
    uc.mem_write(0, bytes(code))
    uc.reg_write(arm.UC_ARM_REG_SP, ram + ram_bytes)
    uc.reg_write(arm.UC_ARM_REG_LR, MAGIC_RETURN | 1)
    for name, value in (registers or {}).items():
        uc.reg_write(getattr(arm, f"UC_ARM_REG_{name.upper()}"), value)
    funcs = _Functions([])
    tracker = _Tracker({}, arm.UC_ARM_REG_LR)
    uc.hook_add(unicorn.UC_HOOK_BLOCK, tracker.on_block)
    _run(uc, "count_code: the routine", 0, timeout, arm.UC_ARM_REG_PC, funcs)
    t = _summarise(uc, tracker, funcs, cycle_model(target))
    return IcountResult(t.total, t.per_function, t.per_layer, np.zeros(0, np.int8), t.cycles, t.per_layer_cycles,
                        t.per_function_cycles)


def count_instructions(build, input: np.ndarray, timeout: float = 120) -> IcountResult:
    """Count the instructions `kb_invoke` executes on `input` (int8, KB_INPUT_BYTES) in the ELF of `build`."""
    if build.board.unicorn_cpu is None:
        raise KilobyteError(f"{build.elf}: instruction counting is not available for {build.target} (unicorn "
                            f"cannot run v8.1-M code such as DLS/LE loops); count a cortex-m4 or cortex-m7 build")
    data = as_input_bytes(build, input)
    unicorn, arm = _unicorn()
    symbols = elf_symbols(build.elf)
    objects = {s.name: s.address for s in symbols if s.kind == "object"}
    funcs = _Functions(symbols)
    invoke = f"{build.prefix}_invoke"
    entry = next((a for a, name in funcs.entries(invoke).items() if name == invoke), None)
    if entry is None or "fw_input" not in objects:
        raise KilobyteError(f"{build.elf}: no {invoke} / fw_input symbol; is this a kilobyte firmware?")
    uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
    uc.ctl_set_cpu_model(getattr(arm, build.board.unicorn_cpu))
    _map_image(uc, build)
    uc.mem_write(objects["fw_input"], data)
    stack_top = elf_symbol_values(build.elf)["__stack_top"]
    for reg, value in ((arm.UC_ARM_REG_SP, stack_top), (arm.UC_ARM_REG_LR, MAGIC_RETURN | 1),
                       (arm.UC_ARM_REG_R0, objects["fw_input"]), *_output_args(build, arm, objects["fw_output"])):
        uc.reg_write(reg, value)
    tracker = _Tracker(funcs.entries("kb_layer_"), arm.UC_ARM_REG_LR)
    uc.hook_add(unicorn.UC_HOOK_BLOCK, tracker.on_block)
    _run(uc, f"{build.elf}: kb_invoke", entry, timeout, arm.UC_ARM_REG_PC, funcs)
    t = _summarise(uc, tracker, funcs, cycle_model(build.target))
    output = np.frombuffer(bytes(uc.mem_read(objects["fw_output"], build.output_bytes)), dtype=np.int8).copy()
    return IcountResult(t.total, t.per_function, t.per_layer, output, t.cycles, t.per_layer_cycles,
                        t.per_function_cycles)
