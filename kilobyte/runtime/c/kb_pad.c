/* Kilobyte runtime: PAD of an int8 tensor with a constant byte (the zero point, i.e. real 0) in H, W and C.
 *
 * Shapes: in (in_h, in_w, in_c), pixel stride in_cstride; out (pad_t + in_h + pad_b, pad_l + in_w + pad_r,
 * pad_c0 + in_c + pad_c1), pixel stride out_cstride. in and out must not overlap.
 */
#include <string.h>

#include "kilobyte.h"

void kb_pad(const kb_pad_params *p, const int8_t *in, int8_t *out)
{
    const int32_t out_h = p->pad_t + p->in_h + p->pad_b;
    const int32_t out_w = p->pad_l + p->in_w + p->pad_r;
    const int32_t out_c = p->pad_c0 + p->in_c + p->pad_c1;
    for (int32_t oy = 0; oy < out_h; ++oy) {
        const int32_t iy = oy - p->pad_t;
        for (int32_t ox = 0; ox < out_w; ++ox) {
            const int32_t ix = ox - p->pad_l;
            int8_t *y = out + (oy * p->out_row + ox) * p->out_cstride;  /* (out_c,) */
            if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                memset(y, p->value, (size_t)out_c);
                continue;
            }
            memset(y, p->value, (size_t)p->pad_c0);
            memcpy(y + p->pad_c0, in + (iy * p->in_row + ix) * p->in_cstride, (size_t)p->in_c);
            memset(y + p->pad_c0 + p->in_c, p->value, (size_t)p->pad_c1);
        }
    }
}
