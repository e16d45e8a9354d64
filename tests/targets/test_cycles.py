"""The Cortex-M cycle model (`targets/cortexm/cycles.py`) on hand-written instruction sequences.

Each routine is assembled by arm-none-eabi-as, run in unicorn by `count_code` (the firmware counter's block hook and
summary), and its modelled cycles are checked against the Cortex-M4 TRM's timings (Table 3-1, §3.3.2), written out
here from the table — not from the model: ALU / multiplies 1, a load 2 or 1 when it follows a load/store single, a
store with an immediate offset 1, LDM/STM/PUSH/POP 1 + N, a branch 1 + P when taken (P = 2 in the model), an IT
folded after a 16-bit instruction 0. The routine's own final `bx lr` is one instruction and one cycle (its refill is
not counted, as kb_invoke's return is not). Cortex-M7 cases check the documented dual-issue approximation.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import pytest

from kilobyte.errors import KilobyteError
from kilobyte.targets.cortexm import count_code, cycle_model
from kilobyte.targets.cortexm.cycles import decode

pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and not (shutil.which("arm-none-eabi-as") and importlib.util.find_spec("unicorn")),
    reason="arm-none-eabi-as or unicorn missing")

RAM = 0x20000000
P = 2  # the M4 model's pipeline refill per taken branch (the TRM's P: 1-3)


def assemble(tmp_path, source: str, cpu: str = "cortex-m4") -> bytes:
    src, obj, binary = tmp_path / "r.s", tmp_path / "r.o", tmp_path / "r.bin"
    src.write_text(".syntax unified\n.thumb\n.text\n" + source + "\n")
    subprocess.run(["arm-none-eabi-as", f"-mcpu={cpu}", "-mthumb", str(src), "-o", str(obj)], check=True)
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(obj), str(binary)], check=True)
    return binary.read_bytes()


def run(tmp_path, source: str, target: str = "cortex-m4", **registers):
    return count_code(assemble(tmp_path, source), target, registers={"r0": RAM, **registers})


def test_data_processing_is_one_cycle_each(tmp_path):
    r = run(tmp_path, "movs r1, #0\n" + "adds r1, #1\n" * 8 + "mul r2, r1, r1\nmla r3, r1, r1, r2\nbx lr")
    assert r.total == 12
    assert r.cycles == 1 + 8 + 1 + 1 + 1


def test_neighbouring_loads_pipeline(tmp_path):
    r = run(tmp_path, "ldr r1, [r0]\nldr r2, [r0, #4]\nldrb r3, [r0, #8]\nadds r1, r2\nldrh r2, [r0]\nbx lr")
    assert r.total == 6
    assert r.cycles == (2 + 1 + 1) + 1 + 2 + 1  # three loads back to back: N + 1; the fourth follows an add


def test_stores_with_an_immediate_offset_take_one_cycle(tmp_path):
    r = run(tmp_path, "movs r2, #4\nstr r1, [r0]\nadds r1, #1\nstr r1, [r0, r2]\nadds r1, #1\n"
                      "str.w r1, [r0, #8]\nbx lr")
    assert r.total == 7
    assert r.cycles == 1 + 1 + 1 + 2 + 1 + 1 + 1  # the register-offset store after an add is not pipelined: 2


def test_load_and_store_multiple_cost_one_plus_their_registers(tmp_path):
    r = run(tmp_path, "push {r4-r7, lr}\nldmia r0!, {r1-r3}\nstmia r0!, {r1-r2}\npop {r4-r7}\n"
                      "ldrd r2, r3, [r0]\npop {r1}\nbx r1",
            r1=0)
    # push 5 registers, ldm 3, stm 2, pop 4, ldrd (1 + 2), pop 1 (lr's value into r1), bx
    assert r.total == 7
    assert r.cycles == (1 + 5) + (1 + 3) + (1 + 2) + (1 + 4) + 3 + (1 + 1) + 1


def test_a_taken_branch_refills_the_pipeline(tmp_path):
    r = run(tmp_path, "movs r2, #10\nloop:\nldr r3, [r0], #4\nldr r4, [r1], #4\nsmlad r5, r3, r4, r5\n"
                      "subs r2, #1\nbne loop\nbx lr", r1=RAM + 0x100)
    per_iteration = (2 + 1) + 1 + 1 + 1  # two loads (pipelined), SMLAD, SUBS, BNE
    assert r.total == 1 + 10 * 5 + 1
    assert r.cycles == 1 + 10 * per_iteration + 9 * P + 1  # taken 9 times, falls through on the 10th


def test_a_call_and_its_return_are_taken_branches(tmp_path):
    r = run(tmp_path, "push {lr}\nbl f\npop {pc}\nf:\nadds r1, #1\nbx lr")
    # push (1 + 1), bl (1 + P), adds, bx lr (1 + P: returns inside the routine), pop {pc} (1 + 1, the last exit)
    assert r.total == 5
    assert r.cycles == 2 + (1 + P) + 1 + (1 + P) + 2


def test_it_folds_after_a_16_bit_instruction(tmp_path):
    r = run(tmp_path, "cmp r1, #0\nit eq\nmoveq r2, #1\ncmp.w r1, #0\nit ne\nmovne r2, #2\nbx lr", r1=0)
    # the second IT follows a 32-bit CMP and is not folded; the skipped MOVNE still takes its cycle
    assert r.total == 7
    assert r.cycles == 1 + 0 + 1 + 1 + 1 + 1 + 1


def test_m7_pairs_neighbours_with_one_memory_access_and_one_multiply(tmp_path):
    body = "adds r1, #1\nadds r2, #1\nldr r3, [r0]\nadds r4, #1\nldr r5, [r0, #4]\nldr r6, [r0, #8]\n" \
           "mul r7, r1, r2\nmla r8, r1, r2, r7\nbx lr"
    m7 = run(tmp_path, body, "cortex-m7")
    m4 = run(tmp_path, body)
    assert m7.total == m4.total == 9
    # pairs: (adds, adds) (ldr, adds) (ldr) (ldr, mul) (mla, bx)
    assert m7.cycles == 5
    assert m4.cycles == 1 + 1 + 2 + 1 + 2 + 1 + 1 + 1 + 1


def test_m7_multiple_transfers_move_two_registers_per_cycle(tmp_path):
    m7 = run(tmp_path, "push {r4-r8, lr}\npop {r4-r8}\npop {r1}\nbx r1", "cortex-m7", r1=0)
    assert m7.cycles == (1 + 3) + (1 + 3) + (1 + 1) + 1


def test_decoder_classes_and_lengths_match_the_assembler(tmp_path):
    source = ("movs r0, #1\nldr r1, [r2]\nstr.w r1, [r2, #-4]!\nldrsh.w r3, [r2, r4, lsl #1]\nsmmlar r5, r6, r7, r8\n"
              "sdiv r0, r1, r2\nudiv r0, r1, r2\numull r0, r1, r2, r3\ntbb [pc, r0]\nldrex r0, [r1]\n"
              "strex r2, r0, [r1]\nldmia.w r1, {r2-r9}\ncbz r0, 1f\nb.w 1f\n1:\nblx r3\n")
    kinds = [(i.kind, i.size) for i in decode(assemble(tmp_path, source))]
    assert kinds == [("alu", 2), ("load", 2), ("store", 4), ("load", 4), ("mul", 4), ("div", 4), ("div", 4),
                     ("mul", 4), ("table", 4), ("load", 4), ("store", 4), ("ldm", 4), ("branch", 2), ("branch", 4),
                     ("branch", 2)]
    assert decode(assemble(tmp_path, "ldmia.w r1, {r2-r9}"))[0].registers == 8


def test_a_routine_that_never_returns_is_an_error_not_a_count(tmp_path):
    with pytest.raises(KilobyteError, match="did not return within"):
        count_code(assemble(tmp_path, "1:\nb 1b"), "cortex-m4", timeout=0.2)


def test_every_target_core_has_a_model_and_only_the_m55_a_loop_end_rule():
    """The M55's is the beat model (priced from the QEMU plugin's profile: test_beat_model.py); a core outside the
    targets has none."""
    assert cycle_model("cortex-m55").loop_refill == 0 and cycle_model("cortex-m4").loop_refill is None
    assert cycle_model("cortex-m0plus") is None
    assert cycle_model("cortex-m4").refill == P
