"""Export stage: write IR graphs in other tools' formats — `.tflite` (the file TensorFlow Lite Micro runs)."""

from .tflite import save_tflite, to_tflite

__all__ = ["save_tflite", "to_tflite"]
