"""Writes that never follow a symbolic link and never replace what hadw did not write (a leaf: imports
only hadw.errors).

A link planted in a run folder (`ln -s ~/.bashrc RUN/config.yaml`) must not make a run truncate or
overwrite its target. Every file a run writes is opened with O_NOFOLLOW (appends, the lock) or written
to a fresh temporary name and renamed over the final one (a rename replaces a link, never its target);
a planted link where hadw would write is refused in one line.

Output files a command writes where its user asked (`hadw eval --json/--samples/--markdown`, the reports of
`hadw compare --out`) go through `write_output`: a link there is refused, an existing file is replaced only
when hadw wrote it (each command recognises its own files by their content) or with --overwrite, and the
new content is written to a temporary name and renamed, so a failed write leaves the old file whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from hadw.errors import UserError


class LinkError(UserError):
    """A symbolic link sits where hadw would write; hadw never writes through one."""


def refuse_link(path: Path, where: str = "in a run folder: remove it") -> None:
    """LinkError when `path` is a symbolic link (dangling or not); `where` ends the line (what to do)."""
    if path.is_symlink():
        raise LinkError(f"{path} is a symbolic link (to {os.readlink(path)}); hadw never writes through a link {where}")


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
    """Write `text` (UTF-8) to `path` through a temporary file (atomic_write_bytes)."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync)


def atomic_write_bytes(path: Path, data: bytes, fsync: bool = True) -> None:
    """Write `data` to a fresh temporary file beside `path` (O_EXCL | O_NOFOLLOW: a planted temporary name is
    removed first, never followed), fsync it, and rename it over `path` (a link at `path` is replaced). A
    failed write (disk full) removes the temporary file and leaves `path` as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


HEAD_BYTES = 4096  # what `write_output` reads of an existing file to recognise it as hadw's own
TAIL_BYTES = 65536  # and of its end: a PDF's metadata (where a figure is marked) is written last


def _read(path: Path, size: int, from_end: bool) -> bytes:
    """`size` bytes from the start (or the end) of a regular file, read without following a link (b"" when
    unreadable)."""
    try:
        fd = open_nofollow(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, LinkError):
        return b""
    with os.fdopen(fd, "rb") as f:
        if from_end:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
        return f.read(size)


def head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes of a regular file, read without following a link (b"" when unreadable)."""
    return _read(path, size, from_end=False)


def tail(path: Path, size: int = TAIL_BYTES) -> bytes:
    """The last `size` bytes of a regular file, read without following a link (b"" when unreadable)."""
    return _read(path, size, from_end=True)


NAME_MAX = 255  # bytes in one name of a path: the limit of Linux file systems (ext4, xfs, btrfs, NFS)


def folder_name_problem(path: str | Path) -> str | None:
    """What is wrong with a folder name hadw writes in (a run folder, a sweep folder), or None. A control character
    (a newline, a tab) is refused: hadw's logs, progress lines and the resume command it prints are lines, which such
    a name would break. A name of the path longer than NAME_MAX bytes cannot be created. Spaces, any other Unicode
    and a leading dash are fine (give a dashed name as ./-run to a command's argument)."""
    text = str(path)
    bad = sorted({repr(ch) for ch in text if ord(ch) < 32 or ord(ch) == 127})
    if bad:
        return f"holds the control character(s) {', '.join(bad)}; allowed: any name without control characters"
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in Path(text).parts), default=0)
    if longest > NAME_MAX:
        return f"holds a name of {longest} bytes; allowed: at most {NAME_MAX} bytes per name (the file system's limit)"
    return None


