/* Kilobyte runtime, Cortex-M DSP kernels: the wide path's blocks in Armv7E-M assembly (Thumb-2, GNU as, run through
 * the C preprocessor for kb_arm_wide.h's constants). C interface, contracts and callers: kb_arm_wide.h (used by
 * arm/kb_conv.c and arm/kb_conv_add.c); the firmware builder assembles this file when a firmware's C files include
 * that header. Eight functions, two families, each for N = 3..6 output pixels:
 *
 *   kb_dot_1x<N>_cols(r0 cols, r1 w, r2 groups, r3 acc)    1 channel x N pixels, raw int32 sums into acc[0..N)
 *   kb_wide_1x<N>(r0 cols, r1 w, r2 groups, r3 job)        every channel job->co .. job->out_c - 1 of N pixels,
 *                                                           requantised to int8 and stored through job->y
 *
 * The columns: N int16 im2col columns interleaved by groups of 4 values (kb_arm_widen.h), group g of column c at
 * bytes 8 * (N * g + c) as two words, the pairs (x0, x2), (x1, x3). The weights: int8, 4 * groups per channel.
 *
 * One 4-value step (STEP below): one weight word, split once by SXTB16 into (w0, w2) and (w1, w3), serves all N
 * columns; LDM loads two columns' words per instruction and SMLAD adds x0 * w0 + x2 * w2, then x1 * w1 + x3 * w3.
 * That is 3 + ceil(N / 2) + 2N instructions for 4N MACs (18 for 24 at N = 6). The block needs N accumulators,
 * 2 weight halves, 4 column words and 2 pointers: at N = 6 every allocatable register (r0-r12, lr), so the loop
 * ends live on the stack. GCC would not keep 14 values in registers through the loop, hence assembly.
 * SMLAD wraps modulo 2^32 like the portable kernels' int32 accumulators, so sums are bit-identical to theirs.
 *
 * Registers in both loops:
 *   r0  the column pointer (advances 8N bytes per step)      r1  the weight pointer (advances 4 bytes per step)
 *   r2 .. r(N+1)  the accumulators of pixels 0 .. N-1         r12, lr  the weight word's halves (w0, w2), (w1, w3)
 *   r8 - r11  the column words of a step (free between steps)
 * AAPCS: arguments in r0-r3; r4-r11 and lr saved and restored; r0-r3, r12 and the flags clobbered.
 */
#include "kb_arm_wide.h"
#include "kb_arm_asm.h"

#if KB_WIDE_COLS != 6
#error "kb_arm_wide.S has the blocks for 3..6 columns: KB_WIDE_COLS must be 6"
#endif

/* -- building blocks ----------------------------------------------------------------------------------------------- */

/* r3 .. r(N+1) = r2: every pixel's accumulator starts at the bias. */
.macro BROADCAST n
    mov     r3, r2
    mov     r4, r2
    .if \n >= 4
    mov     r5, r2
    .endif
    .if \n >= 5
    mov     r6, r2
    .endif
    .if \n >= 6
    mov     r7, r2
    .endif
.endm

/* Two columns (accumulators a, b) of one step: r8, r9 column a's words, r10, r11 column b's. */
.macro COLS_2 a, b
    ldmia   r0!, {r8-r11}
    smlad   \a, r8, r12, \a
    smlad   \a, r9, lr, \a
    smlad   \b, r10, r12, \b
    smlad   \b, r11, lr, \b
.endm

/* One column (accumulator a): the last of an odd N. */
.macro COLS_1 a
    ldrd    r8, r9, [r0], #8
    smlad   \a, r8, r12, \a
    smlad   \a, r9, lr, \a
.endm

/* One 4-value step on N columns: the next weight word, split, times each column's group. All 32-bit instructions:
 * STEP_BYTES(N) bytes of code, which kb_wide_1x<N> relies on to enter its unrolled loop part-way (checked there). */
