"""Report stage: a library's accuracy on labelled images (`kilobyte evaluate`) as text and as a PNG.

The text is what a person reads after a run: where the images came from and what was done to them, the accuracy
(beside the reported one when these are the held-out images a search or the demo measured), a per-class table and
the confusion matrix (rows: true class, columns: predicted), then the target's accuracy under QEMU and its
agreement with the host build (its own tables only when an output differs: otherwise they are the host's). The
PNG draws the confusion matrix, row-normalised, and the per-class accuracy. It reads a
`train.library_accuracy.LibraryEvaluation` and changes nothing.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from ..errors import KilobyteError
from .memory_plot import save_png

MAX_MATRIX_CLASSES = 30  # wider confusion matrices go to --json / --plot only (a text row would wrap)


def format_evaluation(ev) -> str:
    """The whole report of a `LibraryEvaluation`, as lines of text."""
    lines = [f"library   {ev.project} (host C build)", f"data      {_source(ev)}",
             f"input     {_preprocessing(ev.preprocessing)}"]
    reported = ""
    if ev.split is not None:
        same = "same images" if ev.same_images_as_report else f"on all {ev.split['images']} of them"
        reported = f"   (reported by {ev.split['by']}: {ev.split['int8_accuracy'] * 100:.2f} %, {same})"
    lines.append(f"accuracy  {_percent(ev.host)}{reported}")
    if ev.warning:
        lines.append(f"WARNING   {ev.warning}")
    if ev.hint:
        lines.append(f"note      {ev.hint}")
    lines += ["", format_scores(ev.host, ev.classes)]
    if ev.on_target is not None:
        lines += ["", f"{ev.target} under QEMU: accuracy {_percent(ev.on_target)}; {_agreement(ev)}"]
        if ev.differing:  # else its classes are the host's, image for image: the tables above
            lines += ["", format_scores(ev.on_target, ev.classes)]
    return "\n".join(lines)


def _agreement(ev) -> str:
    n = ev.on_target.images
    if not ev.differing:
        return f"every output equal to the host C build's ({n} of {n} images; the figures above hold for it)"
    return (f"outputs DIFFER from the host C build's on {len(ev.differing)} of {n} images (first: image "
            f"{ev.differing[0]}) — please report this")


def format_scores(scores, names: list[str]) -> str:
    """The per-class table, then the confusion matrix when it has at most `MAX_MATRIX_CLASSES` classes.

    >>> from kilobyte.train.library_accuracy import Scores
    >>> print(format_scores(Scores(np.array([[2, 1], [0, 3]])), ["cat", "dog"]))
    class  images  correct  accuracy
    cat         3        2    66.7 %
    dog         3        3   100.0 %
    <BLANKLINE>
    confusion matrix (rows: true class, columns: predicted)
         cat  dog
    cat    2    1
    dog    0    3
    """
    rows = [["class", "images", "correct", "accuracy"]]
    rows += [[name, str(n), str(c), "-" if a is None else f"{a * 100:.1f} %"]
             for name, (n, c, a) in zip(names, scores.per_class())]
    lines = _aligned(rows, left=1)
    if len(names) > MAX_MATRIX_CLASSES:
        return "\n".join([*lines, "", f"confusion matrix: {len(names)} classes, see --json or --plot"])
    matrix = [["", *names], *([name, *(str(v) for v in row)] for name, row in zip(names, scores.confusion))]
    return "\n".join([*lines, "", "confusion matrix (rows: true class, columns: predicted)", *_aligned(matrix, 1)])


def _aligned(rows: list[list[str]], left: int) -> list[str]:
    """Columns padded to their widest cell: the first `left` left-aligned, the others right-aligned."""
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if j < left else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _percent(scores) -> str:
    return f"{scores.accuracy * 100:.2f} % ({scores.correct} / {scores.images})"


def _source(ev) -> str:
    if ev.split is None:
        return f"{ev.data}, {ev.host.images} images"
    s = ev.split
    first = "" if ev.same_images_as_report else f"the first {ev.host.images} of "
    return (f"{ev.data}, held-out images {s['start']}-{s['stop'] - 1} (seed {s['seed']}): {first}the {s['images']} "
            f"images {s['by']} reported its int8 accuracy on")


def _preprocessing(p: dict) -> str:
    hwc = lambda s: "x".join(str(d) for d in s)  # noqa: E731
    steps = [f"{hwc(p['data_shape'])} images"]
    if p["resize"]:
        steps.append(f"resized ({p['resize']}) to {hwc(p['input_shape'][:2])}")
    if p["channels_repeated"]:
        steps.append(f"channel repeated to {p['input_shape'][2]}")
    lo, hi = p["value_range"]
    steps.append(f"values {lo:g}..{hi:g} quantised to {p['dtype']} (scale {p['scale']:.6g}, zero point "
                 f"{p['zero_point']})")
    if p.get("clipped_values"):
        steps.append(f"{p['clipped_values']} values clipped to the {p['dtype']} range")
    return ", ".join(steps)


def check_plot_path(path) -> None:
    """Before a long run: a one-line error when the PNG could not be written (no matplotlib, no such folder)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise KilobyteError(f"--plot {path}: drawing needs matplotlib: pip install 'kilobyte[plot]'")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise KilobyteError(f"--plot {path}: no such folder {folder}")


