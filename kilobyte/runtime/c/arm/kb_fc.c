/* Kilobyte runtime, Cortex-M DSP kernels: int8 FULLY_CONNECTED on Armv7E-M SIMD, bit-identical to ../kb_fc.c.
 *
 * Shapes as the portable file: in (in_n,); w (out_n, in_n); bias, mult, shift (out_n,); out (out_n,).
 * With no input offset — what the generated code passes, having folded the offset into the bias
 * (ops/fully_connected.py) — four rows at a time run in assembly (kb_arm_fc4: 16 MACs per 5 loads, 10 unpacks and
 * 8 SMLADs), the last in_n & 7 inputs in C. The rows left over (out_n % 4), and every row when an input offset is
 * given, run two at a time (kb_dot_1x2: the offset added while unpacking, 8 MACs per 3 loads, 6 unpacks and 4
 * SMLADs); an odd last row runs paired with itself and is stored once. A sum is requantised by the one-SMMLAR form
 * (kb_arm_rqs) where its domain holds — shift in -23..-1 and |acc| < 2^30, checked on the sum itself — else by
 * kb_arm_requantize.
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loop within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_requant.h"
#include "kb_arm_dot.h"
#include "kb_arm_fc4.h"

/* The layer's output arithmetic, in locals (the int8 stores could alias *p, which would reload it per output). */
typedef struct {
    int32_t out_offset, act_min, act_max;
} fc_out;

static __attribute__((noinline)) int8_t requantize_rq(const fc_out *f, int32_t acc, int32_t mult, int32_t shift)
{
    return kb_arm_requantize(acc, mult, shift, f->out_offset, f->act_min, f->act_max);
}

/* A row's sum requantised: by the one-SMMLAR form (kb_arm_rqs: exact for |acc| < 2^30, checked on the sum itself,
 * and a shift in its domain), else by kb_arm_requantize. */
static inline __attribute__((always_inline)) int8_t requantize(const fc_out *f, int32_t acc, int32_t mult,
                                                               int32_t shift)
{
    if (__builtin_expect((uint32_t)acc + (KB_ARM_RQS_MAX_ACC - 1) < 2u * KB_ARM_RQS_MAX_ACC - 1 &&
                         kb_arm_rqs_ok(shift, f->out_offset), 1)) {
        const kb_arm_rqs q = kb_arm_rqs_of(mult, shift, f->out_offset, f->act_min, f->act_max);
        return kb_arm_rqs_apply(&q, acc);
    }
    return requantize_rq(f, acc, mult, shift);
}

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, blocks = p->in_offset == 0 ? p->out_n & ~3 : 0, tail = n & ~7;
    const fc_out f = {p->out_offset, p->act_min, p->act_max};
    for (int32_t r = 0; r < blocks; r += 4) {
        const int8_t *rows = w + r * n;
        int32_t acc[4] = {bias[r], bias[r + 1], bias[r + 2], bias[r + 3]};
        kb_arm_fc4(in, rows, n, acc);
        for (int32_t i = tail; i < n; ++i) {
            for (int32_t j = 0; j < 4; ++j) {
                acc[j] = kb_wrapping_add(acc[j], rows[j * n + i] * in[i]);
            }
        }
        for (int32_t j = 0; j < 4; ++j) {
            out[r + j] = requantize(&f, acc[j], mult[r + j], shift[r + j]);
        }
    }
    for (int32_t r = blocks; r < p->out_n; r += 2) {
        const int32_t r1 = r + 1 < p->out_n ? r + 1 : r;
        int32_t acc[2] = {bias[r], bias[r1]};
        kb_dot_1x2(in, w + r * n, w + r1 * n, n, p->in_offset, acc);
        out[r] = requantize(&f, acc[0], mult[r], shift[r]);
        if (r1 != r) {
            out[r1] = requantize(&f, acc[1], mult[r1], shift[r1]);
        }
    }
}
