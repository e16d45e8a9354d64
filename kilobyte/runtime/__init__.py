"""Codegen stage, C runtime: the hand-written portable C99 int8 kernels in `runtime/c/`, and host helpers.

The kernels (one family per file: `kb_conv.c`, `kb_depthwise.c`, ...; structs and prototypes in `kilobyte.h`; the
fixed-point requantisation in `kb_requant.h`; the int8 dot product of conv and FC in `kb_dot.h`) compute TFLite's int8
reference arithmetic bit for bit. The code generator copies in the headers (`HEADERS`) and the files a model uses
(`sources_for`); this module also builds them into a shared library with
gcc (`build_shared`, strict warnings, optionally under AddressSanitizer/UBSan) and loads it with ctypes (`load`),
with `ctypes.Structure` mirrors of the parameter structs, so tests and the verifier can call kernels from Python.

>>> [p.name for p in sources_for(["conv", "add"])]
['kb_conv.c', 'kb_add.c']
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import KilobyteError

C_DIR = Path(__file__).resolve().parent / "c"
ARM_DIR = C_DIR / "arm"  # the Cortex-M DSP kernels: same-named files that replace portable ones (TFLM's cmsis_nn/)
MVE_DIR = C_DIR / "mve"  # the Cortex-M55 Helium kernels: same-named files that replace DSP or portable ones
HEADERS = ("kilobyte.h", "kb_requant.h", "kb_dot.h")
# Kernel family -> the one source file implementing it.
KERNEL_FILES = {
    "conv": "kb_conv.c",
    "depthwise": "kb_depthwise.c",
    "fc": "kb_fc.c",
    "add": "kb_add.c",
    "pool": "kb_pool.c",
    "mean": "kb_mean.c",
    "concat": "kb_concat.c",
    "pad": "kb_pad.c",
    "quantize": "kb_quantize.c",
    "conv_add": "kb_conv_add.c",
    "softmax": "kb_softmax.c",
    "elementwise": "kb_elementwise.c",
    "lut": "kb_lut.c",
    "movement": "kb_movement.c",
    "resize": "kb_resize.c",
    "transpose_conv": "kb_transpose_conv.c",
    "sparse_conv": "kb_sparse_conv.c",
    "float_tail": "kb_float_tail.c",
    "detect": "kb_detect.c",
}
CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g")


def sources_for(families: Iterable[str] | None = None) -> list[Path]:
    """The `.c` files of the given kernel families (all of them when None), in the order asked."""
    names = list(KERNEL_FILES) if families is None else list(families)
    unknown = [n for n in names if n not in KERNEL_FILES]
    if unknown:
        raise KilobyteError(f"runtime: no kernel family {unknown}; known: {sorted(KERNEL_FILES)}")
    return [C_DIR / KERNEL_FILES[n] for n in names]


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def include_closure(source: Path, include_dir: Path) -> list[Path]:
    """`source` and the quoted headers it includes, transitively, each found next to the file that includes it or
    in `include_dir` (a header found nowhere, e.g. a system one, is left out)."""
    seen, todo = [source], [source]
    while todo:
        current = todo.pop()
        for name in _INCLUDE.findall(current.read_text()):
            header = next((d / name for d in (current.parent, include_dir) if (d / name).is_file()), None)
            if header is not None and header not in seen:
                seen.append(header)
                todo.append(header)
    return seen


def assembly_for(chosen: Sequence[Path], arm_dir: Path = ARM_DIR) -> list[Path]:
    """arm_dir's X.S files whose header X.h is included by a chosen .c file, directly or through chosen headers
    (e.g. kb_arm_wide.S, declared by kb_arm_wide.h, which arm/kb_conv.c includes and arm/kb_fc.c does not)."""
    by_name = {p.name: p for p in chosen}
    todo, seen = [p for p in chosen if p.suffix == ".c"], set()
    while todo:
        for name in _INCLUDE.findall(todo.pop().read_text()):
            if name in by_name and name not in seen:
                seen.add(name)
                todo.append(by_name[name])
    return [s for s in sorted(arm_dir.glob("*.S")) if s.with_suffix(".h").name in seen]


def arm_files(names: Iterable[str]) -> list[Path]:
    """The Arm (DSP) build of the runtime files `names` ("kb_conv.c", ...): the arm/ replacement of each that has
    one, every arm/ header, and the arm/ assembly those files need; the files without a replacement are not listed.

    >>> [p.name for p in arm_files(["kb_fc.c", "kb_pool.c"])]  # doctest: +NORMALIZE_WHITESPACE
    ['kb_fc.c', 'kb_arm_asm.h', 'kb_arm_dot.h', 'kb_arm_dw3.h', 'kb_arm_dwg.h', 'kb_arm_fc4.h', 'kb_arm_requant.h',
     'kb_arm_simd.h', 'kb_arm_wide.h', 'kb_arm_widen.h', 'kb_arm_window.h', 'kb_arm_fc4.S']
    """
    swapped = [ARM_DIR / n for n in names if (ARM_DIR / n).is_file()]
    chosen = swapped + sorted(ARM_DIR.glob("*.h"))
    return chosen + assembly_for(chosen)


def build_shared(sources: Sequence[str | Path], out: str | Path, extra_flags: Sequence[str] = (), *,
                 sanitize: bool = False, cc: str = "gcc") -> Path:
    """Compile `sources` (with `runtime/c` on the include path) into the shared library `out`; return its path.

    Flags: `CFLAGS` (C99, -O2, -Wall -Wextra -Werror), plus `SANITIZE_FLAGS` with `sanitize`, plus `extra_flags`.
    A library built with `sanitize` can only be loaded by a process that has libasan preloaded (`sanitizer_env`).
    """
    if shutil.which(cc) is None:
        raise KilobyteError(f"runtime: C compiler '{cc}' not found; install gcc or pass cc=")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    flags = [*CFLAGS, *(SANITIZE_FLAGS if sanitize else ()), *extra_flags, f"-I{C_DIR}"]
    cmd = [cc, *flags, *(str(s) for s in sources), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise KilobyteError(f"runtime: building {out.name} failed:\n{' '.join(cmd)}\n{res.stderr.strip()}")
    return out


def build_cached(sources: Sequence[str | Path], cache_dir: str | Path, extra_flags: Sequence[str] = (), *,
                 sanitize: bool = False) -> Path:
    """`build_shared` into `cache_dir`, named by a hash of the sources, headers and flags: rebuilt only on change."""
    h = hashlib.sha256(repr((sorted(map(str, sources)), tuple(extra_flags), sanitize)).encode())
    for path in [*map(Path, sources), *(C_DIR / n for n in HEADERS)]:
        h.update(path.read_bytes())
    out = Path(cache_dir) / f"libkb_{'san_' if sanitize else ''}{h.hexdigest()[:16]}.so"
    return out if out.exists() else build_shared(sources, out, extra_flags, sanitize=sanitize)


def sanitizer_env(cc: str = "gcc") -> dict[str, str]:
    """Environment entries a Python process needs to load a `sanitize=True` library (libasan first, no leak check)."""
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return {"LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


# -- ctypes mirrors of kilobyte.h --------------------------------------------------------------------------------------
def _struct(name: str, fields: str) -> type[ctypes.Structure]:
    return type(name, (ctypes.Structure,), {"_fields_": [(f, ctypes.c_int32) for f in fields.split()]})


ConvParams = _struct("ConvParams", """in_h in_w in_c in_cstride out_h out_w out_c out_cstride k_h k_w
    stride_h stride_w dil_h dil_w pad_t pad_b pad_l pad_r in_offset out_offset act_min act_max in_row out_row
    scratch_bytes in_consumed""")
FcParams = _struct("FcParams", "in_n out_n in_offset out_offset act_min act_max")
AddParams = _struct("AddParams", """pixels c in1_cstride in2_cstride out_cstride in1_offset in2_offset left_shift
    in1_mult in1_shift in2_mult in2_shift out_mult out_shift out_offset act_min act_max""")
MulParams = _struct("MulParams", """pixels c in1_cstride in2_cstride out_cstride in1_offset in2_offset out_mult
    out_shift out_offset act_min act_max""")
MinMaxParams = _struct("MinMaxParams", "pixels c in1_cstride in2_cstride out_cstride")
ConstParams = _struct("ConstParams", """rows cols c in_row in_col in_c k_row k_col k_c out_row out_col in_offset
    left_shift in_mult in_shift neg out_mult out_shift out_offset act_min act_max""")
PadParams = _struct("PadParams", """in_h in_w in_c in_cstride pad_t pad_b pad_l pad_r pad_c0 pad_c1 out_cstride
    value in_row out_row""")
MeanParams = _struct("MeanParams", "outer reduce inner c in_cstride out_cstride sum_offset mult shift out_offset")
SoftmaxParams = _struct("SoftmaxParams", """rows depth input_multiplier input_left_shift diff_min
    reverse_scaling_divisor reverse_scaling_right_shift""")
RequantizeParams = _struct("RequantizeParams", "n in_offset out_offset mult shift")
ResizeParams = _struct("ResizeParams", "in_w c in_cstride out_h out_w out_cstride")


class StridesParams(ctypes.Structure):
    """kb_strides_params: four loop axes (dims, input and output byte steps) and the first input byte."""

    _fields_ = [("dims", ctypes.c_int32 * 4), ("in_step", ctypes.c_int32 * 4), ("out_step", ctypes.c_int32 * 4),
                ("in_start", ctypes.c_int32)]

class DetectHead(ctypes.Structure):
    """kb_detect_head: one detector head's int8 map, geometry, anchors (1/16 pixel) and tables."""

    _fields_ = [("data", ctypes.POINTER(ctypes.c_int8)), ("h", ctypes.c_int32), ("w", ctypes.c_int32),
                ("stride", ctypes.c_int32), ("anchors", ctypes.c_int32),
                ("anchor_wh", ctypes.POINTER(ctypes.c_int16)), ("sigmoid", ctypes.POINTER(ctypes.c_uint16)),
                ("exp", ctypes.POINTER(ctypes.c_uint32))]


