"""Processes for the black-box tests: where the binaries are, free ports,
temporary files, a child process whose stdout is read line by line, and
stopping by PID (terminate, wait, kill), never by name."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Optional, Sequence


def parse_build_dir(argv: Optional[list] = None) -> str:
    """Returns the value of --build-dir and removes it from argv (default
    sys.argv) so unittest.main() does not see it. Falls back to
    $WEIR_BUILD_DIR, then ./build."""
    argv = sys.argv if argv is None else argv
    value = os.environ.get("WEIR_BUILD_DIR", "build")
    i = 1
    while i < len(argv):
        if argv[i] == "--build-dir" and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
        elif argv[i].startswith("--build-dir="):
            value = argv[i].split("=", 1)[1]
            del argv[i]
        else:
            i += 1
    return os.path.abspath(value)


def binary(build_dir: str, relpath: str) -> str:
    """Path of a built program, e.g. binary(b, "bench/gslb_sim/gslb-sim").
    Raises FileNotFoundError with a clear message when it was not built."""
    path = os.path.join(build_dir, relpath)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} not found or not executable (build it first)")
    return path


def require_tools(*names: str) -> None:
    """Raises RuntimeError naming the missing programs. Black-box tests need
    the real clients, so a missing one is a setup error, not a skipped test."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise RuntimeError(f"missing tools: {', '.join(missing)} (scripts/install-deps.sh installs them)")


# Set by scripts/test.sh (CI installs every tool and runs as root): a test that
# would be skipped for a missing tool or privilege fails instead.
REQUIRE_ALL = os.environ.get("WEIR_REQUIRE_ALL") == "1"


def requires(condition: bool, reason: str):
    """A class or method decorator: without `condition` the test is skipped
    with `reason`, or, under WEIR_REQUIRE_ALL=1 (CI), fails with it."""
    if condition:
        return lambda obj: obj
    if not REQUIRE_ALL:
        return unittest.skip(reason)

    def fail(obj):
        if isinstance(obj, type):
            def set_up_class(cls):
                raise AssertionError(f"required by CI: {reason}")
            obj.setUpClass = classmethod(set_up_class)
            return obj

        def failing(self, *a, **kw):
            self.fail(f"required by CI: {reason}")
        failing.__name__ = obj.__name__
        return failing
    return fail


def skip_or_fail(test, reason: str) -> None:
    """Inside a test: skip with `reason`, or fail under WEIR_REQUIRE_ALL=1 (CI)."""
    if REQUIRE_ALL:
        test.fail(f"required by CI: {reason}")
    test.skipTest(reason)


def child_pids(pid: int) -> list:
    """The processes `pid` started (from any of its threads)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def free_port(host: str = "127.0.0.1", udp_and_tcp: bool = True) -> int:
    """A port that is free right now on `host` for TCP (and UDP). Prefer
    letting a server bind port 0 and report its port: another process can
    take this one before you bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(50):
        with socket.socket(family, socket.SOCK_STREAM) as t:
            t.bind((host, 0))
            port = t.getsockname()[1]
            if not udp_and_tcp:
                return port
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as u:
                    u.bind((host, port))
                    return port
            except OSError:
                continue
    raise RuntimeError(f"no free port on {host}")


def write_temp(text: str, suffix: str = ".toml", directory: Optional[str] = None) -> str:
    """Writes `text` to a new temporary file and returns its path."""
    fd, path = tempfile.mkstemp(suffix=suffix, dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def run(argv: Sequence[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
    """Runs a command to completion, capturing text stdout/stderr."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


def netns_argv(netns: Optional[str], argv: Sequence[str]) -> list:
    """`argv` run inside the named network namespace (`ip netns exec`), or
    `argv` itself when netns is None: how a client reaches a server that
    listens only inside a namespace the test created (weirtest.netns)."""
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


class Process:
    """A child process whose stdout is read line by line in the background.

    The constructor starts it and waits until a stdout line matches `ready`
    (a regex), so the caller knows it is serving. Lines seen so far are in
    `lines`; stderr goes to a temporary file (`stderr_text()`).
    """

    def __init__(self, argv: Sequence[str], ready: Optional[str] = r"^ready$", timeout: float = 10.0,
                 env: Optional[dict] = None, cwd: Optional[str] = None):
        self.argv = list(argv)
        self.lines: list[str] = []
        self._queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._stderr_final = ""
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
                                     cwd=cwd, bufsize=1)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if ready is not None:
            try:
                self.wait_line(ready, timeout)
            except Exception:
                self.stop()
                raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float = 10.0) -> re.Match:
        """Waits for a stdout line matching `pattern`, the first seen so far
        or the next; returns the match. Raises RuntimeError (with stderr) if
        the process exits or times out."""
        rx = re.compile(pattern)
        for line in self.lines:
            m = rx.search(line)
            if m:
                return m
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self._next_line(deadline, f"a line matching {pattern!r}"))
            if m:
                return m

    def wait_count(self, pattern: str, count: int, timeout: float = 10.0) -> None:
        """Waits until `count` stdout lines in all match `pattern` (wait_line
        also returns a line seen before: this waits for the Nth of a line
        that repeats)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while sum(1 for line in self.lines if rx.search(line)) < count:
            self._next_line(deadline, f"{count} lines matching {pattern!r}")

    def _next_line(self, deadline: float, what: str) -> str:
        """The next stdout line (also appended to `lines`) before
        `deadline`; RuntimeError (with stderr) if none comes or the process
        ends first."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.argv[0]}: no {what} in time; stdout={self.lines!r} "
                                   f"stderr={self.stderr_text()!r}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self._queue.put(None)  # the end stays for the next caller
                self.proc.wait(timeout=5)
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode} before {what}; "
                                   f"stdout={self.lines!r} stderr={self.stderr_text()!r}")
            self.lines.append(line)
            return line

    def stderr_text(self) -> str:
        if self._stderr.closed:
            return self._stderr_final
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        rc = stop_pid(self.proc, timeout)
        self._reader.join(timeout=2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr_final = self.stderr_text()
            self._stderr.close()
        return rc

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_pid(proc: "subprocess.Popen | int", timeout: float = 5.0) -> int:
    """Stops one process we started: SIGTERM, wait, then SIGKILL. Accepts a
    Popen (preferred: it is reaped) or a PID. Returns the exit code (or
    -signal), or 0 for a bare PID that is already gone."""
    if isinstance(proc, int):
        try:
            os.kill(proc, signal.SIGTERM)
        except ProcessLookupError:
            return 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(proc, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.05)
        try:
            os.kill(proc, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return -signal.SIGKILL
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.05) -> bool:
    """Polls `predicate` until it is true; raises AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def collect_lines(process: Process, settle: float = 0.2) -> list:
    """Moves every stdout line the process printed so far (waiting `settle`
    seconds for stragglers) into process.lines and returns process.lines.
    For scripted servers that print one line per event."""
    deadline = time.monotonic() + settle
    while True:
        try:
            line = process._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            process._queue.put(None)  # keep the end marker for wait_line()
            break
        process.lines.append(line)
    return process.lines


def split_hostport(text: str) -> tuple:
    """'127.0.0.1:53' -> ('127.0.0.1', 53); '[::1]:53' -> ('::1', 53)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def proc_cpu_us(pid: int) -> tuple:
    """(user, system) CPU time of a whole process (all its threads) so far,
    in microseconds, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    # The command name (field 2) may contain spaces: split after its ')'.
    fields = data[data.rindex(")") + 2:].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) * 1_000_000 // tck, int(fields[12]) * 1_000_000 // tck  # fields 14, 15 of proc(5)
