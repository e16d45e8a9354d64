"""Kernels stage: the questions the planner asks of the kernel contracts (each op's, in its `OpDef`: `kilobyte.ops`).

Scratch, as the runtime's kernels read it (bytes; scratch lives in the arena at its step only):
- CONV_2D, portable kernels: none (they read each window straight from the NHWC input).
- CONV_2D, DSP kernels with at least `KB_COLS_MIN_OUT_C` output channels: im2col columns of `kh*kw*Cin` int16
  values. A conv with a window larger than 1x1 is planned two columns per layer (`4*kh*kw*Cin` bytes; without them
  it falls back to direct convolution); from bytes free anyway the planner grants up to `WIDE_COLUMNS` (the kernel
  reads at most that many) or, for 1x1 convs, two, each of whole groups of four values (`wide_column_bytes`: the
  wide path pads a window of kh*kw*Cin % 4 != 0 values with zeros). With fewer output channels the DSP conv never
  widens columns (`KB_COLS_MIN_OUT_C` in `runtime/c/arm/`), so it is planned none; with scratch or not, it may keep
  columns in its own output's unwritten part and in consumed input rows (kilobyte.h, kb_conv).
- CONV_2D, Helium kernels (mve), whatever the output channels: three int8 im2col columns of `kh*kw*Cin` values
  (none for a 1x1 window without padding, read in place), rounded up to a word, then one int32 per output channel
  (the bias with the input offset folded in, computed once per call): `mve_conv_scratch_bytes`. Without it the
  kernel runs a slower direct path. No columns are granted beyond it (the DSP 1x1 conv + ADD the set keeps then
  takes its pair path).
- CONV_2D with a sparse weight format (FWCS, CSR; `ops/sparse.py`), both sets: two im2col windows of 2-byte values,
  `4 * ceil4(kh*kw*Cin)` bytes, and 36 bytes per output channel (`KB_SPARSE_SCRATCH`), always (the DSP kernels widen
  two pixels' windows into them and prepare each channel's requantisation, the portable ones gather one int8
  window); never more, and never a patch stage: a sparse conv runs per layer.
- DEPTHWISE_CONV_2D in place (TinyEngine): one zero-padded input channel, `(H+pt+pb)*(W+pl+pr)` bytes, both sets.
  A DSP 3x3 one with stride 1 or 2 runs four channels at a time through a ring of three widened window rows
  (`depthwise_ring_bytes`: `24*(W+pl+pr)`) where its scratch holds one: the planner grants the ring from bytes free
  anyway where the padded channel is smaller (`extra_ring`), else the kernel runs channel by channel. Out of place
  (`kb_depthwise_3x3`) the same ring is granted from free bytes, else it reads the input directly. The Helium
  kernels (mve) run a 3x3 stride-1 or -2 conv four channels at a time through a ring of three int8 rows (or
  columns on tall maps: `mve_ring_bytes`, `12*max(W+pl+pr, H+pt+pb)`), granted the same way, in place and out of
  place; without it out of place they read the input directly.
- TRANSPOSE_CONV: none. TFLite Micro scatters into an int32 copy of the whole output (4 bytes per output value of
  arena); `kb_transpose_conv` gathers per output pixel instead, with the same sums.
- Everything else streams: none.

TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX (family `movement`) are not spatially local: an output pixel of a
transpose or slice comes from elsewhere in the map (a strided slice's patch of output reads a strided, not a
contiguous, input box; a transpose may swap H or W with C), so a patch stage ends before them. None runs in place:
their output overlaps their input only when it is a copy, and RESHAPE covers that.
"""

from __future__ import annotations

from ..errors import KilobyteError
from ..ir import Graph, Node, Op
from ..ops import opdef
from ..ops.binary import CONST_STRUCT, constant_operand
from ..ops.contract import InPlaceRule, KernelContract
from ..ops.conv_kernels import (
    IM2COL_COLUMNS,
    column_bytes,
    depthwise_ring_bytes,
    is_sparse,
    mve_conv_scratch_bytes,
    mve_ring_bytes,
    sparse_scratch_bytes,
    wide_column_bytes,
)

KERNEL_SETS = ("portable", "dsp", "mve")
# Kernel sets built on the Cortex-M DSP kernels (runtime/c/arm/): "mve" is them with runtime/c/mve/'s Cortex-M55
# Helium files swapped in where one exists, so it plans the DSP set's scratch.
DSP_BASED = ("dsp", "mve")
MVE_CORES = ("cortex-m55",)  # the cores with Helium: the only ones that build the "mve" set
NO_DSP_CORES = ("cortex-m0plus",)  # ARMv6-M: no DSP extension (SMLAD), so the portable kernels only


