"""Writes into a run folder that never follow a symbolic link (a leaf: imports only hadw.errors).

A link planted in a run folder (`ln -s ~/.bashrc RUN/config.yaml`) must not make a run truncate or
overwrite its target. Every file a run writes is opened with O_NOFOLLOW (appends, the lock) or written
to a fresh temporary name and renamed over the final one (a rename replaces a link, never its target);
a planted link where hadw would write is refused in one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from hadw.errors import UserError


class LinkError(UserError):
    """A symbolic link sits where hadw would write; hadw never writes through one."""


def refuse_link(path: Path) -> None:
    """LinkError when `path` is a symbolic link (dangling or not)."""
    if path.is_symlink():
        raise LinkError(
            f"{path} is a symbolic link (to {os.readlink(path)}); hadw never writes through a link in a run "
            "folder: remove it"
        )


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW; a link at `path` is a one-line LinkError instead of ELOOP."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as err:
        if path.is_symlink():
            refuse_link(path)
        raise err from None


def open_append(path: Path) -> IO[str]:
    """A text file opened for appending (created if absent), never through a link."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return os.fdopen(fd, "a", encoding="utf-8")


def atomic_write_text(path: Path, text: str, fsync: bool = True) -> None:
    """Write `text` to a fresh temporary file beside `path` (O_EXCL | O_NOFOLLOW: a planted temporary name is
    removed first, never followed), fsync it, and rename it over `path` (a link at `path` is replaced)."""
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
