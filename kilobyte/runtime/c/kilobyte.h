/* Kilobyte runtime (codegen stage): parameter structs and kernel prototypes of the portable C99 int8 kernels.
 *
 * Generated code calls these kernels straight-line, with every shape, offset, multiplier and shift emitted as
 * constants, and copies in only the kernel files (kb_*.c) the model uses. Arithmetic is TFLite's int8 reference
 * arithmetic, bit for bit (see kb_requant.h). Conventions:
 *   - activations are int8 NHWC, batch 1; a tensor is (h, w, c) pixels, and consecutive pixels are `cstride`
 *     bytes apart (cstride == c, except for a CONCAT input written into its channel slice of the output);
 *   - zero points enter as offsets: in_offset = -input zero point, out_offset = +output zero point;
 *   - padding is explicit (top, bottom, left, right); padded taps contribute nothing (TFLite skips them);
 *   - act_min/act_max are the fused activation's clamp in the quantised domain ([-128, 127] for none);
 *   - per-channel multipliers/shifts are int32 arrays (shift > 0 = left shift), one entry per output channel.
 * Nothing here allocates or checks arguments: the code generator checks everything before it emits a call.
 * MEAN as TFLite files have it (1/n folded into the requantisation) is kb_mean; the quantiser itself rewrites a
 * float MEAN to AVG_POOL_2D (global average pooling = kb_avg_pool with the whole image as the window). RESHAPE has
 * no kernel (it aliases its input, or is one memmove); TRANSPOSE, STRIDED_SLICE and TILE are one strided copy.
 */
#ifndef KILOBYTE_H
#define KILOBYTE_H

#include <stddef.h>
#include <stdint.h>

/* CONV_2D, DEPTHWISE_CONV_2D (out_c == in_c) and the pooling ops (in_offset, out_offset, dil unused). */
typedef struct {
    int32_t in_h, in_w, in_c, in_cstride;     /* input (in_h, in_w, in_c), pixel stride in_cstride */
    int32_t out_h, out_w, out_c, out_cstride; /* output (out_h, out_w, out_c), pixel stride out_cstride */
    int32_t k_h, k_w;                         /* window */
    int32_t stride_h, stride_w;
    int32_t dil_h, dil_w;                     /* dilation (1 = dense) */
    int32_t pad_t, pad_b, pad_l, pad_r;       /* explicit padding */
    int32_t in_offset;                        /* -input zero point */
    int32_t out_offset;                       /* output zero point */
    int32_t act_min, act_max;                 /* quantised activation clamp */
    int32_t in_row, out_row;                  /* row pitch in pixels (>= in_w / out_w: a tile of a wider buffer) */
    int32_t scratch_bytes;                    /* CONV_2D, DEPTHWISE_CONV_2D: bytes of `scratch` (0 with NULL) */
    int32_t in_consumed;                      /* CONV_2D: 1 = the input dies here (see kb_conv below) */
} kb_conv_params;

/* FULLY_CONNECTED: in (in_n,), weights (out_n, in_n), out (out_n,). */
typedef struct {
    int32_t in_n, out_n;
    int32_t in_offset, out_offset;
    int32_t act_min, act_max;
} kb_fc_params;

/* ADD and SUB (TFLite int8): operands and output are (pixels, c) with their own pixel strides; an operand's stride
 * of 0 repeats its one pixel (a (1,1,1,c) operand broadcast over the other's pixels). */
typedef struct {
    int32_t pixels, c;
    int32_t in1_cstride, in2_cstride, out_cstride;
    int32_t in1_offset, in2_offset;           /* -zero points */
    int32_t left_shift;                       /* 20 */
    int32_t in1_mult, in1_shift;
    int32_t in2_mult, in2_shift;
    int32_t out_mult, out_shift;
    int32_t out_offset;                       /* output zero point */
    int32_t act_min, act_max;
} kb_add_params;

/* MUL (TFLite int8): shapes and strides as kb_add_params (stride 0: broadcast one pixel);
 * out = clamp(MBQM((in1 + in1_offset) * (in2 + in2_offset), out_mult, out_shift) + out_offset). */
