/* Kilobyte runtime, Cortex-M DSP kernels: a 3x3 depthwise channel's output row, two outputs per step, in Armv7E-M
 * assembly (Thumb-2, GNU as, through the C preprocessor for kb_arm_dw3.h's constants). Interface and contract:
 * kb_arm_dw3.h (used by arm/kb_depthwise.c).
 *
 * Stride 1, one window row r of outputs x and x + 1 from one word [r0 r1 r2 r3] (SXTB16: e = [r0, r2], o = [r1, r3]):
 *     out(x)     += SMLAD([w0, w2], e) + w1 * r1      (SMLABB / SMLATB on o's bottom)
 *     out(x + 1) += SMLAD([w0, w2], o) + w1 * r2      (SMLABT / SMLATT on e's top)
 * 7 instructions for 6 MACs. Stride 2: out(x + 1) sees r2, r3, r4: SMLABT([w0, w2], e) + w1 * r3 (o's top) +
 * w2 * r4 (one LDRSB; SMLATB) — 9 instructions (10 for rows 1 and 2, which need their address) for 6 MACs.
 * Then both sums are requantised in registers (kb_arm_rqs's form: 4 instructions each + SSAT as the clamp, or two
 * compares each for a narrower activation: a flag picks one of two pair loops per row; one function per stride keeps
 * the Flash down) and stored. An odd last output of a row takes nine LDRSB + SMLAxB. The sums
 * are exact (|sum| < 2^30, the caller's bound). One call does the whole channel, so the frame is set up once.
 *
 * Registers in the loop:
 *   r0  the plane byte under output x's top-left tap     r1  output x
 *   r2  job->pw (plane row pitch)                        r3  2 * pw (stride 1) or a row address (stride 2); scratch
 *   r4, r5, r6  [w0, w2] of window rows 0, 1, 2          r7  [w1 row 0, w1 row 1]     r8  w1 of row 2
 *   r9, r10  the sums of outputs x and x + 1             r11, r12, lr  the plane word and its halves; scratch
 * The rest lives in a frame copied from the job (FRAME below). AAPCS: r4-r11 and lr saved and restored.
 */
#include "kb_arm_dw3.h"
#include "kb_arm_asm.h"

/* Frame offsets (from sp, below the saved registers): base twice (one LDRD starts both sums), k and mult (one LDRD),
 * right, ocs, act_min and act_max (one LDRD), the pair loop's end (r0 after the row's last pair), the job, the
 * current output row's first window and output, the output rows left. */
#define F_BASE 0
#define F_K 8
#define F_RIGHT 16
#define F_OCS 20
#define F_MIN 24
#define F_END 32
#define F_JOB 36
#define F_ROW 40
#define F_Y 44
#define F_ROWS 48
#define F_FULL 52
#define F_BYTES 56

/* Entry (r0 plane, r1 y, r2 job): save, copy the job's per-channel values into the frame and its weights into r4-r8;
 * r2 = pw. */
