/* Kilobyte runtime, Cortex-M DSP kernels: the wide path's blocks, 1 output channel x N = 3..KB_WIDE_COLS pixels on
 * N interleaved int16 im2col columns (kb_arm_widen.h), which are hand-written assembly in kb_arm_wide.S. This header
 * is their interface: prototypes, the kb_wide_job they work through, when their requantisation is exact
 * (kb_wide_job_ok) and the block size (kb_wide_block), for arm/kb_conv.c and arm/kb_conv_add.c; and the constants
 * kb_arm_wide.S needs (kb_wide_job's field offsets), so it is included by the assembly too: the C part is under
 * #ifndef __ASSEMBLER__. The firmware builder assembles kb_arm_wide.S into a firmware whose C files include this
 * header (kilobyte/targets/cortexm/firmware.py, select_sources).
 *
 *   kb_dot_1x<N>_cols(cols, w, groups, acc): acc[0..N) = acc[0] + sum over 4 * groups values of column c times w
 *     (the caller stores the bias in acc[0]; the n & 3 tail values are the caller's). The int32 sums wrap like the
 *     portable kernels' (see kb_arm_simd.h). arm/kb_conv.c's C fallback of the wide path.
 *   kb_wide_1x<N>(cols, w, groups, job): the same dot product for channels job->co .. job->out_c - 1 (their weights
 *     follow each other from w on: groups words each), each result requantised to int8 and stored at
 *     job->y[c][co] for pixel c; job->co ends at job->out_c. TFLite's requantisation (two roundings, + out_offset,
 *     clamp [-128, 127]) as one SMMLAR (derivation in kb_arm_wide.S), exact where kb_wide_job_ok says so.
 */
#ifndef KB_ARM_WIDE_H
#define KB_ARM_WIDE_H

#define KB_WIDE_COLS 6  /* the wide path's columns (pixels per block): the most kb_arm_wide.S keeps in registers */

/* kb_wide_job's fields as kb_arm_wide.S reads them: byte offsets (checked against the struct below). */
#define KB_WIDE_JOB_BIAS 0
#define KB_WIDE_JOB_MULT 4
#define KB_WIDE_JOB_SHIFT 8  /* KB_WIDE_JOB_MULT + 4: one LDRD loads both pointers */
#define KB_WIDE_JOB_CO 12
#define KB_WIDE_JOB_OUT_C 16
#define KB_WIDE_JOB_K1 20
#define KB_WIDE_JOB_Y 24

/* Largest right shift and the accumulator bound under which kb_wide_1x<N> is exact: 2 * acc fits int32 and the
 * SMMLAR result, |2 * acc * mult / 2^32| < 2^30 plus |(1 + 2 * out_offset) << (r - 1)| < 2^(r + 7) <= 2^30, too. */
#define KB_WIDE_MAX_RIGHT 23
#define KB_WIDE_MAX_ACC (1 << 30)

#ifndef __ASSEMBLER__

#include <stddef.h>
#include <stdint.h>

#include "kb_arm_requant.h"

/* What kb_wide_1x<N> works through: the conv's per-channel constants, the channel range and the outputs. */
typedef struct {
    const int32_t *bias, *mult, *shift;
    int32_t co;              /* the next channel; advanced by the call to out_c */
    int32_t out_c;           /* > co */
    int32_t k1;              /* 1 + 2 * out_offset */
    int8_t *y[KB_WIDE_COLS]; /* pixel c's output, channel 0 */
} kb_wide_job;

_Static_assert(offsetof(kb_wide_job, bias) == KB_WIDE_JOB_BIAS && offsetof(kb_wide_job, mult) == KB_WIDE_JOB_MULT &&
               offsetof(kb_wide_job, shift) == KB_WIDE_JOB_SHIFT && offsetof(kb_wide_job, co) == KB_WIDE_JOB_CO &&
               offsetof(kb_wide_job, out_c) == KB_WIDE_JOB_OUT_C && offsetof(kb_wide_job, k1) == KB_WIDE_JOB_K1 &&
               offsetof(kb_wide_job, y) == KB_WIDE_JOB_Y, "kb_wide_job layout used by kb_arm_wide.S");
_Static_assert(KB_WIDE_JOB_SHIFT == KB_WIDE_JOB_MULT + 4, "kb_arm_wide.S loads mult and shift with one LDRD");

void kb_dot_1x3_cols(const int8_t *cols, const int8_t *w, int32_t groups, int32_t *acc);
void kb_dot_1x4_cols(const int8_t *cols, const int8_t *w, int32_t groups, int32_t *acc);
void kb_dot_1x5_cols(const int8_t *cols, const int8_t *w, int32_t groups, int32_t *acc);
void kb_dot_1x6_cols(const int8_t *cols, const int8_t *w, int32_t groups, int32_t *acc);

void kb_wide_1x3(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);
void kb_wide_1x4(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);
void kb_wide_1x5(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);
void kb_wide_1x6(const int8_t *cols, const int8_t *w, int32_t groups, kb_wide_job *job);

/* Whether kb_wide_1x<N> computes every channel of a conv exactly: reduction n (no n & 3 tail), the full clamp, and
 * an int8 out_offset, per channel a right shift 1..KB_WIDE_MAX_RIGHT and a bias that keeps |acc| < KB_WIDE_MAX_ACC
 * for any input: |bias| + n * 255 * 128 (|x + in_offset| <= 255, |w| <= 128). Checked by the kernel at each call
 * (~5 instructions per channel) rather than by the code generator, so that the kernel stays exact for any caller. */
static inline int kb_wide_job_ok(const int32_t *bias, const int32_t *shift, int32_t out_c, int32_t n,
                                 int32_t out_offset, int32_t act_min, int32_t act_max)
{
    if ((n & 3) || !kb_arm_full_clamp(act_min, act_max) || n >= KB_WIDE_MAX_ACC / (255 * 128) || out_offset < -128 ||
        out_offset > 127) {
        return 0;
    }
    const int32_t lim = KB_WIDE_MAX_ACC - n * 255 * 128;  /* |bias| < lim */
    for (int32_t co = 0; co < out_c; ++co) {
        if (shift[co] > -1 || shift[co] < -KB_WIDE_MAX_RIGHT || bias[co] >= lim || bias[co] <= -lim) {
            return 0;
        }
    }
    return 1;
}

/* Pixels in the next block when `left` >= 3 are still to do: 6, but a last 7 or 8 go as 4 + 3 or 4 + 4 (a block of
 * 1 or 2 would need the slower two-column kernels). */
static inline int32_t kb_wide_block(int32_t left)
{
    return left == 7 || left == 8 ? 4 : left < KB_WIDE_COLS ? left : KB_WIDE_COLS;
}

#endif /* __ASSEMBLER__ */

#endif /* KB_ARM_WIDE_H */
