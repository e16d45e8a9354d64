"""Targets stage tests: the Cortex-M DSP kernels (kilobyte/runtime/c/arm/) under QEMU on Cortex-M4 and M7, bit for
bit against the portable kernels and the numpy int8 reference.

Three kinds of evidence:
- Kernel calls. One firmware per (core, kernel set) makes ~190 direct calls of every function of arm/kb_conv.c,
  arm/kb_depthwise.c, arm/kb_fc.c and arm/kb_conv_add.c on buffers laid out as generated code may lay them out:
  input pixel stride > C, output into a channel slice, row pitch > width (a tile of a wider buffer), in-place
  depthwise on one buffer, a fused conv + ADD over a residual.
  Weights, per-channel scales, zero points, fused activations and (sometimes saturating) biases are random; windows
  cover k 1/3/5/7, stride 1/2, dilation, asymmetric padding, odd channel counts and long reductions. Every byte of
  every buffer is compared with the expectation (`eval_node_int8` written into the layout; all other bytes, and a
  guard after each buffer, unchanged); only the depthwise scratch plane and the conv im2col scratch are free. Conv
  calls get their scratch (the DSP kernels' pre-widened column path) or NULL (their direct path).
- Requantisation. The shorter kb_arm_requantize of the DSP kernels against kb_requantize and numpy on target, on
  6000 random and edge cases (every shift, saturating accumulators, exact rounding ties).
- Compiled models. Zoo models at small sizes and hand-built one-node graphs go through `compile_graph`; the "dsp"
  and "portable" firmware agree with each other and with `run_int8`.
On CI (env CI set) nothing here is skipped: a missing toolchain fails with the install hint.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from random_nets import compile_bundle, pack_inputs
from runtime_symbols import defined_functions

import kilobyte.runtime as rt
from kilobyte import ir
from kilobyte.interp import run_int8
from kilobyte.interp.int8_ref import eval_node_int8
from kilobyte.ir import Activation, GraphBuilder, Op, QParams
from kilobyte.ops import arith
from kilobyte.ops.binary import add_int8
from kilobyte.ops.layer_code import folded_bias
from kilobyte.ops.node_params import requant_params
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions, have_tools, measure, run_qemu

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")

TARGETS = ("cortex-m4", "cortex-m7")
KERNEL_SETS = ("portable", "dsp")
SENTINEL, GUARD = 0x5A, 16
DSP_FILES = ("kb_conv.c", "kb_depthwise.c", "kb_fc.c", "kb_conv_add.c")  # runtime/c/arm/ replaces these
ACTS = list(Activation)


# -- random one-node int8 graphs (as tests/runtime/test_kernels.py builds them) ----------------------------------------
def weighted_graph(rng, op, x_shape, w_shape, attrs, *, per_channel=True, big_bias=False):
    """A one-node int8 CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED graph with random weights, scales and zero
    points; outputs range from saturated to a few steps wide. Returns (graph, random int8 input)."""
    n_out = w_shape[3] if op is Op.DEPTHWISE_CONV_2D else w_shape[0]
    fan_in = int(np.prod(w_shape)) // n_out
    s_in = 2.0 ** rng.uniform(-8, 0)
    s_w = np.asarray(2.0 ** rng.uniform(-9, -4, n_out if per_channel else 1), np.float32)
    s_out = s_in * float(s_w.mean()) * math.sqrt(fan_in) * 2.0 ** rng.uniform(-2, 12)
    bias = rng.integers(-2**31, 2**31, n_out) if big_bias else np.round(rng.normal(0, 6000 * math.sqrt(fan_in), n_out))
    zi, zo = (int(v) for v in rng.integers(-128, 128, 2))
    axis = (3 if op is Op.DEPTHWISE_CONV_2D else 0) if s_w.size > 1 else None
    b = GraphBuilder()
    x = b.input(x_shape, "int8", qparams=QParams.per_tensor(float(s_in), zi))
    wq = QParams(s_w, np.zeros(s_w.size, np.int64), axis)
    bq = QParams((np.float32(s_in) * s_w).astype(np.float32), np.zeros(s_w.size, np.int64), 0 if axis is not None
                 else None)
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    y = b.node(op, [x, b.const("w", w, wq), b.const("b", bias.astype(np.int32), bq)], attrs, dtype="int8",
               qparams=QParams.per_tensor(float(s_out), zo))
    return b.build([y]), rng.integers(-128, 128, x_shape).astype(np.int8)


def random_window(rng, ks=(1, 3, 5, 7), dilation=True):
    """Kernel, stride, dilation, asymmetric padding (< kernel) and an input size that leaves an output pixel."""
    k = int(rng.choice(ks))
    kw = k if rng.random() < 0.7 else int(rng.choice(ks))
    stride = tuple(int(v) for v in rng.integers(1, 3, 2))
    dil = tuple(int(v) for v in rng.integers(1, 3, 2)) if dilation and rng.random() < 0.25 else (1, 1)
    pad = tuple(int(v) for v in (rng.integers(0, k), rng.integers(0, k), rng.integers(0, kw), rng.integers(0, kw)))
    h_min = max(1, dil[0] * (k - 1) + 1 - pad[0] - pad[1])
    w_min = max(1, dil[1] * (kw - 1) + 1 - pad[2] - pad[3])
    hw = (int(rng.integers(h_min, h_min + 8)), int(rng.integers(w_min, w_min + 10)))
    return dict(k=(k, kw), stride=stride, dil=dil, pad=pad, hw=hw)


# -- kernel calls in one firmware --------------------------------------------------------------------------------------
@dataclass
class Call:
    """One kernel call on its own arena region: [input (| output) | scratch | guard], the input at offset 0;
    `before` is the region's content before the call, `after` the expected content after it."""

    label: str
    kernel: str
    struct: str  # "kb_conv_params" | "kb_fc_params"
    params: dict
    arrays: tuple  # weights (int8), bias, multipliers, shifts (int32)
    before: np.ndarray
    after: np.ndarray
    out_off: int
    scratch: tuple[int, int] | None = None  # (offset, bytes) of the depthwise plane / conv columns: not compared
    add: dict | None = None  # kb_add_params of kb_conv_1x1_add
    consumed: int = 0  # bytes of input at offset 0 the kernel may overwrite (kb_conv_params.in_consumed): not compared


def _layout(rng, values, c, cstride, row):
    """(h, w, c) values -> (h * row * cstride) bytes: pixels cstride apart, rows row pixels apart, random filler."""
    h, w = values.shape[:2]
    buf = rng.integers(-128, 128, (h, row, cstride)).astype(np.int8)
    buf[:, :w, :c] = values
    return buf.reshape(-1)