.macro ENTER
    push    {r4-r11, lr}
    sub     sp, sp, #F_BYTES
    mov     r3, r2
    str     r3, [sp, #F_JOB]
    ldr     r12, [r3, #KB_DW3_BASE]
    str     r12, [sp, #F_BASE]
    str     r12, [sp, #F_BASE + 4]
    ldrd    r12, lr, [r3, #KB_DW3_K]
    strd    r12, lr, [sp, #F_K]
    ldr     r12, [r3, #KB_DW3_RIGHT]
    str     r12, [sp, #F_RIGHT]
    ldr     r12, [r3, #KB_DW3_OCS]
    str     r12, [sp, #F_OCS]
    ldrd    r12, lr, [r3, #KB_DW3_MIN]
    strd    r12, lr, [sp, #F_MIN]
    ldr     r12, [r3, #KB_DW3_ROWS]
    str     r12, [sp, #F_ROWS]
    ldr     r12, [r3, #KB_DW3_FULL]
    str     r12, [sp, #F_FULL]
    str     r0, [sp, #F_ROW]
    str     r1, [sp, #F_Y]
    ldmia   r3, {r4-r8}                 /* w02[0..2], w1_01, w1_2 */
    ldr     r2, [r3, #KB_DW3_PW]
.endm

.macro LEAVE
    add     sp, sp, #F_BYTES
    pop     {r4-r11, pc}
.endm

/* reg = the one-SMMLAR requantisation of reg (r12 = k, lr = mult, r11 = right; r3 scratch), before the clamp. */
.macro RQ reg
    add     r3, r12, \reg, asr #31      /* k - [sum < 0] */
    lsl     \reg, \reg, #1
    smmlar  \reg, \reg, lr, r3
    asr     \reg, \reg, r11
.endm

/* Clamp reg and reg2 (or reg alone: reg2 = none) to [-128, 127]: SSAT. */
.macro CLAMP_FULL reg, reg2
    ssat    \reg, #8, \reg
    .ifnc \reg2, none
    ssat    \reg2, #8, \reg2
    .endif
.endm

/* Clamp reg and reg2 (or reg alone) to [act_min, act_max]: two compares each. Clobbers r12, lr. */
.macro CLAMP_ANY reg, reg2
    ldrd    r12, lr, [sp, #F_MIN]
    cmp     \reg, r12
    it      lt
    movlt   \reg, r12
    cmp     \reg, lr
    it      gt
    movgt   \reg, lr
    .ifnc \reg2, none
    cmp     \reg2, r12
    it      lt
    movlt   \reg2, r12
    cmp     \reg2, lr
    it      gt
    movgt   \reg2, lr
    .endif
.endm

/* Clamp reg (the odd output) by the frame's `full` flag: CLAMP_FULL or CLAMP_ANY. Clobbers r12, lr. */
.macro CLAMP reg
    ldr     r12, [sp, #F_FULL]
    cmp     r12, #0
    beq     6f
    CLAMP_FULL \reg, none
    b       7f
6:
    CLAMP_ANY \reg, none
7:
.endm

/* Requantise r9, r10, clamp (`clamp`: FULL or ANY), store at r1 and r1 + ocs, advance r1 by two outputs. */
.macro STORE_PAIR clamp
    ldrd    r12, lr, [sp, #F_K]
    ldr     r11, [sp, #F_RIGHT]
    RQ      r9
    RQ      r10
    CLAMP_\clamp r9, r10
    ldr     r11, [sp, #F_OCS]
    strb    r9, [r1]
    strb    r10, [r1, r11]
    add     r1, r1, r11, lsl #1
.endm

/* One window row at r0 (+ `off`: r2 = pw or r3 = 2 * pw), stride 1: weights wpair and the w1 half (top or bottom). */
.macro ROW_S1 off, wpair, w1, top
    .ifc \off, none
    ldr     r11, [r0]
    .else
    ldr     r11, [r0, \off]
    .endif
    sxtb16  r12, r11                    /* [r0, r2] */
    sxtb16  lr, r11, ror #8             /* [r1, r3] */
    smlad   r9, \wpair, r12, r9
    smlad   r10, \wpair, lr, r10
    .if \top
    smlatb  r9, \w1, lr, r9
    smlatt  r10, \w1, r12, r10
    .else
    smlabb  r9, \w1, lr, r9
    smlabt  r10, \w1, r12, r10
    .endif
.endm

/* One window row at r3, stride 2: out(x) from r0..r2, out(x + 1) from r2..r4. */
.macro ROW_S2 wpair, w1, top
    ldr     r11, [r3]
    sxtb16  r12, r11                    /* [r0, r2] */
    sxtb16  lr, r11, ror #8             /* [r1, r3] */
    smlad   r9, \wpair, r12, r9         /* w0 r0 + w2 r2 */
    smlabt  r10, \wpair, r12, r10       /* w0 r2 */
    .if \top
    smlatb  r9, \w1, lr, r9             /* w1 r1 */
    smlatt  r10, \w1, lr, r10           /* w1 r3 */
    .else
    smlabb  r9, \w1, lr, r9
    smlabt  r10, \w1, lr, r10
    .endif
    ldrsb   r11, [r3, #4]
    smlatb  r10, \wpair, r11, r10       /* w2 r4 */
.endm

/* One window row of a single output at r3: three bytes, three multiply-accumulates into r9. */
.macro ROW_1 wpair, w1, top
    ldrsb   r11, [r3]
    smlabb  r9, \wpair, r11, r9         /* w0 x0 */
    ldrsb   r11, [r3, #1]
    .if \top
    smlatb  r9, \w1, r11, r9            /* w1 x1 */
    .else
    smlabb  r9, \w1, r11, r9
    .endif
    ldrsb   r11, [r3, #2]
    smlatb  r9, \wpair, r11, r9         /* w2 x2 */
.endm

/* One pair of outputs at r0 into r1, advancing both (`step`: as CHANNEL's), clamped by `clamp`; then back to `again`
 * until r0 reaches the row's end. */
.macro PAIRS step, clamp, again
    ldrd    r9, r10, [sp, #F_BASE]
    .if \step == 1
    lsl     r3, r2, #1
    ROW_S1  none, r4, r7, 0
    ROW_S1  r2, r5, r7, 1
    ROW_S1  r3, r6, r8, 0
    add     r0, r0, #2
    .else
    mov     r3, r0
    ROW_S2  r4, r7, 0
    add     r3, r3, r2
    ROW_S2  r5, r7, 1
    add     r3, r3, r2
    ROW_S2  r6, r8, 0
    add     r0, r0, #4
    .endif
    STORE_PAIR \clamp
    ldr     r11, [sp, #F_END]
    cmp     r0, r11
    bne     \again
.endm

/* The whole channel: per output row, its pairs (PAIRS, one loop per clamp kind so that the flag is tested once per
 * row, not per pair), then its single last output when job->odd; `step` = log2 of the plane bytes one pair advances
 * (1: stride 1, 2: stride 2). */
.macro CHANNEL name, step
FUNCTION \name
    ENTER
5:                                      /* output row: r0, r1 = its first window and output */
    ldr     r3, [sp, #F_JOB]
    ldr     r12, [r3, #KB_DW3_PAIRS]
    add     r12, r0, r12, lsl #\step
    str     r12, [sp, #F_END]
    cmp     r0, r12
    beq     3f
    ldr     r12, [sp, #F_FULL]
    cmp     r12, #0
    beq     2f
1:
    PAIRS   \step, FULL, 1b
    b       3f
2:
    PAIRS   \step, ANY, 2b
3:                                      /* the odd last output of the row */
    ldr     r3, [sp, #F_JOB]
    ldr     r12, [r3, #KB_DW3_ODD]
    cmp     r12, #0
    beq     4f
    ldr     r9, [sp, #F_BASE]
    mov     r3, r0
    ROW_1   r4, r7, 0
    add     r3, r3, r2
    ROW_1   r5, r7, 1
    add     r3, r3, r2
    ROW_1   r6, r8, 0
    ldrd    r12, lr, [sp, #F_K]
    ldr     r11, [sp, #F_RIGHT]
    RQ      r9
    CLAMP   r9
    strb    r9, [r1]
4:                                      /* the next output row */
    ldr     r3, [sp, #F_JOB]
    ldr     r12, [r3, #KB_DW3_ROW_STEP]
    ldr     r0, [sp, #F_ROW]
    add     r0, r0, r12
    str     r0, [sp, #F_ROW]
    ldr     r12, [r3, #KB_DW3_Y_ROW]
    ldr     r1, [sp, #F_Y]
    add     r1, r1, r12
    str     r1, [sp, #F_Y]
    ldr     r12, [sp, #F_ROWS]
    subs    r12, r12, #1
    str     r12, [sp, #F_ROWS]
    bne     5b
    LEAVE
END_FUNCTION \name
.endm

    CHANNEL kb_dw3_s1, 1
    CHANNEL kb_dw3_s2, 2