def plot_evaluation(ev, path) -> str:
    """Draw the confusion matrix (each row as fractions of its class) and the per-class accuracy of the host build
    (and of the target in a second row when any of its outputs differ) to PNG file `path`; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    host = "host C" + (f" = {ev.target} (QEMU)" if ev.on_target is not None and not ev.differing else "")
    engines = [(host, ev.host)] + ([(f"{ev.target} (QEMU)", ev.on_target)] if ev.differing else [])
    n = len(ev.classes)
    side = min(12.0, 3.0 + 0.35 * n)
    fig = Figure(figsize=(2 * side, side * len(engines) * 0.85), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(engines), 2, squeeze=False)
    for (label, scores), (ax_m, ax_b) in zip(engines, axes):
        _draw_matrix(fig, ax_m, scores, ev.classes, f"{label}: confusion ({scores.accuracy * 100:.2f} %)")
        _draw_per_class(ax_b, scores, ev.classes, f"{label}: accuracy per class")
    save_png(fig, os.fspath(path))
    return os.fspath(path)


def _draw_matrix(fig, ax, scores, names: list[str], title: str) -> None:
    counts = scores.confusion
    rows = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, rows, out=np.zeros(counts.shape, float), where=rows > 0)
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    if len(names) <= 20:  # the counts themselves, where they stay readable
        for (i, j), v in np.ndenumerate(counts):
            if v:
                ax.text(j, i, str(v), ha="center", va="center", fontsize="x-small",
                        color="white" if share[i, j] > 0.5 else "black")
    ticks = range(len(names))
    ax.set_xticks(ticks, names, rotation=90 if len(names) > 10 else 0, fontsize="small")
    ax.set_yticks(ticks, names, fontsize="small")
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(title)


def _draw_per_class(ax, scores, names: list[str], title: str) -> None:
    per_class = scores.per_class()
    acc = [0.0 if a is None else a * 100 for _, _, a in per_class]
    ax.bar(range(len(names)), acc, color="tab:blue")
    for i, (n, _, _) in enumerate(per_class):
        if n == 0:  # no image of this class: no bar, and not a 0 % one
            ax.text(i, 2, "no images", rotation=90, ha="center", va="bottom", fontsize="x-small", color="gray")
    ax.axhline(scores.accuracy * 100, color="tab:orange", linestyle="--", linewidth=1.2,
               label=f"overall {scores.accuracy * 100:.2f} %")
    ax.set_xticks(range(len(names)), names, rotation=90 if len(names) > 10 else 0, fontsize="small")
    ax.set_ylim(0, 100)
    ax.set_xlabel("class")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