def _window_params(g) -> dict:
    """kb_conv_params of a one-node graph, dense (the layout fields are overwritten per call)."""
    node = g.nodes[0]
    _, h, w, c = g.tensors[node.inputs[0]].shape
    _, ho, wo, co = g.tensors[node.outputs[0]].shape
    kh, kw = g.tensors[node.inputs[1]].shape[1:3]
    rq, a = requant_params(g, node), node.attrs
    t, b, left, r = a.padding
    return dict(in_h=h, in_w=w, in_c=c, in_cstride=c, out_h=ho, out_w=wo, out_c=co, out_cstride=co, k_h=kh, k_w=kw,
                stride_h=a.stride[0], stride_w=a.stride[1], dil_h=a.dilation[0], dil_w=a.dilation[1], pad_t=t,
                pad_b=b, pad_l=left, pad_r=r, in_offset=-rq.input_zp, out_offset=rq.output_zp, act_min=rq.act_min,
                act_max=rq.act_max, in_row=w, out_row=wo)


def _arrays(g):
    node = g.nodes[0]
    rq = requant_params(g, node)
    return (g.tensors[node.inputs[1]].data.astype(np.int8), g.tensors[node.inputs[2]].data.astype(np.int32),
            np.asarray(rq.multiplier, np.int32), np.asarray(rq.shift, np.int32))


CONV_KERNELS = ("kb_conv", "kb_conv_3x3", "kb_conv_1x1")  # take im2col scratch (KB_CONV_SCRATCH bytes) or NULL


DW_SCRATCH_KERNELS = ("kb_depthwise_3x3",)  # out of place, take a ring (24 * (w + pl + pr) bytes) or NULL


def window_calls(rng, kernels, g, x, *, in_place=False, scratch_odds=0.5, columns=None, dense=None,
                 consumed=False, ring_odds=0.5, ring_bytes=None) -> list[Call]:
    """Calls of `kernels` on node g (conv or depthwise): disjoint buffers with random strides, slice and row pitch,
    or (in_place) one buffer of max(input, output) pixels with equal pixel strides, as generated code does. A conv
    call gets im2col scratch with probability scratch_odds, else NULL (the DSP direct path): `columns` int16 columns
    of kh*kw*in_c (scratch_bytes set to match), 2 (the two-column path) or 6 (the wide path), random when None.
    dense=True: disjoint buffers without strides, slice or row pitch (then the DSP conv may use the unwritten part
    of its output for columns), False: always with them, None: either. consumed: a conv call gets in_consumed = 1
    (the input dies there: the kernel may overwrite it; not compared). A depthwise call that takes scratch gets, with
    probability ring_odds, at least the DSP group path's ring (or `ring_bytes`, another kernel set's; in place: its
    padded plane, or the ring when larger; kb_depthwise_3x3: the ring, else NULL), word-aligned, scratch_bytes set
    to match."""
    p = _window_params(g)
    want = eval_node_int8(g, g.nodes[0], [x, *(g.tensors[t].data for t in g.nodes[0].inputs[1:])])[0]
    c, co, (h, w), (ho, wo) = p["in_c"], p["out_c"], (p["in_h"], p["in_w"]), (p["out_h"], p["out_w"])
    plane = (h + p["pad_t"] + p["pad_b"]) * (w + p["pad_l"] + p["pad_r"])
    calls = []
    for kernel in kernels:
        if in_place:
            cs = c + int(rng.integers(0, 3))
            p.update(in_cstride=cs, out_cstride=cs, in_row=w, out_row=wo)
            before = np.full(max(h * w, ho * wo) * cs, SENTINEL, np.int8)
            before[:h * w * cs] = _layout(rng, x[0], c, cs, w)
            after = before.copy()
            after[:ho * wo * cs].reshape(ho * wo, cs)[:, :c] = want.reshape(-1, c)
            out_off = 0
        else:
            in_cs, c0, out_cs, in_row, out_row = c, 0, co, w, wo  # dense half of the time, as most layers are
            if not dense and (dense is False or rng.random() < 0.5):
                in_cs, c0, in_row, out_row = (v + int(rng.integers(0, 3)) for v in (c, 0, w, wo))
                out_cs = c0 + co + int(rng.integers(0, 3))
            p.update(in_cstride=in_cs, out_cstride=out_cs, in_row=in_row, out_row=out_row)
            out = np.full((ho, out_row, out_cs), SENTINEL, np.int8)
            x_bytes = _layout(rng, x[0], c, in_cs, in_row)
            before = np.concatenate([x_bytes, out.reshape(-1)])
            out[:, :wo, c0:c0 + co] = want
            after = np.concatenate([x_bytes, out.reshape(-1)])
            out_off = x_bytes.size + c0
        scratch = None
        if "inplace" in kernel or kernel in DW_SCRATCH_KERNELS:
            size = plane if "inplace" in kernel else 0
            if rng.random() < ring_odds:
                size = max(size, ring_bytes if ring_bytes is not None else 24 * (w + p["pad_l"] + p["pad_r"]))
            p["scratch_bytes"] = size
            scratch = (before.size + (-before.size) % 4, size) if size else None
        if kernel in CONV_KERNELS:
            p["scratch_bytes"], p["in_consumed"] = 0, int(consumed)
            if rng.random() < scratch_odds:
                cols = columns or int(rng.choice([2, 6]))
                size = 2 * cols * p["k_h"] * p["k_w"] * c
                scratch, p["scratch_bytes"] = (before.size + (-before.size) % 4, size), size  # 4-byte aligned
        pad = (scratch[0] + scratch[1] - before.size if scratch else 0) + GUARD
        before = np.concatenate([before, np.full(pad, SENTINEL, np.int8)])
        after = np.concatenate([after, np.full(pad, SENTINEL, np.int8)])
        label = f"{kernel} {dict(p)}"
        calls.append(Call(label, kernel, "kb_conv_params", dict(p), _arrays(g), before, after, out_off, scratch,
                          consumed=x_bytes.size if consumed and not in_place else 0))
    return calls


