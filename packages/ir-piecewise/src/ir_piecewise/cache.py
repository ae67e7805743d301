"""The on-disk compile cache.

Layout under the cache directory::

    <cache_dir>/
        .lock                      file lock taken by every write
        <key[:2]>/<key>.irpw        one compiled piece per file

``<key>`` is a SHA-256 over the piece's graph code and input metadata, the shape it was
compiled for (a range or a size) and the global key (`CompilationConfig.key`, torch and triton
versions, the IR selection state: priorities, implementation hashes and pass uuids). A file is
``MAGIC``, the SHA-256 of the payload, a newline, then the payload: the bytes Inductor's
``CompiledArtifact.save(format="binary")`` writes. Files are written to a temporary name and
renamed into place under the lock, so readers see whole files or none; a file whose checksum or
load fails is logged, removed and recompiled.
"""

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

logger = logging.getLogger("ir_piecewise")
MAGIC = b"IRPW1\n"


class CompileCache:
    """Compiled pieces stored under `root`, keyed by hex digests."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        """Where the entry for `key` lives."""
        return self.root / key[:2] / f"{key}.irpw"

    def _lock(self) -> FileLock:
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / ".lock"))

    def load(self, key: str, load_payload: Callable[[Path], Any]) -> Any | None:
        """The entry for `key` loaded by `load_payload` (given a file holding the payload), or
        None if absent, corrupt or unloadable (the bad file is removed)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        header, _, payload = data.partition(b"\n")
        digest, _, payload = payload.partition(b"\n")
        if header + b"\n" != MAGIC or hashlib.sha256(payload).hexdigest().encode() != digest:
            logger.warning("ir_piecewise: corrupt cache entry %s (bad checksum); recompiling", path)
            self._remove(path)
            return None
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            payload_file = Path(tmp) / "artifact.bin"
            payload_file.write_bytes(payload)
            try:
                return load_payload(payload_file)
            except Exception as exc:  # a stale entry: its format or dependencies changed
                logger.warning(
                    "ir_piecewise: cache entry %s failed to load (%s: %s); recompiling",
                    path,
                    type(exc).__name__,
                    exc,
                )
                self._remove(path)
                return None

    def store(self, key: str, save_payload: Callable[[Path], None]) -> None:
        """Write the entry for `key`: `save_payload` writes the payload to the path it is
        given; the checksummed entry is then renamed into place atomically."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            payload_file = Path(tmp) / "artifact.bin"
            save_payload(payload_file)
            payload = payload_file.read_bytes()
            staged = Path(tmp) / "entry"
            staged.write_bytes(
                MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
            )
            with self._lock():
                os.replace(staged, path)
        logger.debug("ir_piecewise: cached %s", path)

    def remove(self, key: str) -> None:
        """Remove the entry for `key`, if there is one."""
        self._remove(self.path(key))

    def _remove(self, path: Path) -> None:
        with self._lock():
            path.unlink(missing_ok=True)
