"""Kilobyte: make deep learning fit on microcontrollers."""

__version__ = "0.1.0"