def kernel_sets(core: str) -> tuple[str, ...]:
    """The kernel sets firmware for `core` can be built with: portable everywhere, DSP where the core has the DSP
    extension, mve on Helium cores.

    >>> kernel_sets("cortex-m4"), kernel_sets("cortex-m55"), kernel_sets("cortex-m0plus")
    (('portable', 'dsp'), ('portable', 'dsp', 'mve'), ('portable',))
    """
    if core in NO_DSP_CORES:
        return ("portable",)
    return KERNEL_SETS if core in MVE_CORES else tuple(k for k in KERNEL_SETS if k != "mve")
KB_COLS_MIN_OUT_C = 16  # runtime/c/arm: below this many output channels the DSP conv never widens columns
WIDE_COLUMNS = 6  # the most columns the DSP conv reads


def contract_for(node: Node) -> KernelContract:
    """The contract of `node`'s op (every `Op` has one, in its `OpDef`)."""
    return opdef(node.op).contract


def check_kernel_set(kernels: str) -> str:
    if kernels not in KERNEL_SETS:
        raise KilobyteError(f"unknown kernel set {kernels!r}: choose " + ", ".join(f"'{k}'" for k in KERNEL_SETS))
    return kernels


# -- scratch (what a conv reads: `ops/conv_kernels.py`) ------------------------------------------------------------
def is_local(node: Node) -> bool:
    """Whether `node` may run inside a patch stage: its contract's `local`, and dense weights (a sparse conv runs
    per layer)."""
    return contract_for(node).local and not is_sparse(node)


def reads_columns(graph: Graph, node: Node, kernels: str) -> bool:
    """Whether `node`'s kernel in `kernels` reads im2col columns at all: the DSP conv with >= KB_COLS_MIN_OUT_C
    outputs, the Helium one (mve) always."""
    if kernels not in DSP_BASED or not contract_for(node).columns or is_sparse(node):
        return False
    return kernels == "mve" or graph.tensors[node.outputs[0]].shape[-1] >= KB_COLS_MIN_OUT_C


def layer_scratch(graph: Graph, node: Node, kernels: str) -> int:
    """Scratch bytes `node` reads per layer when it does not run in place (module docstring)."""
    if is_sparse(node):
        return sparse_scratch_bytes(graph, node)
    if kernels == "mve" and reads_columns(graph, node, kernels):
        return mve_conv_scratch_bytes(graph, node)
    if not reads_columns(graph, node, kernels) or graph.tensors[node.inputs[1]].shape[1:3] == (1, 1):
        return 0
    return IM2COL_COLUMNS * column_bytes(graph, node)


def extra_columns(graph: Graph, node: Node, kernels: str) -> tuple[int, int]:
    """(bytes of one column, the most columns the kernel reads) for scratch granted from free bytes — columns of the
    wide path, whole groups of four values (`wide_column_bytes`); (0, 0) when `node`'s kernel reads no columns."""
    if not reads_columns(graph, node, kernels) or kernels == "mve":  # the Helium conv reads exactly its layer scratch
        return 0, 0
    return wide_column_bytes(graph, node), WIDE_COLUMNS


def extra_ring(graph: Graph, node: Node, kernels: str, in_place: bool) -> int:
    """Bytes of the channel-group ring a depthwise conv's kernel in `kernels` reads when granted them (DSP 3x3,
    stride 1 or 2: `depthwise_ring_bytes`), else 0."""
    if kernels not in DSP_BASED or node.op is not Op.DEPTHWISE_CONV_2D:
        return 0
    if kernels == "mve":
        return mve_ring_bytes(graph, node, in_place)
    return depthwise_ring_bytes(graph, node, in_place)


def inplace_rule(graph: Graph, node: Node, options) -> InPlaceRule | None:
    """`node`'s in-place rule when `options` allow it (depthwise also needs depth multiplier 1)."""
    rule = contract_for(node).inplace
    if rule is None or not getattr(options, rule.option):
        return None
    if node.op is Op.DEPTHWISE_CONV_2D and node.attrs.depth_multiplier != 1:
        return None
    return rule


# -- C parameters ---------------------------------------------------------------------------------------------------
def node_struct(graph: Graph, node: Node) -> str | None:
    """The C parameter struct `node`'s layer fills: its contract's, or `kb_const_params` for a constant operand."""
    return CONST_STRUCT if constant_operand(graph, node) is not None else contract_for(node).struct
