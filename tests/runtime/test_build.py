"""Runtime stage tests of the build side (kilobyte/runtime/__init__.py): struct mirrors, self-contained kernel files
(host gcc and arm-none-eabi-gcc), and test_kernels.py / test_softmax_kernel.py / test_lut_kernel.py /
test_movement_kernel.py / test_upsample_kernel.py rerun against an ASan/UBSan build of the kernels."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kilobyte.runtime as rt
from kilobyte.errors import KilobyteError

SANITIZE = os.environ.get("KB_RUNTIME_SANITIZE") == "1"
M4 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]


C_FIELD_TYPES = {"int32_t": ctypes.c_int32, "int16_t": ctypes.c_int16, "const int8_t *": ctypes.POINTER(ctypes.c_int8),
                 "const int16_t *": ctypes.POINTER(ctypes.c_int16), "const uint16_t *": ctypes.POINTER(ctypes.c_uint16),
                 "const uint32_t *": ctypes.POINTER(ctypes.c_uint32)}


def test_structs_match_header():
    """The ctypes mirrors list the same fields with the same types (an array: of its element type), in the same
    order, as kilobyte.h."""
    text = re.sub(r"/\*.*?\*/", "", (rt.C_DIR / "kilobyte.h").read_text(), flags=re.S)
    structs = {name: body for body, name in re.findall(r"typedef struct \{(.*?)\} (\w+);", text, re.S)}
    assert set(structs) == set(rt.STRUCTS)
    for name, body in structs.items():
        fields = []
        for decl in (d.strip() for d in body.split(";") if d.strip()):
            ctype, names = re.fullmatch(r"((?:const )?\w+ \*?)\s*(.*)", decl).groups()
            fields += [(re.sub(r"\[\d+\]$", "", f.strip()), C_FIELD_TYPES[ctype.strip()]) for f in names.split(",")]
        mirror = [(f, getattr(t, "_type_", t) if issubclass(t, ctypes.Array) else t)
                  for f, t in rt.STRUCTS[name]._fields_]
        assert fields == mirror, name


def test_every_prototype_has_a_signature():
    text = (rt.C_DIR / "kilobyte.h").read_text()
    declared = set(re.findall(r"^(?:void|int32_t) (kb_\w+)\(", text, re.M))  # kb_argmax_i8: int32_t
    for names in re.findall(r"^kb_conv_kernel (kb_\w+(?:, kb_\w+)*);", text, re.M):  # the shared conv signature
        declared |= set(names.split(", "))
    assert declared == set(rt.SIGNATURES)


@pytest.mark.parametrize("cc", ["gcc", "arm-none-eabi-gcc"])
def test_each_kernel_file_compiles_alone(cc, tmp_path):
    """Codegen copies in only the files a model uses: each must build alone, including only string/stdint/stddef
    (and math.h for the float tail's expf / logf)."""
    if shutil.which(cc) is None and not os.environ.get("CI"):  # never skipped on CI: fail there
        pytest.skip(f"{cc} not installed")
    assert shutil.which(cc), f"{cc} not installed (CI is set: the kernel files must be built for both compilers)"
    for src in rt.sources_for():
        text = src.read_text()
        libm = {"math.h"} if src.name == "kb_float_tail.c" else set()  # expf / logf of a float tail, nothing else
        assert set(re.findall(r'#include [<"]([\w.]+)[>"]', text)) <= {
            "string.h", "stdint.h", "stddef.h", "kilobyte.h", "kb_requant.h", "kb_dot.h", *libm}, src.name
        assert "malloc" not in text, src.name
        cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-Wshadow",
               *(M4 if cc.startswith("arm") else []), f"-I{rt.C_DIR}", "-c", str(src), "-o", str(tmp_path / "k.o")]
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


def test_build_error_is_reported(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) { int unused; return 0; }\n")  # -Werror turns the warning into an error
    with pytest.raises(KilobyteError, match="bad"):
        rt.build_shared([bad], tmp_path / "bad.so")


@pytest.mark.skipif(SANITIZE, reason="already the sanitizer run")
def test_kernels_under_sanitizers():
    """Rerun the kernel tests against kernels built with -fsanitize=address,undefined (libasan preloaded)."""
    env = {**os.environ, **rt.sanitizer_env(), "KB_RUNTIME_SANITIZE": "1"}
    here = Path(__file__).parent
    files = [str(here / f) for f in ("test_kernels.py", "test_softmax_kernel.py", "test_lut_kernel.py",
                                     "test_movement_kernel.py", "test_upsample_kernel.py",
                                     "test_const_kernels.py")]
    cmd = [sys.executable, "-m", "pytest", *files, "-q", "-x", "-p", "no:cacheprovider"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=here.parents[1], timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert " passed" in res.stdout
