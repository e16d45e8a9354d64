"""Tests for codegen/library.py, header.py and build_files.py: the generated library as firmware engineers use it.

- The header is the manifest: every macro and the invoke's parameters, parsed back from the text, equal
  `kilobyte.json`'s values (arena, shapes, dtypes, scales, zero points, offsets), and nothing else is defined.
- A prefix names every export: the host library's global symbols are exactly the manifest's "exports" plus runtime
  kb_* kernels; files and CMake target carry it; bad prefixes are one-line errors.
- The float helpers (inline, compiled into a test shim) give the int8 input `kilobyte run DIR --input x.npy` gives
  from the same float `.npy`, and the output and argmax that run gives; dequantize equals TFLite's DEQUANTIZE.
- `--arena-extern`: model.c leaves the arena undefined; the host harness defines it; results unchanged.
- Several outputs: one pointer each, named after the graph's outputs, written into separate buffers.
- `make TARGET=cortex-m4|m7|m55` builds a static library for that core with the DSP kernels; two such archives
  link into one image with one copy of each kernel.
Oracle: the numpy int8 reference (`run_int8`), and TFLite's QUANTIZE/DEQUANTIZE (`quant.arith`).
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kilobyte.cli import main as cli
from kilobyte.codegen import HostModel, LibraryOptions, compile_graph
from kilobyte.errors import KilobyteError
from kilobyte.interp import run_int8
from kilobyte.ir import ConvAttrs, FullyConnectedAttrs, GraphBuilder, Op, PoolAttrs, ReshapeAttrs
from kilobyte.ops.arith import dequantize_values, quantize_values
from kilobyte.quant import quantize
from kilobyte.targets.cortexm import have_tools

DEFINE = re.compile(r"^#define (\w+) (.+?)(?:\s+/\*.*)?$", re.M)


def _classifier():
    """conv -> pool -> flatten -> FC: a (1, 7) score vector."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("digits")
    x = b.input((1, 8, 8, 1))
    y = b.node(Op.CONV_2D, [x], ConvAttrs((1, 1), (1, 1, 1, 1)), params={"weight": rng.normal(0, .5, (6, 3, 3, 1))})
    y = b.node(Op.MAX_POOL_2D, [y], PoolAttrs((2, 2), (2, 2)))
    y = b.node(Op.RESHAPE, [y], ReshapeAttrs((1, 96)))
    g = b.build([b.node(Op.FULLY_CONNECTED, [y], FullyConnectedAttrs(), params={"weight": rng.normal(0, .2, (7, 96))})])
    return quantize(g, [rng.normal(0.3, 1, (1, 8, 8, 1)).astype(np.float32) for _ in range(4)])


def _two_heads():
    rng = np.random.default_rng(2)
    b = GraphBuilder("heads")
    f = b.node(Op.CONV_2D, [b.input((1, 8, 8, 3))], ConvAttrs((2, 2), (1, 1, 1, 1)),
               params={"weight": rng.normal(0, .5, (8, 3, 3, 3))})
    scores = b.node(Op.CONV_2D, [f], ConvAttrs((1, 1), (0, 0, 0, 0)),
                    params={"weight": rng.normal(0, .5, (3, 1, 1, 8))})
    boxes = b.node(Op.AVG_POOL_2D, [f], PoolAttrs((2, 2), (2, 2)))
    return quantize(b.build([scores, boxes]), [rng.normal(size=(1, 8, 8, 3)).astype(np.float32) for _ in range(4)])


def _macro_value(text: str):
    text = text.strip()
    if text.startswith("{"):
        return [int(v) for v in text.strip("{}").split(",")]
    return float(text[:-1]) if text.endswith("f") else int(text)


def _expected_macros(m: dict) -> dict:
    """Every macro the header must define, from the manifest alone."""
    u = m["prefix"].upper()
    want = {f"{u}_ARENA_BYTES": m["arena_bytes"], f"{u}_ARENA_ALIGN": m["arena_align"],
            f"{u}_MODEL_H": None, f"{u}_OUTPUT_COUNT": len(m["outputs"])}
    if m["arena_extern"]:
        want[f"{u}_ARENA_EXTERN"] = 1

    def tensor(name: str, t: dict, offset: bool) -> None:
        want.update({f"{name}_BYTES": int(np.prod(t["shape"])), f"{name}_RANK": len(t["shape"]),
                     f"{name}_SHAPE": t["shape"], f"{name}_SCALE": t["scale"], f"{name}_ZERO_POINT": t["zero_point"]})
        if offset:
            want[f"{name}_OFFSET"] = t["offset"]

    tensor(f"{u}_INPUT", m["input"], False)
    if len(m["outputs"]) == 1:
        tensor(f"{u}_OUTPUT", m["outputs"][0], False)
    else:
        want[f"{u}_OUTPUT_BYTES"] = sum(int(np.prod(o["shape"])) for o in m["outputs"])
        for o in m["outputs"]:
            tensor(f"{u}_OUTPUT_{re.sub(r'[^0-9A-Za-z_]', '_', o['name']).upper()}", o, True)
    return want


