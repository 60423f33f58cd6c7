"""Exceptions shared by stages and orchestration (stages may raise them; tasks/ records them)."""


class UnitError(Exception):
    """An expected failure of one unit (bad input, unavailable video, missing weights): its message
    is what the user reads in the status table, so it names the file, row or field at fault."""


class Skip(Exception):
    """Raised by a stage to say "nothing to do for this unit", with the reason (not a failure)."""


class MissingWeights(UnitError):
    """A model's weights are not at the configured path (never downloaded silently)."""

    def __init__(self, config_key: str, path: str, hint: str = ""):
        super().__init__(
            f"model weights not found: {path} (config key `{config_key}`). "
            f"Put the file there or point `{config_key}` at it.{(' ' + hint) if hint else ''}"
        )
        self.config_key = config_key
        self.path = path


class MissingDependency(UnitError):
    """An optional package (the `models` extra) is not installed."""

    def __init__(self, package: str, backend: str):
        super().__init__(
            f"backend {backend!r} needs the package {package!r}: pip install 'vsi-wild[models]'"
        )
