/* Kilobyte runtime, Cortex-M DSP kernels: a 3x3 depthwise conv for four channels at once, row by row through a ring
 * of three widened window rows, one pixel per step, in Armv7E-M assembly (Thumb-2, GNU as, through the C
 * preprocessor for kb_arm_dwg.h's constants). Interface and contract: kb_arm_dwg.h (used by arm/kb_depthwise.c).
 *
 * A tap is two words of the window row (channels [c, c+2] and [c+1, c+3] as int16 pairs) and the tap's two weight
 * words in the same layout: one LDRD each, then SMLABB / SMLATT per channel — 6 instructions for 4 MACs, nothing to
 * unpack (the rows were widened once). Then the four doubled sums are requantised by kb_arm_rqs's one-SMMLAR form
 * (5 instructions each with its constants' two loads, no shift before the SMMLAR: the weights are doubled), packed
 * into one word (BFI) and, unless the clamp is the full int8 range (job->full: SSAT did it), clamped to
 * [act_min, act_max] in every byte by SSUB8 + SEL; one word store. 87 instructions per pixel of 36 MACs (92 with the
 * narrower clamp). Between output rows the three ring rows rotate and the input rows new to the next row's windows
 * are widened in (one at stride 1, two at stride 2): 5.5 instructions per input pixel.
 *
 * Registers in the pixel loop:
 *   r0, r1, r2  window rows 0, 1, 2 at the pixel's tap (r, 0)    r3  the output pixel
 *   r4-r7       the sums of channels c, c + 1, c + 2, c + 3        r8-r11  a tap's row and weight words; scratch
 *   r12         the job                                            lr  row 0's end (after the row's last pixel)
 * The ring rows, output row, next input row and rows left live in a frame. AAPCS: r4-r11 and lr saved and restored.
 */
#include "kb_arm_dwg.h"
#include "kb_arm_asm.h"

