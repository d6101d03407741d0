"""User-facing errors.

A `UserError` is bad input (config, data, environment) that the user can fix. The CLI prints its
message as one line, without a traceback, and exits non-zero; anything else is a bug and keeps
its traceback.
"""


class UserError(Exception):
    """Bad input: the message names the field, channel, file or host and says what is wrong."""


class ConfigError(UserError):
    """The YAML config or a `--set` override is invalid."""


class DataError(UserError):
    """A channel's data is missing or malformed."""
