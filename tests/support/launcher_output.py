"""The output of an `sm-launch` process a whole-job test reads as it comes (the elastic jobs on the
fake autoscaling cluster: tests/launcher/attached/test_elastic.py, test_elastic_zero.py)."""

import re
import threading
import time


class Output:
    """The launcher's output lines as they come, kept and searchable."""

    def __init__(self, proc):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate, timeout_s: float, what: str, proc) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.lines):
            assert proc.poll() is None, f"the launcher ended ({proc.returncode}) before {what}:\n" + self.tail()
            assert time.monotonic() < deadline, f"no {what} within {timeout_s} s:\n" + self.tail()
            time.sleep(0.5)

    def tail(self) -> str:
        """The policy's latest decisions (its holds say why), then the last lines."""
        decisions = [x for x in self.lines if "autoscale:" in x or "cache:" in x]
        return "\n".join(decisions[-30:] + ["..."] + self.lines[-40:])


def last_step(lines: list[str]) -> int:
    return max([int(m.group(1)) for line in lines if (m := re.search(r"step=(\d+) ", line))], default=0)
