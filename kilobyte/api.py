"""Python API mirroring the CLI: load a model from any source into the IR, then profile, plan, quantise, compile,
prune, evaluate.

A thin public facade: loading, compiling, verifying and the fit live in the driver (`kilobyte.driver`), which the
CLI calls too; the CLI (`kilobyte.cli`) only parses arguments and prints. Each function takes plain values and
returns data.
"""

from __future__ import annotations

from .data import Dataset, choose_reading, load_dataset
from .driver import (
    CheckedBuild,
    LoadedModel,
    calibration_inputs,
    compile_checked,
    compile_model,
    load,
    match_input,
    quantize,
)
from .errors import KilobyteError
from .formats.project import manifest
from .prune import prune_model
from .prune.pipeline import DEFAULT_LOSS_BUDGET
from .train import TrainConfig, fit
from .train.detect_library import evaluate_detector
from .train.library_accuracy import evaluate_library
from .train.library_accuracy import library_dir as library_dir_of

__all__ = ["LoadedModel", "PrunedBuild", "calibration_inputs", "compile_model", "compile_pruned", "evaluate", "load",
           "match_input", "prune", "quantize"]

PrunedBuild = CheckedBuild  # a pruned model compiled and checked (`compile_pruned`)


def prune(model: LoadedModel, dataset_spec: str, *, method: str = "filterlet", sparsity: float | None = None,
          device=None, epochs: int = 10, retrain_epochs: int = 3, loss_budget: float | None = None,
          seed: int = 0, kernels: str = "portable"):
    """Train a PyTorch model for `epochs` on a dataset (0: it is trained already), then prune it
    (`kilobyte.prune.prune_model`: `sparsity` or `device`, filterlet / csr / channel) and retrain for
    `retrain_epochs`; returns the `PruneResult`. The dataset is resized to the model input; its last 20 % are held out
    for the accuracies. `kernels`: the kernel set its Flash figures are for (as `compile_model`)."""
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
             progress: bool = False, task: str | None = None):
    """`kilobyte evaluate`: the accuracy of the compiled library in `library_dir` (or a search's output folder) on
    labelled images, per class and as a confusion matrix, from its own host C build — and, with `target` / `device`,
    from its firmware under QEMU, each output compared with the host's. `split="test"`: the held-out images a search
    or the demo reported its int8 accuracy on. Returns a `train.library_accuracy.LibraryEvaluation` (`.to_json()`;
    `report.confusion` formats and draws it). A detector library (compiled with `detect`), or `task="detect"`: its
    mAP@0.5 on images with boxes instead (`train.detect_library.DetectionEvaluation`)."""
    if task == "detect" or (task is None and manifest(library_dir_of(library_dir)).get("detect")):
        return evaluate_detector(library_dir, data, split=split, limit=limit, target=target, device=device,
                                 kernels=kernels, progress=progress)
    return evaluate_library(library_dir, data, split=split, limit=limit, target=target, device=device,
                            kernels=kernels, resize=resize, progress=progress)


def compile_pruned(result, out_dir, data: str, *, name: str = "model", kernels: str = "portable",
                   target: str | None = None, n_random: int = 2) -> PrunedBuild:
    """Compile a `PruneResult`'s int8 graph (its weight formats set: FWCS, CSR or dense) into `out_dir` as
    `compile_model` does, verify the host build against the reference and TFLite Micro on `n_random` random inputs
    and images of `data`; with `target` (a Cortex-M core) also under QEMU and count its instructions (unicorn).
    A differing byte raises a `KilobyteError`. Returns a `PrunedBuild` (`driver.compile_checked`)."""
    return compile_checked(result.graph, out_dir, data, name=name, kernels=kernels, target=target,
                           n_random=n_random, what="pruned model")
