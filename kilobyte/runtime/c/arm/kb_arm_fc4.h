/* Kilobyte runtime, Cortex-M DSP kernels: four fully-connected rows at a time, in assembly (kb_arm_fc4.S), for
 * arm/kb_fc.c.
 *
 * kb_arm_fc4(x, w, n, acc): acc[j] += sum_{i < n & ~7} w[j * n + i] * x[i] for rows j = 0..3 of w (row pitch n),
 * wrapping like SMLAD, with no input offset: the generated code folds the input offset into the bias
 * (ops/fully_connected.py), so the input is only sign-extended. The caller adds the last n & 7 values. */
#ifndef KB_ARM_FC4_H
#define KB_ARM_FC4_H

#ifndef __ASSEMBLER__
#include <stdint.h>

void kb_arm_fc4(const int8_t *x, const int8_t *w, int32_t n, int32_t acc[4]);
#endif

#endif /* KB_ARM_FC4_H */
