"""Report stage: `kilobyte evaluate`'s text and picture for a detector library
(`train.detect_library.DetectionEvaluation`): mAP@0.5 and AP per class; the first images with the library's boxes
(solid, labelled with class and score) over the true ones (dashed)."""

from __future__ import annotations

import os

from .memory_plot import save_png


def format_detection(ev) -> str:
    """`kilobyte evaluate --task detect`'s text: mAP@0.5, then AP per class."""
    where = f" ({ev.split} split)" if ev.split else ""
    lines = [f"{ev.project}: mAP@0.5 {ev.map50 * 100:.1f} % on {ev.images} images of {ev.data}{where}, "
             f"{ev.objects} objects (host C build)"]
    if ev.record is not None and ev.record["map50"] is not None:
        same = "the same images" if ev.images == ev.record["images"] else f"{ev.images} of its {ev.record['images']}"
        lines.append(f"  reported by {ev.record['by']}: mAP@0.5 {ev.record['map50'] * 100:.1f} % ({same})")
    if ev.target:
        same = "the same boxes" if not ev.differing else f"different boxes on {len(ev.differing)} images"
        lines.append(f"  {ev.target} under QEMU: {same}")
    lines += [f"  {name:>12}: AP {a * 100:5.1f} %" if a is not None else f"  {name:>12}: no boxes"
              for name, a in zip(ev.classes, ev.ap)]
    return "\n".join(lines)


def plot_detections(ev, path) -> str:
    """The evaluation's sample images with their boxes, to PNG file `path` (atomically); returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    n = len(ev.samples)
    cols = min(4, max(n, 1))
    rows = max(1, -(-n // cols))
    fig = Figure(figsize=(3 * cols, 3 * rows + 0.4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (image, truth, found) in zip(axes.flat, ev.samples):
        ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
        for x0, y0, x1, y1 in truth:
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="lime", ls="--", lw=1))
        for (x0, y0, x1, y1), score, cls in zip(found.boxes, found.scores, found.labels):
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="red", lw=1.2))
            ax.text(x0, y0 - 1, f"{ev.classes[cls]} {score:.2f}", color="red", fontsize=7, va="bottom")
    fig.suptitle(f"mAP@0.5 {ev.map50 * 100:.1f} % on {ev.images} images; red: the library, green dashed: true")
    fig.tight_layout()
    save_png(fig, os.fspath(path))
    return str(path)
