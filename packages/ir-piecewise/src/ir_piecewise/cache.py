"""The on-disk compile cache.

Layout under the cache directory::

    <cache_dir>/
        .lock                      file lock taken by every write and removal
        <key[:2]>/<key>.irpw        one compiled piece (or saved trace) per file

``<key>`` is a SHA-256 over the piece's graph code and input metadata, the shape it was
compiled for (a range or a size) and the global key (`ir_piecewise.backend.global_key`: the
configuration, the code of ir-piecewise, the package versions, the IR selection state, the
code of the passes, ops and implementations, and the process's world size and rank, so the
ranks of a distributed model share a directory without loading each other's pieces). A file
is ``MAGIC``, the key, a newline, the SHA-256 of the key line, the metadata line and the
payload, a newline, the metadata (one line of JSON: what the compilation decided beside the
code, such as the autotuned choices, `ir_piecewise.autotuned`), a newline, then the payload:
the bytes Inductor's ``CompiledArtifact.save(format="binary")`` writes. Files are
written to a temporary name and renamed into place under the lock, so readers see whole files
or none; a file whose checksum or load fails, or that holds another key's entry, is logged,
removed and recompiled.

File-system faults never fail a compilation: it goes on without the cache, and one warning per
path and reason says so. A cache directory that cannot be written (read-only, another user's)
is still read; one that is not a directory is not used at all; an entry that cannot be read (a
directory, say) is compiled without. The lock is waited for `lock_timeout` seconds; where
another process holds it longer, this process stores nothing more in that directory.
"""

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

logger = logging.getLogger("ir_piecewise")
MAGIC = b"IRPW3\n"
#: seconds a write waits for the cache lock (`CompilationConfig.cache_lock_timeout`)
DEFAULT_LOCK_TIMEOUT = 10.0

#: (path, reason) pairs already warned about in this process
_warned: set[tuple[str, str]] = set()
#: cache directories this process stores nothing more in, with the reason
_not_written: dict[str, str] = {}


def _warn_once(path: Path, reason: str, consequence: str) -> None:
    if (str(path), reason) in _warned:
        return
    _warned.add((str(path), reason))
    logger.warning("ir_piecewise: compile cache %s: %s; %s", path, reason, consequence)


def _reason(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc.strerror or exc}"


def _entry_bytes(key: str, payload: bytes, metadata: Mapping[str, Any] | None = None) -> bytes:
    head = key.encode() + b"\n"
    meta = json.dumps(dict(metadata or {}), sort_keys=True).encode() + b"\n"
    digest = hashlib.sha256(head + meta + payload).hexdigest().encode()
    return MAGIC + head + digest + b"\n" + meta + payload


def _parse(data: bytes) -> tuple[str, dict[str, Any], bytes] | None:
    """The key, metadata and payload of an entry's bytes, or None if they are not a whole
    entry."""
    if not data.startswith(MAGIC):
        return None
    key, _, rest = data[len(MAGIC) :].partition(b"\n")
    digest, _, rest = rest.partition(b"\n")
    meta, _, payload = rest.partition(b"\n")
    if hashlib.sha256(key + b"\n" + meta + b"\n" + payload).hexdigest().encode() != digest:
        return None
    try:
        metadata = json.loads(meta)
    except ValueError:
        return None
    if not isinstance(metadata, dict):
        return None
    return key.decode(errors="replace"), metadata, payload


