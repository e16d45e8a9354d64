"""The Cortex-M55 Helium (MVE) kernel set, "mve" (runtime/c/mve/ over the DSP set): bit-exact under QEMU mps3-an547.

Work in progress for issue 30 (step 2): so far fully connected, conv and ADD / SUB. The calls of test_dsp_kernels.py's
FC and conv harnesses (random shapes, windows, strides, padding, dilation, channel slices, row pitch, per-tensor and
per-channel, big biases, with and without scratch) run on the M55 with the mve and the dsp sets; both must leave
every call's bytes as numpy says. Whole zoo models (residual ADDs, convs of every kind) compiled for the mve set
must equal the int8 interpreter. On CI (env CI set) nothing here is skipped.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from test_dsp_kernels import (
    ACTS,
    GROUP_CASES,
    _check_calls,
    conv_calls,
    depthwise_calls,
    fc_calls,
    weighted_graph,
    window_calls,
    word_aligned,
    write_call_model,
)

from kilobyte.errors import KilobyteError
from kilobyte.targets.cortexm import build_firmware, have_tools, run_qemu
from kilobyte.targets.cortexm.firmware import select_sources

pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not have_tools(),
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) missing")


def test_mve_fully_connected_calls_bit_exact_on_the_m55(tmp_path):
    calls = [word_aligned(c) for c in fc_calls(np.random.default_rng(5))]
    model_dir, x = write_call_model(tmp_path / "calls", calls)
    counts = {}
    for kernels in ("mve", "dsp"):
        build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / kernels)
        run = run_qemu(build, x, timeout=120, count=True)
        _check_calls(calls, run.output, f"{kernels} kernels on cortex-m55")
        counts[kernels] = run.instructions
    src = {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}
    assert "mve/kb_fc.c" in src and "arm/kb_arm_fc4.S" not in src  # the Helium file replaces the DSP one
    assert counts["mve"] < counts["dsp"], counts


# (stride, padding, c, (h, w)): 3x3 depthwise convs with the Helium ring granted, in place and out of place —
# test_dsp_kernels' GROUP_CASES and maps taller than wide (KWS's 25x5: the ring runs down the columns), channels not a
# multiple of four
MVE_RING_CASES = (*GROUP_CASES, (1, (1,) * 4, 64, (25, 5)), (1, (1,) * 4, 10, (12, 4)), (1, (0, 2, 1, 1), 7, (9, 3)),
                  (2, (1,) * 4, 12, (11, 4)), (1, (2, 0, 0, 2), 8, (6, 2)))


def mve_ring_calls(rng):
    from kilobyte import ir
    from kilobyte.ir import Op

    calls = []
    for i, (s, pad, c, (h, w)) in enumerate(MVE_RING_CASES):
        attrs = ir.DepthwiseAttrs((s, s), pad, (1, 1), 1, ACTS[i % len(ACTS)])
        g, x = weighted_graph(rng, Op.DEPTHWISE_CONV_2D, (1, h, w, c), (1, 3, 3, c), attrs, big_bias=i % 5 == 4)
        ring = 12 * max(w + pad[2] + pad[3], h + pad[0] + pad[1])  # ops/conv_kernels.mve_ring_bytes
        calls += window_calls(rng, ["kb_depthwise_inplace_3x3"], g, x, in_place=True, ring_odds=1.0, ring_bytes=ring)
        calls += window_calls(rng, ["kb_depthwise_3x3"], g, x, ring_odds=1.0, ring_bytes=ring)  # out of place
    return calls


@pytest.mark.parametrize("harness", ("conv", "depthwise", "ring"))
def test_mve_conv_calls_bit_exact_on_the_m55(tmp_path, harness):
    """test_dsp_kernels.py's conv and depthwise calls (random windows, strides, padding, dilation, channel slices,
    row pitch, with and without scratch, in place and out of place) through the Helium kernels: every call's bytes as
    numpy says."""
    make = {"conv": conv_calls, "depthwise": depthwise_calls, "ring": mve_ring_calls}[harness]
    calls = [word_aligned(c) for c in make(np.random.default_rng(30))]
    for part, chunk in enumerate(_chunks(calls)):  # the calls' shapes are small and odd: no speed claim here
        model_dir, x = write_call_model(tmp_path / f"calls{part}", chunk)
        for kernels in ("mve", "dsp"):
            build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / f"{kernels}{part}")
            _check_calls(chunk, run_qemu(build, x, timeout=300).output, f"{kernels} kernels on cortex-m55, part {part}")
    kernel_file = "kb_depthwise.c" if harness == "ring" else f"kb_{harness}.c"
    assert f"mve/{kernel_file}" in {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}


def _chunks(calls, arena_bytes: int = 120_000):
    """The calls in runs whose regions fit the M55 board's 512 KB of RAM (the arena, the input and the output each
    hold all of a run's regions)."""
    chunk, size = [], 0
    for call in calls:
        if chunk and size + call.before.size > arena_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(call)
        size += call.before.size
    if chunk:
        yield chunk