@pytest.mark.parametrize("case", ["classifier", "heads", "extern"])
def test_header_is_the_manifest(tmp_path, case):
    graph = _two_heads() if case == "heads" else _classifier()
    lib = LibraryOptions(prefix={"classifier": "digits", "heads": "det", "extern": "ext"}[case],
                         arena_extern=case == "extern")
    m = compile_graph(graph, tmp_path / "p", library=lib).manifest
    text = (tmp_path / "p" / m["header"]).read_text()
    got = {name: None if value.strip() == "" else _macro_value(value) for name, value in DEFINE.findall(text)}
    got.update({name: None for name in re.findall(r"^#define (\w+)$", text, re.M)})
    want = _expected_macros(m)
    assert set(got) == set(want)
    for name, value in want.items():
        if isinstance(value, float):
            assert np.float32(got[name]) == np.float32(value), name  # the C float literal is the float32 scale
        else:
            assert got[name] == value, name
    params = re.search(rf"void {lib.prefix}_invoke\(([^)]*)\);", text).group(1).split(", ")
    assert [p.split("*")[1] for p in params[1:]] == [o["param"] for o in m["outputs"]]
    assert (f"static inline int {lib.prefix}_argmax(" in text) == m["argmax"] == (case != "heads")
    if case == "heads":
        assert [o["param"] for o in m["outputs"]] == list(graph.outputs)  # named after the graph's outputs


def _global_symbols(lib_path: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib_path)], capture_output=True, text=True).stdout
    return {p[2] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[1] in "TDBR"}


def test_prefix_names_every_export_and_file(tmp_path):
    graph = _classifier()
    result = compile_graph(graph, tmp_path / "kws", library=LibraryOptions(prefix="kws"))
    m, src = result.manifest, tmp_path / "kws" / "src"
    assert sorted(p.name for p in src.glob("*model*")) == ["kws_model.c", "kws_model.h"]
    assert "add_library(kws_model STATIC src/kws_model.c)" in (tmp_path / "kws" / "CMakeLists.txt").read_text()
    host = HostModel(result.out_dir)
    exported = {s for s in _global_symbols(result.out_dir / "host" / "libmodel.so") if not s.startswith("kb_")}
    assert exported == set(m["exports"]) == {"kws_invoke", "kws_arena"}
    x = np.random.default_rng(0).integers(-128, 128, (1, 8, 8, 1)).astype(np.int8)
    np.testing.assert_array_equal(host(x), run_int8(graph, x)[graph.outputs[0]])
    for bad in ("Kws", "kb_x", "1net", "static", "a" * 33):
        with pytest.raises(KilobyteError, match="--prefix"):
            LibraryOptions(prefix=bad)


