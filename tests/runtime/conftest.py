"""Fixtures for the C runtime tests: all kernels (plus a tiny shim exposing the inline requant helpers) built once
per session into a tmp dir — plainly, or under ASan/UBSan when `test_suite_under_sanitizers` reruns the tests in a
subprocess with libasan preloaded and KB_RUNTIME_SANITIZE=1."""

import ctypes
import os

import pytest

from kilobyte.runtime import build_cached, load, sources_for

SANITIZE = os.environ.get("KB_RUNTIME_SANITIZE") == "1"

# The requant helpers are `static inline`: this shim applies them elementwise so Python can test them directly.
REQUANT_SHIM = r"""
#include "kb_requant.h"
void kbt_requant(int32_t n, const int32_t *x, const int32_t *b, const int32_t *e, const int32_t *s,
                 int32_t *srdhm, int32_t *rdbpot, int32_t *mbqm)
{
    for (int32_t i = 0; i < n; ++i) {
        srdhm[i] = kb_sat_rounding_doubling_high_mul(x[i], b[i]);
        rdbpot[i] = kb_rounding_divide_by_pot(x[i], (int)e[i]);
        mbqm[i] = kb_multiply_by_quantized_multiplier(x[i], b[i], (int)s[i]);
    }
}
"""


@pytest.fixture(scope="session")
def kb_lib(tmp_path_factory):
    cache = tmp_path_factory.mktemp("kb_runtime")
    shim = cache / "kbt_requant_shim.c"
    shim.write_text(REQUANT_SHIM)
    lib = load(build_cached([*sources_for(), shim], cache, sanitize=SANITIZE))
    i32 = ctypes.POINTER(ctypes.c_int32)
    lib.kbt_requant.argtypes = [ctypes.c_int32, *[i32] * 7]
    lib.kbt_requant.restype = None
    return lib
