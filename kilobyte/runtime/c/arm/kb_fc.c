/* Kilobyte runtime, Cortex-M DSP kernels: int8 FULLY_CONNECTED on Armv7E-M SIMD, bit-identical to ../kb_fc.c.
 *
 * Shapes as the portable file: in (in_n,); w (out_n, in_n); bias, mult, shift (out_n,); out (out_n,).
 * With no input offset — what the generated code passes, having folded the offset into the bias
 * (ops/fully_connected.py) — four rows at a time run in assembly (kb_arm_fc4: 16 MACs per 5 loads, 10 unpacks and
 * 8 SMLADs), the last in_n & 7 inputs in C. The rows left over (out_n % 4), and every row when an input offset is
 * given, run two at a time (kb_dot_1x2: the offset added while unpacking, 8 MACs per 3 loads, 6 unpacks and 4
 * SMLADs); an odd last row runs paired with itself and is stored once. A sum is requantised by the one-SMMLAR form
 * (kb_arm_rqs) where its domain holds — shift <= -1 and |acc| < 2^30, bounded from the bias and in_n — else by
 * kb_arm_requantize.
 */
/* See arm/kb_conv.c: keeps the unrolled SIMD loop within the registers. Speed only. */
#pragma GCC optimize("no-schedule-insns")

#include "kilobyte.h"
#include "kb_requant.h"
#include "kb_arm_requant.h"
#include "kb_arm_dot.h"
#include "kb_arm_fc4.h"

/* The largest |bias| for which the one-SMMLAR form is exact for any input: |acc| < 2^30 needs
 * |bias| + in_n * 128 * (128 + |in_offset|) < 2^30; -1 when no bias is small enough or the form's shift and
 * offset domain does not hold for this layer's out_offset (checked per row for the shift). */
static int32_t rqs_bias_limit(const kb_fc_params *p)
{
    const int32_t off = p->in_offset < 0 ? -p->in_offset : p->in_offset;
    const int64_t room = (int64_t)KB_ARM_RQS_MAX_ACC - 1 - (int64_t)p->in_n * 128 * (128 + off);
    return room < 0 || !kb_arm_rqs_ok(-1, p->out_offset) ? -1 : (int32_t)room;
}

/* The layer's output arithmetic in locals (the int8 stores could alias *p, which would reload it per output). */
typedef struct {
    int32_t limit, out_offset, act_min, act_max;
} fc_out;

static inline __attribute__((always_inline)) int8_t requantize(const fc_out *f, int32_t acc, int32_t bias,
                                                               int32_t mult, int32_t shift)
{
    if (bias <= f->limit && bias >= -f->limit && shift <= -1 && shift >= -KB_ARM_RQS_MAX_RIGHT) {
        const kb_arm_rqs q = kb_arm_rqs_of(mult, shift, f->out_offset, f->act_min, f->act_max);
        return kb_arm_rqs_apply(&q, acc);
    }
    return kb_arm_requantize(acc, mult, shift, f->out_offset, f->act_min, f->act_max);
}

/* out[j] for the `count` rows from acc[j]; one copy of the requantisation for both row blocks (Flash). */
static __attribute__((noinline)) void store(const fc_out *f, const int32_t *acc, int32_t count, const int32_t *bias,
                                            const int32_t *mult, const int32_t *shift, int8_t *out)
{
    for (int32_t j = 0; j < count; ++j) {
        out[j] = requantize(f, acc[j], bias[j], mult[j], shift[j]);
    }
}

void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out)
{
    const int32_t n = p->in_n, blocks = p->in_offset == 0 ? p->out_n & ~3 : 0, tail = n & ~7;
    const fc_out f = {rqs_bias_limit(p), p->out_offset, p->act_min, p->act_max};
    for (int32_t r = 0; r < blocks; r += 4) {
        const int8_t *rows = w + r * n;
        int32_t acc[4] = {bias[r], bias[r + 1], bias[r + 2], bias[r + 3]};
        kb_arm_fc4(in, rows, n, acc);
        for (int32_t i = tail; i < n; ++i) {
            for (int32_t j = 0; j < 4; ++j) {
                acc[j] = kb_wrapping_add(acc[j], rows[j * n + i] * in[i]);
            }
        }
        store(&f, acc, 4, bias + r, mult + r, shift + r, out + r);
    }
    for (int32_t r = blocks; r < p->out_n; r += 2) {
        const int32_t r1 = r + 1 < p->out_n ? r + 1 : r;
        int32_t acc[2] = {bias[r], bias[r1]};
        kb_dot_1x2(in, w + r * n, w + r1 * n, n, p->in_offset, acc);
        store(&f, acc, r1 - r + 1, bias + r, mult + r, shift + r, out + r);
    }
}
