/* Kilobyte runtime, Cortex-M55 Helium (MVE): the sums of a 3x3 depthwise window (dilation 1) along one line of a
 * channel's zero-point-padded plane, in assembly (kb_mve_dw3.S), for mve/kb_depthwise.c.
 *
 * kb_mve_dw3_sums(a, wp, groups, w, sums): for i < 4 * groups,
 *   sums[i] = sum_{r < 3, c < 3} w[3 * r + c] * a[r * wp + i + c]    (int8 plane values, int32 weights and sums)
 * i.e. four neighbouring outputs per step, the lanes one plane byte apart. It reads up to 4 * groups + 2 bytes of
 * each of the three rows (the caller's last group may run past the line's end: those sums are not used). */
#ifndef KB_MVE_DW3_H
#define KB_MVE_DW3_H

#ifndef __ASSEMBLER__
#include <stdint.h>

void kb_mve_dw3_sums(const int8_t *a, int32_t wp, int32_t groups, const int32_t w[9], int32_t *sums);
#endif

#endif /* KB_MVE_DW3_H */
