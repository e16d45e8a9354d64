"""ops tests: the sparse weight layouts (kilobyte/ops/sparse.py) — FWCS and CSR encode, decode and byte counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sparse_nets import prune_filterlets

from kilobyte.analysis.macs import layer_weight_bytes
from kilobyte.errors import KilobyteError
from kilobyte.ops.sparse import decode, encode_csr, encode_fwcs, format_bytes


@st.composite
def pruned_weights(draw):
    cout, k, cin = draw(st.integers(1, 6)), draw(st.sampled_from((1, 3, 5))), draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = rng.integers(-128, 128, (cout, k, k, cin)).astype(np.int8)
    return prune_filterlets(rng, w, draw(st.floats(0, 1)), dead_filters=draw(st.integers(0, cout)))


@given(pruned_weights())
def test_round_trip_and_byte_counts(w):
    cout, kh, kw, cin = w.shape
    f, c = encode_fwcs(w), encode_csr(w)
    assert np.array_equal(decode(f), w) and np.array_equal(decode(c), w)
    kept = np.any(w.reshape(cout, kh * kw, cin) != 0, axis=2)
    assert f.weight_bytes == kept.sum() * cin and f.index_bytes == 2 * (kept.sum() + cout + 1)
    assert c.weight_bytes == np.count_nonzero(w) and c.index_bytes == 2 * (np.count_nonzero(w) + cout + 1)
    # the byte rule (fwcs_sizes / csr_sizes, which the pruning scheduler uses) is the arrays' real size
    assert (f.weight_bytes, f.index_bytes) == (f.arr.nbytes, f.cptr.nbytes + f.fidx.nbytes)
    assert (c.weight_bytes, c.index_bytes) == (c.arr.nbytes, c.idx.nbytes + c.fidx.nbytes)
    assert f.fidx[0] == 0 and np.all(np.diff(f.fidx.astype(int)) >= 0)  # a dead filter: fidx[n] == fidx[n + 1]
    assert np.all(f.cptr % cin == 0) and np.all(f.cptr < kh * kw * cin)


def test_fully_pruned_filter_and_layer():
    w = np.zeros((3, 3, 3, 4), np.int8)
    w[1, 2, 0, 3] = 5
    f = encode_fwcs(w)
    assert f.fidx.tolist() == [0, 0, 1, 1] and f.cptr.tolist() == [24] and f.arr.tolist() == [0, 0, 0, 5]
    assert encode_csr(np.zeros_like(w)).weight_bytes == 0 and np.array_equal(decode(encode_fwcs(np.zeros_like(w))),
                                                                               np.zeros_like(w))


def test_fwcs_beats_csr_at_90_percent_filterlet_sparsity():
    """DTMM Eq. 4 with 16-bit indices: CSR ~3 B per kept weight, FWCS ~1 + 2/C; at C = 32, 90 %: FWCS < half."""
    w = prune_filterlets(np.random.default_rng(0), np.ones((64, 3, 3, 32), np.int8), 0.9, extra=0.0)
    (fw, fi), (cw, ci) = format_bytes(w, "fwcs"), format_bytes(w, "csr")
    assert (fw + fi) < 0.4 * (cw + ci)


def test_bad_input_is_one_line():
    with pytest.raises(KilobyteError, match="int8 OHWI"):
        encode_fwcs(np.zeros((2, 3, 3), np.int8))
    with pytest.raises(KilobyteError, match="16-bit"):
        encode_csr(np.ones((2, 1, 1, 40000), np.int8))  # 80000 kept weights overflow fidx
    with pytest.raises(KilobyteError, match="16-bit offsets"):
        encode_fwcs(np.ones((1, 1, 1, 70000), np.int8))
    with pytest.raises(KilobyteError, match="unknown sparse"):
        format_bytes(np.ones((1, 1, 1, 1), np.int8), "coo")


def test_layer_weight_bytes_reports_each_layer():
    from sparse_nets import case_graph

    g, _ = case_graph(0, "fwcs")
    (row,) = layer_weight_bytes(g).values()
    w = g.tensors[g.nodes[0].inputs[1]].data
    assert row["format"] == "fwcs" and (row["weight_bytes"], row["index_bytes"]) == format_bytes(w, "fwcs")
    assert row["sparsity"] == pytest.approx(float((w == 0).mean()))
