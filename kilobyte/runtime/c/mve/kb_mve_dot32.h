/* Kilobyte runtime, Cortex-M55 Helium (MVE): the dot products of three conv columns with the output channels two at a
 * time, in assembly (kb_mve_dot32.S), for mve/kb_conv.c; and the conv's scratch.
 *
 * kb_mve_dot32(job): for each of job->pairs channel pairs (c, c + 1) from the one at job->w (weights of channel c:
 * k bytes; of c + 1: w_step bytes on, k for a pair, 0 to repeat c) and each column j (the k int8 values at
 * job->col[j]):
 *   job->at[16 * j] = fb[0] + sum_i col[j][i] * w_c[i],   job->at[16 * j + 1] = the same for c + 1 with fb[1]
 * (mod 2^32), with fb = job->fb (the pair's biases, in_offset * sum(w) folded in), job->at and job->fb advancing two
 * entries a pair (a row of KB_MVE_DOT4_CHANNELS per column). The struct's layout is the assembly's (the static
 * asserts). */
#ifndef KB_MVE_DOT32_H
#define KB_MVE_DOT32_H

#include "kb_mve_conv4.h"

/* The Helium conv's scratch: three int8 columns of kh * kw * in_c values (none when it reads its windows in place,
 * `direct`), rounded up to a word, then one int32 per output channel (the folded biases): ops/conv_kernels.py's
 * mve_conv_scratch_bytes. */
#define KB_MVE_CONV_COLUMNS_BYTES(p, direct) ((direct) ? 0 : (3 * (p)->k_h * (p)->k_w * (p)->in_c + 3) & ~3)
#define KB_MVE_CONV_SCRATCH(p, direct) (KB_MVE_CONV_COLUMNS_BYTES(p, direct) + 4 * (p)->out_c)

#define KB_MVE_DOT32_W 0
#define KB_MVE_DOT32_K 4
#define KB_MVE_DOT32_PAIRS 8
#define KB_MVE_DOT32_W_BACK 12
#define KB_MVE_DOT32_W_STEP 16
#define KB_MVE_DOT32_COL 20
#define KB_MVE_DOT32_AT 32
#define KB_MVE_DOT32_FB 36

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const int8_t *w;
    int32_t k, pairs;
    int32_t w_back;  /* 16 * ceil(k / 16) - k: how far a weight pointer runs past a channel's k bytes */
    int32_t w_step;  /* k, or 0 (the last channel of an odd run, paired with itself) */
    const int8_t *col[3];
    int32_t *at;     /* &sums[0][channel] (the assembly advances it) */
    const int32_t *fb;  /* the folded biases of the pair's channels (the assembly advances it) */
    int32_t sums[6][KB_MVE_DOT4_CHANNELS];  /* rows: up to two three-column passes (a 1x1 conv's six pixels) */
} kb_mve_dot32_job;

_Static_assert(offsetof(kb_mve_dot32_job, col) == KB_MVE_DOT32_COL, "kb_mve_dot32_job layout");
_Static_assert(offsetof(kb_mve_dot32_job, at) == KB_MVE_DOT32_AT, "kb_mve_dot32_job layout");
_Static_assert(offsetof(kb_mve_dot32_job, fb) == KB_MVE_DOT32_FB, "kb_mve_dot32_job layout");

void kb_mve_dot32(kb_mve_dot32_job *job);
#endif

#endif /* KB_MVE_DOT32_H */
