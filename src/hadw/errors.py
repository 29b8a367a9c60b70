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


class SignalStop(UserError):
    """A signal (SIGINT, SIGTERM, SIGHUP) stopped a command at a safe point, after saving what it had: the
    message says where it stopped and how to go on; the exit code is the shell's for the signal, 128 + its number."""

    prefix = ""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


# Optional packages -> the extra of pyproject.toml that brings them (one home for the CLI's message).
EXTRAS = {
    "matplotlib": "theory",
    "transformers": "eval",
    "tokenizers": "eval",
    "safetensors": "eval",
    "huggingface_hub": "eval",
    "math_verify": "eval",
    "latex2sympy2_extended": "eval",
    "datasets": "eval",
    "pyarrow": "eval",
    "omegaconf": "train",
    "yaml": "train",
    "trl": "trl",
    "accelerate": "trl",
    "tensorboard": "tensorboard",
    "torch.utils.tensorboard": "tensorboard",
    "wandb": "wandb",
    "ray": "cluster",
    "submitit": "cluster",
    "peft": "lora",
}


# Each extra includes the ones before it (pyproject.toml): naming the larger one installs everything a command needs.
TIERS = ("theory", "eval", "train")


class MissingExtraError(UserError):
    """An optional package is not installed: the message names it and the extra to install."""

    def __init__(self, package: str, what: str = "this command", extra: str | None = None) -> None:
        extra = extra or EXTRAS.get(package, "all")
        super().__init__(f"{what} needs the optional package {package!r}: pip install 'hadw[{extra}]'")


def missing_extra(err: BaseException, what: str = "this command", needs: str | None = None) -> MissingExtraError | None:
    """The MissingExtraError for an ImportError of an optional package, else None (a bug keeps its traceback).

    needs: the extra the whole command needs (`train` for `hadw demo`); named instead of the package's own
    extra when it includes it, so one install brings every package the command will ask for.
    """
    name = getattr(err, "name", None) or ""
    if not isinstance(err, ImportError) or not name:
        return None
    for package in (name, name.split(".")[0]):
        if package in EXTRAS:
            extra = EXTRAS[package]
            if needs in TIERS and extra in TIERS and TIERS.index(extra) <= TIERS.index(needs):
                extra = needs
            return MissingExtraError(package, what, extra)
    return None
