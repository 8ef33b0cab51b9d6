"""Write files so that an interrupted run never leaves a truncated one.

Each writer writes a temporary file in the destination folder and renames it
over the destination (os.replace is atomic on POSIX within one file system).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from hypar_sim.errors import InputError


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary binary file, then rename it to `path`."""
    path = Path(path)
    tmp = _temporary(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_together(files: dict[str | Path, bytes]) -> None:
    """Write every file's bytes to a temporary file beside it, then rename them all: a
    failure or an interruption while writing (a full disk, Ctrl-C) leaves none of them
    new, not some (`run --csv --trace --plot`), and no temporary file behind."""
    done: list[Path] = []
    try:
        for path, data in files.items():
            done.append(_temporary(Path(path), lambda handle, data=data: handle.write(data)))
        for tmp, path in zip(done, files, strict=True):
            os.replace(tmp, path)
    except BaseException:
        for tmp in done:
            tmp.unlink(missing_ok=True)
        raise


def _temporary(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """A hidden temporary file beside `path` holding what `write(f)` wrote (synced to disk),
    removed again if writing fails."""
    import tempfile  # 4 ms of a process's start: only when a file is written

    check_target(path, "output")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Folders of the system's own files: an output there is refused (a device or a kernel
#: setting is not a place for results).
SYSTEM_FOLDERS = (Path("/dev"), Path("/proc"), Path("/sys"))


def check_target(path: Path, what: str) -> None:
    """InputError unless `path` may be replaced by a new regular file: not a folder, not
    a device, pipe or socket, not under a system folder (`SYSTEM_FOLDERS`)."""
    if path.is_dir():
        raise InputError(f"{what}: {path} is a folder, not a file")
    if path.exists() and not path.is_file():
        raise InputError(f"{what}: {path} is not a regular file (a device, pipe or socket); "
                         "give a file path")
    resolved = path.resolve()
    if any(resolved.is_relative_to(folder) for folder in SYSTEM_FOLDERS):
        raise InputError(f"{what}: {path} is under a system folder "
                         f"({', '.join(map(str, SYSTEM_FOLDERS))}); give a file path elsewhere")


def check_writable(path: str | Path, what: str) -> Path:
    """InputError now, before any work, if `path` cannot be written later."""
    path = Path(path)
    check_target(path, what)
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise InputError(f"{what}: {parent} is not a folder")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{what}: cannot write in {parent}")
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))