#define STEP_BYTES(n) (4 * (3 + ((n) + 1) / 2 + 2 * (n)))

.macro STEP n
    ldr     lr, [r1], #4
    sxtb16  r12, lr
    sxtb16  lr, lr, ror #8
    COLS_2  r2, r3
    .if \n == 3
    COLS_1  r4
    .else
    COLS_2  r4, r5
    .endif
    .if \n == 5
    COLS_1  r6
    .elseif \n == 6
    COLS_2  r6, r7
    .endif
.endm

/* -- kb_dot_1x<N>_cols: acc[0..N) = acc[0] + column c . w -------------------------------------------------------------
 * groups & 3 single steps, then the rest four steps per iteration; each loop test compares r1 with an end kept on
 * the stack. Frame (16 bytes below the saved registers): sp + 4 acc, sp + 8 the weights' end, sp + 12 the end of
 * the single steps (sp + 0 is unused). */
.macro DOT_1XN n
FUNCTION kb_dot_1x\n\()_cols
    push    {r4-r11, lr}
    add     r12, r1, r2, lsl #2         /* the end of the weights: w + 4 * groups */
    and     r2, r2, #3
    add     lr, r1, r2, lsl #2          /* the end of the groups & 3 single steps */
    push    {r2, r3, r12, lr}
    ldr     r2, [r3]                    /* acc[0]: the bias */
    BROADCAST \n
    b       2f
1:
    STEP    \n