DetectParams = _struct("DetectParams", "classes image_w image_h score_min iou_max")


class Detection(ctypes.Structure):
    """kb_detection: a box in 1/16 pixel, its Q15 score and class (`ops.detect_post.DETECTION_DTYPE`)."""

    _fields_ = [(f, ctypes.c_int16) for f in ("x_min", "y_min", "x_max", "y_max", "score", "cls")]


STRUCTS = {"kb_conv_params": ConvParams, "kb_fc_params": FcParams, "kb_add_params": AddParams,
           "kb_pad_params": PadParams, "kb_mean_params": MeanParams, "kb_softmax_params": SoftmaxParams,
           "kb_requantize_params": RequantizeParams, "kb_mul_params": MulParams, "kb_minmax_params": MinMaxParams,
           "kb_const_params": ConstParams, "kb_strides_params": StridesParams, "kb_resize_params": ResizeParams,
           "kb_detect_head": DetectHead, "kb_detect_params": DetectParams, "kb_detection": Detection}

_I8, _I32, _F32 = ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)
_I16, _U16 = ctypes.POINTER(ctypes.c_int16), ctypes.POINTER(ctypes.c_uint16)
_conv = ctypes.POINTER(ConvParams)
_WEIGHTED = [_I8, _I8, _I32, _I32, _I32, _I8]  # in, w, bias, mult, shift, out
SIGNATURES = {
    "kb_conv": [_conv, *_WEIGHTED, _I8],
    "kb_conv_1x1": [_conv, *_WEIGHTED, _I8],
    "kb_conv_3x3": [_conv, *_WEIGHTED, _I8],
    "kb_depthwise": [_conv, *_WEIGHTED],
    "kb_depthwise_3x3": [_conv, *_WEIGHTED, _I8],
    "kb_depthwise_inplace": [_conv, *_WEIGHTED, _I8],
    "kb_depthwise_inplace_3x3": [_conv, *_WEIGHTED, _I8],
    "kb_depthwise_inplace_5x5": [_conv, *_WEIGHTED, _I8],
    "kb_depthwise_inplace_7x7": [_conv, *_WEIGHTED, _I8],
    "kb_fully_connected": [ctypes.POINTER(FcParams), *_WEIGHTED],
    "kb_add": [ctypes.POINTER(AddParams), _I8, _I8, _I8],
    "kb_sub": [ctypes.POINTER(AddParams), _I8, _I8, _I8],
    "kb_mul": [ctypes.POINTER(MulParams), _I8, _I8, _I8],
    "kb_add_const": [ctypes.POINTER(ConstParams), _I8, _I32, _I8],
    "kb_mul_const": [ctypes.POINTER(ConstParams), _I8, _I32, _I8],
    "kb_maximum": [ctypes.POINTER(MinMaxParams), _I8, _I8, _I8],
    "kb_minimum": [ctypes.POINTER(MinMaxParams), _I8, _I8, _I8],
    "kb_avg_pool": [_conv, _I8, _I8],
    "kb_max_pool": [_conv, _I8, _I8],
    "kb_mean": [ctypes.POINTER(MeanParams), _I8, _I8],
    "kb_copy_channels": [ctypes.c_int32, ctypes.c_int32, _I8, ctypes.c_int32, _I8, ctypes.c_int32],
    "kb_pad": [ctypes.POINTER(PadParams), _I8, _I8],
    "kb_quantize": [ctypes.c_int32, _F32, ctypes.c_float, ctypes.c_int32, _I8],
    "kb_dequantize": [ctypes.c_int32, _I8, ctypes.c_float, ctypes.c_int32, _F32],
    "kb_argmax_i8": [ctypes.c_int32, _I8],
    "kb_requantize_u8_i8": [ctypes.POINTER(RequantizeParams), ctypes.c_void_p, _I8],
    "kb_requantize_i8_u8": [ctypes.POINTER(RequantizeParams), _I8, ctypes.c_void_p],
    "kb_conv_1x1_add": [_conv, _I8, _I8, _I32, _I32, _I32, ctypes.POINTER(AddParams), _I8],
    "kb_softmax": [ctypes.POINTER(SoftmaxParams), _I8, _I8],
    "kb_log_softmax": [ctypes.POINTER(SoftmaxParams), _I8, _I8],
    "kb_lut": [ctypes.c_int32, ctypes.c_int32, _I8, _I8, ctypes.c_int32, _I8, ctypes.c_int32],
    "kb_strided_copy": [ctypes.POINTER(StridesParams), _I8, _I8],
    "kb_reduce_max": [ctypes.POINTER(StridesParams), _I8, _I8],
    "kb_transpose_conv": [_conv, *_WEIGHTED],
    "kb_conv_fwcs": [_conv, _I8, _I8, _U16, _U16, _I32, _I32, _I32, _I8, _I8],
    "kb_conv_csr": [_conv, _I8, _I8, _U16, _U16, _I32, _I32, _I32, _I8, _I8],
    "kb_resize_nearest": [ctypes.POINTER(ResizeParams), _I16, _I8, _I8],
    "kb_resize_bilinear": [ctypes.POINTER(ResizeParams), _I16, _I8, _I8],
    "kb_quantize_u8": [ctypes.c_int32, _F32, ctypes.c_float, ctypes.c_int32, ctypes.c_void_p],
    "kb_dequantize_u8": [ctypes.c_int32, ctypes.c_void_p, ctypes.c_float, ctypes.c_int32, _F32],
    "kb_argmax_u8": [ctypes.c_int32, ctypes.c_void_p],
    "kb_softmax_f32": [ctypes.c_int32, ctypes.c_int32, ctypes.c_float, _F32],
    "kb_log_softmax_f32": [ctypes.c_int32, ctypes.c_int32, _F32],
    "kb_logistic_f32": [ctypes.c_int32, _F32],
    "kb_add_const_f32": [ctypes.c_int32, _F32, _F32, ctypes.c_int32, ctypes.c_int32, ctypes.c_float, ctypes.c_float],
    "kb_mul_const_f32": [ctypes.c_int32, _F32, _F32, ctypes.c_int32, ctypes.c_int32, ctypes.c_float, ctypes.c_float],
    "kb_detect": [ctypes.POINTER(DetectParams), ctypes.POINTER(DetectHead), ctypes.c_int32, ctypes.POINTER(Detection),
                  ctypes.c_int32, ctypes.POINTER(Detection), ctypes.c_int32],
}

RESTYPES = {"kb_argmax_i8": ctypes.c_int32, "kb_argmax_u8": ctypes.c_int32,  # every other kernel returns void
            "kb_detect": ctypes.c_int32}


def load(path: str | Path) -> ctypes.CDLL:
    """Load a built runtime library and declare the argument types of every kernel it contains."""
    lib = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = argtypes, RESTYPES.get(name)
    return lib


__all__ = ["ARM_DIR", "MVE_DIR", "AddParams", "CFLAGS", "C_DIR", "ConstParams", "ConvParams", "DetectHead",
           "DetectParams", "Detection", "FcParams", "HEADERS",
           "KERNEL_FILES", "MeanParams", "MinMaxParams", "MulParams", "PadParams", "RESTYPES", "RequantizeParams",
           "ResizeParams", "SANITIZE_FLAGS", "SIGNATURES", "STRUCTS", "SoftmaxParams", "StridesParams", "arm_files",
           "assembly_for", "build_cached", "build_shared", "load", "sanitizer_env", "sources_for"]
