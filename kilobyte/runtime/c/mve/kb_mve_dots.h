/* Kilobyte runtime, Cortex-M55 Helium (MVE): the dot products of three conv columns with every channel of a run
 * when a column is short (k <= 32 values: the first layers' small reductions), in assembly (kb_mve_dots.S), for
 * mve/kb_conv.c.
 *
 * The three columns stay in vector registers (one or two each, zero past k), so a channel costs its weights' one or
 * two VLDRBs and three (k <= 16) or six VMLADAVs, where kb_mve_dot32's loop set-up per channel pair would dominate.
 * kb_mve_dots16 / kb_mve_dots32(job): for each of job->n channels c (weights: k bytes from job->w + c * k),
 *   job->sums[j][c] = sum_{i < k} col[j][i] * w_c[i]   (mod 2^32; no bias: the caller adds it)
 * Weights are read 16 (32) bytes a channel, past k into the next channel's, which meet the columns' zeros; the last
 * channel's load is predicated, so nothing past the weights is read. The layout is kb_mve_dot32's job (shared). */
#ifndef KB_MVE_DOTS_H
#define KB_MVE_DOTS_H

#include "kb_mve_dot32.h"

#ifndef __ASSEMBLER__
void kb_mve_dots16(kb_mve_dot32_job *job);
void kb_mve_dots32(kb_mve_dot32_job *job);
#endif

#endif /* KB_MVE_DOTS_H */