2:
    ldr     r8, [sp, #12]
    cmp     r1, r8
    bne     1b
    b       4f
3:
    .rept 4
    STEP    \n
    .endr
4:
    ldr     r8, [sp, #8]
    cmp     r1, r8
    bne     3b
    ldr     r8, [sp, #4]                /* acc[0..N) = r2 .. r(N+1) */
    .if \n == 3
    stmia   r8, {r2-r4}
    .elseif \n == 4
    stmia   r8, {r2-r5}
    .elseif \n == 5
    stmia   r8, {r2-r6}
    .else
    stmia   r8, {r2-r7}
    .endif
    add     sp, sp, #16
    pop     {r4-r11, pc}
END_FUNCTION kb_dot_1x\n\()_cols
.endm

/* -- kb_wide_1x<N>: every channel of N pixels, requantised in registers -----------------------------------------------
 * Per channel job->co: the accumulators start at bias[co]; the dot loop is STEP unrolled 8 times and entered at
 * step (-groups) & 7 (the entry address computed once per call), so one 3-instruction loop test serves 32 values;
 * it runs to the constant end of the columns (r0 is reset per channel), so the weight pointer r1 simply carries on
 * into the next channel's weights. Then each accumulator is requantised and stored (RQ), co advanced, and the next
 * channel starts until co == out_c. About 30 instructions per channel besides the dot loop and the outputs.
 * Frame (16 bytes below the saved registers): sp + 0 cols, sp + 4 job, sp + 8 the loop entry (Thumb bit set),
 * sp + 12 the end of the columns.
 *
 * The requantisation is TFLite's MultiplyByQuantizedMultiplier (two roundings), + out_offset and the clamp
 * [-128, 127], as one SMMLAR: with r = -shift (1..KB_WIDE_MAX_RIGHT),
 *     out = SSAT8((SMMLAR(2 * acc, mult, ((1 + 2 * out_offset) << (r - 1)) - [acc < 0])) >> r)
 * where SMMLAR(a, b, c) = (c * 2^32 + a * b + 2^31) >> 32. It is kb_arm_rq1's one-rounding form (kb_arm_requant.h),
 * numerator and shift doubled so that the low word's constant is exactly SMMLAR's 2^31, the out_offset moved inside
 * the shift (floor(v / 2^r) + o == floor((v + o * 2^r) / 2^r)). Exact while |acc| < KB_WIDE_MAX_ACC: the caller
 * checks kb_wide_job_ok (kb_arm_wide.h) first; tests/targets/test_dsp_kernels.py checks the form in numpy over that
 * whole domain and these functions on target. 5 instructions per output, 2 more for the store.
 * Registers while requantising: r0 job, r9 the channel's constant (1 + 2 * out_offset) << (r - 1), r10 mult,
 * r11 r, r12 co, r8 and lr scratch. */

/* Output c of the channel (accumulator acc) to job->y[c][co]. */
.macro RQ acc, c
    add     lr, r9, \acc, asr #31       /* constant - [acc < 0] */
    lsl     \acc, \acc, #1
    smmlar  lr, \acc, r10, lr
    asr     lr, lr, r11
    ssat    lr, #8, lr
    ldr     r8, [r0, #(KB_WIDE_JOB_Y + 4 * \c)]
    strb    lr, [r8, r12]
.endm

.macro WIDE_1XN n
FUNCTION kb_wide_1x\n
    push    {r4-r11, lr}
    mov     r12, #(8 * \n)
    mla     r12, r2, r12, r0            /* the end of the columns: cols + 8N * groups */
    adr     r9, 6f                      /* no groups: straight to the requantisation */
    cmp     r2, #0
    beq     8f
    rsb     lr, r2, #0                  /* else into the 8-step loop at step (-groups) & 7 */
    and     lr, lr, #7
    mov     r8, #STEP_BYTES(\n)
    adr     r9, 3f
    mla     r9, lr, r8, r9
8:
    orr     r9, r9, #1                  /* a Thumb address for BX */
    push    {r0, r3, r9, r12}
5:                                      /* channel job->co: accumulators = bias[co] */
    ldr     r0, [sp, #4]
    ldr     r8, [r0, #KB_WIDE_JOB_CO]
    ldr     r9, [r0, #KB_WIDE_JOB_BIAS]
    ldr     r2, [r9, r8, lsl #2]
    BROADCAST \n
    ldr     r0, [sp]
    ldr     r8, [sp, #8]
    bx      r8
3:
    STEP    \n
7:
    .rept 7
    STEP    \n
    .endr
    .if 7b - 3b != STEP_BYTES(\n)
    .error "kb_wide_1x\n: a step is not STEP_BYTES(\n) bytes of code"
    .endif
    ldr     r8, [sp, #12]
    cmp     r0, r8
    bne     3b
6:                                      /* requantise: r12 co, r10 mult, r11 r, r9 the constant */
    ldr     r0, [sp, #4]
    ldr     r12, [r0, #KB_WIDE_JOB_CO]
    ldrd    r8, r9, [r0, #KB_WIDE_JOB_MULT]   /* job->mult, job->shift */
    ldr     r10, [r8, r12, lsl #2]
    ldr     r11, [r9, r12, lsl #2]
    ldr     r9, [r0, #KB_WIDE_JOB_K1]
    rsb     r11, r11, #0
    sub     r8, r11, #1
    lsl     r9, r9, r8
    RQ      r2, 0
    RQ      r3, 1
    RQ      r4, 2
    .if \n >= 4
    RQ      r5, 3
    .endif
    .if \n >= 5
    RQ      r6, 4
    .endif
    .if \n >= 6
    RQ      r7, 5
    .endif
    add     r12, r12, #1                /* the next channel */
    str     r12, [r0, #KB_WIDE_JOB_CO]
    ldr     r8, [r0, #KB_WIDE_JOB_OUT_C]
    cmp     r12, r8
    bne     5b
    add     sp, sp, #16
    pop     {r4-r11, pc}
END_FUNCTION kb_wide_1x\n
.endm

/* -- the functions ------------------------------------------------------------------------------------------------- */

    DOT_1XN 6
    DOT_1XN 5
    DOT_1XN 4
    DOT_1XN 3

    WIDE_1XN 6
    WIDE_1XN 5
    WIDE_1XN 4
    WIDE_1XN 3
