/* Kilobyte runtime, Cortex-M55 Helium (MVE): DTMM's filterlet convolution on four output pixels, in Armv8.1-M
 * assembly (GNU as). Interface and contract: kb_mve_fwcs4.h (used by mve/kb_sparse_conv.c).
 *
 * Per kept filterlet: its offset (LDRH), the four columns' pointers at it, then a tail-predicated loop (DLSTP.8 /
 * LETP) over its in_c weights: one VLDRB of the weights and one per column, one VMLADAVA per column — 9 vector
 * instructions for 64 MACs, the weights loaded once for the four pixels (DTMM's weight-stationary reuse on 4 lanes of
 * 16 values). A filter's four sums go to the job's table.
 *
 * Registers: r0, r2, r4, r6 the sums (VMLADAVA takes even registers); r5, r7, r9, r11 the columns; r3 the weights
 * and r1 the filterlet offsets (both run on through the filters); r8 the filter's filterlets left; r10 the job;
 * r12 scratch; lr the loop count. AAPCS: r4-r11 and d8-d9 (q4) saved and restored.
 */
#include "kb_mve_fwcs4.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_fwcs4
    push {r4-r11, lr}
    vpush {d8-d9}
    mov r10, r0
    ldr r3, [r10, #KB_MVE_FWCS4_ARR]
    ldr r1, [r10, #KB_MVE_FWCS4_CPTR]
.Lfilter:
    movs r0, #0
    movs r2, #0
    movs r4, #0
    movs r6, #0
    ldr r12, [r10, #KB_MVE_FWCS4_FIDX]
    ldrh r8, [r12, #2]
    ldrh r5, [r12], #2
    str r12, [r10, #KB_MVE_FWCS4_FIDX]
    subs r8, r8, r5
    beq .Lstore
.Lfilterlet:
    ldrh r12, [r1], #2
    ldr r5, [r10, #KB_MVE_FWCS4_COLS]
    add r5, r5, r12
    ldr r12, [r10, #KB_MVE_FWCS4_K]
    add r7, r5, r12
    add r9, r7, r12
    add r11, r9, r12
    ldr lr, [r10, #KB_MVE_FWCS4_IN_C]
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
    letp lr, .Ldot
    ldr r12, [r10, #KB_MVE_FWCS4_W_BACK]
    subs r3, r3, r12
    subs r8, r8, #1
    bne .Lfilterlet
.Lstore:
    ldr r12, [r10, #KB_MVE_FWCS4_AT]
    str r2, [r12, #4 * KB_MVE_DOT4_CHANNELS]
    str r4, [r12, #8 * KB_MVE_DOT4_CHANNELS]
    str r6, [r12, #12 * KB_MVE_DOT4_CHANNELS]
    str r0, [r12], #4
    str r12, [r10, #KB_MVE_FWCS4_AT]
    ldr r12, [r10, #KB_MVE_FWCS4_N]
    subs r12, r12, #1
    str r12, [r10, #KB_MVE_FWCS4_N]
    bne .Lfilter
    vpop {d8-d9}
    pop {r4-r11, pc}
END_FUNCTION kb_mve_fwcs4
