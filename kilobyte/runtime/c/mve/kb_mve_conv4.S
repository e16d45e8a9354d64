/* Kilobyte runtime, Cortex-M55 Helium (MVE): the dot products of four conv columns with a run of channels, and the
 * im2col's copies and fills, in Armv8.1-M assembly (GNU as). Interface and contract: kb_mve_conv4.h (used by
 * mve/kb_conv.c).
 *
 * Per channel, a tail-predicated loop (DLSTP.8 / LETP) over the k values: one VLDRB of the weights and one per
 * column, one VMLADAVA per column and one VADDVA of the weights — 10 vector instructions for 64 MACs, loads and
 * multiplies alternating so the memory and multiply units overlap. The five sums are stored (four STRs and one
 * post-indexed); requantisation is the caller's, four channels at a time.
 *
 * Registers: r0, r2, r4, r6 the four sums and r8 the weight sum (VMLADAVA / VADDVA take even registers);
 * r5, r7, r9, r11 the columns; r3 the weights (advance through the channels); r10 the job; r12 the channel;
 * r1 &sums[0][channel]; lr the loop count. AAPCS: r4-r11 and d8-d9 (q4) saved and restored.
 */
#include "kb_mve_conv4.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_dot4
    push {r4-r11, lr}
    vpush {d8-d9}
    mov r10, r0
    ldr r3, [r10, #KB_MVE_DOT4_W]
    add r1, r10, #KB_MVE_DOT4_SUMS       /* &sums[0][co] */
    movs r12, #0
.Lchannel:
    ldrd r5, r7, [r10, #KB_MVE_DOT4_COL]
    ldrd r9, r11, [r10, #KB_MVE_DOT4_COL + 8]
    ldr lr, [r10, #KB_MVE_DOT4_K]
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
    ldr r5, [r10, #KB_MVE_DOT4_W_BACK]
    subs r3, r3, r5
    str r2, [r1, #4 * KB_MVE_DOT4_CHANNELS]
    str r4, [r1, #8 * KB_MVE_DOT4_CHANNELS]
    str r6, [r1, #12 * KB_MVE_DOT4_CHANNELS]
    str r8, [r1, #16 * KB_MVE_DOT4_CHANNELS]  /* wsum[co]: the row after sums[3] */
    str r0, [r1], #4
    adds r12, r12, #1
    ldr r5, [r10, #KB_MVE_DOT4_N]
    cmp r12, r5
    blt .Lchannel
    vpop {d8-d9}
    pop {r4-r11, pc}
END_FUNCTION kb_mve_dot4

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

/* kb_mve_copy_rows(r0 dst, r1 src, r2 rows, r3 n, [sp] src_pitch): r12 the next row's source, lr the loop count. */
FUNCTION kb_mve_copy_rows
    push {r4, lr}
    ldr r4, [sp, #8]
1:
    add r12, r1, r4
    dlstp.8 lr, r3
2:
    vldrb.u8 q0, [r1], #16
    vstrb.8 q0, [r0], #16
    letp lr, 2b
    /* dst ran 16 * ceil(n / 16) bytes on: step back to just past the row's n bytes */
    add r1, r3, #15
    bic r1, r1, #15
    subs r1, r1, r3
    subs r0, r0, r1
    mov r1, r12
    subs r2, r2, #1
    bne 1b
    pop {r4, pc}
END_FUNCTION kb_mve_copy_rows

/* kb_mve_gather(r0 dst, r1 src, r2 n, r3 stride): q1 the lanes' offsets {0, s, 2s, 3s}, r3 then 4 s; the return
 * address in r12, the loop count in lr. */
FUNCTION kb_mve_gather
    cbz r2, 2f
    mov r12, lr
    movs lr, #0
    vidup.u32 q1, lr, #1  /* {0, 1, 2, 3} (lr advances; dlstp overwrites it) */
    vmul.i32 q1, q1, r3
    lsls r3, r3, #2
    dlstp.32 lr, r2
1:
    vldrb.s32 q0, [r1, q1]
    vstrb.32 q0, [r0], #4
    add r1, r1, r3
    letp lr, 1b
    bx r12
2:
    bx lr
END_FUNCTION kb_mve_gather

/* kb_mve_gather_t(r0 dst, r1 src, r2 n, r3 stride, [sp] dst_stride): q1 / q2 the source / destination lanes'
 * offsets, r3 / r4 then four strides of each. */
FUNCTION kb_mve_gather_t
    push {r4, lr}
    ldr r4, [sp, #8]
    cbz r2, 2f
    movs lr, #0
    vidup.u32 q1, lr, #1
    vmul.i32 q2, q1, r4
    vmul.i32 q1, q1, r3
    lsls r3, r3, #2
    lsls r4, r4, #2
    dlstp.32 lr, r2
1:
    vldrb.s32 q0, [r1, q1]
    vstrb.32 q0, [r0, q2]
    add r1, r1, r3
    add r0, r0, r4
    letp lr, 1b
2:
    pop {r4, pc}
END_FUNCTION kb_mve_gather_t
