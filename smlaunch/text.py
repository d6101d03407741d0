"""Small helpers for the words people read: counts with the right plural, durations."""

from __future__ import annotations


def plural(count: int | float, word: str, many: str | None = None) -> str:
    """`1 host`, `2 hosts`, `0 hosts`; `many` for irregular plurals (`plural(2, 'batch', 'batches')`)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`: for progress lines and summaries."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
