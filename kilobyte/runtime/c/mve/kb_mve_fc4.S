/* Kilobyte runtime, Cortex-M55 Helium (MVE): four fully-connected rows at a time in Armv8.1-M assembly (GNU as).
 * Interface and contract: kb_mve_fc4.h (used by mve/kb_fc.c).
 *
 * A tail-predicated loop (DLSTP.8 / LETP) over the inputs, 16 per step: one VLDRB of the input and one per row, one
 * VMLADAVA per row — 9 vector instructions for 64 MACs, loads and multiplies alternating.
 *
 * Registers: r0 x, r1 / r5 / r7 / r9 the rows (all advance; loaded from the rows array, r1 on entry), r4 / r6 / r8 / r12 the sums (VMLADAVA takes even
 * registers), lr the loop count, r3 the sums' address. AAPCS: r4-r9 saved and restored.
 */
#include "kb_mve_fc4.h"
#include "kb_arm_asm.h"

FUNCTION kb_mve_fc4
    push {r4-r9, lr}
    ldrd r5, r7, [r1, #4]
    ldr r9, [r1, #12]
    ldr r1, [r1]
    movs r4, #0
    movs r6, #0
    mov r8, #0
    mov r12, #0
    dlstp.8 lr, r2
1:
    vldrb.u8 q0, [r0], #16
    vldrb.u8 q1, [r1], #16
    vmladava.s8 r4, q0, q1
    vldrb.u8 q2, [r5], #16
    vmladava.s8 r6, q0, q2
    vldrb.u8 q3, [r7], #16
    vmladava.s8 r8, q0, q3
    vldrb.u8 q1, [r9], #16
    vmladava.s8 r12, q0, q1
    letp lr, 1b
    stm r3, {r4, r6, r8, r12}
    pop {r4-r9, pc}
END_FUNCTION kb_mve_fc4
