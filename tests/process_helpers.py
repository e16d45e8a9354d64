"""Helpers for tests that drive `kilobyte` in a subprocess and kill it at chosen moments."""

from __future__ import annotations

import sqlite3
import time


def wait_until(proc, condition, timeout: float = 300, poll: float = 0.05) -> bool:
    """Poll `condition()` until it holds (True) or `proc` exits or `timeout` seconds pass (False). A store being
    written while it is read may raise `sqlite3.Error`: that counts as not yet."""
    start = time.time()
    while time.time() - start < timeout:
        if proc.poll() is not None:
            return False
        try:
            if condition():
                return True
        except sqlite3.Error:
            pass
        time.sleep(poll)
    return False