typedef struct {
    int32_t pixels, c;
    int32_t in1_cstride, in2_cstride, out_cstride;
    int32_t in1_offset, in2_offset;           /* -zero points */
    int32_t out_mult, out_shift;              /* QuantizeMultiplier(s1 * s2 / s_out); the shift may be > 0 */
    int32_t out_offset;                       /* output zero point */
    int32_t act_min, act_max;
} kb_mul_params;

/* ADD, SUB and MUL with one constant operand (TFLite int8, broadcast as numpy does): the constant's share of each
 * element is prepared at generation time as one int32 per constant element ("terms": ADD / SUB its rescaled value,
 * negated when it is subtracted; MUL its value plus its offset). The output is walked as (rows, cols, c), an NHWC
 * map's (H, W, C); the activation, the terms and the output each have their own element step per axis, 0 on an axis
 * the operand broadcasts over (a (C,) constant: k_row = k_col = 0, k_c = 1; a single value: all three 0).
 * ADD / SUB: out = clamp(MBQM(+-MBQM((x + in_offset) << left_shift, in_mult, in_shift) + term, out_mult, out_shift)
 * + out_offset), the activation's share negated (neg = -1) when it is subtracted (c - x); MUL: out =
 * clamp(MBQM((x + in_offset) * term, out_mult, out_shift) + out_offset). */
typedef struct {
    int32_t rows, cols, c;
    int32_t in_row, in_col, in_c;             /* activation element steps per axis */
    int32_t k_row, k_col, k_c;                /* term steps per axis */
    int32_t out_row, out_col;                 /* output element steps (channels are contiguous) */
    int32_t in_offset;                        /* -activation zero point */
    int32_t left_shift, in_mult, in_shift;    /* ADD / SUB: the activation's rescale (left shift 20) */
    int32_t neg;                              /* ADD / SUB: 0, or -1 when the activation is subtracted */
    int32_t out_mult, out_shift, out_offset;
    int32_t act_min, act_max;
} kb_const_params;

/* MAXIMUM / MINIMUM (TFLite int8): raw int8 values compared (inputs and output share quantisation params); shapes and
 * strides as kb_add_params. */
typedef struct {
    int32_t pixels, c;
    int32_t in1_cstride, in2_cstride, out_cstride;
} kb_minmax_params;

/* PAD with a constant (the input zero point) in H, W and C. */
typedef struct {
    int32_t in_h, in_w, in_c, in_cstride;
    int32_t pad_t, pad_b, pad_l, pad_r, pad_c0, pad_c1;
    int32_t out_cstride;                      /* >= pad_c0 + in_c + pad_c1 */
    int32_t value;                            /* fill byte: the zero point */
    int32_t in_row, out_row;                  /* row pitch in pixels (>= in_w / padded width) */
} kb_pad_params;

/* MEAN (TFLite int8) over a contiguous run of axes: the input read as (outer, reduce, inner) pixels of c channels,
 * the output as (outer, inner) pixels; out = clamp(MBQM(sum of the reduce values + sum_offset, mult, shift)
 * + out_offset) per channel (see kb_mean.c). */
typedef struct {
    int32_t outer, reduce, inner, c;
    int32_t in_cstride, out_cstride;          /* pixel strides (bytes) */
    int32_t sum_offset;                       /* -input zero point * reduce */
    int32_t mult, shift;                      /* QuantizeMultiplier(s_in / s_out) with 1/reduce folded in */
    int32_t out_offset;                       /* output zero point */
} kb_mean_params;

/* TRANSPOSE, STRIDED_SLICE, TILE (kb_strided_copy) and REDUCE_MAX (kb_reduce_max): four nested loops, outermost
 * first; loop axis k takes dims[k] steps of in_step[k] input bytes (negative: a reversed axis; 0: TILE's repeats) and
 * out_step[k] output bytes (0: an axis REDUCE_MAX reduces), from input byte in_start and output byte 0. */
typedef struct {
    int32_t dims[4];
    int32_t in_step[4];
    int32_t out_step[4];
    int32_t in_start;
} kb_strides_params;

/* SOFTMAX and LOG_SOFTMAX (TFLite int8): `rows` rows of `depth` contiguous values, normalised along each row.
 * The fields are TFLite Micro's Prepare results for the input scale (and beta): see kb_softmax.c. */
