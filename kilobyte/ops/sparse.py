"""IR stage: the sparse weight layouts of a CONV_2D — DTMM's FWCS and the CSR baseline — from dense OHWI int8 weights.

A *filterlet* is the Cin contiguous weights of one output filter at one kernel position (kh, kw) of the OHWI layout:
`w[n, h, x, :]`. A layer has Cout * kh * kw of them. Both formats keep per filter the position order of OHWI:

- **FWCS** (DTMM, Fig. 5): `arr` the kept filterlets' int8 weights, filter after filter, position after position
  (Cin values each, zeros inside a kept filterlet included); `cptr` one uint16 per kept filterlet, the offset of its
  first weight within the filter, (h * kw + x) * Cin; `fidx` (Cout + 1) uint16, filter n's kept filterlets are
  `cptr[fidx[n]:fidx[n + 1]]` (the last entry is the sentinel); and Cin, which the kernel already has.
- **CSR** (PatDNN's baseline): `arr` the nonzero int8 weights; `idx` one uint16 per kept weight, its offset within
  the filter, (h * kw + x) * Cin + c; `fidx` (Cout + 1) uint16 into `arr`.

A filterlet is kept when any of its weights is nonzero; a fully pruned filter has fidx[n] == fidx[n + 1]. The byte
counts (`weight_bytes`, `index_bytes`) are the sizes of the arrays the generated C holds for the layer.

>>> import numpy as np
>>> w = np.zeros((2, 1, 2, 3), np.int8); w[0, 0, 1] = (1, 0, 2); w[1, 0, 0, 2] = -3
>>> f = encode_fwcs(w)
>>> f.arr.tolist(), f.cptr.tolist(), f.fidx.tolist()
([1, 0, 2, 0, 0, -3], [3, 0], [0, 1, 2])
>>> c = encode_csr(w)
>>> c.arr.tolist(), c.idx.tolist(), c.fidx.tolist()
([1, 2, -3], [3, 5, 2], [0, 2, 3])
>>> f.weight_bytes, f.index_bytes, c.weight_bytes, c.index_bytes
(6, 10, 3, 12)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KilobyteError

FORMATS = ("dense", "fwcs", "csr")
SPARSE_FORMATS = ("fwcs", "csr")
INDEX_BYTES = 2  # every index is uint16 (DTMM's m0 = 16 bits)
_U16_MAX = 0xFFFF


def fwcs_sizes(cout: int, cin: int, kept_filterlets: int) -> tuple[int, int]:
    """(weight_bytes, index_bytes) of FWCS for `cout` filters keeping `kept_filterlets` filterlets of `cin` weights:
    the byte rule every count of FWCS storage uses (the encoder's arrays, the pruning scheduler's Flash).

    >>> fwcs_sizes(8, 4, 36)  # 36 filterlets of 4 weights; 36 cptr + 8 fidx + the sentinel
    (144, 90)
    """
    return kept_filterlets * cin, INDEX_BYTES * (kept_filterlets + cout + 1)


def csr_sizes(cout: int, kept_weights: int) -> tuple[int, int]:
    """(weight_bytes, index_bytes) of CSR for `cout` filters keeping `kept_weights` weights.

    >>> csr_sizes(8, 144)
    (144, 306)
    """
    return kept_weights, INDEX_BYTES * (kept_weights + cout + 1)


@dataclass(frozen=True)
class Fwcs:
    """A layer's weights in FWCS (module docstring)."""

    arr: np.ndarray   # (kept filterlets * cin,) int8
    cptr: np.ndarray  # (kept filterlets,) uint16
    fidx: np.ndarray  # (cout + 1,) uint16
    shape: tuple[int, int, int, int]  # the dense OHWI shape

    @property
    def weight_bytes(self) -> int:
        return fwcs_sizes(self.shape[0], self.shape[3], int(self.cptr.size))[0]

    @property
    def index_bytes(self) -> int:
        return fwcs_sizes(self.shape[0], self.shape[3], int(self.cptr.size))[1]


