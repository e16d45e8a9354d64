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
/* kb_mve_dw3_quads(rows, step, n, w, sums): four channels at a time — rows[r] points at padded row r of a ring whose
 * pixels are four channel bytes; for output i < n (its window starting step * i bytes on), the four channels' sums
 *   sums[4 i + l] = sum_{r, c < 3} w[3 r + c][l] * rows[r][step * i + 4 c + l]
 * with w the nine taps' weight vectors (int32, 16-byte aligned). */
void kb_mve_dw3_quads(const int8_t *const rows[3], int32_t step, int32_t n, const int32_t w[9][4], int32_t *sums);
#endif

#endif /* KB_MVE_DW3_H */