typedef struct {
    int32_t rows, depth;
    int32_t input_multiplier, input_left_shift; /* beta * input scale * 2^26 = multiplier * 2^(left_shift - 31) */
    int32_t diff_min;                           /* differences x - max(row) below this are left out (<= 0) */
    int32_t reverse_scaling_divisor;            /* LOG_SOFTMAX: the inverse scaling, as a multiplier and */
    int32_t reverse_scaling_right_shift;        /* right shift (0 and 0 for SOFTMAX) */
} kb_softmax_params;

/* RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR: input (.., in_w, c) pixels in_cstride bytes apart, output (out_h, out_w,
 * c) pixels out_cstride apart; where each output row and column reads from is a table the code generator computes
 * (see kb_resize.c). */
typedef struct {
    int32_t in_w, c, in_cstride;
    int32_t out_h, out_w, out_cstride;
} kb_resize_params;

/* kb_conv.c ------------------------------------------------------------------------------------------------------ */
/* scratch: NULL, or p->scratch_bytes >= KB_CONV_SCRATCH(p) bytes, 4-byte aligned, that the kernel may overwrite
 * (int16 im2col columns of kh*kw*in_c values, two or more; the planner reserves two and grants up to six from bytes
 * that are free anyway; the DSP kernels use them, the portable ones need none).
 * out: a dense output (out_cstride == out_c, out_row == out_w) spans out .. out + out_h * out_w * out_c, bytes that
 * hold nothing else while the conv runs (the planner never overlaps a conv's output with a live tensor, and a
 * concat slice or patch tile is not dense); the DSP kernels keep columns in its not yet written part.
 * in: with p->in_consumed (the planner's Plan.consumed: nothing reads the input after this conv) the kernel may
 * overwrite the input rows it has finished reading; the DSP kernels keep columns there when the input is dense. */
#define KB_CONV_SCRATCH(p) (4 * (p)->k_h * (p)->k_w * (p)->in_c)
/* The signature of the conv kernels and of the in-place depthwise ones (kb_depthwise.c). */
typedef void kb_conv_kernel(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int8_t *out, int8_t *scratch);
kb_conv_kernel kb_conv, kb_conv_1x1, kb_conv_3x3;

/* kb_sparse_conv.c ----------------------------------------------------------------------------------------------- */
/* CONV_2D on sparse weights: FWCS (DTMM's filterlets: arr, cptr, fidx) and CSR (arr, idx, fidx); formats and the
 * folded bias (bias[n] - zp_in * sum(w[n])) in kb_sparse_conv.c. scratch: KB_SPARSE_SCRATCH(p) bytes, 4-byte
 * aligned, never NULL: two im2col windows of 2-byte values, then 36 bytes per output channel (the DSP kernels'
 * requantisation, prepared once per call); the portable kernels use one int8 window of it. */
#define KB_SPARSE_SCRATCH(p) (4 * (((p)->k_h * (p)->k_w * (p)->in_c + 3) & ~3) + 36 * (p)->out_c)
void kb_conv_fwcs(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *cptr,
                  const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                  int8_t *scratch);
void kb_conv_csr(const kb_conv_params *p, const int8_t *in, const int8_t *arr, const uint16_t *idx,
                 const uint16_t *fidx, const int32_t *bias, const int32_t *mult, const int32_t *shift, int8_t *out,
                 int8_t *scratch);

/* kb_depthwise.c ------------------------------------------------------------------------------------------------- */
void kb_depthwise(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                  const int32_t *mult, const int32_t *shift, int8_t *out);
/* kb_depthwise_3x3: a 3x3 window with dilation 1, out of place (as kb_depthwise); scratch: NULL, or p->scratch_bytes
 * bytes, 4-byte aligned, the kernel may overwrite (the DSP kernels keep a ring of widened input rows there when it
 * holds one; the planner grants it from bytes free anyway: schedule/scratch.py). */
kb_conv_kernel kb_depthwise_3x3;
kb_conv_kernel kb_depthwise_inplace, kb_depthwise_inplace_3x3, kb_depthwise_inplace_5x5, kb_depthwise_inplace_7x7;
/* Runtime-internal: each depthwise kernel file (portable and DSP) defines the fixed-window entry points with this, as
 * calls of its own static inplace_kxk(..., K), which the compiler specialises for the constant K. */
