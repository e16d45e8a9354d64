/* Kilobyte runtime, Cortex-M DSP kernels: a 3x3 depthwise conv for a group of four channels, every output row,
 * through a ring of three widened window rows, one pixel per step, in hand-written assembly (kb_arm_dwg.S), for
 * arm/kb_depthwise.c's channel-group path. This header is its interface: the job it reads and, for the assembly,
 * the job's field offsets (included by kb_arm_dwg.S too: the C part is under #ifndef __ASSEMBLER__).
 *
 *   kb_dwg_s1(job, y)   the group's output rows, horizontal and vertical stride 1
 *   kb_dwg_s2(job, y)   the same, stride 2
 *
 * The ring: three rows of job->ring_row bytes at job->ring, each the group's pixels of one input row as two
 * int16-pair words, [x_c, x_c+2] then [x_c+1, x_c+3] (SXTB16 of the pixel's four bytes, and of them rotated by 8),
 * job->lead bytes of padding columns first and the right padding after the job->in_w input pixels; the padding
 * columns hold the zero point (job->z2: it as an int16 pair in both lanes), set by the caller, never written here.
 * Input row iy (first channel at job->in + iy * job->in_row, pixels job->cs bytes apart) is widened into a ring row
 * when a window first needs it; a row outside [0, in_h) (padding) is filled with the zero point. Output row 0's
 * windows start at input row job->first (-pad_t); output x of row oy goes to y + oy * job->y_row + x * job->ocs,
 * four bytes, channels c..c+3; a row advances the window rows by job->row_bytes.
 *
 * Each sum is 2 * (base + taps): job->w holds the taps doubled (as the rows' int16 pairs), job->base the doubled
 * accumulator start (bias + in_offset * sum(w): the padding's zero point then adds nothing), so the one-SMMLAR
 * requantisation of kb_arm_rqs (kb_arm_requant.h) needs no shift before its SMMLAR; the caller uses the job only
 * where kb_arm_rqs_ok holds and |base| + 9 * 128 * 128 < 2^30 for all four channels. The four results are clamped
 * together to the bytes of job->min4 / job->max4 (act_min / act_max in each byte) with SSUB8 + SEL, unless job->full.
 * In place: output row oy is stored after every input row its windows read was widened, so the caller runs the job
 * over its own input when no output row reaches an input row not yet widened (arm/kb_depthwise.c, groups_apply).
 */
#ifndef KB_ARM_DWG_H
#define KB_ARM_DWG_H

#define KB_DWG_RING_PIXEL_BYTES 24  /* ring bytes per input pixel: three rows x two int16-pair words
                                     * (ops/conv_kernels.py: DW_RING_BYTES_PER_PIXEL) */

#define KB_DWG_W 0          /* nine taps x [we, wo]: 72 bytes */
#define KB_DWG_BASE 72      /* four: c, c + 1, c + 2, c + 3 */
#define KB_DWG_RQ 88        /* four x (k, mult, right, spare): 16 bytes each */
#define KB_DWG_OCS 148      /* rq[3].spare, after the last channel's right: one LDRD */
#define KB_DWG_MIN4 152     /* KB_DWG_MIN4 + 4 = KB_DWG_MAX4: one LDRD */
#define KB_DWG_MAX4 156
#define KB_DWG_FULL 160     /* act_min = -128 and act_max = 127: no clamp after SSAT */
#define KB_DWG_IN 164
#define KB_DWG_IN_ROW 168
#define KB_DWG_CS 172
#define KB_DWG_IN_W 176
#define KB_DWG_IN_H 180
#define KB_DWG_FIRST 184
#define KB_DWG_OUT_H 188
#define KB_DWG_Y_ROW 192
#define KB_DWG_ROW_BYTES 196
#define KB_DWG_LEAD 200
#define KB_DWG_Z2 204
#define KB_DWG_RING 208
#define KB_DWG_RING_ROW 212

#ifndef __ASSEMBLER__

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t k, mult, right, spare;  /* channel 3's `spare` is the job's ocs */
} kb_dwg_rq;

typedef struct {
    int32_t w[9][2];
    int32_t base[4];
    kb_dwg_rq rq[4];
    int32_t min4, max4, full;
    const int8_t *in;                 /* the group's first channel of input pixel (0, 0) */
    int32_t in_row, cs, in_w, in_h;   /* bytes per input row and per pixel; pixels per row; rows */
    int32_t first, out_h, y_row;      /* output row 0's first window row; output rows; bytes per output row */
    int32_t row_bytes, lead, z2;      /* ring bytes per output pixel times out_w; padding bytes before a row; */
    int32_t *ring;                    /* the zero point as an int16 pair; the ring and its bytes per row */
    int32_t ring_row;
} kb_dwg_job;

_Static_assert(offsetof(kb_dwg_job, w) == KB_DWG_W && offsetof(kb_dwg_job, base) == KB_DWG_BASE &&
               offsetof(kb_dwg_job, rq) == KB_DWG_RQ && offsetof(kb_dwg_job, rq[3].spare) == KB_DWG_OCS &&
               offsetof(kb_dwg_job, min4) == KB_DWG_MIN4 && offsetof(kb_dwg_job, max4) == KB_DWG_MAX4 &&
               offsetof(kb_dwg_job, full) == KB_DWG_FULL && offsetof(kb_dwg_job, in) == KB_DWG_IN &&
               offsetof(kb_dwg_job, in_row) == KB_DWG_IN_ROW && offsetof(kb_dwg_job, cs) == KB_DWG_CS &&
               offsetof(kb_dwg_job, in_w) == KB_DWG_IN_W && offsetof(kb_dwg_job, in_h) == KB_DWG_IN_H &&
               offsetof(kb_dwg_job, first) == KB_DWG_FIRST && offsetof(kb_dwg_job, out_h) == KB_DWG_OUT_H &&
               offsetof(kb_dwg_job, y_row) == KB_DWG_Y_ROW && offsetof(kb_dwg_job, row_bytes) == KB_DWG_ROW_BYTES &&
               offsetof(kb_dwg_job, lead) == KB_DWG_LEAD && offsetof(kb_dwg_job, z2) == KB_DWG_Z2 &&
               offsetof(kb_dwg_job, ring) == KB_DWG_RING && offsetof(kb_dwg_job, ring_row) == KB_DWG_RING_ROW,
               "kb_dwg_job layout used by kb_arm_dwg.S");

void kb_dwg_s1(const kb_dwg_job *job, int8_t *y);
void kb_dwg_s2(const kb_dwg_job *job, int8_t *y);

#endif /* __ASSEMBLER__ */

#endif /* KB_ARM_DWG_H */