def test_mve_needs_the_cortex_m55(tmp_path):
    model_dir, _ = write_call_model(tmp_path / "calls", [word_aligned(fc_calls(np.random.default_rng(1))[0])])
    with pytest.raises(KilobyteError, match=r"mve kernels need Helium \(cortex-m55\)"):
        build_firmware(model_dir, "cortex-m4", kernels="mve")


@pytest.mark.parametrize("name,width,res", (("resnet-small", 0.5, 32), ("mobilenetv2", 0.25, 32),
                                            ("mnist-cnn", 0.5, 28)))
def test_mve_zoo_models_equal_the_interpreter(tmp_path, name, width, res):
    """Every Helium kernel a real model calls (convs 1x1 and 3x3 with and without padding, few and many channels,
    the residual ADDs, the FC head) against run_int8, and the beat model's cycles below the DSP set's."""
    from kilobyte.api import load
    from kilobyte.codegen import compile_graph
    from kilobyte.interp import run_int8
    from kilobyte.quant import quantize
    from kilobyte.schedule.plan_types import PlanOptions

    graph = load(name, width=width, resolution=res, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(3)
    q = quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = run_int8(q, x)[q.outputs[0]].reshape(-1)
    cycles = {}
    for kernels in ("mve", "dsp"):
        result = compile_graph(q, tmp_path / kernels, PlanOptions(kernels=kernels))
        build = build_firmware(result.out_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / f"fw-{kernels}")
        run = run_qemu(build, x, timeout=300, count=True)
        assert np.array_equal(run.output, want), kernels
        cycles[kernels] = run.cycles
    assert cycles["mve"] < cycles["dsp"], cycles


def _add_case(rng, i):
    """One kb_add / kb_sub call: random scales (TFLite's add_params: one input at multiplier 0.5, shift 0, the other
    shifting right), every other one with hand-made shifts (both inputs right, one, a left shift: every assembly copy
    and the general path);
    pixel strides wider than c (channel slices) or 0 (a broadcast pixel); in place on the first input sometimes."""
    from kilobyte.ops import arith
    from kilobyte.ops.binary import add_int8, sub_int8

    pixels, c = int(rng.integers(1, 40)), int(rng.integers(1, 23))
    s1, s2, so = 2.0 ** rng.uniform(-8, 0, 3)
    z1, z2, zo = (int(v) for v in rng.integers(-128, 128, 3))
    ap = arith.add_params(s1, z1, s2, z2, so, zo, ACTS[i % len(ACTS)])
    if i % 2 == 1:  # hand-made shifts: both inputs right (the 11 assembly), one, a left shift (the general path)
        s1, s2 = ((-2, -1), (-1, -3), (0, -2), (-1, 0), (1, 0), (0, 1))[(i // 2) % 6]
        ap = dataclasses.replace(ap, input1_shift=s1, input2_shift=s2, output_shift=int(rng.integers(-20, -12)),
                                 left_shift=int(rng.integers(10, 21)))
    strides = [c + int(rng.integers(0, 3)) for _ in range(3)]
    if i % 5 == 4:
        strides[1] = 0
    a = rng.integers(-128, 128, (pixels, c)).astype(np.int8)
    b = rng.integers(-128, 128, (1 if strides[1] == 0 else pixels, c)).astype(np.int8)
    sub = i % 3 == 1
    want = (sub_int8 if sub else add_int8)(a, b, ap)
    return dict(kernel="kb_sub" if sub else "kb_add", a=a, b=b, want=want, strides=strides, ap=ap,
                in_place=i % 2 == 0 and strides[2] == strides[0])


def _add_model(root, cases):
    """A model directory whose kb_invoke runs kb_add / kb_sub on regions of the arena (in1 | in2 | out | guard),
    with kb_add.c (swapped for mve/kb_add.c under --kernels mve) and the runtime headers."""
    from test_dsp_kernels import GUARD, SENTINEL, write_model_h

    import kilobyte.runtime as rt

    src = root / "src"
    src.mkdir(parents=True)
    for path in [rt.C_DIR / "kb_add.c", *(rt.C_DIR / h for h in rt.HEADERS)]:
        (src / path.name).write_text(path.read_text())
    before, after, calls, base = [], [], [], 0
    rng = np.random.default_rng(7)
    for i, k in enumerate(cases):
        pixels, c = k["a"].shape
        s1, s2, so = k["strides"]
        n1, n2 = (pixels - 1) * s1 + c, (k["b"].shape[0] - 1) * s2 + c
        no = (pixels - 1) * so + c
        r1 = rng.integers(-128, 128, n1).astype(np.int8)
        r2 = rng.integers(-128, 128, n2).astype(np.int8)
        r1[(np.arange(pixels)[:, None] * s1 + np.arange(c)).reshape(-1)] = k["a"].reshape(-1)
        r2[(np.arange(k["b"].shape[0])[:, None] * s2 + np.arange(c)).reshape(-1)] = k["b"].reshape(-1)
        ro = r1.copy() if k["in_place"] else np.full(no, SENTINEL, np.int8)
        out_at = base if k["in_place"] else base + n1 + n2
        result = ro.copy()
        result[(np.arange(pixels)[:, None] * so + np.arange(c)).reshape(-1)] = k["want"].reshape(-1)
        guard = np.full(GUARD, SENTINEL, np.int8)
        if k["in_place"]:
            before += [r1, r2, guard]
            after += [result, r2, guard]
        else:
            before += [r1, r2, ro, guard]
            after += [r1, r2, result, guard]
        ap = k["ap"]
        fields = dict(pixels=pixels, c=c, in1_cstride=s1, in2_cstride=s2, out_cstride=so,
                      in1_offset=ap.input1_offset, in2_offset=ap.input2_offset, left_shift=ap.left_shift,
                      in1_mult=ap.input1_multiplier, in1_shift=ap.input1_shift, in2_mult=ap.input2_multiplier,
                      in2_shift=ap.input2_shift, out_mult=ap.output_multiplier, out_shift=ap.output_shift,
                      out_offset=ap.output_offset, act_min=ap.act_min, act_max=ap.act_max)
        init = ", ".join(f".{f} = {v}" for f, v in fields.items())
        calls.append(f"    {{ static const kb_add_params p = {{{init}}}; {k['kernel']}(&p, kb_arena + {base}, "
                     f"kb_arena + {base + n1}, kb_arena + {out_at}); }}\n")
        base += sum(len(x) for x in before[-(3 if k["in_place"] else 4):])
    write_model_h(src, base, base, base)
    (src / "model.c").write_text('#include <string.h>\n#include "model.h"\n#include "kilobyte.h"\n'
                                 "int8_t kb_arena[KB_ARENA_BYTES] __attribute__((aligned(8)));\n"
                                 "void kb_invoke(const int8_t *input, int8_t *output)\n{\n"
                                 f"    memcpy(kb_arena, input, {base});\n" + "".join(calls)
                                 + f"    memcpy(output, kb_arena, {base});\n}}\n")
    return root, np.concatenate(before), np.concatenate(after)


def test_mve_add_and_sub_calls_bit_exact_on_the_m55(tmp_path):
    rng = np.random.default_rng(11)
    cases = [_add_case(rng, i) for i in range(48)]
    model_dir, x, want = _add_model(tmp_path / "adds", cases)
    for kernels in ("mve", "portable"):
        build = build_firmware(model_dir, "cortex-m55", kernels=kernels, out_dir=tmp_path / kernels)
        got = run_qemu(build, x, timeout=120).output
        assert np.array_equal(got, want), f"{kernels}: {int(np.sum(got != want))} bytes differ"
    assert "mve/kb_add.c" in {p.parent.name + "/" + p.name for p in select_sources(model_dir / "src", "mve")}


MVE_REQUANT_C = """#include <string.h>
#include "model.h"
#include "kb_mve_requant.h"
int8_t kb_arena[KB_ARENA_BYTES];
void kb_invoke(const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < KB_OUTPUT_BYTES / 3; ++i) {
        int32_t v[6];  /* acc, mult, shift, out_offset, act_min, act_max */
        memcpy(v, input + 24 * i, sizeof v);
        const int32x4_t acc = vdupq_n_s32(v[0]);
        const int32x4_t a = kb_mve_rq4(acc, 0, v[1], v[2], v[4] - v[3], v[5] - v[3], v[3]);
        const int32x4_t b = kb_mve_rq_lanes(acc, vdupq_n_s32(v[1]), vdupq_n_s32(v[2]), vdupq_n_s32(v[4] - v[3]),
                                            vdupq_n_s32(v[5] - v[3]), v[3]);
        int32x4_t c = a;  /* kb_mve_divide (the ADD's form) where the shift is right only */
        if (v[2] < 0) {
            c = kb_mve_divide(vqrdmulhq_n_s32(acc, v[1]), v[2]);
            c = vaddq_n_s32(vminq_s32(vmaxq_s32(c, vdupq_n_s32(v[4] - v[3])), vdupq_n_s32(v[5] - v[3])), v[3]);
        }
        output[3 * i] = (int8_t)vgetq_lane_s32(a, 1);
        output[3 * i + 1] = (int8_t)vgetq_lane_s32(b, 2);
        output[3 * i + 2] = (int8_t)vgetq_lane_s32(c, 3);
    }
}
"""


def test_mve_requantisation_equals_tflite_on_target(tmp_path):
    """kb_mve_rq4 (one channel's multiplier for four values), kb_mve_rq_lanes (one per lane) and kb_mve_divide (the
    ADD's rounding, right shifts only), the Helium kernels' requantisation, against numpy's TFLite
    MultiplyByQuantizedMultiplier on test_dsp_kernels' edge vectors: exact ties of both roundings, INT32_MIN, every
    shift from -31 to 30."""
    from test_dsp_kernels import requant_vectors, write_model_h

    import kilobyte.runtime as rt
    from kilobyte.ops import arith

    n = 6000
    v = requant_vectors(n, np.random.default_rng(12))
    src = tmp_path / "src"
    src.mkdir()
    for path in [*(rt.C_DIR / h for h in rt.HEADERS), rt.MVE_DIR / "kb_mve_requant.h"]:
        (src / path.name).write_text(path.read_text())
    write_model_h(src, 8, 24 * n, 3 * n)
    (src / "model.c").write_text(MVE_REQUANT_C)
    scaled = arith.multiply_by_quantized_multiplier(v[:, 0], v[:, 1], v[:, 2]).astype(np.int64)
    want = np.clip(scaled + v[:, 3], v[:, 4], v[:, 5]).astype(np.int8)
    build = build_firmware(tmp_path, "cortex-m55", kernels="mve", out_dir=tmp_path / "fw")
    got = run_qemu(build, v.view(np.int8).reshape(-1), timeout=60).output.reshape(n, 3)
    np.testing.assert_array_equal(got[:, 0], want, err_msg="kb_mve_rq4")
    np.testing.assert_array_equal(got[:, 1], want, err_msg="kb_mve_rq_lanes")
    np.testing.assert_array_equal(got[:, 2], want, err_msg="kb_mve_divide")
    assert (v[:, 2] < 0).sum() > n // 3  # kb_mve_divide ran on a good share
