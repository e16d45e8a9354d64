"""The one image resize of training, evaluation, calibration and the generated library.

A search that trains at a resolution other than the data's puts a RESIZE_BILINEAR (half-pixel centres, no
align_corners) at the front of the library it deploys, so the library takes the sensor's image. For the float
network to have learned on what the int8 library computes (up to quantisation), everything that resizes images for
it — the search's and the recipe's training, BN recalibration, float and int8 evaluation, PTQ calibration, `kilobyte
evaluate` — calls `resize_images` with that same semantics: TFLite's float RESIZE_BILINEAR with half_pixel_centers,
which is also PyTorch's `F.interpolate(mode="bilinear", align_corners=False)` (and `nn.Upsample` of that mode, which
the torch frontend lowers to exactly that op).

`mode="nearest"` (PyTorch's "nearest": source index floor(i · in / out), TFLite's nearest without flags) is only for
a user who asks for it (`kilobyte evaluate --resize nearest`).
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError

MODES = ("bilinear", "nearest")


def fit_to_input(x: np.ndarray, input_shape_nhwc: tuple[int, ...], spec: str, mode: str = "bilinear",
                 what: str = "the model's") -> np.ndarray:
    """NHWC images `x` made the shape of an input (1, H, W, C): resized (`resize_images`, `mode`) to a square input
    when the size differs, one channel repeated when the input has more; a one-line error naming dataset `spec` and
    `what` takes them ("the model's", "the library's") otherwise. (n, H, W, C) float32."""
    _, h, w, c = input_shape_nhwc
    if x.shape[3] != c and x.shape[3] != 1:
        raise KilobyteError(f"dataset '{spec}' has {x.shape[3]} channels, {what} input has {c}")
    if tuple(x.shape[1:3]) != (h, w):
        if h != w:
            raise KilobyteError(f"dataset '{spec}': cannot resize {x.shape[1]}x{x.shape[2]} images to {what} "
                                f"{h}x{w} input (only to a square one); resize them first")
        x = resize_images(x, h, mode)
    return np.repeat(x, c, axis=3) if x.shape[3] != c else x


def resize_images(x, size, mode: str = "bilinear"):
    """Images resized to `size` (an int for size×size, or (H, W)); unchanged when already that size or None.

    `x` is either NHWC numpy (float; returned as float32 NHWC numpy, torch not needed) or an NCHW torch tensor
    (returned as an NCHW tensor, for training batches). Both give the same numbers (up to float rounding)."""
    if mode not in MODES:
        raise ValueError(f"resize mode {mode!r}; one of {', '.join(MODES)}")
    if size is None:
        return x
    h, w = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if isinstance(x, np.ndarray):
        if tuple(x.shape[1:3]) == (h, w):
            return x
        return _resize_nhwc(x.astype(np.float32, copy=False), (h, w), mode)
    if tuple(x.shape[2:]) == (h, w):
        return x
    import torch.nn.functional as F

    if mode == "nearest":
        return F.interpolate(x, size=(h, w), mode="nearest")
    return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)


def _resize_nhwc(x: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """Separable resize of (N, H, W, C) float32 along H then W."""
    out = x
    for axis, n in ((1, size[0]), (2, size[1])):
        if out.shape[axis] == n:
            continue
        if mode == "nearest":
            out = np.take(out, np.arange(n) * out.shape[axis] // n, axis=axis)
            continue
        lo, hi, d = _bilinear_taps(out.shape[axis], n)
        d = d.reshape([-1 if a == axis else 1 for a in range(out.ndim)])
        out = np.take(out, lo, axis=axis) * (1 - d) + np.take(out, hi, axis=axis) * d
    return np.ascontiguousarray(out, dtype=np.float32)


def _bilinear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-pixel-centre source taps of each output row: (lower index, upper index, weight of the upper), with the
    source coordinate clamped at 0 as TFLite and PyTorch both do."""
    coord = np.maximum((np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5, 0.0)
    lo = np.floor(coord).astype(np.int64)
    hi = np.minimum(lo + 1, in_size - 1)
    return lo, hi, (coord - lo).astype(np.float32)
