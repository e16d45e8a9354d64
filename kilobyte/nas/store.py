"""Search stage: the search store — one SQLite file in the output directory that makes a search resumable.

Every finished evaluation is committed as it finishes (architecture JSON, resources, accuracy, phase, generation,
index, seed, seconds); each finished phase commits its result. A search killed at any moment (SIGKILL included) and
restarted with `--resume` replays its deterministic schedule and takes every finished evaluation from here instead of
recomputing it, so nothing finished is lost or repeated. SQLite's journal makes each commit all-or-nothing.

The first row of `meta` records the search's settings; resuming with different settings, or opening a file that is
not a Kilobyte store (or is damaged), is a one-line `StoreError` — never a silent restart.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..atomic import replacing
from ..errors import KilobyteError

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
    phase TEXT NOT NULL, generation INTEGER NOT NULL, idx INTEGER NOT NULL,
    arch TEXT NOT NULL, arch_key TEXT NOT NULL, seed INTEGER NOT NULL,
    accuracy REAL NOT NULL, resources TEXT NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (phase, generation, idx));
CREATE TABLE IF NOT EXISTS phases (name TEXT PRIMARY KEY, result TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS issued (
    phase TEXT NOT NULL, idx INTEGER NOT NULL, arch TEXT NOT NULL, parent INTEGER, morphism TEXT,
    PRIMARY KEY (phase, idx));
"""


class StoreError(KilobyteError):
    """The search store cannot be used: damaged, not a store, or made by a search with other settings."""


@dataclass(frozen=True)
class Evaluation:
    phase: str
    generation: int
    idx: int
    arch: str  # Arch JSON
    arch_key: str
    seed: int
    accuracy: float
    resources: dict
    seconds: float


class SearchStore:
    """The SQLite store of one search (`path`); `settings` must match the stored ones when the file exists, except
    that the integer settings named in `growable` (a μNAS search's `evaluations`) may be larger: the search is
    extended, and the stored settings become the new ones."""

    def __init__(self, path: str | Path, settings: dict, *, resume: bool, growable: tuple[str, ...] = ()):
        self.path = Path(path)
        existed = self.path.exists()
        if existed and not resume:
            raise StoreError(f"{self.path}: a search store already exists; pass --resume to continue it or choose "
                             f"another --out")
        if resume and not existed:
            raise StoreError(f"{self.path}: no search store to resume")
        settings = json.loads(json.dumps({"schema": SCHEMA_VERSION, **settings}))
        if not existed:
            self._create(settings)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)  # autocommit; explicit transactions below
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(SCHEMA)
            stored = dict(self.db.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a readable search store ({e})") from None
        if not stored:
            raise StoreError(f"{self.path}: the store has no settings recorded (damaged or not Kilobyte's)")
        else:
            try:
                old = json.loads(stored["settings"])
            except (KeyError, json.JSONDecodeError):
                raise StoreError(f"{self.path}: the store's settings are unreadable (damaged)") from None
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            grown = [k for k in diff if k in growable and isinstance(old.get(k), int)
                     and isinstance(settings.get(k), int) and settings[k] > old[k]]
            if len(grown) < len(diff):
                k = next(k for k in diff if k not in grown)
                extra = " (it may grow, not shrink)" if k in growable else ""
                raise StoreError(f"{self.path}: stored search has {k}={old.get(k)!r}, this run {settings.get(k)!r}"
                                 f"{extra}; resume with the same settings or choose another --out")
            if grown:  # a longer search: it continues where the stored one ended
                self.db.execute("UPDATE meta SET value=? WHERE key='settings'", (json.dumps(settings, sort_keys=True),))
        self.settings = settings

    def _create(self, settings: dict) -> None:
        """Write a new store (schema + settings) under a temporary name, then rename it into place
        (`kilobyte.atomic.replacing`): a search killed while creating it leaves either no store or a complete one,
        never a store without settings."""
        with replacing(self.path) as tmp:
            db = sqlite3.connect(tmp)
            try:
                db.executescript(SCHEMA)
                db.execute("INSERT INTO meta VALUES ('settings', ?)", (json.dumps(settings, sort_keys=True),))
                db.commit()
            finally:
                db.close()

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def stored_settings(path: str | Path) -> dict:
        """The settings of the store at `path`, read without opening it for writing (a finished search, e.g. for
        `--export`); a missing, damaged or foreign file is a one-line `StoreError`."""
        path = Path(path)
        if not path.exists():
            raise StoreError(f"{path}: no search store")
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                row = db.execute("SELECT value FROM meta WHERE key='settings'").fetchone()
            finally:
                db.close()
            return json.loads(row[0])
        except (sqlite3.DatabaseError, TypeError, json.JSONDecodeError) as e:
            raise StoreError(f"{path}: not a readable search store ({type(e).__name__}: {e})") from None

    # -- evaluations -------------------------------------------------------------------------------------------------
    def add(self, e: Evaluation) -> None:
        """Commit one finished evaluation. One already stored is not replaced; it is counted in `meta.repeated`
        (a search replaying its schedule takes stored results instead of recomputing them, so this stays 0)."""
        try:
            self.db.execute("INSERT INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (e.phase, e.generation, e.idx, e.arch, e.arch_key, e.seed, e.accuracy,
                             json.dumps(e.resources, sort_keys=True), e.seconds))
        except sqlite3.IntegrityError:
            self.db.execute("INSERT INTO meta VALUES ('repeated', '1') "
                            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def repeated(self) -> int:
        """Evaluations computed again although already stored (0 unless something is wrong)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='repeated'").fetchone()
        return 0 if row is None else int(row[0])

    def get(self, phase: str, generation: int, idx: int) -> Evaluation | None:
        row = self.db.execute("SELECT * FROM evaluations WHERE phase=? AND generation=? AND idx=?",
                              (phase, generation, idx)).fetchone()
        return None if row is None else self._evaluation(row)

    def evaluations(self, phase: str | None = None) -> list[Evaluation]:
        q = "SELECT * FROM evaluations" + (" WHERE phase=?" if phase else "") + " ORDER BY phase, generation, idx"
        return [self._evaluation(r) for r in self.db.execute(q, (phase,) if phase else ())]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]

    @staticmethod
    def _evaluation(row) -> Evaluation:
        return Evaluation(row[0], row[1], row[2], row[3], row[4], row[5], row[6], json.loads(row[7]), row[8])

    # -- issued candidates (searches with evaluations in flight) -------------------------------------------------------
    def issue(self, phase: str, idx: int, arch: str, parent: int | None, morphism: str | None) -> None:
        """Record a candidate handed to evaluation, before it runs: a resumed search evaluates again those issued
        but not finished (in `evaluations`) rather than drawing new ones, so its course does not change."""
        self.db.execute("INSERT OR REPLACE INTO issued VALUES (?, ?, ?, ?, ?)", (phase, idx, arch, parent, morphism))

    def unfinished(self, phase: str) -> list[tuple[int, str, int | None, str | None]]:
        """(idx, arch, parent, morphism) of candidates issued in `phase` without a finished evaluation, by idx."""
        return list(self.db.execute(
            "SELECT idx, arch, parent, morphism FROM issued WHERE phase=? AND idx NOT IN "
            "(SELECT idx FROM evaluations WHERE phase=?) ORDER BY idx", (phase, phase)))

    # -- phases ------------------------------------------------------------------------------------------------------
    def phase_result(self, name: str) -> dict | None:
        row = self.db.execute("SELECT result FROM phases WHERE name=?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def finish_phase(self, name: str, result: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO phases VALUES (?, ?)", (name, json.dumps(result, sort_keys=True)))
