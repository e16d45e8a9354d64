"""Errors meant for people: every one names the file, node or tensor and the reason, on one line.

The CLI prints `kilobyte: error: <message>` for any `KilobyteError` and exits non-zero; anything else is a bug.
"""


class KilobyteError(ValueError):
    """Base class: a user mistake or an unsupported input, reported as one line."""


class UnsupportedOpError(KilobyteError):
    """A model uses an operator (or an attribute value) Kilobyte does not implement."""


class ModelFileError(KilobyteError):
    """A model file is missing, truncated or malformed."""


class DoesNotFitError(KilobyteError):
    """A model does not fit the chosen device's SRAM or Flash."""


class PruneError(KilobyteError):
    """Pruning asked for outside its range (an unknown method or mode, a sparsity outside [0, 1), a budget no pruning
    meets, a layer that cannot be pruned)."""
