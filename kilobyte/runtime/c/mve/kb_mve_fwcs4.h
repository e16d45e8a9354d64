/* Kilobyte runtime, Cortex-M55 Helium (MVE): the filterlet (FWCS) sums of four output pixels for a run of filters, in
 * assembly (kb_mve_fwcs4.S), for mve/kb_sparse_conv.c.
 *
 * kb_mve_fwcs4(job): for each of job->n filters f (from the one whose fidx entry job->fidx points at), over its kept
 * filterlets j (job->cptr and job->arr point at the first filter's first; both run on through the filters):
 *   job->sums[p][f] = sum_j sum_{c < in_c} arr_j[c] * col[p][cptr[j] + c]    (mod 2^32)
 * with column p the k int8 values at job->cols + p * job->k (the pixel's window, padding = the zero point). The
 * struct's layout is the assembly's: keep them in step (the static asserts below). */
#ifndef KB_MVE_FWCS4_H
#define KB_MVE_FWCS4_H

#include "kb_mve_conv4.h"

#define KB_MVE_FWCS4_COLS 0
#define KB_MVE_FWCS4_K 4
#define KB_MVE_FWCS4_IN_C 8
#define KB_MVE_FWCS4_W_BACK 12
#define KB_MVE_FWCS4_ARR 16
#define KB_MVE_FWCS4_CPTR 20
#define KB_MVE_FWCS4_FIDX 24
#define KB_MVE_FWCS4_N 28
#define KB_MVE_FWCS4_AT 32
#define KB_MVE_FWCS4_SUMS 36

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const int8_t *cols;
    int32_t k, in_c;
    int32_t w_back;  /* 16 * ceil(in_c / 16) - in_c: how far the weight pointer runs past a filterlet */
    const int8_t *arr;
    const uint16_t *cptr, *fidx;
    int32_t n;       /* filters left (the assembly counts it down) */
    int32_t *at;     /* &sums[0][filter] (the assembly advances it) */
    int32_t sums[4][KB_MVE_DOT4_CHANNELS];
} kb_mve_fwcs4_job;

_Static_assert(offsetof(kb_mve_fwcs4_job, at) == KB_MVE_FWCS4_AT, "kb_mve_fwcs4_job layout");
_Static_assert(offsetof(kb_mve_fwcs4_job, sums) == KB_MVE_FWCS4_SUMS, "kb_mve_fwcs4_job layout");

void kb_mve_fwcs4(kb_mve_fwcs4_job *job);
#endif

#endif /* KB_MVE_FWCS4_H */
