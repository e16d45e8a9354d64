/* Kilobyte runtime, Cortex-M DSP kernels: one output row of a 3x3 depthwise channel from its zero-point-padded plane,
 * two outputs per step, in hand-written assembly (kb_arm_dw3.S), for the in-place depthwise kernels of
 * arm/kb_depthwise.c. This header is their interface: the job they read and, for the assembly, its field offsets (so
 * it is included by kb_arm_dw3.S too: the C part is under #ifndef __ASSEMBLER__). The firmware builder assembles
 * kb_arm_dw3.S into a firmware whose C files include this header.
 *
 *   kb_dw3_s1(plane, y, job)          every output of the channel, horizontal stride 1
 *   kb_dw3_s2(plane, y, job)          the same, horizontal stride 2
 *
 * plane: the padded plane (rows job->pw apart), the top-left tap of output (0, 0)'s window at its first byte; output
 * row oy's windows start job->row_step * oy bytes on. y: output (0, 0) (outputs job->ocs apart, output rows
 * job->y_row apart). Each row: job->pairs pairs of outputs, then one more when job->odd. job->rows >= 1.
 * Each output is job->base + its window's taps times the plane bytes, requantised by the one-SMMLAR
 * form of kb_arm_rqs (kb_arm_requant.h) with job->k, mult, right and clamped to [act_min, act_max]: the caller
 * (job->full: the clamp is [-128, 127], SSAT does it) uses these only where kb_arm_rqs_ok holds and |base| + 9 * 128 * 128 < 2^30 (arm/kb_depthwise.c, chan_at).
 * The window rows' weights are int16 halves: w02[r] = [w0, w2] of row r (for SMLAD on [x0, x2]), w1_01 =
 * [w1 of row 0, w1 of row 1], w1_2 = w1 of row 2 (bottom half).
 */
#ifndef KB_ARM_DW3_H
#define KB_ARM_DW3_H

#define KB_DW3_W02 0       /* three words */
#define KB_DW3_W1_01 12
#define KB_DW3_W1_2 16
#define KB_DW3_PW 20
#define KB_DW3_OCS 24
#define KB_DW3_BASE 28
#define KB_DW3_K 32        /* KB_DW3_K + 4 = KB_DW3_MULT: one LDRD */
#define KB_DW3_MULT 36
#define KB_DW3_RIGHT 40
#define KB_DW3_MIN 44      /* KB_DW3_MIN + 4 = KB_DW3_MAX: one LDRD */
#define KB_DW3_MAX 48
#define KB_DW3_ROWS 52
#define KB_DW3_PAIRS 56
#define KB_DW3_ODD 60
#define KB_DW3_ROW_STEP 64
#define KB_DW3_Y_ROW 68
#define KB_DW3_FULL 72

#ifndef __ASSEMBLER__

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t w02[3];
    int32_t w1_01, w1_2;
    int32_t pw, ocs, base;
    int32_t k, mult, right;
    int32_t act_min, act_max;
    int32_t rows, pairs, odd;  /* output rows; pairs per row and whether one output follows them */
    int32_t row_step, y_row;   /* bytes from one output row's first window (output) to the next's */
    int32_t full;              /* act_min = -128 and act_max = 127 */
} kb_dw3_job;

_Static_assert(offsetof(kb_dw3_job, w02) == KB_DW3_W02 && offsetof(kb_dw3_job, w1_01) == KB_DW3_W1_01 &&
               offsetof(kb_dw3_job, w1_2) == KB_DW3_W1_2 && offsetof(kb_dw3_job, pw) == KB_DW3_PW &&
               offsetof(kb_dw3_job, ocs) == KB_DW3_OCS && offsetof(kb_dw3_job, base) == KB_DW3_BASE &&
               offsetof(kb_dw3_job, k) == KB_DW3_K && offsetof(kb_dw3_job, mult) == KB_DW3_MULT &&
               offsetof(kb_dw3_job, right) == KB_DW3_RIGHT && offsetof(kb_dw3_job, act_min) == KB_DW3_MIN &&
               offsetof(kb_dw3_job, act_max) == KB_DW3_MAX && offsetof(kb_dw3_job, rows) == KB_DW3_ROWS &&
               offsetof(kb_dw3_job, pairs) == KB_DW3_PAIRS && offsetof(kb_dw3_job, odd) == KB_DW3_ODD &&
               offsetof(kb_dw3_job, row_step) == KB_DW3_ROW_STEP && offsetof(kb_dw3_job, y_row) == KB_DW3_Y_ROW &&
               offsetof(kb_dw3_job, full) == KB_DW3_FULL,
               "kb_dw3_job layout used by kb_arm_dw3.S");

void kb_dw3_s1(const int8_t *plane, int8_t *y, const kb_dw3_job *job);
void kb_dw3_s2(const int8_t *plane, int8_t *y, const kb_dw3_job *job);

#endif /* __ASSEMBLER__ */

#endif /* KB_ARM_DW3_H */
