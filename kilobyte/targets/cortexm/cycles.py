"""Targets stage (Cortex-M): modelled cycles of a basic block, beside the executed-instruction count.

Instructions are not cycles: on a Cortex-M4 a load costs two unless it follows another load or store, LDM/STM cost
one plus one per register, a taken branch refills the pipeline. `icount` runs the firmware in unicorn with a
basic-block hook; it counts how often each block ran and how often it was left by a taken branch (the next block
does not start where it ends). This module decodes a block's Thumb-2 instructions into timing classes and prices
them with a core's model; `icount` adds `refill` per taken exit.

Cortex-M4 (Arm's Cortex-M4 TRM, r0p1, Table 3-1 and §3.3.2 "Load/store timings"), zero wait states:

    data processing, MUL/MLA/MLS, long multiplies, SMLAD/SMMLAR and the other DSP multiplies   1
    SDIV / UDIV                                                  12 (the TRM's 2-12 depends on the operands; bound)
    load single (LDR/LDRB/LDRH/LDRSB/LDRSH, literal too)          2, or 1 right after a load/store single (pipelined)
    store single                                                 1 with an immediate offset ("always one cycle"),
                                                                 else as a load
    LDM / STM / PUSH / POP of N registers                        1 + N;   LDRD / STRD   1 + 2
    branch (B, B<c>, BL, BX, BLX, CBZ/CBNZ)                      1, + P when taken;   TBB / TBH   2, + P
    IT                                                           0 after a 16-bit instruction (folded), else 1
    taken branch refill P                                        2 (the TRM: 1-3 by target alignment and width)

Not modelled on the M4: the extra cycle when a load/store address comes from the instruction just before it (no
forwarding to the address unit), a load that does not pipeline because its address is the previous load's result,
floating point (charged 1; our kernels are integer).

Cortex-M7 (approximation, documented): Arm publishes no per-instruction table for the M7. It issues two instructions
per cycle in order; this model pairs neighbours greedily within a block when the pair has at most one memory access
and at most one multiply and the first is not multi-cycle; LDM/STM of N registers take 1 + ceil(N/2) (64-bit
path), LDRD/STRD 1, divides 12, TBB/TBH 2; a taken branch adds 1 (the branch predictor hides most of the refill;
its mispredictions — a loop's exit, returns — are not simulated). Load-use stalls are not modelled.

Cortex-M55 (the beat model, documented assumptions; Arm publishes no cycle table for it). One instruction issues per
cycle, in order. Helium (MVE) instructions work on 128-bit vectors in four beats; the M55's datapath executes two
beats per cycle, so a vector instruction holds its unit for two cycles. Three units: memory (VLDR*/VSTR*, VLD2/4,
VST2/4, gathers and scatters), multiply (VMUL*, VMLA*/VMLADAV*/VMLALDAV*, VQDMULH, VQRDMULH, VRMLALDAVH, ...), and
integer (every other vector instruction: VADD, VDUP, VSHL, VMAX, VADDV, lane moves...). The next instruction may issue
the cycle after one on another unit (beat-wise overlap: a VLDR and a VMLADAVA alternating run at one instruction per
cycle), and waits for its unit when the unit is busy (two VMLADAVAs in a row: two cycles each); scalar instructions
overlap a vector instruction's second cycle. VPST and VCTP take one cycle and no unit. Scalar prices: one cycle for
data processing, multiplies and load/store single or dual (the M55's 64-bit data path, loads pipelined), LDM/STM/PUSH/
POP of N registers 1 + ceil(N/2), divides 12, TBB/TBH 2; a taken branch refills 2, except the loop end of a
low-overhead loop (LE/LETP), which the M55's loop cache turns into no refill. Each block is priced in steady state,
as if it followed itself (exact for loop bodies, where the vector work is). Not modelled: data-dependence stalls
(vector results are ready one or two cycles after issue; the kernels interleave independent accumulators), the
vector store-then-load hazard, wait states (code and data in TCM). The vector instructions are recognised from
`arm-none-eabi-objdump`'s disassembly (`helium.vector_insns`); everything else is decoded here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

ALU, MUL, DIV, LOAD, STORE, LDM, STM, DUAL, BRANCH, TABLE, IT = (
    "alu", "mul", "div", "load", "store", "ldm", "stm", "dual", "branch", "table", "it")
# v8.1-M: Helium vector instructions by unit, VPST/VCTP, and the end of a low-overhead loop (LE, LETP)
VMEM, VMUL, VINT, VPRED, LOOP_END = "vmem", "vmul", "vint", "vpred", "loop-end"
VECTOR_UNITS = {VMEM: "memory", VMUL: "multiply", VINT: "integer"}
M55_VECTOR_CYCLES = 2  # four beats at two per cycle
_SINGLE = (LOAD, STORE)  # load/store single: pipelines with its neighbour on the M4
_MEMORY = (LOAD, STORE, LDM, STM, DUAL, TABLE)


@dataclass(frozen=True)
class Insn:
    """One Thumb instruction, as its timing needs it."""

    kind: str
    size: int  # bytes: 2 or 4
    registers: int = 0  # LDM / STM / PUSH / POP: registers transferred
    imm_offset: bool = False  # a store single addressed by base + immediate


def _popcount(x: int) -> int:
    return bin(x).count("1")


def _decode16(h: int) -> Insn:
    """A 16-bit Thumb instruction (ARMv7-M ARM §A5.2)."""
    top6 = h >> 10
    if top6 == 0b010001 and (h >> 8) & 0b11 == 0b11:  # BX / BLX (register)
        return Insn(BRANCH, 2)
    if top6 >> 1 == 0b01001:  # LDR (literal)
        return Insn(LOAD, 2)
    if h >> 12 == 0b0101:  # load/store, register offset: opB 000-010 store, 011-111 load
        return Insn(STORE if (h >> 9) & 0b111 <= 0b010 else LOAD, 2)
    if h >> 13 == 0b011 or h >> 12 in (0b1000, 0b1001):  # immediate offset (word/byte, halfword, SP-relative)
        return Insn(LOAD, 2) if (h >> 11) & 1 else Insn(STORE, 2, imm_offset=True)
    if h >> 12 == 0b1011:  # miscellaneous
        if (h >> 9) & 0b111 == 0b010:  # PUSH {..., LR}
            return Insn(STM, 2, _popcount(h & 0x1FF))
        if (h >> 9) & 0b111 == 0b110:  # POP {..., PC}
            return Insn(LDM, 2, _popcount(h & 0x1FF))
        if (h >> 8) & 0b0101 == 0b0001:  # CBZ / CBNZ
            return Insn(BRANCH, 2)
        if (h >> 8) & 0xF == 0xF and h & 0xF:  # IT (a zero mask is a hint: NOP, YIELD, ...)
            return Insn(IT, 2)
        return Insn(ALU, 2)
    if h >> 12 == 0b1100:  # STM / LDM
        return Insn(LDM if (h >> 11) & 1 else STM, 2, _popcount(h & 0xFF))
    if h >> 12 == 0b1101:  # B<c>; cond 1110 is UDF, 1111 SVC
        return Insn(BRANCH if (h >> 8) & 0xF < 0b1110 else ALU, 2)
    if h >> 11 == 0b11100:  # B
        return Insn(BRANCH, 2)
    if h >> 6 == 0b0100001101:  # MULS
        return Insn(MUL, 2)
    return Insn(ALU, 2)


def _decode32(h1: int, h2: int) -> Insn:
    """A 32-bit Thumb-2 instruction (ARMv7-M ARM §A5.3): op1 = h1[12:11], op2 = h1[10:4], op = h2[15]."""
    op1, op2 = (h1 >> 11) & 0b11, (h1 >> 4) & 0x7F
    if op1 == 0b01:
        if op2 >> 5 == 0b00 and not op2 & 0b100:  # load/store multiple (LDM, STM, PUSH.W, POP.W)
            return Insn(LDM if op2 & 1 else STM, 4, _popcount(h2))
        if op2 >> 5 == 0b00:  # load/store dual or exclusive, table branch
            if h1 & 0xFFF0 == 0xE8D0 and h2 & 0xFFE0 == 0xF000:
                return Insn(TABLE, 4)
            if not (h1 >> 8) & 1 and not (h1 >> 5) & 1:  # P = 0 and W = 0: LDREX / STREX family
                return Insn(LOAD if op2 & 1 else STORE, 4)
            return Insn(DUAL, 4)
        return Insn(ALU, 4)  # data processing (shifted register), coprocessor / floating point
    if op1 == 0b10:
        if h2 >> 15:  # branches and miscellaneous control
            if (h2 >> 12) & 0b101 or (h1 >> 7) & 0b111 != 0b111:  # B.W, BL, or B<c>.W
                return Insn(BRANCH, 4)
            return Insn(ALU, 4)  # MSR / MRS / hints / barriers
        return Insn(ALU, 4)  # data processing (immediate)
    # op1 == 0b11
    if op2 >> 4 == 0b000 and not op2 & 1:  # store single
        imm = (h1 >> 7) & 1 or (h2 >> 11) & 1  # T3 imm12, or T4 imm8 (offset / pre / post-indexed)
        return Insn(STORE, 4, imm_offset=bool(imm))
    if op2 >> 5 == 0b00 and op2 & 0b111 in (0b001, 0b011, 0b101):  # load byte / halfword / word, hints
        return Insn(LOAD, 4)
    if op2 >> 3 == 0b0110:  # multiply, multiply accumulate, DSP multiplies, USAD8
        return Insn(MUL, 4)
    if op2 >> 3 == 0b0111:  # long multiply / accumulate, divide
        return Insn(DIV if op2 & 0b111 in (0b001, 0b011) and (h2 >> 4) & 0xF == 0xF else MUL, 4)
    return Insn(ALU, 4)  # data processing (register), parallel add/sub, coprocessor / floating point


def thumb_instructions(code: bytes) -> Iterator[tuple[int, int, int | None]]:
    """(byte offset, first halfword, second halfword or None for a 16-bit one) of each Thumb instruction of `code`,
    a straight run of them (a halfword whose top five bits are 0b11101, 0b11110 or 0b11111 starts a 32-bit one)."""
    i = 0
    while i + 1 < len(code):
        h1 = code[i] | code[i + 1] << 8
        if h1 >> 11 in (0b11101, 0b11110, 0b11111) and i + 3 < len(code):
            yield i, h1, code[i + 2] | code[i + 3] << 8
            i += 4
        else:
            yield i, h1, None
            i += 2


def decode(code: bytes, at: int = 0, known: dict[int, Insn] | None = None) -> list[Insn]:
    """The timing classes of the Thumb instructions of `code` (`thumb_instructions`), loaded at address `at`;
    `known` (address -> Insn) overrides the decoding where it has an entry (the Helium instructions of a v8.1-M
    image: `helium.vector_insns`).

    >>> [i.kind for i in decode(bytes.fromhex("0120" "1068" "fff7feff" "7047"))]  # movs; ldr; bl .; bx lr
    ['alu', 'load', 'branch', 'branch']
    """
    known = known or {}
    return [known.get(at + i) or (_decode16(h1) if h2 is None else _decode32(h1, h2))
            for i, h1, h2 in thumb_instructions(code)]


def bl_target(address: int, first: int, second: int) -> int | None:
    """The target of a Thumb-2 BL (encoding T1: 11110 S imm10, 11 J1 1 J2 imm11) at `address`, else None.

    >>> hex(bl_target(0x8000, 0xF000, 0xF800))  # BL to the next instruction's address + 0
    '0x8004'
    >>> hex(bl_target(0x8000, 0xF7FF, 0xFFFE))  # BL 4 bytes back: to itself
    '0x8000'
    """
    if first >> 11 != 0b11110 or second & 0xD000 != 0xD000:
        return None
    s = first >> 10 & 1
    i1, i2 = 1 - ((second >> 13 & 1) ^ s), 1 - ((second >> 11 & 1) ^ s)
    offset = s << 24 | i1 << 23 | i2 << 22 | (first & 0x3FF) << 12 | (second & 0x7FF) << 1
    return address + 4 + (offset - (1 << 25) if s else offset)


@dataclass(frozen=True)
class CycleModel:
    """A core's price list: `block(insns)` cycles for one pass through a block, `refill` per taken exit
    (`exit_refill`: of a given block)."""

    core: str
    block: Callable[[list[Insn]], int]
    refill: int
    loop_refill: int | None = None  # a taken exit by a low-overhead loop's end (LE), where the core has one

    def exit_refill(self, insns: list[Insn]) -> int:
        """The refill a taken exit from the block `insns` costs."""
        if self.loop_refill is not None and insns and insns[-1].kind == LOOP_END:
            return self.loop_refill
        return self.refill


def _m4_block(insns: list[Insn]) -> int:
    cycles, prev = 0, None
    for insn in insns:
        k = insn.kind
        if k in _SINGLE:
            pipelined = prev is not None and prev.kind in _SINGLE
            cycles += 1 if pipelined or (k == STORE and insn.imm_offset) else 2
        elif k in (LDM, STM):
            cycles += 1 + insn.registers
        elif k == DUAL:
            cycles += 3
        elif k == DIV:
            cycles += 12
        elif k == TABLE:
            cycles += 2
        elif k == IT:
            cycles += 0 if prev is not None and prev.size == 2 else 1
        else:  # alu, mul, branch
            cycles += 1
        prev = insn
    return cycles


def _m7_alone(insn: Insn) -> int:
    """Cycles of an M7 instruction that does not dual-issue, or 0 if it may pair."""
    k = insn.kind
    if k in (LDM, STM):
        return 1 + (insn.registers + 1) // 2
    return {DUAL: 1, DIV: 12, TABLE: 2}.get(k, 0)


def _m7_block(insns: list[Insn]) -> int:
    cycles, i = 0, 0
    while i < len(insns):
        a = insns[i]
        alone = _m7_alone(a)
        if alone:
            cycles, i = cycles + alone, i + 1
            continue
        b = insns[i + 1] if i + 1 < len(insns) else None
        pairs = (b is not None and a.kind != BRANCH and not _m7_alone(b)
                 and not (a.kind in _MEMORY and b.kind in _MEMORY) and not (a.kind == MUL and b.kind == MUL))
        cycles, i = cycles + 1, i + (2 if pairs else 1)
    return cycles


def _m55_scalar(insn: Insn) -> int:
    k = insn.kind
    if k in (LDM, STM):
        return 1 + (insn.registers + 1) // 2
    return {DIV: 12, TABLE: 2}.get(k, 1)


def _m55_pass(insns: list[Insn], t: int, free: dict[str, int]) -> int:
    """Issue `insns` from cycle `t` with the vector units free from `free` (updated); the cycle after the last issue."""
    for insn in insns:
        unit = VECTOR_UNITS.get(insn.kind)
        if unit is None:
            t += _m55_scalar(insn)
            continue
        start = max(t, free.get(unit, 0))
        free[unit] = start + M55_VECTOR_CYCLES
        t = start + 1
    return t


def _m55_block(insns: list[Insn]) -> int:
    """One pass in steady state: the second of two back-to-back passes (units still busy from the first)."""
    free: dict[str, int] = {}
    first = _m55_pass(insns, 0, free)
    return _m55_pass(insns, first, free) - first


MODELS = {"cortex-m4": CycleModel("cortex-m4", _m4_block, refill=2),
          "cortex-m7": CycleModel("cortex-m7", _m7_block, refill=1),
          "cortex-m55": CycleModel("cortex-m55", _m55_block, refill=2, loop_refill=0)}


def cycle_model(target: str) -> CycleModel | None:
    """The model of a `--target` core, None when there is none."""
    return MODELS.get(target)