@dataclass(frozen=True)
class Csr:
    """A layer's weights in CSR (module docstring)."""

    arr: np.ndarray   # (nonzeros,) int8
    idx: np.ndarray   # (nonzeros,) uint16
    fidx: np.ndarray  # (cout + 1,) uint16
    shape: tuple[int, int, int, int]

    @property
    def weight_bytes(self) -> int:
        return csr_sizes(self.shape[0], int(self.idx.size))[0]

    @property
    def index_bytes(self) -> int:
        return csr_sizes(self.shape[0], int(self.idx.size))[1]


def _check(w: np.ndarray, what: str) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 4 or w.dtype != np.int8:
        raise KilobyteError(f"{what}: needs int8 OHWI weights (Cout, kh, kw, Cin), got {w.dtype} {w.shape}")
    if w[0].size > _U16_MAX + 1:
        raise KilobyteError(f"{what}: a filter of {w[0].size} weights does not fit 16-bit offsets (at most 65536)")
    return w


def _fidx(counts: np.ndarray, what: str) -> np.ndarray:
    fidx = np.concatenate([[0], np.cumsum(counts)])
    if fidx[-1] > _U16_MAX:
        raise KilobyteError(f"{what}: {fidx[-1]} kept entries overflow the 16-bit filter index (at most 65535); "
                            "keep this layer dense")
    return fidx.astype(np.uint16)


def encode_fwcs(w: np.ndarray, what: str = "weights") -> Fwcs:
    """FWCS of dense OHWI int8 weights `w`."""
    w = _check(w, what)
    cout, kh, kw, cin = w.shape
    lets = w.reshape(cout, kh * kw, cin)
    kept = np.any(lets != 0, axis=2)  # (cout, kh * kw)
    n, pos = np.nonzero(kept)         # row-major: filter, then position
    return Fwcs(lets[n, pos].reshape(-1).astype(np.int8), (pos * cin).astype(np.uint16),
                _fidx(kept.sum(axis=1), what), (cout, kh, kw, cin))


def encode_csr(w: np.ndarray, what: str = "weights") -> Csr:
    """CSR of dense OHWI int8 weights `w`."""
    w = _check(w, what)
    flat = w.reshape(w.shape[0], -1)
    n, k = np.nonzero(flat)
    return Csr(flat[n, k].astype(np.int8), k.astype(np.uint16), _fidx((flat != 0).sum(axis=1), what),
               tuple(w.shape))


def decode(enc: Fwcs | Csr) -> np.ndarray:
    """The dense OHWI int8 weights of an encoding (`decode(encode_x(w)) == w`)."""
    cout, kh, kw, cin = enc.shape
    flat = np.zeros((cout, kh * kw * cin), np.int8)
    for n in range(cout):
        lo, hi = int(enc.fidx[n]), int(enc.fidx[n + 1])
        if isinstance(enc, Fwcs):
            for j in range(lo, hi):
                flat[n, int(enc.cptr[j]):int(enc.cptr[j]) + cin] = enc.arr[j * cin:(j + 1) * cin]
        else:
            flat[n, enc.idx[lo:hi].astype(np.int64)] = enc.arr[lo:hi]
    return flat.reshape(cout, kh, kw, cin)


def encode(w: np.ndarray, fmt: str, what: str = "weights") -> Fwcs | Csr:
    """`w` in sparse format `fmt` ("fwcs" or "csr")."""
    if fmt == "fwcs":
        return encode_fwcs(w, what)
    if fmt == "csr":
        return encode_csr(w, what)
    raise KilobyteError(f"{what}: unknown sparse weight format {fmt!r}: choose one of {SPARSE_FORMATS}")


def format_bytes(w: np.ndarray, fmt: str, what: str = "weights") -> tuple[int, int]:
    """(weight_bytes, index_bytes) of `w` stored in `fmt` ("dense": its int8 values and no index)."""
    if fmt == "dense":
        return int(np.asarray(w).size), 0
    enc = encode(w, fmt, what)
    return enc.weight_bytes, enc.index_bytes


def sparsity(w: np.ndarray) -> float:
    """Fraction of zero weights."""
    w = np.asarray(w)
    return float((w == 0).mean()) if w.size else 0.0
