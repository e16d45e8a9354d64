/* Kilobyte runtime, Cortex-M55 Helium (MVE): three conv columns against output channels two at a time, in Armv8.1-M
 * assembly (GNU as). Interface and contract: kb_mve_dot32.h (used by mve/kb_conv.c).
 *
 * Per channel pair, a tail-predicated loop (DLSTP.8 / LETP) over the k values: one VLDRB of each channel's weights
 * and of each column, one VMLADAVA per (column, channel) — 11 vector instructions for 96 MACs (the loads of a
 * column serve both channels). No weight sums: the sums start at the biases, the input offset folded in.
 *
 * Registers: r0, r2, r4 (channel c) and r6, r8, r10 (channel c + 1) the sums of columns 0-2 (VMLADAVA takes even
 * registers); r1, r3, r5 the columns; r7, r9 the two channels' weights; r11 the job; r12 scratch; lr the loop
 * count. AAPCS: r4-r11 and d8-d9 (q4) saved and restored.
 */
#include "kb_mve_dot32.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_dot32
    push {r4-r11, lr}
    vpush {d8-d9}
    mov r11, r0
    ldr r7, [r11, #KB_MVE_DOT32_W]
.Lpair:
    ldr r1, [r11, #KB_MVE_DOT32_COL]
    ldr r3, [r11, #KB_MVE_DOT32_COL + 4]
    ldr r5, [r11, #KB_MVE_DOT32_COL + 8]
    ldr r9, [r11, #KB_MVE_DOT32_W_STEP]
    add r9, r7, r9
    ldr r12, [r11, #KB_MVE_DOT32_FB]  /* the sums start at the two channels' biases */
    ldrd r0, r6, [r12], #8
    str r12, [r11, #KB_MVE_DOT32_FB]
    mov r2, r0
    mov r4, r0
    mov r8, r6
    mov r10, r6
    ldr lr, [r11, #KB_MVE_DOT32_K]
    dlstp.8 lr, lr
.Ldot:  /* loads and multiplies interleaved as far as the operands allow: the two units overlap */
    vldrb.u8 q0, [r7], #16
    vldrb.u8 q2, [r1], #16
    vmladava.s8 r0, q2, q0
    vldrb.u8 q1, [r9], #16
    vmladava.s8 r6, q2, q1
    vldrb.u8 q3, [r3], #16
    vmladava.s8 r2, q3, q0
    vmladava.s8 r8, q3, q1
    vldrb.u8 q4, [r5], #16
    vmladava.s8 r4, q4, q0
    vmladava.s8 r10, q4, q1
    letp lr, .Ldot
    ldr r12, [r11, #KB_MVE_DOT32_W_BACK]
    sub r7, r9, r12                  /* the next pair's first channel: w + 2 k */
    ldr r12, [r11, #KB_MVE_DOT32_AT]  /* each column's two channels are neighbours in its row of the table */
    strd r2, r8, [r12, #4 * KB_MVE_DOT4_CHANNELS]
    strd r4, r10, [r12, #8 * KB_MVE_DOT4_CHANNELS]
    strd r0, r6, [r12], #8
    str r12, [r11, #KB_MVE_DOT32_AT]
    ldr r12, [r11, #KB_MVE_DOT32_PAIRS]
    subs r12, r12, #1
    str r12, [r11, #KB_MVE_DOT32_PAIRS]
    bne .Lpair
    vpop {d8-d9}
    pop {r4-r11, pc}
END_FUNCTION kb_mve_dot32
