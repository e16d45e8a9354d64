"""CLI stage: `kilobyte evaluate DIR --data DATA` — the compiled library's accuracy on labelled images.

Parses and prints only: the run is `api.evaluate` (`train.library_accuracy.evaluate_library`), the text and the
PNG are `report.confusion`'s.
"""

from __future__ import annotations

from ..api import evaluate
from ..errors import DoesNotFitError
from ..report.confusion import check_plot_path, format_evaluation, plot_evaluation
from ..report.detections import format_detection, plot_detections
from ..train.detect_library import DetectionEvaluation
from .bench_cmd import add_target_args, does_not_fit, target_device
from .common import add_command, add_json_arg, print_json


def register(sub) -> None:
    """accuracy of a compiled library (its own C code) on labelled images: per class, confusion matrix

    Run the C library in DIR (written by `kilobyte compile`, `kilobyte demo`, or a `kilobyte search` output folder) on
    labelled images and report its accuracy, the accuracy of each class and the confusion matrix — the numbers of what
    you will ship, from its own host build. The library must be a classifier: one int8 output of shape (1, N); the class
    is the argmax of its scores. Each image is read in the layout that fits the library's input, resized to its size
    when it differs (bilinear, as `kilobyte search` trains and its libraries resize; --resize nearest), one channel
    repeated to its channels, and quantised with its input scale and zero point — exactly as the search and the demo
    score their held-out images, so `--split test` on their output gives their reported int8 accuracy. With --target (or
    --device), the firmware for that Cortex-M core is built once and runs every image under QEMU (about 0.1 s each; use
    --limit): the same figures again, and whether each output equals the host build's. Exit code 1 when an output
    differs, 2 when the firmware does not fit --device.
    """
    p = add_command(sub, "evaluate", register)
    p.add_argument("dir", metavar="DIR", help="a compiled library (kilobyte.json), or a search's output folder")
    p.add_argument("--data", metavar="NAME|PATH",
                   help="labelled images: mnist, digits, letters, a .npz (x, y; optional layout='NHWC'/'NCHW'), or a "
                   "folder with one sub-folder of images per class (the sub-folder names are the class names, in "
                   "sorted order); with --split test, default: the data the split was taken from")
    p.add_argument("--split", choices=("test",), default=None,
                   help="'test': only the held-out images the search or the demo reported its int8 accuracy on "
                   "(recorded in DIR/held_out.json; checked to be the same images)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="evaluate the first N images only")
    p.add_argument("--resize", choices=("bilinear", "nearest"), default="bilinear",
                   help="how images of another size are resized to the library's input (default bilinear: "
                   "`kilobyte search`'s training resize)")
    p.add_argument("--task", choices=("classify", "detect"), default=None,
                   help="detect: mAP@0.5 of a detector library (compiled with --detect) on images with boxes "
                   "(digit-scenes, small-digit-scenes, or a folder with boxes.csv; --split test: a built-in "
                   "set's held-out scenes); default: what the library is")
    add_target_args(p)
    p.add_argument("--plot", metavar="FILE.png", help="draw the confusion matrix and per-class accuracy to a PNG (a "
                   "detector: the first images with their predicted and true boxes)")
    add_json_arg(p, "the figures")
    p.set_defaults(func=run)


def run(args) -> int:

    target, device = target_device(args)
    if args.plot:
        check_plot_path(args.plot)
    try:
        ev = evaluate(args.dir, args.data, split=args.split, limit=args.limit, target=target,
                      device=device, kernels=args.kernels, resize=args.resize, progress=not args.json, task=args.task)
    except DoesNotFitError as e:
        return does_not_fit(e)
    if isinstance(ev, DetectionEvaluation):
        if args.plot:
            plot_detections(ev, args.plot)
        if args.json:
            print_json(ev.to_json())
        else:
            print(format_detection(ev) + (f"\nplot      {args.plot}" if args.plot else ""))
        return 1 if ev.differing else 0
    if args.plot:
        plot_evaluation(ev, args.plot)
    if args.json:
        print_json(ev.to_json())
    else:
        print(format_evaluation(ev))
        if args.plot:
            print(f"plot      {args.plot}")
    return 1 if ev.differing else 0
