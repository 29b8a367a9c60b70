"""The one base class of every error a user can fix: the CLI prints its message as one line and exits 2.

Lowest floor (no imports): ConfigError, DatasetError, RunDirError, ... subclass UserError so the single
handler in `hadw.cli.main` catches them all, whichever package raised them.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input (a config key, a data file, a path, a run folder). The message names the file / key /
    value and what is allowed; the CLI shows it as one line and exits with `exit_code` (2)."""

    exit_code = 2
    prefix = "error: "  # what the CLI puts before the message