#define KB_DEPTHWISE_INPLACE_KXK(K)                                                                                \
    void kb_depthwise_inplace_##K##x##K(const kb_conv_params *p, const int8_t *in, const int8_t *w,               \
                                        const int32_t *bias, const int32_t *mult, const int32_t *shift,           \
                                        int8_t *out, int8_t *scratch)                                             \
    {                                                                                                              \
        inplace_kxk(p, in, w, bias, mult, shift, out, scratch, K);                                                 \
    }

/* kb_transpose_conv.c -------------------------------------------------------------------------------------------- */
/* TRANSPOSE_CONV: the kb_conv_params fields of a conv, pad_t / pad_l = the rows / columns cropped off the top / left of
 * the full output; bias always given (zeros when the model has none). Needs no scratch (it gathers per output pixel). */
void kb_transpose_conv(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int8_t *out);

/* kb_fc.c -------------------------------------------------------------------------------------------------------- */
void kb_fully_connected(const kb_fc_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int8_t *out);

/* kb_add.c ------------------------------------------------------------------------------------------------------- */
/* out may be in1 or in2 when it has the same stride (every element is read before it is written). */
void kb_add(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void kb_sub(const kb_add_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
/* out may be in when it has the same steps; terms as kb_const_params says. */
void kb_add_const(const kb_const_params *p, const int8_t *in, const int32_t *terms, int8_t *out);

/* kb_elementwise.c ----------------------------------------------------------------------------------------------- */
void kb_mul(const kb_mul_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void kb_mul_const(const kb_const_params *p, const int8_t *in, const int32_t *terms, int8_t *out);
void kb_maximum(const kb_minmax_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);
void kb_minimum(const kb_minmax_params *p, const int8_t *in1, const int8_t *in2, int8_t *out);

/* kb_pool.c ------------------------------------------------------------------------------------------------------ */
void kb_avg_pool(const kb_conv_params *p, const int8_t *in, int8_t *out);
void kb_max_pool(const kb_conv_params *p, const int8_t *in, int8_t *out);

/* kb_mean.c ------------------------------------------------------------------------------------------------------ */
void kb_mean(const kb_mean_params *p, const int8_t *in, int8_t *out);

/* kb_concat.c ---------------------------------------------------------------------------------------------------- */
void kb_copy_channels(int32_t pixels, int32_t c, const int8_t *in, int32_t in_cstride, int8_t *out,
                      int32_t out_cstride);

/* kb_pad.c ------------------------------------------------------------------------------------------------------- */
void kb_pad(const kb_pad_params *p, const int8_t *in, int8_t *out);

/* kb_quantize.c -------------------------------------------------------------------------------------------------- */
void kb_quantize(int32_t n, const float *in, float scale, int32_t zero_point, int8_t *out);
void kb_dequantize(int32_t n, const int8_t *in, float scale, int32_t zero_point, float *out);
int32_t kb_argmax_i8(int32_t n, const int8_t *in);  /* first index of the largest value */
/* The same at a uint8 edge (a uint8 input or output of the file): clamped to 0..255. */
void kb_quantize_u8(int32_t n, const float *in, float scale, int32_t zero_point, uint8_t *out);
void kb_dequantize_u8(int32_t n, const uint8_t *in, float scale, int32_t zero_point, float *out);
int32_t kb_argmax_u8(int32_t n, const uint8_t *in);
/* QUANTIZE between uint8 and int8 at a model's edges (TFLite Micro's Requantize). */
typedef struct {
    int32_t n;
    int32_t in_offset, out_offset;            /* input and output zero points */
    int32_t mult, shift;                      /* QuantizeMultiplier(s_in / s_out) */
} kb_requantize_params;
void kb_requantize_u8_i8(const kb_requantize_params *p, const uint8_t *in, int8_t *out);
void kb_requantize_i8_u8(const kb_requantize_params *p, const int8_t *in, uint8_t *out);

/* kb_float_tail.c: float ops after a model's last DEQUANTIZE, in place on the float output (kb_invoke_float). */
void kb_softmax_f32(int32_t rows, int32_t depth, float beta, float *x);
void kb_log_softmax_f32(int32_t rows, int32_t depth, float *x);
void kb_logistic_f32(int32_t n, float *x);
void kb_add_const_f32(int32_t n, float *x, const float *c, int32_t c_len, int32_t inner, float lo, float hi);
void kb_mul_const_f32(int32_t n, float *x, const float *c, int32_t c_len, int32_t inner, float lo, float hi);

/* kb_softmax.c ---------------------------------------------------------------------------------------------------- */
/* Output quantisation as TFLite requires: SOFTMAX scale 1/256, zero point -128; LOG_SOFTMAX 16/256, 127. out may be
 * in (each value is read before it is written). */
void kb_softmax(const kb_softmax_params *p, const int8_t *in, int8_t *out);
void kb_log_softmax(const kb_softmax_params *p, const int8_t *in, int8_t *out);

/* kb_lut.c ------------------------------------------------------------------------------------------------------- */
/* An int8 unary op as its 256-entry table (entry i: the output for input i - 128) over (pixels, c) bytes with the
 * given pixel strides; out may be in. */
void kb_lut(int32_t pixels, int32_t c, const int8_t table[256], const int8_t *in, int32_t in_cstride, int8_t *out,
            int32_t out_cstride);

/* kb_movement.c -------------------------------------------------------------------------------------------------- */
/* in and out must not overlap. */
void kb_strided_copy(const kb_strides_params *p, const int8_t *in, int8_t *out);
void kb_reduce_max(const kb_strides_params *p, const int8_t *in, int8_t *out);

/* kb_resize.c ---------------------------------------------------------------------------------------------------- */
/* src: out_h source rows, then out_w source columns. taps: (lo, hi, frac) per output row, then per output column. */
void kb_resize_nearest(const kb_resize_params *p, const int16_t *src, const int8_t *in, int8_t *out);
void kb_resize_bilinear(const kb_resize_params *p, const int16_t *taps, const int8_t *in, int8_t *out);

/* kb_conv_add.c -------------------------------------------------------------------------------------------------- */
/* A 1x1 stride-1 conv (p, w, bias, mult, shift as kb_conv_1x1) fused with the residual ADD reading its output
 * (a: in1 = the conv's output, in2 = the residual): the sum is written over the residual, which `in` must not meet. */
void kb_conv_1x1_add(const kb_conv_params *p, const int8_t *in, const int8_t *w, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, const kb_add_params *a, int8_t *residual_and_out);

/* kb_detect.c ---------------------------------------------------------------------------------------------------- */
/* A YOLO-style detector's post-processing (kilobyte.ops.detect_post gives the arithmetic). One head: an int8 map
 * (h, w, anchors * (5 + classes)) at `stride` input pixels per cell, its anchors (w, h) in 1/16 pixel and its
 * 256-entry tables (entry v + 128 for the int8 value v): sigmoid in Q15, exp in Q8. */
typedef struct {
    const int8_t *data;
    int32_t h, w, stride, anchors;
    const int16_t *anchor_wh;
    const uint16_t *sigmoid;
    const uint32_t *exp;
} kb_detect_head;
typedef struct {
    int32_t classes;
    int32_t image_w, image_h;                 /* boxes are clamped to the image */
    int32_t score_min;                        /* Q15: a box scoring less is no candidate */
    int32_t iou_max;                          /* Q15: NMS drops a box overlapping a kept one of its class by more */
} kb_detect_params;
/* One detection: box in 1/16 pixel, score in Q15, class index (a generated model.h declares it too). */
#ifndef KB_DETECTION_DEFINED
#define KB_DETECTION_DEFINED
typedef struct {
    int16_t x_min, y_min, x_max, y_max;
    int16_t score, cls;
} kb_detection;
#endif
/* Candidates go into cand (max_cand entries, caller-owned), the kept boxes into out (max_out); returns how many
 * were written to out, best first. No heap. */
int32_t kb_detect(const kb_detect_params *p, const kb_detect_head *heads, int32_t n_heads, kb_detection *cand,
                  int32_t max_cand, kb_detection *out, int32_t max_out);

#endif /* KILOBYTE_H */
