"""Python API mirroring the CLI: load a model from any source into the IR, then profile, plan, quantise, compile.

Each function takes plain values and returns data; the CLI (`kilobyte.cli`) only parses arguments and prints.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import KilobyteError, ModelFileError
from .ir import Graph


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
    from . import zoo

    if spec in zoo.names():
        kwargs = {"width": width if width is not None else 1.0, "resolution": resolution}
        if num_classes is not None:
            kwargs["num_classes"] = num_classes
        if channels is not None:
            kwargs["in_channels"] = channels
        module, shape = zoo.create(spec, **kwargs)
        return _from_module(spec, module, shape)
    path = Path(spec)
    if path.suffix == ".onnx":
        return _from_onnx(path)
    if path.suffix == ".tflite":
        return _from_tflite(path)
    if ":" in spec and not path.exists():
        return _from_python(spec, resolution, channels)
    raise KilobyteError(f"model '{spec}': not a zoo name ({', '.join(zoo.names())}), .onnx, .tflite or "
                        f"module:attr")


def _from_module(source: str, module, shape) -> LoadedModel:
    from .frontends import from_torch
    from .transforms import prepare_for_inference

    graph = prepare_for_inference(from_torch(module, tuple(shape)))
    return LoadedModel(source, graph, module, tuple(shape))


def _from_onnx(path: Path) -> LoadedModel:
    from .frontends import from_onnx
    from .transforms import prepare_for_inference

    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    return LoadedModel(str(path), prepare_for_inference(from_onnx(path)))


def _from_tflite(path: Path) -> LoadedModel:
    """An int8 (or float) `.tflite` as the file has it, with explicit PADs before convolutions folded into their
    padding (converters write SAME-padded convs of some models as PAD + VALID conv; the padded copy is a wasted
    buffer, e.g. 226 -> 129 KB planned arena on a face detector), and depthwise convs with a depth multiplier > 1
    as the equivalent CONV_2D. Both compute the same values."""
    from .frontends.tflite import from_tflite
    from .transforms import fold_pad, lower_depthwise_multiplier

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
    import torch

    module = obj if isinstance(obj, torch.nn.Module) else obj()
    if not isinstance(module, torch.nn.Module):
        raise KilobyteError(f"model '{spec}': {attr} is not an nn.Module or a function returning one")
    shape = getattr(module, "input_shape", None)
    if shape is None:
        if resolution is None:
            raise KilobyteError(f"model '{spec}': give --resolution (or an `input_shape` attribute on the module)")
        shape = (1, channels or 3, resolution, resolution)
    return _from_module(spec, module, shape)


def calibration_inputs(dataset_spec: str, input_shape_nhwc: tuple[int, ...], n: int = 64, seed: int = 0):
    """`n` images of a dataset in the layout that fits the model input (`data.choose_reading`), resized /
    channel-matched to it, as a list of (1,H,W,C) arrays."""
    from .data import choose_reading, load_dataset

    ds = load_dataset(dataset_spec, seed=seed).take(slice(0, n))
    x = match_input(choose_reading(ds, input_shape_nhwc, dataset_spec), input_shape_nhwc, dataset_spec)
    return [x[i:i + 1] for i in range(len(x))]


def match_input(x, input_shape_nhwc: tuple[int, ...], dataset_spec: str):
    """NHWC images `x` resized (`data.resize_images`: bilinear, as the search trains and its libraries resize) and
    channel-repeated to a model input of shape `input_shape_nhwc` (`data.resize.fit_to_input`)."""
    from .data.resize import fit_to_input

    return fit_to_input(x, input_shape_nhwc, dataset_spec)


def quantize(model: LoadedModel, dataset_spec: str, *, samples: int = 64, method: str = "minmax") -> Graph:
    """Post-training int8 quantisation of a float model with calibration images from a dataset."""
    from .quant import quantize as _quantize

    if model.is_int8:
        return model.graph
    shape = model.graph.tensors[model.graph.inputs[0]].shape
    return _quantize(model.graph, calibration_inputs(dataset_spec, shape, samples), method=method)


def compile_model(model: LoadedModel, out_dir, *, data: str | None = None, samples: int = 64, patch=None,
                  inplace: bool = True, conv_columns: str = "free", kernels: str = "portable",
                  max_mac_overhead: float | None = 0.2, library=None):
    """Quantise (float models need `data`), plan and generate the C project; returns a `CompileResult`.
    `kernels`: the kernel set the plan is for ("portable", or "dsp" for the Cortex-M DSP kernels): its scratch is
    what that set reads, and firmware builds of the project default to it. conv_columns="wide" gives every DSP conv
    six im2col columns even where that raises the SRAM peak (faster); "free" (default) only from bytes free anyway.
    `max_mac_overhead`: with patch="auto", the most extra MACs the patch stage may cost (None: no limit).
    `library`: a `codegen.LibraryOptions` (prefix of exported names, arena ownership, Arm target of the build files)."""
    from .codegen import compile_graph
    from .schedule.plan_types import PlanOptions

    if not model.is_int8 and data is None:
        raise KilobyteError(f"model '{model.source}' is float: give calibration data with --data "
                            "(mnist, digits, letters, a .npz or an image folder)")
    graph = quantize(model, data, samples=samples) if not model.is_int8 else model.graph
    opts = PlanOptions(inplace_depthwise=inplace, inplace_add=inplace, alias_reshape=inplace,
                       concat_in_place=inplace, fuse_add=inplace, patch=patch, conv_columns=conv_columns,
                       kernels=kernels, max_mac_overhead=max_mac_overhead)
    name = Path(model.source).stem if model.source.endswith((".onnx", ".tflite")) else model.source
    return compile_graph(graph, out_dir, opts, model_name=name, library=library)


def prune(model: LoadedModel, dataset_spec: str, *, method: str = "filterlet", sparsity: float | None = None,
          device=None, epochs: int = 10, retrain_epochs: int = 3, loss_budget: float | None = None,
          seed: int = 0, kernels: str = "portable"):
    """Train a PyTorch model for `epochs` on a dataset (0: it is trained already), then prune it
    (`kilobyte.prune.prune_model`: `sparsity` or `device`, filterlet / csr / channel) and retrain for
    `retrain_epochs`; returns the `PruneResult`. The dataset is resized to the model input; its last 20 % are held out
    for the accuracies. `kernels`: the kernel set its Flash figures are for (as `compile_model`)."""
    from .data import Dataset, choose_reading, load_dataset
    from .prune import prune_model
    from .prune.pipeline import DEFAULT_LOSS_BUDGET
    from .train import TrainConfig, fit

    if model.module is None:
        raise KilobyteError(f"model '{model.source}': pruning needs a PyTorch model (a zoo name or module:attr), "
                            "it retrains the weights")
    ds = load_dataset(dataset_spec, seed=seed)
    if ds.y is None:
        raise KilobyteError(f"dataset '{dataset_spec}' has no labels: pruning needs them")
    shape = model.graph.tensors[model.graph.inputs[0]].shape
    ds = Dataset(ds.name, match_input(choose_reading(ds, shape, dataset_spec), shape, dataset_spec), ds.y)
    train, _ = ds.split(len(ds.x) - max(1, round(0.2 * len(ds.x))))
    if epochs > 0:
        fit(model.module, train.x, train.y, TrainConfig(epochs=epochs, seed=seed))
    retrain = TrainConfig.plain(epochs=retrain_epochs, lr=1e-3, seed=seed)
    return prune_model(model.module, ds, method, sparsity=sparsity, device=device, config=retrain, seed=seed,
                       loss_budget=DEFAULT_LOSS_BUDGET if loss_budget is None else loss_budget, kernels=kernels)


def evaluate(library_dir, data: str | None = None, *, split: str | None = None, limit: int | None = None,
             target: str | None = None, device=None, kernels: str | None = None, resize: str = "bilinear",
             progress: bool = False):
    """`kilobyte evaluate`: the accuracy of the compiled library in `library_dir` (or a search's output folder) on
    labelled images, per class and as a confusion matrix, from its own host C build — and, with `target` / `device`,
    from its firmware under QEMU, each output compared with the host's. `split="test"`: the held-out images a search
    or the demo reported its int8 accuracy on. Returns a `train.library_accuracy.LibraryEvaluation` (`.to_json()`;
    `report.confusion` formats and draws it)."""
    from .train.library_accuracy import evaluate_library

    return evaluate_library(library_dir, data, split=split, limit=limit, target=target, device=device,
                            kernels=kernels, resize=resize, progress=progress)


@dataclass
class PrunedBuild:
    """A pruned model compiled and checked (`compile_pruned`)."""

    compiled: object  # the `codegen.CompileResult`
    host: object  # `codegen.verify.VerifyReport`: host C == numpy reference == TFLite Micro
    target: object = None  # with a target: the QEMU `VerifyReport` ...
    bench: dict | None = None  # ... and `bench_on_target`'s numbers (instructions, measured Flash / SRAM)


def compile_pruned(result, out_dir, data: str, *, name: str = "model", kernels: str = "portable",
                   target: str | None = None, n_random: int = 2):
    """Compile a `PruneResult`'s int8 graph (its weight formats set: FWCS, CSR or dense) into `out_dir` as
    `compile_model` does, verify the host build against the reference and TFLite Micro on `n_random` random inputs
    and images of `data`; with `target` (a Cortex-M core) also under QEMU and count its instructions (unicorn).
    A differing byte raises a `KilobyteError`. Returns a `PrunedBuild`."""
    from .codegen.verify import verify_project

    compiled = compile_model(LoadedModel(name, result.graph), out_dir, kernels=kernels)
    host = verify_project(compiled.out_dir, n_random=n_random, data=data)
    _check_verified(host, compiled.out_dir, "host")
    if target is None:
        return PrunedBuild(compiled, host)
    from .targets.cortexm.verify import bench_on_target, verify_on_target

    on_target = verify_on_target(compiled.out_dir, target, n_random=n_random, data=data)
    _check_verified(on_target, compiled.out_dir, target)
    return PrunedBuild(compiled, host, on_target, bench_on_target(compiled.out_dir, target))


def _check_verified(report, out_dir, where: str) -> None:
    if not report.ok:
        raise KilobyteError(f"{out_dir}: the pruned model's {where} build is not bit-exact ({report.mismatches[0]}; "
                            f"{len(report.mismatches)} mismatches); the project is left there to inspect — please "
                            "report this")