def conv_calls(rng) -> list[Call]:
    calls = []
    for i in range(44):
        case = random_window(rng)
        cin, cout = (int(rng.integers(1, 14)), int(rng.integers(1, 14))) if i % 3 else \
            (int(rng.integers(17, 80)), int(rng.integers(1, 6)))  # every 3rd: long reductions (the x16 loop)
        attrs = ir.ConvAttrs(case["stride"], case["pad"], case["dil"], ACTS[i % len(ACTS)])
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *case["hw"], cin), (cout, *case["k"], cin), attrs,
                              big_bias=i % 5 == 0)
        kernels = ["kb_conv"]
        if case["k"] == (3, 3) and case["dil"] == (1, 1):
            kernels.append("kb_conv_3x3")
        if case["k"] == (1, 1) and case["stride"] == (1, 1) and case["pad"] == (0, 0, 0, 0):
            kernels.append("kb_conv_1x1")
        calls += window_calls(rng, kernels, g, x)
    for k, s, pad, cin, cout, hw in ((1, 1, (0,) * 4, 16, 7, (5, 5)), (1, 1, (0,) * 4, 37, 4, (3, 7)),
                                     (1, 1, (0,) * 4, 8, 48, (6, 6)), (1, 1, (0,) * 4, 3, 5, (1, 1)),
                                     (3, 1, (1,) * 4, 32, 5, (6, 7)), (3, 2, (0, 1, 0, 1), 16, 3, (8, 8)),
                                     (5, 1, (2,) * 4, 20, 3, (5, 9)), (3, 1, (1,) * 4, 3, 4, (9, 9))):
        attrs = ir.ConvAttrs((s, s), pad, (1, 1), ACTS[cout % len(ACTS)])  # layers as the zoo models have them
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, k, k, cin), attrs)
        calls += window_calls(rng, ["kb_conv_1x1" if k == 1 else "kb_conv_3x3" if k == 3 else "kb_conv"], g, x)
    for k, s, pad, dil, cin, cout, hw in COLUMN_CASES:  # the column path (scratch) on every awkward shape
        attrs = ir.ConvAttrs((s, s), pad, (dil, dil), ACTS[cin % len(ACTS)])
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, k, k, cin), attrs, big_bias=cout % 2 == 1)
        names = ["kb_conv", *(["kb_conv_1x1"] if k == 1 and s == 1 and not any(pad) else []),
                 *(["kb_conv_3x3"] if k == 3 and dil == 1 else [])]
        calls += window_calls(rng, names, g, x, scratch_odds=1.0, columns=2)
        calls += window_calls(rng, names[:1], g, x, scratch_odds=1.0, columns=6)
    for cin, cout, hw in WIDE_CASES:  # the wide path's blocks (3..6 pixels, 7 = 4 + 3, 8 = 4 + 4) and step counts
        attrs = ir.ConvAttrs((1, 1), (0,) * 4, (1, 1), ACTS[hw[1] % len(ACTS)])
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, 1, 1, cin), attrs, big_bias=cin % 3 == 0)
        calls += window_calls(rng, ["kb_conv_1x1"], g, x, scratch_odds=1.0, columns=6)
    for k, s, pad, cin, cout, hw in TAIL_CASES:  # two columns of scratch, a dense output: its unwritten tail
        attrs = ir.ConvAttrs((s, s), pad, (1, 1), ACTS[cout % len(ACTS)])
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, k, k, cin), attrs, big_bias=cin == 30)
        names = ["kb_conv_1x1" if k == 1 else "kb_conv_3x3"]
        calls += window_calls(rng, names, g, x, scratch_odds=1.0, columns=2, dense=True)
        calls += window_calls(rng, names, g, x, scratch_odds=1.0, columns=2, dense=False)
        calls += window_calls(rng, names, g, x, scratch_odds=1.0, columns=2, dense=True, consumed=True)
        calls += window_calls(rng, names, g, x, scratch_odds=1.0, columns=2, dense=False, consumed=True)
    for k, s, pad, cin, cout, hw in (*TAIL_CASES, *NO_SCRATCH_CASES):  # no scratch: a dense output's unwritten
        # part and consumed input rows hold the columns, the last pixels run directly; not dense: the direct path
        attrs = ir.ConvAttrs((s, s), pad, (1, 1), ACTS[(cin + cout) % len(ACTS)])
        g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, k, k, cin), attrs, big_bias=cin == 30)
        names = ["kb_conv", *(["kb_conv_1x1"] if k == 1 and s == 1 and not any(pad) else [])]
        calls += window_calls(rng, names, g, x, scratch_odds=0.0, dense=True)
        calls += window_calls(rng, names, g, x, scratch_odds=0.0, dense=True, consumed=True)
        calls += window_calls(rng, names, g, x, scratch_odds=0.0, dense=False, consumed=True)
    return calls


# (k, stride, padding, dilation, in_c, out_c, (h, w)) for the DSP column path (out_c >= KB_COLS_MIN_OUT_C = 16):
# odd pixel counts, odd out_c, in_c a multiple of 4 (word widening, whole window rows) or not (value by value, a 1-3
# value tail), padded taps, stride 2, dilation, reductions that end in the x4 / tail loops; window_calls adds strides,
# channel slices and row pitch.
COLUMN_CASES = ((1, 1, (0,) * 4, 1, 16, 17, (5, 5)), (1, 1, (0,) * 4, 1, 37, 16, (3, 7)),
                (1, 1, (0,) * 4, 1, 12, 19, (1, 1)), (1, 2, (0, 1, 0, 1), 1, 20, 16, (7, 6)),
                (3, 1, (1,) * 4, 1, 3, 21, (9, 9)), (3, 2, (1, 0, 0, 1), 1, 8, 17, (8, 7)),
                (3, 1, (2,) * 4, 2, 6, 16, (7, 8)), (5, 1, (2, 1, 2, 0), 1, 4, 18, (6, 5)),
                (3, 1, (1,) * 4, 1, 64, 16, (4, 4)), (3, 1, (0, 2, 1, 0), 1, 16, 23, (5, 6)))


# (in_c, out_c, (h, w)) of 1x1 convs on the wide path: every pixel count from 1 (two-column fallback) to 14, and
# reductions whose 4-value groups leave 0-3 single steps before the 4-step loop, with and without a 1-3 value tail.
WIDE_CASES = ((16, 16, (1, 1)), (12, 17, (1, 2)), (4, 16, (1, 3)), (8, 18, (2, 2)), (20, 16, (1, 5)),
              (28, 19, (2, 3)), (13, 16, (1, 7)), (64, 16, (2, 4)), (7, 21, (3, 3)), (33, 16, (2, 5)),
              (48, 16, (1, 11)), (112, 17, (3, 4)), (3, 16, (1, 13)), (44, 24, (2, 7)), (2, 16, (3, 5)))


# (k, stride, padding, in_c, out_c, (h, w)) of convs whose dense output's unwritten part holds 6, then 5, 4, 3
# columns and finally none (the two-column path for the last pixels): 3x3 as in mnist-cnn at its memory peak (a
# column is 9 output pixels), 1x1 (a column is 1-2 pixels), a reduction with a tail (value by value).
TAIL_CASES = ((3, 2, (0, 1, 0, 1), 16, 32, (28, 28)), (3, 1, (1,) * 4, 8, 17, (6, 11)), (1, 1, (0,) * 4, 8, 16, (5, 7)),
              (1, 1, (0,) * 4, 30, 16, (4, 9)))

# More shapes without scratch (with TAIL_CASES): KWS's and VWW's 1x1 convs at their memory peak (in_c = out_c: the
# output's unwritten part runs out before the last blocks; in_c 8, out_c 16), 1-3 pixels (too few for a block), a
# reduction larger than the whole output (no block ever fits: every pixel direct), an odd out_c, a tail of 1-3 values.
NO_SCRATCH_CASES = ((1, 1, (0,) * 4, 64, 64, (5, 5)), (1, 1, (0,) * 4, 8, 16, (6, 8)), (1, 1, (0,) * 4, 16, 16, (1, 3)),
                    (1, 1, (0,) * 4, 96, 16, (2, 3)), (1, 1, (0,) * 4, 20, 17, (3, 5)), (3, 1, (1,) * 4, 5, 16, (7, 6)),
                    (1, 1, (0,) * 4, 24, 16, (1, 2)))


