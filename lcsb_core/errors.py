"""Typed errors of the trainer core. Each carries a stable `code` that the service maps to a job's
`error.code` (see DESIGN.md, "Terminal states")."""

from __future__ import annotations


class LCSBError(Exception):
    """Base class; `code` is a short machine-readable reason."""

    code = "internal_error"


class ConfigError(LCSBError, ValueError):
    """A configuration value is invalid; the message names the field."""

    code = "invalid_config"


class ModelLoadError(LCSBError):
    """The base model cannot be loaded; the message says what to do."""

    code = "model_load_error"


class DataError(LCSBError, ValueError):
    """The dataset cannot be used for training; the message names the line and field."""

    code = "invalid_file"


class DivergenceError(LCSBError):
    """Loss or gradients became NaN/Inf; training stopped without saving a non-finite adapter."""

    code = "nan_loss"


class TrainingCancelled(LCSBError):
    """The caller asked to stop between steps (a callback returned a cancel request)."""

    code = "cancelled"
