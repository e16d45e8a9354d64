/* Kilobyte runtime, Cortex-M55 Helium (MVE): four fully-connected rows at a time, in assembly (kb_mve_fc4.S), for
 * mve/kb_fc.c.
 *
 * kb_mve_fc4(x, rows, n, sums): sums[j] = sum_{i < n} rows[j][i] * x[i] (mod 2^32) for j = 0..3, any n > 0, no
 * input offset (generated code folds it into the bias: ops/fully_connected.py). */
#ifndef KB_MVE_FC4_H
#define KB_MVE_FC4_H

#ifndef __ASSEMBLER__
#include <stdint.h>

void kb_mve_fc4(const int8_t *x, const int8_t *const rows[4], int32_t n, int32_t sums[4]);
#endif

#endif /* KB_MVE_FC4_H */
