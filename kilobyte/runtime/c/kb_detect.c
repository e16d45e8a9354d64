/* Kilobyte runtime (codegen stage): a YOLO-style detector's post-processing — box decoding, score threshold,
 * class-wise NMS, top-K — in integers, exactly as the reference kilobyte.ops.detect_post.postprocess computes it
 * (that module's doc gives the arithmetic; the generator writes each head's sigmoid (Q15) and exp (Q8) tables and
 * anchors (1/16 pixel) from the head's quantisation).
 *
 * No heap: candidates go into the caller's `cand` array (at most max_cand, kept sorted by score, equal scores in
 * the order made: head, row, column, anchor), the kept boxes into the caller's `out` (at most max_out). Returns the
 * number written to `out`, best first.
 */
#include "kilobyte.h"

#define KB_DETECT_FRAC 4   /* box coordinates in 1/16 pixel */

static int32_t kb_clamp_q4(int64_t v, int32_t hi)
{
    return v < 0 ? 0 : v > hi ? hi : (int32_t)v;
}

/* Insert d into cand[0..*n) (sorted by score, highest first; a tie goes after the boxes already there). */
static void kb_detect_insert(kb_detection *cand, int32_t *n, int32_t max_cand, const kb_detection *d)
{
    int32_t i = *n;
    if (i == max_cand) {
        if (d->score <= cand[i - 1].score) {
            return;
        }
        --i;  /* the last one drops out */
    } else {
        ++*n;
    }
    while (i > 0 && cand[i - 1].score < d->score) {
        cand[i] = cand[i - 1];
        --i;
    }
    cand[i] = *d;
}

static int kb_detect_overlaps(const kb_detection *a, const kb_detection *b, int32_t iou_max)
{
    const int32_t w = (a->x_max < b->x_max ? a->x_max : b->x_max) - (a->x_min > b->x_min ? a->x_min : b->x_min);
    const int32_t h = (a->y_max < b->y_max ? a->y_max : b->y_max) - (a->y_min > b->y_min ? a->y_min : b->y_min);
    const int64_t inter = (int64_t)(w > 0 ? w : 0) * (h > 0 ? h : 0);
    const int64_t area_a = (int64_t)(a->x_max - a->x_min) * (a->y_max - a->y_min);
    const int64_t area_b = (int64_t)(b->x_max - b->x_min) * (b->y_max - b->y_min);
    return inter * 32768 > (int64_t)iou_max * (area_a + area_b - inter);
}

int32_t kb_detect(const kb_detect_params *p, const kb_detect_head *heads, int32_t n_heads, kb_detection *cand,
                  int32_t max_cand, kb_detection *out, int32_t max_out)
{
    const int32_t fields = 5 + p->classes;
    const int32_t wmax = p->image_w << KB_DETECT_FRAC, hmax = p->image_h << KB_DETECT_FRAC;
    const int shift = 15 - KB_DETECT_FRAC;
    int32_t n = 0;
    for (int32_t k = 0; k < n_heads; ++k) {
        const kb_detect_head *hd = &heads[k];
        const int8_t *v = hd->data;
        for (int32_t y = 0; y < hd->h; ++y) {
            for (int32_t x = 0; x < hd->w; ++x) {
                for (int32_t a = 0; a < hd->anchors; ++a, v += fields) {
                    int32_t best = 0;
                    for (int32_t c = 1; c < p->classes; ++c) {
                        if (v[5 + c] > v[5 + best]) {
                            best = c;
                        }
                    }
                    int32_t score = ((int32_t)hd->sigmoid[v[4] + 128] * hd->sigmoid[v[5 + best] + 128] + (1 << 14))
                                    >> 15;
                    score = score > 32767 ? 32767 : score;
                    if (score < p->score_min) {
                        continue;
                    }
                    const int64_t cx = (((int64_t)hd->sigmoid[v[0] + 128] + ((int64_t)x << 15)) * hd->stride) >> shift;
                    const int64_t cy = (((int64_t)hd->sigmoid[v[1] + 128] + ((int64_t)y << 15)) * hd->stride) >> shift;
                    const int64_t bw = ((int64_t)hd->anchor_wh[2 * a] * hd->exp[v[2] + 128]) >> 8;
                    const int64_t bh = ((int64_t)hd->anchor_wh[2 * a + 1] * hd->exp[v[3] + 128]) >> 8;
                    const int64_t x0 = cx - (bw >> 1), y0 = cy - (bh >> 1);
                    kb_detection d;
                    d.x_min = (int16_t)kb_clamp_q4(x0, wmax);
                    d.x_max = (int16_t)kb_clamp_q4(x0 + bw, wmax);
                    d.y_min = (int16_t)kb_clamp_q4(y0, hmax);
                    d.y_max = (int16_t)kb_clamp_q4(y0 + bh, hmax);
                    d.score = (int16_t)score;
                    d.cls = (int16_t)best;
                    kb_detect_insert(cand, &n, max_cand, &d);
                }
            }
        }
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < n && kept < max_out; ++i) {
        int keep = 1;
        for (int32_t j = 0; j < kept && keep; ++j) {
            keep = !(out[j].cls == cand[i].cls && kb_detect_overlaps(&out[j], &cand[i], p->iou_max));
        }
        if (keep) {
            out[kept++] = cand[i];
        }
    }
    return kept;
}
