/* Kilobyte runtime, Cortex-M DSP kernels: four fully-connected rows at a time in Armv7E-M assembly (Thumb-2, GNU as).
 * Interface and contract: kb_arm_fc4.h (used by arm/kb_fc.c).
 *
 * A step takes 4 inputs and the 4 weights at the same columns of rows 0..3: one input word, unpacked once
 * (SXTB16: e = [x0, x2], o = [x1, x3]), then per row one weight word, unpacked alike, and two SMLADs — 5 loads
 * (in two back-to-back groups), 10 unpacks and 8 SMLADs for 16 MACs; two steps per loop iteration.
 *
 * Registers in the loop:
 *   r0  x (advances)          r1  row 0 (advances; row 1 at [r1, r2])     r2  n, the row pitch
 *   r3  row 2 (advances; row 3 at [r3, r2])                                r4  the end of x (x + (n & ~7))
 *   r5-r8  the four sums      r9, r10  the input's even and odd halves    r11, r12, lr  weight words; scratch
 * AAPCS: r4-r11 saved and restored; acc's address (r3 on entry) kept on the stack.
 */
#include "kb_arm_fc4.h"
#include "kb_arm_asm.h"

/* One row's weight word in \w (scratch \t): sum += SMLAD(e, even(w)) + SMLAD(o, odd(w)). */
.macro ROW sum, w, t
    sxtb16 \t, \w
    sxtb16 \w, \w, ror #8
    smlad \sum, r9, \t, \sum
    smlad \sum, r10, \w, \sum
.endm

.macro STEP
    ldr r11, [r0], #4
    ldr r12, [r1, r2]
    ldr lr, [r1], #4
    sxtb16 r9, r11
    sxtb16 r10, r11, ror #8
    ROW r5, lr, r11
    ROW r6, r12, r11
    ldr r12, [r3, r2]
    ldr lr, [r3], #4
    ROW r7, lr, r11
    ROW r8, r12, r11
.endm

FUNCTION kb_arm_fc4
    push {r3-r11, lr}
    ldm r3, {r5-r8}
    bic r4, r2, #7
    add r4, r0, r4
    add r3, r1, r2, lsl #1
    cmp r0, r4
    beq 2f
1:
    STEP
    STEP
    cmp r0, r4
    bne 1b
2:
    pop {r3}
    stm r3, {r5-r8}
    pop {r4-r11, pc}
END_FUNCTION kb_arm_fc4
