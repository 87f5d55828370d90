"""The one configuration error type."""


class ConfigError(ValueError):
    """A configuration file (or value) is unusable; the message names file, key, expected and found."""

    def __init__(self, source: str, key: str, expected: str, found: object, hint: str = "") -> None:
        self.source = source
        self.key = key
        self.expected = expected
        self.found = found
        self.hint = hint
        found_text = repr(found)
        if len(found_text) > 120:
            found_text = found_text[:117] + "..."
        message = f"{source}: {key or '(top level)'}: expected {expected}, found {found_text}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)
