/* Kilobyte runtime, Cortex-M55 Helium (MVE): int8 ADD / SUB, four elements a step, in Armv8.1-M assembly (GNU as).
 * Interface and contract: kb_mve_add.h (used by mve/kb_add.c).
 *
 * A tail-predicated loop (DLSTP.32 / LETP): per input a widening VLDRB.S32 and VMLAS (x * 2^20 + off * 2^20 in one
 * multiply-unit instruction), VQRDMULH by its multiplier and, where it shifts right, the rounding divide (VSHR #31 +
 * VQADD: negative values lowered by one, TFLite's ties away from zero; VRSHL); the sum or difference, the output's
 * VQRDMULH and divide, the clamp, the zero point, one narrowing VSTRB.32. One copy per (d1, d2, op): no branch in
 * the loop.
 *
 * Registers: r0 / r1 / r2 the inputs and the output (advance); r3 / r4 base1 / base2; r5 / r6 / r7 the multipliers;
 * r8 / r9 / r10 the shifts; r11 the zero point; lr the count; q5 / q6 the clamp, q7 the unit; q0-q3 scratch.
 * AAPCS: r4-r11 and d8-d15 saved and restored.
 */
#include "kb_mve_add.h"
#include "kb_arm_asm.h"

.macro DIVIDE q, t, r
    vshr.s32 \t, \q, #31
    vqadd.s32 \q, \q, \t
    vrshl.s32 \q, \r
.endm

.macro ADD_FN name, d1, d2, op
FUNCTION \name
    push {r4-r11, lr}
    vpush {d8-d15}
    ldr r11, [r0, #KB_MVE_ADD_LO]
    vdup.32 q5, r11
    ldr r11, [r0, #KB_MVE_ADD_HI]
    vdup.32 q6, r11
    ldr r11, [r0, #KB_MVE_ADD_UNIT]
    vdup.32 q7, r11
    ldrd r3, r4, [r0, #KB_MVE_ADD_BASE1]
    ldrd r5, r6, [r0, #KB_MVE_ADD_M1]
    ldr r7, [r0, #KB_MVE_ADD_MO]
    ldrd r8, r9, [r0, #KB_MVE_ADD_R1]
    ldrd r10, r11, [r0, #KB_MVE_ADD_RO]
    ldr lr, [r0, #KB_MVE_ADD_N]
    ldr r2, [r0, #KB_MVE_ADD_Y]
    ldr r1, [r0, #KB_MVE_ADD_B]
    ldr r0, [r0, #KB_MVE_ADD_A]
    dlstp.32 lr, lr
1:
    vldrb.s32 q0, [r0], #4
    vldrb.s32 q1, [r1], #4
    vmlas.s32 q0, q7, r3
    vmlas.s32 q1, q7, r4
    vqrdmulh.s32 q0, q0, r5
    vqrdmulh.s32 q1, q1, r6
.if \d1
    DIVIDE q0, q2, r8
.endif
.if \d2
    DIVIDE q1, q3, r9
.endif
    \op\().i32 q0, q0, q1
    vqrdmulh.s32 q0, q0, r7
    DIVIDE q0, q2, r10
    vmax.s32 q0, q0, q5
    vmin.s32 q0, q0, q6
    vadd.i32 q0, q0, r11
    vstrb.32 q0, [r2], #4
    letp lr, 1b
    vpop {d8-d15}
    pop {r4-r11, pc}
END_FUNCTION \name
.endm

ADD_FN kb_mve_add_11_add, 1, 1, vadd
ADD_FN kb_mve_add_01_add, 0, 1, vadd
ADD_FN kb_mve_add_10_add, 1, 0, vadd
ADD_FN kb_mve_add_11_sub, 1, 1, vsub
ADD_FN kb_mve_add_01_sub, 0, 1, vsub
ADD_FN kb_mve_add_10_sub, 1, 0, vsub
