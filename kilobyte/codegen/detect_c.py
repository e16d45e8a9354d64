"""Codegen stage: a detector library's post-processing entry point, `<prefix>_detections` (issue 28).

When the manifest has "detect" (`kilobyte compile --detect detect.json`, or a detection search), model.c gains each
head's tables — sigmoid (Q15) and exp (Q8) of its 256 int8 values, its anchors in 1/16 pixel
(`ops.detect_post.DetectHead`) — a static candidate array of `max_candidates` entries, and the function
    int32_t <prefix>_detections(const int8_t *<head 0>, ..., kb_detection *detections);
which runs the runtime's `kb_detect` over the outputs `<prefix>_invoke` wrote and writes at most
<PREFIX>_MAX_DETECTIONS boxes, best first; it returns how many. The header declares it and `kb_detection`.
"""

from __future__ import annotations

from ..ops.c_text import c_array
from ..ops.detect_post import manifest_spec
from .library import LibraryOptions, output_name

DETECTION_TYPE = """#ifndef KB_DETECTION_DEFINED  /* also in kilobyte.h */
#define KB_DETECTION_DEFINED
/* One detection: box in 1/16 pixel of the input (x_min, y_min inclusive, x_max, y_max exclusive), score in Q15
 * (32767 = 1.0), class index. */
typedef struct {
    int16_t x_min, y_min, x_max, y_max;
    int16_t score, cls;
} kb_detection;
#endif"""


def head_params(manifest: dict) -> list[str]:
    """Parameters of `<prefix>_detections`: each head output (as `<prefix>_invoke` names them), then the result."""
    outs = manifest["outputs"]
    return [f"const int8_t *{output_name(o, len(outs))}" for o in outs] + ["kb_detection *detections"]


def detect_header(lib: LibraryOptions, manifest: dict) -> list[str]:
    """The header's lines for a detector library (none for a plain model)."""
    spec = manifest_spec(manifest)
    if spec is None:
        return []
    u = lib.macro
    return ["", DETECTION_TYPE,
            f"#define {u('DETECT_CLASSES')} {spec.classes}",
            f"#define {u('MAX_DETECTIONS')} {spec.max_detections}  /* the most `detections` receives */",
            f"#define {u('SCORE_THRESHOLD')} {spec.score_q15}  /* Q15: a box scoring less is dropped */",
            f"#define {u('IOU_THRESHOLD')} {spec.iou_q15}  /* Q15: NMS drops a box overlapping a kept one of its "
            "class by more */",
            f"/* After {lib.symbol('invoke')}: decode its head outputs into boxes (score threshold, class-wise NMS), "
            f"best first, into `detections` ({u('MAX_DETECTIONS')} entries); returns how many. No heap. */",
            f"int32_t {lib.symbol('detections')}({', '.join(head_params(manifest))});"]


def detect_source(lib: LibraryOptions, manifest: dict) -> str:
    """model.c's tables and `<prefix>_detections` (module doc)."""
    spec = manifest_spec(manifest)
    parts = ["", "/* Detection post-processing (kilobyte.ops.detect_post): tables from each head's quantisation. */"]
    inits = []
    params = head_params(manifest)
    for k, head in enumerate(spec.heads):
        sig, exp, anc = (lib.symbol(f"det_{n}_{k}") for n in ("sigmoid", "exp", "anchors"))
        parts += [c_array(sig, "uint16_t", head.sigmoid_table()), c_array(exp, "uint32_t", head.exp_table()),
                  c_array(anc, "int16_t", head.anchors_q4())]
        data = output_name(manifest["outputs"][k], len(manifest["outputs"]))
        geometry = f"{head.h}, {head.w}, {head.stride}, {len(head.anchors)}"
        inits.append(f"        {{{data}, {geometry}, {anc}, {sig}, {exp}}},")
    cand = lib.symbol("det_candidates")
    parts += [f"static kb_detection {cand}[{spec.max_candidates}];",
              f"int32_t {lib.symbol('detections')}({', '.join(params)})",
              "{",
              f"    const kb_detect_head heads[{len(spec.heads)}] = {{",
              *inits,
              "    };",
              f"    static const kb_detect_params p = {{{spec.classes}, {spec.image_w}, {spec.image_h}, "
              f"{spec.score_q15}, {spec.iou_q15}}};",
              f"    return kb_detect(&p, heads, {len(spec.heads)}, {cand}, {spec.max_candidates}, detections, "
              f"{spec.max_detections});",
              "}", ""]
    return "\n".join(parts)
