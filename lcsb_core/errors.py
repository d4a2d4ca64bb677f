"""Typed errors of the trainer core. Each carries a stable `code` that the service maps to a job's
`error.code` (see DESIGN.md, "Terminal states"), and the `field` it concerns (None when no one field
is to blame), so that callers never recover either from the message text.

    raise ConfigError("lora.rank", f"must be an integer in [1, 1024], got {rank!r}")
    raise ConfigError("save_every", "is 6, more than {max_steps} (5)", mentions=("max_steps",))
    str(exc)                                   # "save_every: is 6, more than max_steps (5)"
    exc.describe(lambda f: "method." + f)      # the same with the caller's names for the fields
"""

from __future__ import annotations

from collections.abc import Callable


def require(condition: bool, field: str, message: str, mentions: tuple[str, ...] = ()) -> None:
    """The settings' one check helper: nothing when `condition` holds.

    Raises:
        ConfigError: `field` and `message` (other fields as `{name}` placeholders, listed in `mentions`).
    """
    if not condition:
        raise ConfigError(field, message, mentions=mentions)


class LCSBError(Exception):
    """Base class; `code` is a short machine-readable reason, `field` the config field or request
    file it concerns (None: none in particular)."""

    code = "internal_error"
    field: str | None = None


class ConfigError(LCSBError, ValueError):
    """A configuration value is invalid.

    `field` is the dotted config name ("lora.rank", "eval_every"; None when no single field is to
    blame); `message` says what is wrong with it, without the name. Other fields the message names are
    written as `{name}` placeholders and listed in `mentions`, so `describe` can rename them too.
    """

    code = "invalid_config"

    def __init__(self, field: str | None, message: str, *, mentions: tuple[str, ...] = ()) -> None:
        self.field = field
        self.message = message
        self.mentions = tuple(mentions)
        super().__init__(self.describe())

    def __reduce__(self) -> tuple:
        """Pickle by the constructor's arguments (the default would pass only the rendered text)."""
        return _config_error, (type(self), self.field, self.message, self.mentions)

    def describe(self, name: Callable[[str], str] = str) -> str:
        """The message with every field (`field` and `mentions`) written as `name(field)`."""
        text = self.message
        for mention in self.mentions:
            text = text.replace("{" + mention + "}", name(mention))
        return f"{name(self.field)}: {text}" if self.field else text


def _config_error(cls: type[ConfigError], field: str | None, message: str, mentions: tuple[str, ...]) -> ConfigError:
    """Unpickle a ConfigError (see `ConfigError.__reduce__`)."""
    return cls(field, message, mentions=mentions)


class ModelLoadError(LCSBError):
    """The base model cannot be loaded; the message says what to do."""

    code = "model_load_error"


class BaseGGUFMissingError(ModelLoadError):
    """A catalog model's shipped GGUF file is not on this machine: its package is not installed, the
    file is not in it, or it cannot be assembled from its chunk packages."""

    code = "base_gguf_missing"


class BaseGGUFMismatchError(ModelLoadError):
    """A catalog model's GGUF file is there but its SHA-256 is not the catalog's."""

    code = "base_gguf_mismatch"


class DataError(LCSBError, ValueError):
    """The dataset cannot be used for training; the message names the line and field. The service
    sets `field` to the request field of the file ("training_file", "validation_file")."""

    code = "invalid_file"


class DivergenceError(LCSBError):
    """Loss or gradients became NaN/Inf; training stopped without saving a non-finite adapter."""

    code = "nan_loss"


class TrainingCancelled(LCSBError):
    """The caller asked to stop between steps (a callback returned a cancel request)."""

    code = "cancelled"


class CheckpointError(LCSBError):
    """A checkpoint cannot be resumed: an older layout, or tensors that do not match the model's."""

    code = "invalid_checkpoint"


class ExportError(LCSBError, ValueError):
    """An adapter cannot be exported to the requested format (`lcsb_core.export`); the message says
    what the format cannot hold and why. `field` names the request field ("formats", "checkpoint")."""

    code = "unsupported_export"

    def __init__(self, message: str, *, field: str | None = "formats") -> None:
        self.field = field
        super().__init__(message)


class AdapterError(ExportError):
    """The adapter's files cannot be read as a PEFT LoRA adapter: an unreadable config or weights file,
    a module with only one of A and B, shapes that do not form a product, no LoRA tensors. (What plain
    LoRA on linear layers cannot hold, e.g. DoRA magnitudes, stays `ExportError`: `unsupported_export`.)
    Messages name files by their names in the adapter folder, never by a path."""

    code = "adapter_corrupt"

    def __init__(self, message: str) -> None:
        super().__init__(message, field=None)


class AdapterMissingError(ExportError):
    """There is no stored adapter to export (the job's or the checkpoint's archive is gone)."""

    code = "adapter_missing"

    def __init__(self, message: str) -> None:
        super().__init__(message, field=None)