def not_writable(folder: Path) -> str | None:
    """Why this process cannot create files in `folder` ("a read-only file system", "permission denied"), or None
    when it can. os.access asks the kernel, so it holds for root as well (root may write anywhere a read-only
    mount does not forbid)."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    return "permission denied"


def check_writable(path: Path, option: str) -> None:
    """UserError (one line naming `option` and `path`) when the file `path` cannot be written where it would go:
    its nearest existing folder is read-only (a results folder mounted read-only) or not ours to write. Checked
    before the work, so that minutes of generation or drawing never end in an error naming a temporary file."""
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    if folder is None or not folder.is_dir():
        return  # below a file: creating the folder says so, in one line
    why = not_writable(folder)
    if why is not None:
        raise UserError(f"{option} {path}: cannot write in {folder} ({why}); choose a file in a writable folder")


def check_output(path: Path, option: str, owned: Callable[[bytes], bool], overwrite: bool = False) -> None:
    """UserError (one line naming `option` and `path`) unless `path` may receive an output file: not a link,
    not a folder or other non-regular file (a device, a FIFO), and, when it exists with content, either recognised
    by `owned` (given the file's first HEAD_BYTES bytes followed by its last TAIL_BYTES) as a file this command
    wrote, or `overwrite` is set."""
    refuse_link(path, f"({option}): remove it or choose another file")
    check_writable(path, option)
    if not path.exists():
        return
    if not path.is_file():
        raise UserError(f"{option} {path}: is a folder or a special file, not a file hadw can write; choose a file")
    if overwrite or path.stat().st_size == 0:
        return
    if not owned(head(path) + tail(path)):
        raise UserError(
            f"{option} {path}: the file exists and hadw did not write it; choose another file, or pass --overwrite "
            "to replace it"
        )


def write_output(
    path: Path, data: str | bytes, option: str, owned: Callable[[bytes], bool], overwrite: bool = False
) -> None:
    """Write an output file the user named (check_output, then a temporary file renamed over `path`)."""
    check_output(path, option, owned, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)


def json_marker(command: str) -> str:
    """The first key of a JSON report hadw writes: how `owned_json` recognises the file as its own."""
    return f'"written_by": "hadw {command}"'


def owned_json(command: str) -> Callable[[bytes], bool]:
    """Recognises a JSON file that starts with {json_marker(command), ...} (what hadw writes)."""
    marker = json_marker(command).encode()
    return lambda data: data.lstrip()[:1] == b"{" and data.lstrip()[1:].lstrip().startswith(marker)


def markdown_marker(command: str) -> str:
    """The first line of a markdown report hadw writes (an HTML comment: invisible when rendered)."""
    return f"<!-- written by hadw {command} -->\n"


def owned_markdown(command: str) -> Callable[[bytes], bool]:
    """Recognises a markdown file that starts with markdown_marker(command)."""
    marker = markdown_marker(command).encode()
    return lambda data: data.startswith(marker)


# Figures (hadw.plotting.save) carry FIGURE_MARKER in their metadata (PNG "Software", PDF / SVG / PostScript
# "Creator"): how a figure hadw drew is told from a user's file of the same name. Other formats cannot be marked,
# so hadw does not write them.
FIGURE_MARKER = "written by hadw"
FIGURE_FORMATS = ("png", "pdf", "svg", "eps", "ps")


def owned_figure(data: bytes) -> bool:
    """Recognises a figure hadw drew (FIGURE_MARKER in its first or last bytes)."""
    return FIGURE_MARKER.encode() in data


def figure_format(path: Path, option: str) -> str:
    """The format of the figure file `path` (its suffix, lower case); UserError naming `option` if hadw does not
    write that format."""
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FIGURE_FORMATS:
        what = f"the suffix {path.suffix!r}" if fmt else "no suffix"
        allowed = ", ".join(f".{f}" for f in FIGURE_FORMATS)
        raise UserError(f"{option} {path}: {what} is not a figure format hadw writes; allowed: {allowed}")
    return fmt


def check_figure(
    path: Path, option: str, overwrite: bool = False, owned: Callable[[bytes], bool] = owned_figure
) -> None:
    """check_output for a figure: a format hadw writes, not a link, not a folder or special file, not an existing
    file hadw did not draw unless `overwrite`. Commands call it before their work (minutes of training or
    sampling must not end in a refusal)."""
    figure_format(path, option)
    check_output(path, option, owned, overwrite)


class DiskFullError(UserError):
    """The disk filled up while hadw wrote a file; what was complete before is kept."""


# How a full disk shows in the errors of the writers hadw calls: OSError (ENOSPC / EDQUOT), safetensors
# ("IoError(Os { code: 28, kind: StorageFull ...})") and torch.save ("PytorchStreamWriter failed writing file", or,
# torch 2.13 on a full file system, its check of the bytes written: "inline_container.cc:672] . unexpected pos").
_FULL_DISK_SIGNS = (
    "No space left on device",
    "StorageFull",
    "code: 28",
    "Disk quota exceeded",
    "file write failed",
    "] . unexpected pos",
)


def is_disk_full(err: BaseException) -> bool:
    """True when err says the disk (or the quota) is full, whichever library raised it."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(sign in str(err) for sign in _FULL_DISK_SIGNS)


@contextlib.contextmanager
def disk_full_is_one_line(what: str, after: str) -> Iterator[None]:
    """Turn a full disk while writing `what` into one line (DiskFullError) that ends with `after` (what is kept,
    how to go on), instead of the writer's 100-line traceback; any other error passes unchanged."""
    try:
        yield
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise DiskFullError(f"the disk is full: writing {what} failed; {after}") from None
