/* Kilobyte runtime, Cortex-M55 Helium (MVE): four output pixels of a conv, every output channel, in Armv8.1-M
 * assembly (GNU as). Interface and contract: kb_mve_conv4.h (used by mve/kb_conv.c).
 *
 * Per channel, a tail-predicated loop (DLSTP.8 / LETP) over the k values: one VLDRB of the weights and one per
 * column, one VMLADAVA per column and one VADDVA of the weights — 10 vector instructions for 64 MACs, loads and
 * multiplies alternating so the memory and multiply units overlap. Then the four sums become one vector, the bias
 * and in_offset * sum(w) are added, and kb_mve_rq4's requantisation runs on it (VSHL, VQRDMULH, the ties fix-up,
 * VRSHL, VMAX / VMIN, the zero point) before one predicated VSTRB scatter to the four pixels.
 *
 * Registers: r0, r2, r4, r6 the four sums and r8 the weight sum (VMLADAVA / VADDVA take even registers);
 * r5, r7, r9, r11 the columns in the loop, scratch after it; r3 the weights (advance through all channels);
 * r10 the job; r12 the channel; r1 out + channel; lr the loop count. q5 the scatter offsets, q6 / q7 the clamp.
 * AAPCS: r4-r11 and d8-d15 saved and restored.
 */
#include "kb_mve_conv4.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_conv4
    push {r4-r11, lr}
    vpush {d8-d15}
    mov r10, r0
    ldr r3, [r10, #KB_MVE_CONV4_W]
    ldr r1, [r10, #KB_MVE_CONV4_OUT]
    vldrw.u32 q5, [r10, #KB_MVE_CONV4_OFFS]
    ldr r5, [r10, #KB_MVE_CONV4_LO]
    vdup.32 q6, r5
    ldr r5, [r10, #KB_MVE_CONV4_HI]
    vdup.32 q7, r5
    movs r12, #0
.Lchannel:
    ldrd r5, r7, [r10, #KB_MVE_CONV4_COL]
    ldrd r9, r11, [r10, #KB_MVE_CONV4_COL + 8]
    ldr lr, [r10, #KB_MVE_CONV4_K]
    movs r0, #0
    movs r2, #0
    movs r4, #0
    movs r6, #0
    mov r8, #0
    dlstp.8 lr, lr
.Ldot:
    vldrb.u8 q0, [r3], #16
    vldrb.u8 q1, [r5], #16
    vmladava.s8 r0, q1, q0
    vldrb.u8 q2, [r7], #16
    vmladava.s8 r2, q2, q0
    vldrb.u8 q3, [r9], #16
    vmladava.s8 r4, q3, q0
    vldrb.u8 q4, [r11], #16
    vmladava.s8 r6, q4, q0
    vaddva.s8 r8, q0
    letp lr, .Ldot
    ldr r5, [r10, #KB_MVE_CONV4_W_BACK]
    subs r3, r3, r5
    vmov.32 q0[0], r0                /* one lane at a time: the two-lane form's operand order is easy to get wrong */
    vmov.32 q0[1], r2
    vmov.32 q0[2], r4
    vmov.32 q0[3], r6
    ldr r5, [r10, #KB_MVE_CONV4_IN_OFFSET]
    mul r8, r8, r5
    ldr r7, [r10, #KB_MVE_CONV4_BIAS]
    ldr r9, [r7, r12, lsl #2]
    add r8, r8, r9
    vadd.i32 q0, q0, r8
    ldr r7, [r10, #KB_MVE_CONV4_SHIFT]
    ldr r9, [r7, r12, lsl #2]
    bic r5, r9, r9, asr #31          /* left = max(shift, 0) */
    vshl.s32 q0, r5
    ldr r7, [r10, #KB_MVE_CONV4_MULT]
    ldr r11, [r7, r12, lsl #2]
    vqrdmulh.s32 q0, q0, r11
    and r5, r9, r9, asr #31          /* -right = min(shift, 0) */
    vdup.32 q1, r5
    vand q1, q0, q1
    vshr.s32 q1, q1, #31             /* -1 where the value is negative and right > 0 */
    vqadd.s32 q0, q0, q1
    vrshl.s32 q0, r5
    vmax.s32 q0, q0, q6
    vmin.s32 q0, q0, q7
    ldr r5, [r10, #KB_MVE_CONV4_OUT_OFFSET]
    vadd.i32 q0, q0, r5
    ldr r5, [r10, #KB_MVE_CONV4_KEEP]
    vmsr p0, r5
    vpst
    vstrbt.32 q0, [r1, q5]
    adds r1, r1, #1
    adds r12, r12, #1
    ldr r5, [r10, #KB_MVE_CONV4_OUT_C]
    cmp r12, r5
    blt .Lchannel
    vpop {d8-d15}
    pop {r4-r11, pc}
END_FUNCTION kb_mve_conv4

/* kb_mve_copy(r0 dst, r1 src, r2 n): the loop count lives in lr, the return address in r12. */
FUNCTION kb_mve_copy
    cbz r2, 2f
    mov r12, lr
    dlstp.8 lr, r2
1:
    vldrb.u8 q0, [r1], #16
    vstrb.8 q0, [r0], #16
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_copy

/* kb_mve_fill(r0 dst, r1 v, r2 n) */
FUNCTION kb_mve_fill
    cbz r2, 2f
    mov r12, lr
    vdup.8 q0, r1
    dlstp.8 lr, r2
1:
    vstrb.8 q0, [r0], #16
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_fill