def test_float_helpers_equal_kilobyte_run(tmp_path):
    graph = _classifier()
    result = compile_graph(graph, tmp_path / "p", library=LibraryOptions(prefix="digits"))
    x = np.random.default_rng(3).normal(0.3, 1.2, (1, 8, 8, 1)).astype(np.float32)
    x.flat[:4] = [0.0, 1e9, -1e9, result.manifest["input"]["scale"] * 2.5]  # clamps and a tie
    np.save(tmp_path / "x.npy", x)
    assert cli(["run", str(result.out_dir), "--input", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")]) == 0
    y_run = np.load(tmp_path / "y.npy")

    shim = tmp_path / "shim.c"  # the inline helpers, as a user's code calls them
    shim.write_text('#include "digits_model.h"\n'
                    "void t_quantize(const float *x, int8_t *q) { digits_quantize_input(x, q); }\n"
                    "void t_dequantize(const int8_t *q, float *y) { digits_dequantize_output(q, y); }\n"
                    "int t_argmax(const int8_t *y) { return digits_argmax(y); }\n")
    so = tmp_path / "shim.so"
    srcs = [str(p) for p in (result.out_dir / "src").glob("*.c")]
    subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                    f"-I{result.out_dir / 'src'}", str(shim), *srcs, "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    q, deq = np.zeros(64, np.int8), np.zeros(7, np.float32)
    lib.t_quantize(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(q.ctypes.data))
    spec = result.manifest["input"]
    np.testing.assert_array_equal(q, quantize_values(x, spec["scale"], spec["zero_point"]).reshape(-1))
    y = np.zeros(7, np.int8)
    lib.digits_invoke(ctypes.c_void_p(q.ctypes.data), ctypes.c_void_p(y.ctypes.data))
    np.testing.assert_array_equal(y, y_run.reshape(-1))  # what `kilobyte run` gave from the float .npy
    assert lib.t_argmax(ctypes.c_void_p(y.ctypes.data)) == int(np.argmax(y_run))
    lib.t_dequantize(ctypes.c_void_p(y.ctypes.data), ctypes.c_void_p(deq.ctypes.data))
    out = result.manifest["outputs"][0]
    want = dequantize_values(y, out["scale"], out["zero_point"])
    assert np.array_equal(deq.view(np.int32), want.view(np.int32))


def test_arena_extern_leaves_the_arena_to_the_user(tmp_path):
    graph = _classifier()
    result = compile_graph(graph, tmp_path / "p", library=LibraryOptions(prefix="ext", arena_extern=True))
    obj = tmp_path / "model.o"
    src = result.out_dir / "src"
    subprocess.run(["gcc", "-std=c99", "-c", f"-I{src}", str(src / "ext_model.c"), "-o", str(obj)], check=True)
    nm = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^\s+U ext_arena$", nm, re.M) and " B ext_arena" not in nm
    assert result.manifest["exports"] == ["ext_invoke"]
    x = np.random.default_rng(1).integers(-128, 128, (1, 8, 8, 1)).astype(np.int8)
    np.testing.assert_array_equal(HostModel(result.out_dir)(x), run_int8(graph, x)[graph.outputs[0]])
    from kilobyte.codegen import build_executable, run_executable

    for sanitize in (False, True):  # host/arena.c in the plain build, the guarded arena under ASan
        y = run_executable(build_executable(result.out_dir, sanitize=sanitize), x, (1, 7))
        np.testing.assert_array_equal(y, run_int8(graph, x)[graph.outputs[0]])


def test_multi_output_pointers_named_after_outputs(tmp_path):
    graph = _two_heads()
    result = compile_graph(graph, tmp_path / "p", library=LibraryOptions(prefix="det"))
    header = (result.out_dir / "src" / "det_model.h").read_text()
    names = list(graph.outputs)
    assert f"void det_invoke(const int8_t *input, int8_t *{names[0]}, int8_t *{names[1]});" in header
    lib = ctypes.CDLL(str(HostModel(result.out_dir).project / "host" / "libmodel.so"))
    x = np.random.default_rng(4).integers(-128, 128, (1, 8, 8, 3)).astype(np.int8)
    want = run_int8(graph, x)
    bufs = [np.full(graph.tensors[n].shape, 99, np.int8) for n in names]  # two separate buffers
    lib.det_invoke(ctypes.c_void_p(x.ctypes.data), *(ctypes.c_void_p(b.ctypes.data) for b in bufs))
    for name, buf in zip(names, bufs):
        np.testing.assert_array_equal(buf, want[name])


_ARM = have_tools()


@pytest.mark.skipif(not os.environ.get("CI") and not _ARM, reason="needs arm-none-eabi-gcc")  # never skipped on CI
def test_make_target_builds_a_static_library_per_core(tmp_path):
    graphs = {"digits": _classifier(), "det": _two_heads()}
    dirs = {p: compile_graph(g, tmp_path / p, library=LibraryOptions(prefix=p)).out_dir for p, g in graphs.items()}
    cores = {"cortex-m4": ("v7E-M", "VFPv4-D16"), "cortex-m7": ("v7E-M", "FPv5/FP-D16"),
             "cortex-m55": ("v8.1-M.mainline", "MVE Integer and FP")}  # readelf -A: architecture, FPU / MVE
    for target, tags in cores.items():
        for prefix, d in dirs.items():
            res = subprocess.run(["make", "-s", "-C", str(d), f"TARGET={target}"], capture_output=True, text=True)
            assert res.returncode == 0, res.stderr
            archive = d / "out" / target / f"lib{prefix}.a"
            nm = subprocess.run(["arm-none-eabi-nm", str(archive)], capture_output=True, text=True).stdout
            assert f" T {prefix}_invoke" in nm and " T kb_wide_1x3" in nm  # the model and the DSP conv's assembly
            attrs = subprocess.run(["arm-none-eabi-readelf", "-A", str(archive)], capture_output=True,
                                   text=True).stdout
            assert f"Tag_CPU_arch: {tags[0]}\n" in attrs and tags[1] in attrs, (target, attrs[:300])
        # two such archives in one image: each kernel linked once (a member is taken only for an undefined symbol)
        main = tmp_path / "main.c"
        main.write_text('#include "digits_model.h"\n#include "det_model.h"\nstatic int8_t a[192], b[192], c[192];\n'
                        "int main(void) { digits_invoke(a, b); det_invoke(a, b, c); return 0; }\n")
        elf = tmp_path / f"{target}.elf"
        flags = subprocess.run(["make", "-s", "-p", "-n", "-C", str(dirs["det"]), f"TARGET={target}"],
                               capture_output=True, text=True).stdout
        cpu = re.search(rf"^CPU_{target} := (.*)$", flags, re.M).group(1).split()
        subprocess.run(["arm-none-eabi-gcc", *cpu, "-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs",
                        "-Wl,-e,main", "-Wl,--gc-sections", f"-I{dirs['digits'] / 'src'}", f"-I{dirs['det'] / 'src'}",
                        str(main), str(dirs["digits"] / "out" / target / "libdigits.a"),
                        str(dirs["det"] / "out" / target / "libdet.a"), "-o", str(elf)], check=True)
        nm = subprocess.run(["arm-none-eabi-nm", "--defined-only", str(elf)], capture_output=True, text=True).stdout
        kernels = [p[2] for p in (line.split() for line in nm.splitlines()) if len(p) == 3 and p[2].startswith("kb_")
                   and p[1] == "T"]
        assert "kb_conv_3x3" in kernels and len(kernels) == len(set(kernels))  # both models call it
