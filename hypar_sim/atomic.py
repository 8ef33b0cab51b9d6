"""Write files so that an interrupted run never leaves a truncated one.

Each writer writes a temporary file in the destination folder and renames it
over the destination (os.replace is atomic on POSIX within one file system).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from hypar_sim.errors import InputError, clip_value


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(f)` on a temporary binary file, then rename it to `path`."""
    path = Path(path)
    tmp = _temporary(path, write)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _cannot_write(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _cannot_write(path: Path, exc: OSError) -> InputError:
    """A write the file system refused (a full disk, an immutable file, a name too long),
    as one line."""
    return InputError(f"output: cannot write {path} ({exc.strerror or exc})")


def write_together(files: dict[str | Path, bytes]) -> None:
    """Write every file's bytes to a temporary file beside it, then rename them all: a
    failure or an interruption while writing (a full disk, Ctrl-C) leaves none of them
    new, not some (`run --csv --trace --plot`), and no temporary file behind."""
    temporaries: list[Path] = []
    backups: dict[Path, Path | None] = {}  # each file renamed into place: its old content
    target = Path()
    try:
        for target, data in zip(map(Path, files), files.values(), strict=True):
            temporaries.append(_temporary(target, lambda handle, data=data:
                                          handle.write(data)))
        for tmp, target in zip(temporaries, map(Path, files), strict=True):
            backup = _backup(target)
            try:
                os.replace(tmp, target)
            except BaseException:
                if backup is not None:
                    backup.unlink()
                raise
            backups[target] = backup
    except BaseException as exc:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
        for path, backup in backups.items():  # undo the renames done: old content or none
            if backup is not None:
                os.replace(backup, path)
            else:
                path.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _cannot_write(target, exc) from None
        raise
    for backup in backups.values():
        if backup is not None:
            backup.unlink(missing_ok=True)


def _backup(path: Path) -> Path | None:
    """A hard link to `path`'s current file beside it (None: no file there yet)."""
    if not path.exists():
        return None
    backup = path.with_name(f".{path.name}.{os.getpid()}.old")
    backup.unlink(missing_ok=True)
    os.link(path, backup)
    return backup


def _temporary(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """A hidden temporary file beside `path` holding what `write(f)` wrote (synced to disk),
    removed again if writing fails."""
    import tempfile  # 4 ms of a process's start: only when a file is written

    check_target(path, "output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:60]}.",
                                   suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _cannot_write(path, exc) from None
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
    try:
        if path.is_dir():
            raise InputError(f"{what}: {path} is a folder, not a file")
        if path.exists() and not path.is_file():
            raise InputError(f"{what}: {path} is not a regular file (a device, pipe or "
                             "socket); give a file path")
        resolved = path.resolve()
    except OSError as exc:  # a name too long, a loop of links
        raise InputError(f"{what}: {clip_value(str(path))}: {exc.strerror or exc}") from None
    if any(resolved.is_relative_to(folder) for folder in SYSTEM_FOLDERS):
        raise InputError(f"{what}: {path} is under a system folder "
                         f"({', '.join(map(str, SYSTEM_FOLDERS))}); give a file path elsewhere")


def check_writable(path: str | Path, what: str) -> Path:
    """InputError now, before any work, if `path` cannot be written later."""
    if str(path).endswith(os.sep):  # Path("out/") drops the slash: a folder was meant
        raise InputError(f"{what}: {path} is a folder, not a file")
    path = Path(path)
    check_target(path, what)
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise InputError(f"{what}: {parent} is not a folder")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{what}: cannot write in {parent}")
    return path


def check_folder(path: Path, what: str) -> None:
    """InputError now unless `path` is a folder files may be written into, or a new one (not
    a file, a device, a system folder; a folder the process may write in)."""
    try:
        if path.exists() and not path.is_dir():
            raise InputError(f"{what}: {path} is not a folder; give a folder for the figures")
    except OSError as exc:
        raise InputError(f"{what}: {clip_value(str(path))}: {exc.strerror or exc}") from None
    check_writable(path / "README.md", what)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))