def depthwise_calls(rng) -> list[Call]:
    calls = []
    for i in range(40):
        case = random_window(rng, ks=(1, 3, 5, 7) if i < 20 else (3, 5, 7), dilation=i < 20)
        c = int(rng.integers(1, 12)) if i % 3 else int(rng.integers(12, 40))
        attrs = ir.DepthwiseAttrs(case["stride"], case["pad"], case["dil"], 1, ACTS[i % len(ACTS)])
        g, x = weighted_graph(rng, Op.DEPTHWISE_CONV_2D, (1, *case["hw"], c), (1, *case["k"], c), attrs,
                              big_bias=i % 7 == 0)
        square = case["k"][0] == case["k"][1] and case["k"][0] in (3, 5, 7) and case["dil"] == (1, 1)
        unrolled = [f"kb_depthwise_inplace_{case['k'][0]}x{case['k'][1]}"] if square else []
        out_of_place = ["kb_depthwise_3x3"] if case["k"] == (3, 3) and case["dil"] == (1, 1) else []
        if i < 20:  # disjoint buffers, strides, slices and row pitch (the in-place kernels accept them too)
            calls += window_calls(rng, ["kb_depthwise", *out_of_place, "kb_depthwise_inplace", *unrolled], g, x)
        else:
            calls += window_calls(rng, ["kb_depthwise_inplace", *unrolled], g, x, in_place=True)
    for k, s, pad, c, hw in ((3, 1, (1,) * 4, 16, (7, 7)), (3, 1, (1,) * 4, 9, (5, 6)), (3, 2, (0, 1, 0, 1), 24,
                             (8, 8)), (3, 2, (1,) * 4, 5, (7, 9)), (3, 1, (0,) * 4, 7, (4, 5)),
                             (5, 1, (2,) * 4, 8, (6, 7))):
        attrs = ir.DepthwiseAttrs((s, s), pad, (1, 1), 1, ACTS[c % len(ACTS)])  # as in the mobile zoo models
        g, x = weighted_graph(rng, Op.DEPTHWISE_CONV_2D, (1, *hw, c), (1, k, k, c), attrs)
        calls += window_calls(rng, [f"kb_depthwise_inplace_{k}x{k}"], g, x, in_place=True)
        calls += window_calls(rng, ["kb_depthwise", *(["kb_depthwise_3x3"] if k == 3 else [])], g, x)
    for i, (s, pad, c, hw) in enumerate(GROUP_CASES):  # the DSP group path (ring granted), in place and not
        attrs = ir.DepthwiseAttrs((s, s), pad, (1, 1), 1, ACTS[i % len(ACTS)])
        g, x = weighted_graph(rng, Op.DEPTHWISE_CONV_2D, (1, *hw, c), (1, 3, 3, c), attrs, big_bias=i % 5 == 4)
        calls += window_calls(rng, ["kb_depthwise_inplace_3x3"], g, x, in_place=True, ring_odds=1.0)
        calls += window_calls(rng, ["kb_depthwise_3x3"], g, x, ring_odds=1.0)
    return calls


# (stride, padding, c, (h, w)) of 3x3 depthwise convs on the DSP group path (kb_arm_dwg.S): MobileNet's and KWS's small
# maps at stride 1 (in place only up to 7 output columns), stride 2 with symmetric and TF-SAME padding, odd sizes,
# 1-3 channels left for the plane path, one pixel; every fifth with biases the one-SMMLAR form does not cover (its
# groups then take the plane / direct path).
GROUP_CASES = ((1, (1,) * 4, 16, (3, 3)), (1, (1,) * 4, 12, (6, 6)), (1, (1,) * 4, 8, (25, 5)),
               (2, (1,) * 4, 20, (6, 6)), (2, (0, 1, 0, 1), 16, (6, 6)), (2, (1,) * 4, 9, (7, 9)),
               (1, (1,) * 4, 6, (1, 1)), (1, (0,) * 4, 8, (5, 4)), (2, (0, 1, 0, 1), 24, (12, 12)),
               (1, (1,) * 4, 14, (4, 7)), (2, (1, 1, 0, 0), 4, (5, 3)), (1, (1,) * 4, 32, (14, 14)))


def conv_add_call(rng, cin, cout, hw, act, add_act, big_bias, **layout) -> Call:
    """kb_conv_1x1_add: a 1x1 conv's int8 output added (TFLite ADD) to the residual it overwrites. The output region
    holds random bytes (the residual in the slice, other tensors' data around it); only the slice may change.
    layout: window_calls's dense / consumed."""
    attrs = ir.ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), act)
    g, x = weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, 1, 1, cin), attrs, big_bias=big_bias)
    conv = window_calls(rng, ["kb_conv_1x1"], g, x, scratch_odds=0, **layout)[0]  # a layout, the conv's values
    q, (s_res, s_out), (z_res, z_out) = g.tensors[g.outputs[0]].qparams, 2.0 ** rng.uniform(-8, 0, 2), \
        rng.integers(-128, 128, 2).tolist()
    ap = arith.add_params(q.scale[0], q.zero_point[0], s_res, z_res, s_out, z_out, add_act)
    p = conv.params
    ho, wo, cs, row = p["out_h"], p["out_w"], p["out_cstride"], p["out_row"]
    start = conv.before.size - GUARD - ho * row * cs  # the output region follows the input
    c0 = conv.out_off - start
    region = rng.integers(-128, 128, (ho, row, cs)).astype(np.int8)
    result = region.copy()
    conv_values = conv.after[start:start + region.size].reshape(ho, row, cs)[:, :wo, c0:c0 + cout]
    result[:, :wo, c0:c0 + cout] = add_int8(conv_values, region[:, :wo, c0:c0 + cout], ap)
    guard = np.full(GUARD, SENTINEL, np.int8)
    before = np.concatenate([conv.before[:start], region.reshape(-1), guard])
    after = np.concatenate([conv.after[:start], result.reshape(-1), guard])
    add = dict(pixels=ho * wo, c=cout, in1_cstride=cs, in2_cstride=cs, out_cstride=cs,
               in1_offset=ap.input1_offset, in2_offset=ap.input2_offset, left_shift=ap.left_shift,
               in1_mult=ap.input1_multiplier, in1_shift=ap.input1_shift, in2_mult=ap.input2_multiplier,
               in2_shift=ap.input2_shift, out_mult=ap.output_multiplier, out_shift=ap.output_shift,
               out_offset=ap.output_offset, act_min=ap.act_min, act_max=ap.act_max)
    return Call(f"kb_conv_1x1_add {p} {add}", "kb_conv_1x1_add", "kb_conv_params", p, conv.arrays, before, after,
                conv.out_off, None, add, conv.consumed)


def conv_add_calls(rng) -> list[Call]:
    calls = []
    for i in range(12):
        cin, cout, hw = int(rng.integers(1, 40)), int(rng.integers(1, 14)), tuple(rng.integers(1, 7, 2).tolist())
        calls.append(conv_add_call(rng, cin, cout, hw, ACTS[i % len(ACTS)], ACTS[(i + 1) % len(ACTS)], i % 4 == 0))
    for i, (cin, cout, hw) in enumerate(ADD_WIDE_CASES):  # the wide path in the consumed input (dense or not)
        for dense in (True, False):
            calls.append(conv_add_call(rng, cin, cout, hw, Activation.NONE, ACTS[i % len(ACTS)], False, dense=dense,
                                       consumed=True))
    return calls


