/* Kilobyte runtime, Cortex-M55 Helium (MVE): 3x3 depthwise sums along a line of the padded plane, in Armv8.1-M
 * assembly (GNU as). Interface and contract: kb_mve_dw3.h (used by mve/kb_depthwise.c).
 *
 * Per group of four outputs, a low-overhead loop (DLS / LE): for each of the nine taps one VLDRB.S32 of the four
 * lanes' plane bytes and one VMLA (the first a VMUL) by the tap's weight, held in a register for the whole line; one
 * VSTRW of the four sums. Loads and multiplies alternate (memory and multiply units); each row's last tap loads with
 * post-increment, so the row pointers advance by themselves.
 *
 * Registers: r0-r4, r8-r11 the weights (w[0..8]); r5, r6, r7 the three rows (widening loads take low registers);
 * r12 the sums; lr the loop count.
 * AAPCS: r4-r11 saved and restored.
 */
#include "kb_mve_dw3.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_dw3_sums
    push {r4-r11, lr}
    ldr r12, [sp, #36]
    movs lr, r2
    beq 2f
    mov r5, r0
    add r6, r0, r1
    add r7, r6, r1
    ldm r3, {r0-r4, r8-r11}
    dls lr, lr
1:
    vldrb.s32 q1, [r5, #1]
    vldrb.s32 q2, [r5, #2]
    vmul.i32 q0, q1, r1
    vldrb.s32 q1, [r5], #4
    vmla.s32 q0, q2, r2
    vldrb.s32 q2, [r6, #1]
    vmla.s32 q0, q1, r0
    vldrb.s32 q1, [r6, #2]
    vmla.s32 q0, q2, r4
    vldrb.s32 q2, [r6], #4
    vmla.s32 q0, q1, r8
    vldrb.s32 q1, [r7, #1]
    vmla.s32 q0, q2, r3
    vldrb.s32 q2, [r7, #2]
    vmla.s32 q0, q1, r10
    vldrb.s32 q1, [r7], #4
    vmla.s32 q0, q2, r11
    vmla.s32 q0, q1, r9
    vstrw.32 q0, [r12], #16
    le lr, 1b
2:
    pop {r4-r11, pc}
END_FUNCTION kb_mve_dw3_sums

/* kb_mve_dw3_quads(r0 rows, r1 step, r2 n, r3 w, [sp] sums): a low-overhead loop over the outputs; per tap one
 * VLDRB.S32 of the ring (four channels), a VMUL by the tap's weight vector and a VADD (no integer vector-by-vector
 * multiply-accumulate in MVE), on three different units. Weight vectors 0-4 stay in q3-q7, 5-8 are reloaded per
 * output (VLDRW). Registers: r5, r6, r7 the rows (advance by step); r3 the weights; r12 the sums; lr the count.
 * AAPCS: r4-r7 and d8-d15 saved and restored. */
FUNCTION kb_mve_dw3_quads
    push {r4-r7, lr}
    vpush {d8-d15}
    ldr r12, [sp, #84]
    movs lr, r2
    beq 2f
    ldm r0, {r5, r6, r7}
    vldrw.u32 q3, [r3]
    vldrw.u32 q4, [r3, #16]
    vldrw.u32 q5, [r3, #32]
    vldrw.u32 q6, [r3, #48]
    vldrw.u32 q7, [r3, #64]
    dls lr, lr
1:
    vldrb.s32 q1, [r5]
    vmul.i32 q0, q1, q3
    vldrb.s32 q1, [r5, #4]
    vmul.i32 q2, q1, q4
    vldrb.s32 q1, [r5, #8]
    vadd.i32 q0, q0, q2
    vmul.i32 q2, q1, q5
    vldrb.s32 q1, [r6]
    vadd.i32 q0, q0, q2
    vmul.i32 q2, q1, q6
    vldrb.s32 q1, [r6, #4]
    vadd.i32 q0, q0, q2
    vmul.i32 q2, q1, q7
    vldrb.s32 q1, [r6, #8]
    vadd.i32 q0, q0, q2
    vldrw.u32 q2, [r3, #80]
    vmul.i32 q2, q1, q2
    vldrb.s32 q1, [r7]
    vadd.i32 q0, q0, q2
    vldrw.u32 q2, [r3, #96]
    vmul.i32 q2, q1, q2
    vldrb.s32 q1, [r7, #4]
    vadd.i32 q0, q0, q2
    vldrw.u32 q2, [r3, #112]
    vmul.i32 q2, q1, q2
    vldrb.s32 q1, [r7, #8]
    vadd.i32 q0, q0, q2
    vldrw.u32 q2, [r3, #128]
    vmul.i32 q2, q1, q2
    add r5, r5, r1
    add r6, r6, r1
    vadd.i32 q0, q0, q2
    add r7, r7, r1
    vstrw.32 q0, [r12], #16
    le lr, 1b
2:
    vpop {d8-d15}
    pop {r4-r7, pc}
END_FUNCTION kb_mve_dw3_quads
