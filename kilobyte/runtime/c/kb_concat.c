/* Kilobyte runtime: CONCAT along channels, for an input that could not be written straight into its slice.
 *
 * Copies (pixels, c) bytes from `in` (pixel stride in_cstride) into `out` (pixel stride out_cstride); the code
 * generator points `out` at the slice's first channel of the concatenated tensor (base + channel offset) and passes
 * the concat output's channel count as out_cstride. No requantisation: TFLite's int8 CONCATENATION requires every
 * input to share the output's scale and zero point.
 */
#include <string.h>

#include "kilobyte.h"

void kb_copy_channels(int32_t pixels, int32_t c, const int8_t *in, int32_t in_cstride, int8_t *out,
                      int32_t out_cstride)
{
    for (int32_t px = 0; px < pixels; ++px) {
        memcpy(out + px * out_cstride, in + px * in_cstride, (size_t)c);
    }
}