# (in_c, out_c, (h, w)) of fused 1x1 conv + ADD on the DSP wide path (the input dies there): the first pixels on the
# pair path until the consumed input holds six columns and six pixels' values, then blocks of 6, 4 + 3, 4 + 4, ...
ADD_WIDE_CASES = ((16, 16, (6, 7)), (24, 17, (5, 8)), (96, 16, (4, 5)), (48, 24, (6, 6)), (8, 16, (3, 11)))


def fc_calls(rng) -> list[Call]:
    calls = []
    for i in range(24):  # every third as generated code calls it: the input offset folded into the bias
        n_in, n_out = int(rng.integers(1, 90)), int(rng.integers(1, 24))
        g, x = weighted_graph(rng, Op.FULLY_CONNECTED, (1, n_in), (n_out, n_in),
                              ir.FullyConnectedAttrs(ACTS[i % len(ACTS)]), per_channel=i % 2 == 0,
                              big_bias=i % 4 == 0)
        want = eval_node_int8(g, g.nodes[0], [x, *(g.tensors[t].data for t in g.nodes[0].inputs[1:])])[0]
        rq = requant_params(g, g.nodes[0])
        p = dict(in_n=n_in, out_n=n_out, in_offset=-rq.input_zp, out_offset=rq.output_zp, act_min=rq.act_min,
                 act_max=rq.act_max)
        w, bias, mult, shift = _arrays(g)
        if i % 3 == 2:
            bias, p["in_offset"] = folded_bias(g, g.nodes[0]), 0
        arrays = (w, bias, np.broadcast_to(mult, n_out).copy(), np.broadcast_to(shift, n_out).copy())
        guard = np.full(GUARD, SENTINEL, np.int8)
        before = np.concatenate([x.reshape(-1), np.full(n_out, SENTINEL, np.int8), guard])
        after = np.concatenate([x.reshape(-1), want.reshape(-1), guard])
        calls.append(Call(f"kb_fully_connected {p}", "kb_fully_connected", "kb_fc_params", p, arrays, before,
                          after, n_in))
    return calls


def _c_array(name: str, ctype: str, values) -> str:
    flat = np.asarray(values).reshape(-1)
    return (f"static const {ctype} {name}[{max(flat.size, 1)}] __attribute__((aligned(16))) = "
            f"{{{', '.join(str(int(v)) for v in flat) or '0'}}};\n")


def write_model_h(src: Path, arena: int, n_in: int, n_out: int) -> None:
    """model.h of the code generator's contract (what fw/main.c and the firmware build need)."""
    (src / "model.h").write_text(f"#include <stdint.h>\n#define KB_ARENA_BYTES {arena}\n#define KB_INPUT_BYTES {n_in}\n"
                                 f"#define KB_OUTPUT_BYTES {n_out}\nextern int8_t kb_arena[KB_ARENA_BYTES];\n"
                                 "void kb_invoke(const int8_t *input, int8_t *output);\n")


def write_call_model(root: Path, calls: list[Call]) -> tuple[Path, np.ndarray]:
    """A model directory (the code generator's contract: model.h, model.c, runtime files) whose kb_invoke copies its
    input into the arena, makes every call on its region, and returns the whole arena. Returns (dir, input)."""
    offsets = np.cumsum([0] + [c.before.size for c in calls])
    total = int(offsets[-1])
    src = root / "src"
    src.mkdir(parents=True)
    for path in [*(rt.C_DIR / name for name in DSP_FILES), *(rt.C_DIR / h for h in rt.HEADERS)]:
        (src / path.name).write_text(path.read_text())
    write_model_h(src, total, total, total)
    parts = ['#include <string.h>\n#include "model.h"\n#include "kilobyte.h"\n',
             "int8_t kb_arena[KB_ARENA_BYTES] __attribute__((aligned(8)));\n"]
    for i, (call, base) in enumerate(zip(calls, offsets)):
        w, b, m, s = (_c_array(f"kb_{k}_{i}", t, a) for k, t, a in
                      zip(("w", "b", "mult", "shift"), ("int8_t", "int32_t", "int32_t", "int32_t"), call.arrays))
        fields = ", ".join(f".{k} = {int(v)}" for k, v in call.params.items())
        args = ["&p", f"kb_arena + {base}", f"kb_w_{i}", f"kb_b_{i}", f"kb_mult_{i}", f"kb_shift_{i}",
                f"kb_arena + {base + call.out_off}"]
        if call.scratch:
            args.append(f"kb_arena + {base + call.scratch[0]}")
        elif call.kernel in CONV_KERNELS + DW_SCRATCH_KERNELS:
            args.append("NULL")
        add = ""
        if call.add:  # kb_conv_1x1_add takes its kb_add_params before the output
            args.insert(-1, "&a")
            add = f"    static const kb_add_params a = {{{', '.join(f'.{k} = {v}' for k, v in call.add.items())}}};\n"
        call_c = f"{call.kernel}({', '.join(args)});"
        parts.append(f"{w}{b}{m}{s}__attribute__((noinline)) static void kb_layer_{i}(void)\n{{\n"
                     f"    static const {call.struct} p = {{{fields}}};\n{add}    {call_c}\n}}\n")
    body = "".join(f"    kb_layer_{i}();\n" for i in range(len(calls)))
    parts.append(f"void kb_invoke(const int8_t *input, int8_t *output)\n{{\n    memcpy(kb_arena, input, {total});\n"
                 f"{body}    memcpy(output, kb_arena, {total});\n}}\n")
    (src / "model.c").write_text("".join(parts))
    return root, np.concatenate([c.before for c in calls])


def word_aligned(call: Call) -> Call:
    """The call with its region padded (guard bytes) to a multiple of 4: every region, and so every conv scratch
    (4-byte aligned within its region), starts word-aligned in the arena, as the planner places scratch."""
    pad = np.full(-call.before.size % 4, SENTINEL, np.int8)
    return dataclasses.replace(call, before=np.concatenate([call.before, pad]), after=np.concatenate([call.after, pad]))


def _check_calls(calls: list[Call], got: np.ndarray, what: str) -> None:
    bad, base = [], 0
    for call in calls:
        region, want = got[base:base + call.after.size].copy(), call.after.copy()
        if call.scratch:
            region[call.scratch[0]:call.scratch[0] + call.scratch[1]] = 0
            want[call.scratch[0]:call.scratch[0] + call.scratch[1]] = 0
        region[:call.consumed] = want[:call.consumed] = 0
        if not np.array_equal(region, want):
            bad.append(f"{call.label}: {int((region != want).sum())} bytes differ")
        base += call.after.size
    assert not bad, f"{what}: {len(bad)} of {len(calls)} calls wrong:\n" + "\n".join(bad[:8])


