"""The scheduler's storage bytes (kilobyte/prune/storage.py) against FWCS and CSR arrays built here from a pruned OHWI
weight, as DTMM's Fig. 5 lays them out: Arr (kept weights by filter, then position), cPtr (16-bit, one per kept
filterlet — or per kept weight for CSR), fIdx (16-bit, one per filter plus the sentinel) — and against the encoders of
ops/sparse.py, whose byte rule they share."""

from __future__ import annotations

import numpy as np

from kilobyte.ops.sparse import encode_csr, encode_fwcs
from kilobyte.prune.layers import ConvLayer
from kilobyte.prune.storage import PER_CHANNEL_BYTES, dense_bytes, fwcs_bytes


def fwcs_arrays(w: np.ndarray):
    """(Arr int8, cPtr uint16, fIdx uint16) of an OHWI weight whose pruned filterlets are all zero."""
    n, kh, kw, c = w.shape
    arr, cptr, fidx = [], [], [0]
    for o in range(n):
        for h in range(kh):
            for x in range(kw):
                if w[o, h, x].any():
                    arr.extend(w[o, h, x])
                    cptr.append((h * kw + x) * c)
        fidx.append(len(cptr))
    return np.array(arr, np.int8), np.array(cptr, np.uint16), np.array(fidx, np.uint16)


def csr_arrays(w: np.ndarray):
    n = w.shape[0]
    flat = w.reshape(n, -1)
    arr = flat[flat != 0]
    cptr = np.concatenate([np.flatnonzero(f) for f in flat]).astype(np.uint16)
    fidx = np.concatenate([[0], np.cumsum((flat != 0).sum(1))]).astype(np.uint16)
    return arr.astype(np.int8), cptr, fidx


def pruned_weight(seed: int, shape=(6, 3, 3, 5), ratio=0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 127, shape).astype(np.int8)  # no accidental zeros
    n, kh, kw, _ = shape
    gone = rng.permutation(n * kh * kw)[:round(ratio * n * kh * kw)]
    w.reshape(n * kh * kw, -1)[gone] = 0
    return w


def test_fwcs_bytes_equal_the_arrays_built_from_a_weight():
    for seed in range(5):
        w = pruned_weight(seed)
        layer = ConvLayer("c", 6, 5, 3, 3, 4, 4)
        arr, cptr, fidx = fwcs_arrays(w)
        b = fwcs_bytes(layer, len(cptr))
        assert b.weight_bytes == arr.nbytes == 5 * len(cptr)
        assert b.index_bytes == cptr.nbytes + fidx.nbytes
        assert b.other_bytes == PER_CHANNEL_BYTES * 6 == 72
        enc = encode_fwcs(w)
        assert (b.weight_bytes, b.index_bytes) == (enc.weight_bytes, enc.index_bytes)


def test_csr_bytes_equal_the_arrays_and_fwcs_is_smaller():
    w = pruned_weight(7, shape=(8, 3, 3, 16), ratio=0.75)
    layer = ConvLayer("c", 8, 16, 3, 3, 4, 4)
    arr, cptr, fidx = csr_arrays(w)
    b = encode_csr(w)
    assert (b.weight_bytes, b.index_bytes) == (arr.nbytes, cptr.nbytes + fidx.nbytes)
    kept_filterlets = len(arr) // 16
    fwcs = fwcs_bytes(layer, kept_filterlets)
    # derived from Eq. 4: ≈ 3 B per kept weight (CSR) vs 1 + 2/C (FWCS): at C = 16 the index+weights are ≥ 62 % less
    saving = 1 - (fwcs.weight_bytes + fwcs.index_bytes) / (b.weight_bytes + b.index_bytes)
    assert saving > 0.6


def test_dense_bytes():
    layer = ConvLayer("c", 4, 3, 3, 3, 4, 4)
    assert dense_bytes(layer).total == 4 * 27 + 4 * 12
