/* Kilobyte runtime, Cortex-M DSP kernels: window geometry along one axis, shared by arm/kb_conv.c and
 * arm/kb_depthwise.c (which taps of a window lie inside the image, which outputs' windows lie wholly inside it). */
#ifndef KB_ARM_WINDOW_H
#define KB_ARM_WINDOW_H

#include <stdint.h>

/* Kernel indices i < k with 0 <= start + i * dil < size: [*lo, *hi) (empty when *hi <= *lo). */
static inline void inside(int32_t start, int32_t k, int32_t dil, int32_t size, int32_t *lo, int32_t *hi)
{
    *lo = start < 0 ? (-start + dil - 1) / dil : 0;
    *hi = start >= size ? 0 : (size - 1 - start) / dil + 1;
    *hi = *hi < k ? *hi : k;
}

/* Output pixels [*lo, *hi) whose window (k taps, dilation dil) lies inside the image along one axis. */
static inline void interior(int32_t out, int32_t stride, int32_t pad, int32_t k, int32_t dil, int32_t size,
                            int32_t *lo, int32_t *hi)
{
    *lo = (pad + stride - 1) / stride;
    const int32_t last = size - 1 - (k - 1) * dil + pad;  /* the largest window start that fits, plus pad */
    *hi = last < 0 ? 0 : last / stride + 1;
    *hi = *hi < out ? *hi : out;
    *lo = *lo < *hi ? *lo : *hi;
}

#endif /* KB_ARM_WINDOW_H */