@pytest.fixture(scope="module")
def kernel_calls(tmp_path_factory):
    rng = np.random.default_rng(20240611)
    calls = conv_calls(rng) + depthwise_calls(rng) + fc_calls(rng) + conv_add_calls(rng)
    calls = [word_aligned(c) for c in calls]
    model_dir, x = write_call_model(tmp_path_factory.mktemp("calls"), calls)
    return calls, model_dir, x


def _build_and_run(model_dir: Path, x: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """Output of the model on x for every (core, kernel set); firmware builds run two at a time."""
    jobs = [(t, k) for t in TARGETS for k in KERNEL_SETS]

    def one(job):
        target, kernels = job
        build = build_firmware(model_dir, target, kernels=kernels, out_dir=model_dir / f"fw-{target}-{kernels}")
        src = build.out_dir / "src"
        assert (src / "kb_arm_simd.h").is_file() == (kernels == "dsp")  # the swap happened
        wide = kernels == "dsp" and any((src / name).is_file() for name in ("kb_conv.c", "kb_conv_add.c"))
        assert (src / "kb_arm_wide.S").is_file() == wide  # the assembly, with the kernels that call it only
        return run_qemu(build, x, timeout=120).output

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(jobs, pool.map(one, jobs)))


def test_dsp_files_replace_every_function_and_calls_cover_them(kernel_calls):
    calls = kernel_calls[0]
    functions = set()
    for name in DSP_FILES:
        portable, arm = defined_functions(rt.C_DIR / name), defined_functions(rt.C_DIR / "arm" / name)
        assert arm == portable, f"arm/{name} must define exactly the functions of {name}"
        functions |= portable
    assert functions == {c.kernel for c in calls}


def test_kernel_calls_bit_exact_on_qemu(kernel_calls):
    calls, model_dir, x = kernel_calls
    outputs = _build_and_run(model_dir, x)
    for (target, kernels), got in outputs.items():
        _check_calls(calls, got, f"{kernels} kernels on {target}")


def test_group_path_runs_on_its_cases_and_matches_numpy(kernel_calls, tmp_path):
    """The calls that grant the ring do run the DSP group path (kb_arm_dwg.S), at both strides, with its widening and
    padding rows, and the emulated M4 leaves every call's bytes as numpy says (unicorn, not QEMU: the count too)."""
    calls, model_dir, x = kernel_calls
    build = build_firmware(model_dir, "cortex-m4", kernels="dsp", out_dir=tmp_path / "fw")
    counted = count_instructions(build, x, timeout=600)
    _check_calls(calls, counted.output, "dsp kernels on cortex-m4 (unicorn)")
    ran = {f for f, n in counted.per_function.items() if n}
    assert {"kb_dwg_s1", "kb_dwg_s2", "kb_dwg_row_in"} <= ran


# -- requantisation -----------------------------------------------------------------------------------------------
REQUANT_C = """#include <string.h>
#include "model.h"
#include "kb_requant.h"
#include "kb_arm_requant.h"
int8_t kb_arena[KB_ARENA_BYTES];
void kb_invoke(const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < KB_OUTPUT_BYTES / 4; ++i) {
        int32_t v[6];  /* acc, mult, shift, out_offset, act_min, act_max */
        memcpy(v, input + 24 * i, sizeof v);
        output[4 * i] = kb_requantize(v[0], v[1], v[2], v[3], v[4], v[5]);
        output[4 * i + 1] = kb_arm_requantize(v[0], v[1], v[2], v[3], v[4], v[5]);
        output[4 * i + 2] = kb_arm_requantize1(v[0], v[1], v[2], v[3], v[4], v[5]);
        if (kb_arm_rqs_ok(v[2], v[3]) && v[0] < KB_ARM_RQS_MAX_ACC && v[0] > -KB_ARM_RQS_MAX_ACC) {
            const kb_arm_rqs q = kb_arm_rqs_of(v[1], v[2], v[3], v[4], v[5]);
            output[4 * i + 3] = kb_arm_rqs_apply(&q, v[0]);
        } else {
            output[4 * i + 3] = kb_requantize(v[0], v[1], v[2], v[3], v[4], v[5]);
        }
    }
}
"""


def requant_vectors(n: int, rng) -> np.ndarray:
    """(n, 6) int32 (acc, mult, shift, out_offset, act_min, act_max): random and edge accumulators, generated
    multipliers (0 or [2^30, 2^31)), every shift from -31 to 30, ReLU-like and full clamps."""
    edges = np.array([0, 1, -1, 2**31 - 1, -2**31, 2**30, -2**30, 65536, -65537, 127, -128, 3 << 28, -(3 << 28)])
    acc = np.where(rng.random(n) < 0.3, rng.choice(edges, n), rng.integers(-2**31, 2**31, n) >> rng.integers(0, 31, n))
    mult = rng.integers(2**30, 2**31, n)
    mult[rng.random(n) < 0.05], mult[rng.random(n) < 0.05] = 0, 2**30  # exact halves: ties in both roundings
    shift = rng.integers(-31, 31, n)
    lo = np.where(rng.random(n) < 0.5, -128, rng.integers(-128, 0, n))
    hi = np.where(rng.random(n) < 0.5, 127, rng.integers(0, 128, n))
    return np.stack([acc, mult, shift, rng.integers(-128, 128, n), lo, hi], axis=1).astype(np.int32)


def test_arm_requantize_equals_kb_requantize_on_target(tmp_path):
    """kb_arm_requantize, kb_arm_requantize1 and, inside its domain, the one-SMMLAR kb_arm_rqs (the shorter forms the
    DSP kernels use) against kb_requantize and numpy, on target."""
    n = 6000
    v = requant_vectors(n, np.random.default_rng(11))
    src = tmp_path / "src"
    src.mkdir()
    for name in rt.HEADERS:
        (src / name).write_text((rt.C_DIR / name).read_text())
    write_model_h(src, 8, 24 * n, 4 * n)
    (src / "model.c").write_text(REQUANT_C)
    scaled = arith.multiply_by_quantized_multiplier(v[:, 0], v[:, 1], v[:, 2]).astype(np.int64)  # numpy TFLite
    want = np.clip(scaled + v[:, 3], v[:, 4], v[:, 5]).astype(np.int8)
    for target in TARGETS:
        build = build_firmware(tmp_path, target, kernels="dsp", out_dir=tmp_path / f"fw-{target}")
        got = run_qemu(build, v.view(np.int8).reshape(-1), timeout=60).output.reshape(n, 4)
        np.testing.assert_array_equal(got[:, 0], want, err_msg=f"kb_requantize on {target}")
        np.testing.assert_array_equal(got[:, 1], want, err_msg=f"kb_arm_requantize on {target}")
        np.testing.assert_array_equal(got[:, 2], want, err_msg=f"kb_arm_requantize1 on {target}")
        np.testing.assert_array_equal(got[:, 3], want, err_msg=f"kb_arm_rqs (in its domain) on {target}")
    in_domain = (v[:, 2] <= -1) & (v[:, 2] >= -23) & (np.abs(v[:, 0].astype(np.int64)) < 2**30)
    assert in_domain.sum() > n // 4  # the one-SMMLAR form really ran on a good share of the cases


