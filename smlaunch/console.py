"""The console: what a person sees, and where everything else goes.

Everything the launcher says goes through `logging` under the `smlaunch` logger, so one switch
decides how much shows:

* `-q`: errors (stderr) and the result lines (the report's path) only;
* default: the project's own lines (plan summary, bring-up, progress, validation, summary,
  verdict, advisor), nothing from Ray;
* `-v`: our debug lines too, Ray's driver-side logs, and every Ray worker's output forwarded
  (Ray's own `log_to_driver`).

Errors print as one `sm-launch: error: ...` line on stderr, warnings as `WARNING: ...` on stdout,
the rest plainly on stdout (CloudWatch reads a SageMaker job's stdout, and its metric regexes match
our metric lines as printed). A run's log file (`logs/sm-launch.log` in its run directory, or the
SageMaker host's `output/data/smlaunch/`) gets everything at DEBUG, Ray's driver-side loggers
included, whatever the console shows.

Progress: on a terminal a tqdm bar that updates in place (log lines print above it); elsewhere
no escape codes at all, and a plain line every `PLAIN_EVERY_S` seconds instead.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TypedDict

RESULT = 45
"""A level above ERROR for the lines `-q` still prints on stdout (the report's path)."""
logging.addLevelName(RESULT, "RESULT")
PLAIN_EVERY_S = 30.0
"""Seconds between plain progress lines when stdout is not a terminal."""

log = logging.getLogger("smlaunch")


class _State(TypedDict):
    verbosity: int
    file: logging.FileHandler | None


_state: _State = {"verbosity": 0, "file": None}


class _ConsoleHandler(logging.Handler):
    """INFO/WARNING/RESULT to stdout, ERROR to stderr; through tqdm while a bar is drawn."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(record)
        except BrokenPipeError:  # the reader went (the training toolkit, on a stop): write elsewhere, again
            try:
                detach_dead_pipes()
                self._write(record)
            except Exception:
                self.handleError(record)
        except Exception:  # a closed pipe must not turn into a second error
            self.handleError(record)

    def _write(self, record: logging.LogRecord) -> None:
        message = self.format(record)
        stream = sys.stderr if logging.ERROR <= record.levelno < RESULT else sys.stdout
        if _bars and stream.isatty():
            from tqdm import tqdm

            tqdm.write(message, file=stream)
        else:
            stream.write(message + "\n")
            stream.flush()


def detach_dead_pipes() -> None:
    """Point stdout and stderr elsewhere where they are pipes whose reader is gone: the training
    toolkit pipes both to itself (its `capture_error`) and exits at once on SageMaker's SIGTERM.
    They go to the container's own output on a SageMaker host (PID 1's stdout, so CloudWatch still
    gets the lines), else /dev/null (the log file keeps every line). A pipe someone reads is left alone."""
    import os
    import select

    target = None
    if os.environ.get("TRAINING_JOB_NAME") and os.getpid() != 1:  # a SageMaker host: PID 1's stdout is the log stream
        try:
            target = os.open("/proc/1/fd/1", os.O_WRONLY | os.O_APPEND)
        except OSError:
            target = None
    if target is None:
        target = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if any(events & select.POLLERR for _, events in poller.poll(0)):  # a pipe whose reader is gone
            os.dup2(target, fd)
    os.close(target)


class _ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if logging.ERROR <= record.levelno < RESULT:
            return "sm-launch: error: " + " ".join(message.split())
        if record.levelno == logging.WARNING:
            return "WARNING: " + message
        if record.levelno == logging.DEBUG:
            return f"debug: {record.name}: {message}"
        return message


def setup(verbosity: int = 0) -> None:
    """Configure the console for this process: -1 quiet, 0 default, 1 verbose. Idempotent."""
    _state["verbosity"] = verbosity
    handler = next((h for h in log.handlers if isinstance(h, _ConsoleHandler)), None)
    if handler is None:
        handler = _ConsoleHandler()
        handler.setFormatter(_ConsoleFormatter())
        log.addHandler(handler)
    handler.setLevel(logging.ERROR if verbosity < 0 else logging.DEBUG if verbosity > 0 else logging.INFO)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    # Python warnings (deprecations from libraries) go to the log file; to the console only with -v.
    logging.captureWarnings(True)
    warnings_logger = logging.getLogger("py.warnings")
    warnings_logger.propagate = False
    if verbosity > 0 and handler not in warnings_logger.handlers:
        warnings_logger.addHandler(handler)


def verbosity() -> int:
    return _state["verbosity"]


def log_to_file(path: str | Path) -> Path:
    """Also write everything (DEBUG and up, Ray's driver-side loggers too) to `path`."""
    path = Path(path)
    if _state["file"] is not None and _state["file"].baseFilename == str(path.resolve()):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    if _state["file"] is not None:
        close_file()
    _state["file"] = handler
    for name in ("smlaunch", "py.warnings"):
        logging.getLogger(name).addHandler(handler)
    return path


def log_file() -> str | None:
    """The file `log_to_file` writes (relative to the working folder where it is under it), or None."""
    handler = _state["file"]
    if handler is None:
        return None
    path = Path(handler.baseFilename)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def close_file() -> None:
    handler = _state["file"]
    if handler is not None:
        for name in ("smlaunch", "py.warnings", "ray"):
            logging.getLogger(name).removeHandler(handler)
        handler.close()
        _state["file"] = None


def ray_init_options() -> dict:
    """`ray.init` arguments for this verbosity: worker output forwarded only with -v. Ray's driver-side
    logger stays at INFO (the log file gets it); `quiet_ray` decides what reaches the console."""
    return {"logging_level": logging.INFO, "log_to_driver": verbosity() > 0}


def quiet_ray() -> None:
    """After `import ray`: Ray's own driver-side log handler shows only with -v; its records go to
    the run's log file either way. (Ray sets up its `ray` logger, not propagating, at import.)"""
    ray_logger = logging.getLogger("ray")
    for handler in ray_logger.handlers:
        if handler is not _state["file"]:
            handler.setLevel(logging.INFO if verbosity() > 0 else logging.CRITICAL + 1)
    if _state["file"] is not None and _state["file"] not in ray_logger.handlers:
        ray_logger.addHandler(_state["file"])
    if verbosity() <= 0:
        _route_raylet_messages()


def _route_raylet_messages() -> None:
    """Ray's driver prints the raylets' warnings ("4 PYTHON worker processes have been started ...")
    straight to stdout from its error-listener thread, whatever `log_to_driver` says. Send them to
    the log (the file; the console only with -v). Ray has no public switch for this, so the module
    function the thread calls is replaced; if Ray renames it, its lines simply print as before."""
    from smlaunch._ray_compat import replace_stdstream_printer

    ray_log = logging.getLogger("ray.raylet_messages")
    ray_log.setLevel(logging.INFO)  # `ray` itself may sit at WARNING

    def to_log(data, ignore_prefix: bool) -> None:
        for line in data.get("lines", []):
            ray_log.info("(%s) %s", data.get("pid"), line)

    replace_stdstream_printer(to_log)


# --- progress ---------------------------------------------------------------------------------

_bars: list = []


def _count(n: float, unit: str) -> str:
    """A count as people read it: bytes in kB/MB/GB, others with thousands separators
    (`%g` printed 879 MB as `8.79396e+08 B`)."""
    if unit == "B":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if n >= scale:
                return f"{n / scale:,.1f} {name}"
        return f"{n:,.0f} B"
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


class Progress:
    """A progress display: a tqdm bar on a terminal, a plain line every `PLAIN_EVERY_S` otherwise,
    nothing with -q. `update(n)` advances it, `describe(text)` sets the text after the counts."""

    def __init__(
        self,
        desc: str,
        total: float | None = None,
        unit: str = "it",
        initial: float = 0,
        unit_scale: bool = False,
        plain: bool | None = None,
        leave: bool = True,
    ):
        """`leave=False`: the bar vanishes when done (a preparation step that may take a moment)."""
        self.desc, self.total, self.unit = desc, total, unit
        self.n = self.initial = initial
        self.started = time.monotonic()
        self._last_plain = self.started
        self._text = ""
        self._bar = None
        shown = verbosity() >= 0
        self._plain = shown and (plain if plain is not None else not sys.stdout.isatty())
        if shown and not self._plain:
            import shutil

            from tqdm import tqdm

            # A terminal that reports no size (a bare pty) gets 100x40 instead of a hidden, empty bar.
            sized = shutil.get_terminal_size((0, 0)).columns > 0
            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                initial=initial,
                unit_scale=unit_scale,
                dynamic_ncols=sized,
                ncols=None if sized else 100,
                nrows=None if sized else 40,
                smoothing=0.1,
                file=sys.stdout,
                leave=leave,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}"
                if total
                else "{desc}: {n_fmt} {unit} [{elapsed}]{postfix}",
            )
            _bars.append(self._bar)

    def update(self, n: float = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        self._maybe_plain()

    def describe(self, text: str) -> None:
        self._text = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def tick(self) -> None:
        """Redraw (elapsed time moves even without updates), or print the plain line when due."""
        if self._bar is not None:
            self._bar.refresh()
        self._maybe_plain()

    def _maybe_plain(self) -> None:
        now = time.monotonic()
        if self._plain and now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            log.info(self.plain_line())

    def plain_line(self) -> str:
        from smlaunch.text import duration

        elapsed = time.monotonic() - self.started
        unit = self.unit if self.unit == "B" or self.n == 1 and not self.total else self.unit + "s"
        done = f"{_count(self.n, unit)}/{_count(self.total, unit)}" if self.total else _count(self.n, unit)
        done = done if unit == "B" else f"{done} {unit}"
        parts = [f"{self.desc}: {done}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f} %)"
        if self._text:
            parts.append(self._text)
        parts.append(f"elapsed {duration(elapsed)}")
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        return ", ".join(parts)

    def eta_s(self) -> float | None:
        """Seconds left at the average rate so far; None without a total or progress."""
        done, elapsed = self.n - self.initial, time.monotonic() - self.started
        if not self.total or done <= 0 or elapsed <= 0:
            return None
        return max(0.0, (self.total - self.n) * elapsed / done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            _bars.remove(self._bar)
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
