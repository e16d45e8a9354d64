/* Kilobyte runtime, Cortex-M55 Helium (MVE): three short conv columns (k <= 16 or 32 values) held in registers
 * against a run of channels, in Armv8.1-M assembly (GNU as). Interface and contract: kb_mve_dots.h.
 *
 * job fields (kb_mve_dot32_job): w, k, pairs = the number of channels n here, col[3], at (sums[0]).
 * Registers: q0-q2 (k <= 16) or q0-q5 (two halves each) the columns, loaded once with tail predication (zeros
 * past k); q6 / q7 a channel's weights; r0, r2, r4 the three sums; r1 the weights, r3 k, r5 the table row 0
 * pointer, lr the loop count; r6 / r7 predicate values. AAPCS: r4-r7 and d8-d15 saved and restored.
 */
#include "kb_mve_dots.h"
#include "kb_arm_asm.h"

/* Columns: q<lo> = the first 16 values of column j (predicate in P0 = VCTP8 of k), q<hi> = the next 16. */
.macro COLS two
    ldr r12, [r0, #KB_MVE_DOT32_COL]
    vpst
    vldrbt.u8 q0, [r12]
.if \two
    vmsr p0, r7
    vpst
    vldrbt.u8 q3, [r12, #16]
    vmsr p0, r6
.endif
    ldr r12, [r0, #KB_MVE_DOT32_COL + 4]
    vpst
    vldrbt.u8 q1, [r12]
.if \two
    vmsr p0, r7
    vpst
    vldrbt.u8 q4, [r12, #16]
    vmsr p0, r6
.endif
    ldr r12, [r0, #KB_MVE_DOT32_COL + 8]
    vpst
    vldrbt.u8 q2, [r12]
.if \two
    vmsr p0, r7
    vpst
    vldrbt.u8 q5, [r12, #16]
.endif
.endm

/* One channel: sums of the three columns with the weights at r1 (q6, and q7 for the second half). */
.macro CHANNEL two
    vmladav.s8 r0, q0, q6
    vmladav.s8 r2, q1, q6
    vmladav.s8 r4, q2, q6
.if \two
    vmladava.s8 r0, q3, q7
    vmladava.s8 r2, q4, q7
    vmladava.s8 r4, q5, q7
.endif
    str r2, [r5, #4 * KB_MVE_DOT4_CHANNELS]
    str r4, [r5, #8 * KB_MVE_DOT4_CHANNELS]
    str r0, [r5], #4
.endm

.macro DOTS name, two
FUNCTION \name
    push {r4-r7, lr}
    vpush {d8-d15}
    ldr r3, [r0, #KB_MVE_DOT32_K]
    vctp.8 r3
    vmrs r6, p0                       /* the first 16 values' predicate */
.if \two
    sub r7, r3, #16
    vctp.8 r7
    vmrs r7, p0                       /* the second 16's */
    vmsr p0, r6
.endif
    COLS \two
    ldr r1, [r0, #KB_MVE_DOT32_W]
    ldr r5, [r0, #KB_MVE_DOT32_AT]
    ldr lr, [r0, #KB_MVE_DOT32_PAIRS]
    subs lr, lr, #1                   /* all channels but the last: whole-vector weight loads */
    beq 2f
    dls lr, lr
1:
    vldrb.u8 q6, [r1]
.if \two
    vldrb.u8 q7, [r1, #16]
.endif
    add r1, r1, r3
    CHANNEL \two
    le lr, 1b
2:  /* the last channel: its loads predicated on k, nothing past the weights */
    vmsr p0, r6
    vpst
    vldrbt.u8 q6, [r1]
.if \two
    vmsr p0, r7
    vpst
    vldrbt.u8 q7, [r1, #16]
.endif
    CHANNEL \two
    vpop {d8-d15}
    pop {r4-r7, pc}
END_FUNCTION \name
.endm

DOTS kb_mve_dots16, 0
DOTS kb_mve_dots32, 1
