"""Driver stage: a model from any source into the IR (`load`, `from_module`), and calibration images fitted to it.

Every entry point — the CLI, `kilobyte.api`, the search deploying its winner, the benchmarks — loads through here,
so a zoo name, an `.onnx` / `.tflite` file, a Python `module:attr` and an in-memory PyTorch module all reach the
compiler as the same inference graph (BN folded, activations fused; a `.tflite` as the file has it).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import zoo
from ..data import choose_reading, load_dataset
from ..data.resize import fit_to_input
from ..errors import KilobyteError, ModelFileError
from ..frontends import from_onnx, from_torch
from ..ir import Graph
from ..transforms import fold_pad, lower_depthwise_multiplier, prepare_for_inference


@dataclass(frozen=True)
class LoadedModel:
    """A model in the IR: the raw frontend graph and the inference graph every later stage uses."""

    source: str
    graph: Graph  # inference graph: BN folded, activations fused (float) — or the int8 graph of a .tflite
    module: object = None  # the torch module when the source was PyTorch (for training / accuracy)
    input_shape_nchw: tuple[int, ...] | None = None

    @property
    def is_int8(self) -> bool:
        """Quantised already: int8 tensors inside (an int8 model may still take and give float at its edges)."""
        return any(t.dtype == "int8" for t in self.graph.tensors.values())


def load(spec: str, *, resolution: int | None = None, width: float | None = None, channels: int | None = None,
         num_classes: int | None = None) -> LoadedModel:
    """Load MODEL = a zoo name, a `.onnx` / `.tflite` file, or a Python `module:attr` (an nn.Module or a factory)."""
    if spec in zoo.names():
        kwargs = {"width": width if width is not None else 1.0, "resolution": resolution}
        if num_classes is not None:
            kwargs["num_classes"] = num_classes
        if channels is not None:
            kwargs["in_channels"] = channels
        module, shape = zoo.create(spec, **kwargs)
        return from_module(spec, module, shape)
    path = Path(spec)
    if path.suffix == ".onnx":
        return _from_onnx(path)
    if path.suffix == ".tflite":
        return _from_tflite(path)
    if ":" in spec and not path.exists():
        return _from_python(spec, resolution, channels)
    raise KilobyteError(f"model '{spec}': not a zoo name ({', '.join(zoo.names())}), .onnx, .tflite or "
                        f"module:attr")


def from_module(source: str, module, shape) -> LoadedModel:
    """A PyTorch module with NCHW input `shape` as a `LoadedModel` named `source` (traced by `torch.fx`, then
    prepared for inference): how a zoo model, a `module:attr` and a search's trained network enter the compiler."""
    graph = prepare_for_inference(from_torch(module, tuple(shape)))
    return LoadedModel(source, graph, module, tuple(shape))


def _from_onnx(path: Path) -> LoadedModel:
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    return LoadedModel(str(path), prepare_for_inference(from_onnx(path)))


def _from_tflite(path: Path) -> LoadedModel:
    """An int8 (or float) `.tflite` as the file has it, with explicit PADs before convolutions folded into their
    padding (converters write SAME-padded convs of some models as PAD + VALID conv; the padded copy is a wasted
    buffer, e.g. 226 -> 129 KB planned arena on a face detector), and depthwise convs with a depth multiplier > 1
    as the equivalent CONV_2D. Both compute the same values."""
    from ..frontends.tflite import from_tflite  # defers tflite (the [tflite] extra): only a .tflite file reads it

    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    return LoadedModel(str(path), lower_depthwise_multiplier(fold_pad(from_tflite(path))))


def _from_python(spec: str, resolution: int | None, channels: int | None) -> LoadedModel:
    mod_name, _, attr = spec.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise KilobyteError(f"model '{spec}': cannot import ({e})") from None
    finally:
        sys.path.pop(0)
    import torch  # optional heavy dependency: only a Python model needs it

    module = obj if isinstance(obj, torch.nn.Module) else obj()
    if not isinstance(module, torch.nn.Module):
        raise KilobyteError(f"model '{spec}': {attr} is not an nn.Module or a function returning one")
    shape = getattr(module, "input_shape", None)
    if shape is None:
        if resolution is None:
            raise KilobyteError(f"model '{spec}': give --resolution (or an `input_shape` attribute on the module)")
        shape = (1, channels or 3, resolution, resolution)
    return from_module(spec, module, shape)


def calibration_inputs(dataset_spec: str, input_shape_nhwc: tuple[int, ...], n: int = 64, seed: int = 0):
    """`n` images of a dataset in the layout that fits the model input (`data.choose_reading`), resized /
    channel-matched to it, as a list of (1,H,W,C) arrays."""
    ds = load_dataset(dataset_spec, seed=seed).take(slice(0, n))
    x = match_input(choose_reading(ds, input_shape_nhwc, dataset_spec), input_shape_nhwc, dataset_spec)
    return [x[i:i + 1] for i in range(len(x))]


def match_input(x, input_shape_nhwc: tuple[int, ...], dataset_spec: str):
    """NHWC images `x` resized (`data.resize_images`: bilinear, as the search trains and its libraries resize) and
    channel-repeated to a model input of shape `input_shape_nhwc` (`data.resize.fit_to_input`)."""
    return fit_to_input(x, input_shape_nhwc, dataset_spec)
