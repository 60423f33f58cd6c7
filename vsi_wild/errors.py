"""Exceptions shared by stages and orchestration (stages may raise them; tasks/ records them)."""


class UnitError(Exception):
    """An expected failure of one unit (bad input, unavailable video, missing weights): its message
    is what the user reads in the status table, so it names the file, row or field at fault.

    ``kind`` classifies it for reports (``bad_input``, ``unavailable``, ``private``, ``removed``,
    ``gated``, ``geo_blocked``, ``rate_limited``, ``network``, ``missing_weights``, ...);
    ``retryable=False`` means a re-run with the same inputs cannot succeed, so it is not retried
    (``--force`` still retries it).
    """

    def __init__(self, message: str, kind: str = "bad_input", retryable: bool = True):
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class Skip(Exception):
    """Raised by a stage to say "nothing to do for this unit", with the reason (not a failure)."""


class MissingWeights(UnitError):
    """A model's weights are not at the configured path (never downloaded silently)."""

    def __init__(self, config_key: str, path: str, hint: str = ""):
        super().__init__(
            f"model weights not found: {path} (config key `{config_key}`). "
            f"Put the file there or point `{config_key}` at it.{(' ' + hint) if hint else ''}",
            kind="missing_weights",
        )
        self.config_key = config_key
        self.path = path


class MissingDependency(UnitError):
    """An optional package (the `models` extra) is not installed."""

    def __init__(self, package: str, backend: str):
        super().__init__(
            f"backend {backend!r} needs the package {package!r}: pip install 'vsi-wild[models]'",
            kind="missing_dependency",
        )