def test_smmlar_requantisation_equals_tflite_in_numpy():
    """The one-SMMLAR form kb_wide_1x<N> uses, in int64 numpy, against TFLite's MultiplyByQuantizedMultiplier plus
    the output offset, over kb_wide_job_ok's whole domain: every right shift 1-23, |acc| < 2^30, multipliers in
    [2^30, 2^31) (with 2^30 and small accumulators for exact ties), every output offset."""
    rng = np.random.default_rng(17)
    n = 200_000
    for r in range(1, 24):
        acc = rng.integers(-2**30 + 1, 2**30, n)
        acc[:n // 4] = rng.integers(-(1 << min(r + 8, 30)), 1 << min(r + 8, 30), n // 4)  # results near zero
        acc[:64] = [2**30 - 1, -2**30 + 1, 0, 1, -1, *rng.integers(-2**r, 2**r, 59)]
        mult = rng.integers(2**30, 2**31, n)
        mult[n // 8:n // 4] = 2**30  # ties in both of TFLite's roundings
        zp = rng.integers(-128, 128, n)
        want = arith.multiply_by_quantized_multiplier(acc, mult, np.full(n, -r)).astype(np.int64) + zp
        c = ((1 + 2 * zp) << (r - 1)) - (acc < 0)
        high = (c * 2**32 + 2 * acc * mult + 2**31) >> 32  # SMMLAR; |each term| < 2^62: no int64 overflow
        assert np.abs(high).max() < 2**31  # fits SMMLAR's 32-bit result
        np.testing.assert_array_equal(high >> r, want, err_msg=f"right shift {r}")


# -- the assembly blocks ----------------------------------------------------------------------------------------------
DOT_C = """#include <string.h>
#include "model.h"
#include "kb_arm_wide.h"
int8_t kb_arena[KB_ARENA_BYTES];
typedef void kb_dot_fn(const int8_t *, const int8_t *, int32_t, int32_t *);
typedef void kb_wide_fn(const int8_t *, const int8_t *, int32_t, kb_wide_job *);
void kb_invoke(const int8_t *input, int8_t *output)
{
    static kb_dot_fn *const dot[7] = {0, 0, 0, kb_dot_1x3_cols, kb_dot_1x4_cols, kb_dot_1x5_cols, kb_dot_1x6_cols};
    static kb_wide_fn *const wide[7] = {0, 0, 0, kb_wide_1x3, kb_wide_1x4, kb_wide_1x5, kb_wide_1x6};
    for (int32_t i = 0; i < %(cases)d; ++i) {  /* n, groups, channels, out_offset, run, (bias, mult, shift) x 3 */
        int32_t head[14], acc[6] = {0};
        memcpy(head, input, sizeof head);
        const int8_t *cols = input + sizeof head, *w = cols + 8 * head[0] * head[1];
        int8_t *out = output + 48 * i;
        acc[0] = head[5];
        dot[head[0]](cols, w, head[1], acc);
        memcpy(out, acc, sizeof acc);
        int32_t bias[3], mult[3], shift[3];
        for (int32_t co = 0; co < 3; ++co) {
            bias[co] = head[5 + 3 * co], mult[co] = head[6 + 3 * co], shift[co] = head[7 + 3 * co];
        }
        out[46] = (int8_t)kb_wide_job_ok(bias, shift, head[2], 4 * head[1], head[3], -128, 127);
        if (head[4]) {  /* pixel c's output of channel co at 24 + 3 * c + co */
            kb_wide_job job = {bias, mult, shift, 0, head[2], 1 + 2 * head[3], {0}};
            for (int32_t c = 0; c < head[0]; ++c) {
                job.y[c] = out + 24 + 3 * c;
            }
            wide[head[0]](cols, w, head[1], &job);
            out[47] = (int8_t)(job.co == head[2]);
        }
        input = w + 4 * head[1] * head[2];
    }
}
"""


def test_dot_1xn_cols_equal_numpy_on_target(tmp_path):
    """The hand-written assembly blocks against numpy, N = 3..6: kb_dot_1x<N>_cols's raw int32 accumulators
    (wrapping; biases up to the int32 limits) and kb_wide_1x<N>'s requantised int8 outputs of 1-3 channels (TFLite's
    double rounding, output offset, clamp [-128, 127]) within kb_wide_job_ok's limits, up to them: every right shift
    1-23, |acc| up to just under 2^30, output offsets -128..127. Group counts 0-9 (0-3 single steps before the
    4-step loop) and longer, extreme values (|x| = 255, w = -128), rounding ties (groups = 0: the accumulator is the
    bias, multiplier 2^30) and unsaturated results next to rounding boundaries. kb_wide_job_ok itself is checked
    against the same limits on target."""
    rng = np.random.default_rng(5)
    parts, want_acc, want_out = [], [], []
    edges = np.array([0, 1, -1, 2, -2, 3, -3, 2**31 - 1, -2**31, 2**30, -2**30, 5 << 20, -(5 << 20)])
    for n in (3, 4, 5, 6):
        for groups in (*range(10), 16, 37, *[0] * 24, *[1, 2, 5] * 4):
            ch = int(rng.integers(1, 4))
            x = rng.integers(-255, 256, (groups, n, 4))  # value 4g + j of column c, before the {0,2,1,3} order
            w = rng.integers(-128, 128, (ch, groups, 4))
            if groups % 3 == 0:
                x[:] = rng.choice([-255, 255], x.shape)
                w[:] = rng.choice([-128, 127], w.shape)
            run = int(rng.random() < 0.8)
            lim = 2**30 - 4 * groups * 255 * 128  # kb_wide_job_ok's |bias| < lim
            near = run and groups == 0 and rng.random() < 0.75  # unsaturated, next to a rounding boundary (or tie)
            head = [n, groups, ch, int(rng.integers(-20, 21) if near else rng.integers(-128, 128)), run]
            acc = np.zeros((ch, 6), np.int64)
            out = np.zeros(24, np.int8)
            for co in range(ch):
                if not run:
                    bias = int(rng.choice([*edges, lim, -lim, lim - 1])) if groups == 0 or rng.random() < 0.3 else \
                        int(rng.integers(-2**31, 2**31))
                elif rng.random() < 0.3:  # the edge of the range
                    bias = int(rng.choice([-1, 1])) * (lim - 1)
                else:
                    bias = int(rng.integers(-lim + 1, lim))
                mult = 2**30 if groups == 0 and rng.random() < 0.5 else int(rng.integers(2**30, 2**31))
                shift = -int(rng.integers(1, 24 if run else 32))
                if near:
                    top = max(1, min(100, mult >> -shift))
                    v = int(rng.integers(-top, top)) + float(rng.choice([0.0, 0.5]))
                    bias = int(np.clip(round(v * 2.0 ** (31 - shift) / mult) + int(rng.integers(-2, 3)), -lim + 1,
                                       lim - 1))
                head += [bias, mult, shift]  # (lim > 0: 4 * groups * 255 * 128 < 2^30 here)
                acc[co, :n] = (x * w[co, :, None, :]).sum(axis=(0, 2)) + bias
                acc[co] = (acc[co] + 2**31) % 2**32 - 2**31
                if run:
                    assert np.abs(acc[co]).max() < 2**30
                    scaled = arith.multiply_by_quantized_multiplier(acc[co, :n], np.full(n, mult), np.full(n, shift))
                    out[3 * np.arange(n) + co] = np.clip(scaled.astype(np.int64) + head[3], -128, 127)
            ok = all(-23 <= head[7 + 3 * co] <= -1 and abs(head[5 + 3 * co]) < lim for co in range(ch))
            out[22:24] = ok, run  # kb_wide_job_ok; kb_wide_1x<N> leaves job.co == out_c
            head += [0] * (14 - len(head))
            cols = x[:, :, [0, 2, 1, 3]].astype(np.int16)  # per group and column: (x0, x2), (x1, x3)
            parts += [np.array(head, np.int32).view(np.int8), cols.reshape(-1).view(np.int8),
                      w.astype(np.int8).reshape(-1)]
            want_acc.append(acc[0].astype(np.int32))
            want_out.append(out)
    data = np.concatenate(parts)
    src = tmp_path / "src"
    src.mkdir()
    for name in rt.HEADERS:  # the arm/ headers and kb_arm_wide.S come with kernels="dsp" (model.c includes its header)
        (src / name).write_text((rt.C_DIR / name).read_text())
    write_model_h(src, 8, data.size, 48 * len(want_acc))
    (src / "model.c").write_text(DOT_C % {"cases": len(want_acc)})
    for target in TARGETS:
        build = build_firmware(tmp_path, target, kernels="dsp", out_dir=tmp_path / f"fw-{target}")
        got = run_qemu(build, data, timeout=60).output.reshape(len(want_acc), 48)
        np.testing.assert_array_equal(got[:, :24].copy().view(np.int32), np.stack(want_acc),
                                      err_msg=f"kb_dot_1xN_cols on {target}")
        np.testing.assert_array_equal(got[:, 24:], np.stack(want_out), err_msg=f"kb_wide_1xN on {target}")


# -- compiled models ---------------------------------------------------------------------------------------------------
ZOO = (("mobilenetv2", 0.35, 64), ("mnist-cnn", 0.35, 28), ("vgg-small", 0.35, 32), ("resnet-small", 0.35, 32))


def zoo_graph(name: str, width: float, resolution: int):
    from kilobyte.api import load
    from kilobyte.quant import quantize

    graph = load(name, width=width, resolution=resolution, num_classes=10).graph
    shape = graph.tensors[graph.inputs[0]].shape
    rng = np.random.default_rng(len(name))
    return quantize(graph, [rng.normal(0.2, 1.0, shape).astype(np.float32) for _ in range(3)])


def single_node_graphs():
    rng = np.random.default_rng(7)
    graphs = []
    for k, stride, pad, cin, cout, hw in ((1, 1, (0, 0, 0, 0), 13, 7, (7, 9)), (1, 2, (0, 1, 0, 0), 9, 11, (9, 6)),
                                          (3, 1, (1, 0, 2, 1), 5, 3, (9, 7)), (3, 2, (0, 1, 1, 0), 19, 9, (11, 8)),
                                          (5, 1, (2, 1, 0, 3), 3, 5, (8, 10)), (7, 2, (3, 2, 1, 4), 7, 13, (12, 9))):
        attrs = ir.ConvAttrs((stride, stride), pad, (1, 1), ACTS[k % len(ACTS)])
        graphs.append(weighted_graph(rng, Op.CONV_2D, (1, *hw, cin), (cout, k, k, cin), attrs)[0])
    for k, stride, pad, c in ((3, 1, (1, 1, 0, 2), 11), (5, 2, (2, 0, 1, 3), 7), (7, 1, (3, 3, 3, 3), 5)):
        attrs = ir.DepthwiseAttrs((stride, stride), pad, (1, 1), 1, Activation.RELU)
        graphs.append(weighted_graph(rng, Op.DEPTHWISE_CONV_2D, (1, 10, 9, c), (1, k, k, c), attrs)[0])
    graphs.append(weighted_graph(rng, Op.FULLY_CONNECTED, (1, 77), (13, 77), ir.FullyConnectedAttrs())[0])
    return graphs


def test_compiled_models_dsp_equals_portable_equals_reference(tmp_path):
    """Every graph compiled for the DSP kernel set (which the portable build ignores), all bundled into one
    firmware per (core, kernel set) (tests/random_nets.write_bundle): 4 builds and QEMU runs instead of 56."""
    from kilobyte.formats.project import manifest

    graphs = [zoo_graph(*spec) for spec in ZOO] + single_node_graphs()
    rng = np.random.default_rng(3)
    models = []
    for i, graph in enumerate(graphs):
        x = rng.integers(-128, 128, graph.tensors[graph.inputs[0]].shape).astype(np.int8)
        models.append((f"model{i}", graph, PlanOptions(kernels="dsp"), [x]))
    results, inputs, bundle, slices = compile_bundle(tmp_path, models)
    wants = [run_int8(r.graph, xs[0])[r.graph.outputs[0]].reshape(-1) for r, xs in zip(results, inputs)]
    x = pack_inputs(inputs, slices, 0, manifest(bundle)["input"]["shape"][0])
    for (target, kernels), got in _build_and_run(bundle, x).items():
        bad = [f"model{i} ({graph.name}): {int(np.sum(got[off:off + n] != want))} values differ"
               for i, (graph, want, (_, _, off, n)) in enumerate(zip(graphs, wants, slices))
               if not np.array_equal(got[off:off + n], want)]
        assert not bad, f"{kernels} kernels on {target}: " + "; ".join(bad)


def test_flash_split_counts_kernel_helpers_as_kernel_code(tmp_path):
    """The static helpers of the kernel files (the DSP files have many) count as kernel code, so what `measure`
    leaves as "other" (startup, semihosting, libc, parameter structs) is the same, up to alignment, whichever kernel
    set one model is built with; weights are the same too, and the DSP kernel code is the larger."""
    from kilobyte.codegen import compile_graph

    result = compile_graph(zoo_graph("mnist-cnn", 0.35, 28), tmp_path / "m", PlanOptions(kernels="dsp"))
    sizes = {k: measure(build_firmware(result.out_dir, "cortex-m4", kernels=k, out_dir=tmp_path / f"fw-{k}"))
             for k in KERNEL_SETS}
    portable, dsp = sizes["portable"], sizes["dsp"]
    # up to a few bytes of alignment padding between functions, which no symbol owns
    assert abs(portable["flash_other_bytes"] - dsp["flash_other_bytes"]) <= 64
    assert portable["flash_weights_bytes"] == dsp["flash_weights_bytes"]
    assert dsp["flash_kernel_bytes"] > portable["flash_kernel_bytes"] > 0