/* Accumulate tap t: row word pair at [rp, #off] (or post-incremented by `step` when off is `post`). */
.macro TAP rp, off, t, step
    .ifc \off, post
    ldrd    r8, r9, [\rp], #\step
    .else
    ldrd    r8, r9, [\rp, #\off]
    .endif
    ldrd    r10, r11, [r12, #KB_DWG_W + 8 * (\t)]
    smlabb  r4, r8, r10, r4             /* channel c:     x_c   * w_c   */
    smlatt  r6, r8, r10, r6             /* channel c + 2: x_c+2 * w_c+2 */
    smlabb  r5, r9, r11, r5             /* channel c + 1 */
    smlatt  r7, r9, r11, r7             /* channel c + 3 */
.endm

/* One window row (taps t, t + 1, t + 2); the last load moves the row on by one output pixel. */
.macro ROW rp, t, step
    TAP     \rp, 8, \t + 1, \step
    TAP     \rp, 16, \t + 2, \step
    TAP     \rp, post, \t, \step
.endm

/* reg = the one-SMMLAR requantisation of reg (a doubled sum) for channel j, saturated to int8 (r8-r10 scratch;
 * channel 3 also loads job->ocs into r11). */
.macro RQ reg, j
    ldrd    r8, r9, [r12, #KB_DWG_RQ + 16 * \j]        /* k, mult */
    .if \j == 3
    ldrd    r10, r11, [r12, #KB_DWG_RQ + 16 * \j + 8]  /* right, ocs */
    .else
    ldr     r10, [r12, #KB_DWG_RQ + 16 * \j + 8]
    .endif
    add     r8, r8, \reg, asr #31       /* k - [sum < 0] */
    smmlar  \reg, \reg, r9, r8
    asr     \reg, \reg, r10
    ssat    \reg, #8, \reg
.endm

/* One output pixel: sums, requantisation, the four bytes stored, y advanced; `clamp` ANY clamps each byte to
 * [act_min, act_max] (SSUB8 + SEL), FULL leaves SSAT's [-128, 127]. */
.macro PIXEL step, clamp
    ldrd    r4, r5, [r12, #KB_DWG_BASE]
    ldrd    r6, r7, [r12, #KB_DWG_BASE + 8]
    ROW     r0, 0, \step
    ROW     r1, 3, \step
    ROW     r2, 6, \step
    RQ      r4, 0
    RQ      r5, 1
    RQ      r6, 2
    RQ      r7, 3
    bfi     r4, r5, #8, #8
    bfi     r4, r6, #16, #8
    bfi     r4, r7, #24, #8
    .ifc \clamp, ANY
    ldrd    r8, r9, [r12, #KB_DWG_MIN4]
    ssub8   r10, r4, r8                 /* GE per byte: v >= act_min */
    sel     r4, r4, r8
    ssub8   r10, r9, r4                 /* GE per byte: act_max >= v */
    sel     r4, r4, r9
    .endif
    str     r4, [r3]
    add     r3, r3, r11
.endm

/* Widen r2 >= 1 pixels of four channels, r3 bytes apart from r1, into r0 as the ring's two int16-pair words each
 * (SXTB16, and of the word rotated by 8): 5.5 instructions a pixel. Clobbers r0-r2, r4-r6, lr; keeps r12. */
.macro WIDEN
    tst     r2, #1
    beq     2f
    ldr     r6, [r1]                   /* an odd first pixel */
    add     r1, r1, r3
    sxtb16  r4, r6
    sxtb16  r5, r6, ror #8
    strd    r4, r5, [r0], #8
    subs    r2, r2, #1
    beq     3f
2:
    ldr     r6, [r1]
    ldr     lr, [r1, r3]
    add     r1, r1, r3, lsl #1
    sxtb16  r4, r6
    sxtb16  r5, r6, ror #8
    strd    r4, r5, [r0], #8
    sxtb16  r4, lr
    sxtb16  r5, lr, ror #8
    strd    r4, r5, [r0], #8
    subs    r2, r2, #2
    bne     2b
3:
.endm

/* Frame offsets (from sp): the ring rows holding window rows 0, 1, 2 of the current output row, its first output
 * pixel, the next input row to widen, the output rows left. */
#define F_R0 0
#define F_R1 4
#define F_R2 8
#define F_Y 12
#define F_IY 16
#define F_ROWS 20
#define F_BYTES 28

/* kb_dwg_row_in (the assembly's own, not for C): input row r1 of the group (r12: the job) into the ring row at r0,
 * between its padding columns — widened, or the zero point for a padding row. Clobbers r0-r3. Global only so that
 * the Flash split counts it as kernel code like every kernel function. */
FUNCTION kb_dwg_row_in
    push    {r4-r6, lr}
    ldr     r2, [r12, #KB_DWG_LEAD]
    add     r0, r0, r2
    ldr     r2, [r12, #KB_DWG_IN_H]
    cmp     r1, r2
    bhs     1f                          /* iy < 0 or iy >= in_h (unsigned): a padding row */
    ldr     r2, [r12, #KB_DWG_IN_ROW]
    ldr     r3, [r12, #KB_DWG_IN]
    mla     r1, r1, r2, r3
    ldr     r2, [r12, #KB_DWG_IN_W]
    ldr     r3, [r12, #KB_DWG_CS]
    WIDEN
    pop     {r4-r6, pc}
1:
    ldr     r2, [r12, #KB_DWG_IN_W]
    ldr     r3, [r12, #KB_DWG_Z2]
2:
    str     r3, [r0], #4
    str     r3, [r0], #4
    subs    r2, r2, #1
    bne     2b
    pop     {r4-r6, pc}
END_FUNCTION kb_dwg_row_in

/* Input row (frame's F_IY + add) into the ring row at frame offset `slot`. */
.macro ROW_IN slot, add
    ldr     r0, [sp, #\slot]
    ldr     r1, [sp, #F_IY]
    .if \add
    add     r1, r1, #\add
    .endif
    bl      kb_dwg_row_in
.endm

.macro GROUP_FUNCTION name, step, s2
FUNCTION \name
    push    {r4-r11, lr}
    sub     sp, sp, #F_BYTES
    mov     r12, r0
    str     r1, [sp, #F_Y]
    ldr     r4, [r12, #KB_DWG_OUT_H]
    str     r4, [sp, #F_ROWS]
    ldr     r4, [r12, #KB_DWG_RING]
    ldr     r5, [r12, #KB_DWG_RING_ROW]
    str     r4, [sp, #F_R0]
    add     r4, r4, r5
    str     r4, [sp, #F_R1]
    add     r4, r4, r5
    str     r4, [sp, #F_R2]
    ldr     r4, [r12, #KB_DWG_FIRST]
    str     r4, [sp, #F_IY]
    ROW_IN  F_R0, 0
    ROW_IN  F_R1, 1
    ROW_IN  F_R2, 2
    ldr     r4, [sp, #F_IY]
    add     r4, r4, #3
    str     r4, [sp, #F_IY]
3:                                      /* an output row */
    ldr     r0, [sp, #F_R0]
    ldr     r1, [sp, #F_R1]
    ldr     r2, [sp, #F_R2]
    ldr     r3, [sp, #F_Y]
    ldr     lr, [r12, #KB_DWG_ROW_BYTES]
    add     lr, lr, r0
    ldr     r4, [r12, #KB_DWG_FULL]
    cmp     r4, #0
    beq     2f
1:
    PIXEL   \step, FULL
    cmp     r0, lr
    bne     1b
    b       4f
2:
    PIXEL   \step, ANY
    cmp     r0, lr
    bne     2b
4:                                      /* the next output row: rotate the ring, widen its new window rows */
    ldr     r4, [sp, #F_ROWS]
    subs    r4, r4, #1
    beq     9f
    str     r4, [sp, #F_ROWS]
    ldr     r3, [sp, #F_Y]
    ldr     r4, [r12, #KB_DWG_Y_ROW]
    add     r3, r3, r4
    str     r3, [sp, #F_Y]
    ldrd    r4, r5, [sp, #F_R0]
    ldr     r6, [sp, #F_R2]
    .if \s2                             /* window row 2 becomes row 0; two new rows */
    str     r6, [sp, #F_R0]
    strd    r4, r5, [sp, #F_R1]
    ROW_IN  F_R1, 0
    ROW_IN  F_R2, 1
    ldr     r4, [sp, #F_IY]
    add     r4, r4, #2
    .else                               /* rows 1, 2 become 0, 1; one new row */
    strd    r5, r6, [sp, #F_R0]
    str     r4, [sp, #F_R2]
    ROW_IN  F_R2, 0
    ldr     r4, [sp, #F_IY]
    add     r4, r4, #1
    .endif
    str     r4, [sp, #F_IY]
    b       3b
9:
    add     sp, sp, #F_BYTES
    pop     {r4-r11, pc}
END_FUNCTION \name
.endm

    GROUP_FUNCTION kb_dwg_s1, 8, 0
    GROUP_FUNCTION kb_dwg_s2, 16, 1
