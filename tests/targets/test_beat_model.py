"""The Cortex-M55 beat model (kilobyte/targets/cortexm/cycles.py) and its Helium classifier (helium.py).

The price list is an assumption stated in cycles.py (Arm publishes no M55 cycle table): these tests pin its rules
on short sequences, so a change to them is deliberate, and check that objdump's mnemonics reach the right unit on
real encodings assembled here. On CI (env CI set) nothing is skipped.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from kilobyte.targets.cortexm import have_tools
from kilobyte.targets.cortexm.cycles import ALU, LDM, LOAD, LOOP_END, MODELS, VINT, VMEM, VMUL, VPRED, Insn, decode

M55 = MODELS["cortex-m55"]
V = {k: Insn(k, 4) for k in (VMEM, VMUL, VINT, VPRED, LOOP_END)}
A, L = Insn(ALU, 2), Insn(LOAD, 2)


def test_alternating_units_overlap_and_one_unit_waits():
    # VLDR / VMLADAVA alternating: one instruction per cycle in steady state
    assert M55.block([V[VMEM], V[VMUL]] * 4) == 8
    # two multiplies in a row: the second waits for the unit (2 cycles each)
    assert M55.block([V[VMUL]] * 4) == 8
    assert M55.block([V[VMEM], V[VMUL], V[VMUL]]) == 4
    # two loads in a row wait for the memory unit as two multiplies do
    assert M55.block([V[VMEM], V[VMEM]]) == 4


def test_scalar_work_overlaps_a_vector_instructions_second_cycle():
    assert M55.block([V[VMUL], A]) == 2
    assert M55.block([V[VMUL], A, A, A]) == 4
    assert M55.block([A, L, Insn(LDM, 2, registers=5)]) == 1 + 1 + 4
    assert M55.block([V[VPRED], V[VMEM]]) == 2  # VPST: a cycle, no unit


def test_a_low_overhead_loop_end_refills_nothing():
    body = [V[VMEM], V[VMUL], V[LOOP_END]]
    assert M55.exit_refill(body) == 0 and M55.exit_refill(body[:2] + [Insn("branch", 2)]) == M55.refill == 2
    assert M55.block(body) == 3


_ASM = """.syntax unified
.thumb
vldrb.u8 q0, [r0], #16
vmladava.s8 r0, q0, q1
vldrw.u32 q2, [r2, #16]
vstrb.8 q0, [r3], #16
vmla.s32 q0, q1, r2
vqrdmulh.s32 q0, q0, r1
vadd.i32 q0, q0, q1
vaddva.s8 r2, q0
vctp.8 r3
vpst
vldrbt.u8 q0, [r0]
le lr, .
vldr s0, [r0]
adds r0, r0, r1
"""
WANT = [VMEM, VMUL, VMEM, VMEM, VMUL, VMUL, VINT, VINT, VPRED, VPRED, VMEM, LOOP_END, ALU, ALU]


@pytest.mark.skipif(not os.environ.get("CI") and not have_tools(), reason="arm-none-eabi-gcc missing")
def test_objdump_classifies_real_helium_encodings(tmp_path):
    from kilobyte.targets.cortexm.helium import vector_insns
    from kilobyte.targets.cortexm.toolchain import arm_gcc

    (tmp_path / "t.S").write_text(_ASM)
    elf = tmp_path / "t.elf"
    subprocess.run([arm_gcc(), "-mcpu=cortex-m55", "-mfloat-abi=hard", "-mthumb", "-nostdlib", "-Wl,-e,0",
                    "-Wl,-Ttext=0x1000", str(tmp_path / "t.S"), "-o", str(elf)], check=True)
    from kilobyte.targets.cortexm.measure import elf_contents

    at, code = next((a, d) for a, d in elf_contents(elf) if a == 0x1000)
    insns = decode(code, at, vector_insns(elf))
    assert [i.kind for i in insns][:len(WANT)] == WANT