class CompileCache:
    """Compiled pieces stored under `root`, keyed by hex digests; writes wait at most
    `lock_timeout` seconds for the lock."""

    def __init__(self, root: Path, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout

    def path(self, key: str) -> Path:
        """Where the entry for `key` lives."""
        return self.root / key[:2] / f"{key}.irpw"

    def _usable(self) -> bool:
        """False (warned once) where the cache path exists and is not a directory."""
        try:
            if not self.root.exists() or self.root.is_dir():
                return True
        except OSError as exc:
            _warn_once(self.root, _reason(exc), "compiling without the compile cache")
            return False
        _warn_once(self.root, "not a directory", "compiling without the compile cache")
        return False

    def _stop_writing(self, reason: str) -> None:
        _not_written[str(self.root)] = reason
        _warn_once(
            self.root, reason, "loading what it holds, but storing nothing more in it from this "
            "process",
        )  # fmt: skip

    def _lock(self) -> FileLock:
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / ".lock"), timeout=self.lock_timeout)

    def _lock_held(self) -> None:
        self._stop_writing(
            f"its lock {self.root / '.lock'} was held by another process for more than "
            f"{self.lock_timeout:g} s (CompilationConfig.cache_lock_timeout)"
        )

    def load(self, key: str, load_payload: Callable[[Path], Any]) -> Any | None:
        """The entry for `key` loaded by `load_payload` (given a file holding the payload), or
        None if absent, unreadable, corrupt, another key's or unloadable (a bad file is
        removed)."""
        found = self.load_with_metadata(key, load_payload)
        return None if found is None else found[0]

    def load_with_metadata(
        self, key: str, load_payload: Callable[[Path], Any]
    ) -> tuple[Any, dict[str, Any]] | None:
        """As `load`, with the metadata stored beside the payload (`store`)."""
        if not self._usable():
            return None
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _warn_once(path, _reason(exc), "compiling without it")
            return None
        entry = _parse(data)
        if entry is None:
            logger.warning("ir_piecewise: corrupt cache entry %s (bad checksum); recompiling", path)
            self._remove(path)
            return None
        stored_key, metadata, payload = entry
        if stored_key != key:
            _warn_once(
                path,
                f"holds the entry of another key ({stored_key[:16]}...)",
                "removing it and recompiling",
            )
            self._remove(path)
            return None
        try:
            # staged in the system's temporary directory: the cache may be read-only
            with tempfile.TemporaryDirectory(prefix="ir-piecewise-") as tmp:
                payload_file = Path(tmp) / "artifact.bin"
                payload_file.write_bytes(payload)
                try:
                    return load_payload(payload_file), metadata
                except Exception as exc:  # a stale entry: its format or dependencies changed
                    logger.warning(
                        "ir_piecewise: cache entry %s failed to load (%s: %s); recompiling",
                        path,
                        type(exc).__name__,
                        exc,
                    )
                    self._remove(path)
                    return None
        except OSError as exc:
            _warn_once(Path(tempfile.gettempdir()), _reason(exc), f"compiling without {path}")
            return None

    def store(
        self,
        key: str,
        save_payload: Callable[[Path], None],
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the entry for `key`: `save_payload` writes the payload to the path it is
        given, `metadata` (JSON-ready values) goes beside it; the checksummed entry is then
        renamed into place atomically. A file-system
        fault or a held lock skips the write (warned once); what `save_payload` raises is
        raised."""
        if not self._usable() or str(self.root) in _not_written:
            return
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = tempfile.TemporaryDirectory(dir=self.root)
        except OSError as exc:
            self._stop_writing(_reason(exc))
            return
        with staging as tmp:
            payload_file = Path(tmp) / "artifact.bin"
            save_payload(payload_file)
            staged = Path(tmp) / "entry"
            try:
                staged.write_bytes(_entry_bytes(key, payload_file.read_bytes(), metadata))
                with self._lock():
                    os.replace(staged, path)
            except Timeout:
                self._lock_held()
                return
            except OSError as exc:
                _warn_once(path, _reason(exc), "compiled without storing it")
                return
        logger.debug("ir_piecewise: cached %s", path)

    def remove(self, key: str) -> None:
        """Remove the entry for `key`, if there is one."""
        self._remove(self.path(key))

    def _remove(self, path: Path) -> None:
        if str(self.root) in _not_written:
            return
        try:
            with self._lock():
                path.unlink(missing_ok=True)
        except Timeout:
            self._lock_held()
        except OSError as exc:
            _warn_once(path, _reason(exc), "leaving it in place")
