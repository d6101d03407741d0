"""User-facing errors.

A `UserError` is bad input (config, data, environment) that the user can fix. The CLI prints its
message as one line, without a traceback, and exits non-zero; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import re


class UserError(Exception):
    """Bad input: the message names the field, channel, file or host and says what is wrong."""


class ConfigError(UserError):
    """The YAML config or a `--set` override is invalid."""


class DataError(UserError):
    """A channel's data is missing or malformed."""


class UserCodeError(UserError):
    """A function of the user's (a map op on a data host) raised: the message names its config
    field, the line of the user's code it came from, and the error. It raises again on any retry."""


_RAISED = re.compile(r"(smlaunch(?:\.\w+)+)\.(\w+): (.+)")


def user_error_in(exc: BaseException) -> str | None:
    """The message of a `UserError` raised in a Ray task or train worker and wrapped by Ray.

    Ray re-raises worker exceptions wrapped (RayTaskError, WorkerGroupError) and often only as
    text, so the text is searched for `smlaunch.<module>.<Class>: message` and the class is
    checked to be a `UserError` before its message is trusted.
    """
    import importlib

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UserError):
            return str(current)
        texts = [str(current)] + [str(e) for e in getattr(current, "worker_failures", {}).values()]
        for match in _RAISED.finditer("\n".join(texts)):
            try:
                cls = getattr(importlib.import_module(match.group(1)), match.group(2), None)
            except ImportError:
                continue
            if isinstance(cls, type) and issubclass(cls, UserError):
                return match.group(3).strip()
        # Ray Train's ControllerError holds the controller's error as `controller_failure`.
        current = getattr(current, "controller_failure", None) or current.__cause__ or current.__context__
    return None


def describe_error(exc: BaseException) -> str:
    """One line for any exception: a UserError's message, else the type and first line."""
    reason = user_error_in(exc)
    if reason is not None:
        return reason
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"internal error: {type(exc).__name__}: {first}"
