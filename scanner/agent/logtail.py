"""Follows the bookie's log files (rotation-safe) and hands every new complete line to a callback.

watchdog reports changes in the files' directories; ``poll()`` (called from a timer too) does
the reading, so a missed event only delays a line. Rotation by rename or by copy-and-truncate
is followed: the old file is read to its end first, then the new one from its start.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
# A "line" longer than this is cut: a log without newlines must not grow our memory.
MAX_LINE = 1 << 16


class _FollowedFile:
    """One log path: the open file, where we are in it, and an unfinished last line."""

    def __init__(self, path: Path, from_start: bool):
        self.path = path
        self.file = None
        self.partial = b""
        self._open(from_start)

    def _open(self, from_start: bool) -> None:
        try:
            self.file = open(self.path, "rb")
        except OSError:
            self.file = None
            return
        if not from_start:
            self.file.seek(0, os.SEEK_END)

    def read_lines(self) -> list[str]:
        if self.file is None:
            self._open(from_start=True)  # created since: everything in it is new
            if self.file is None:
                return []
        lines = self._drain()
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return lines  # rotated away and not recreated yet: keep the old file until it is
        opened = os.fstat(self.file.fileno())
        if (current.st_ino, current.st_dev) != (opened.st_ino, opened.st_dev):
            self.file.close()
            self.partial = b""
            self._open(from_start=True)
            lines += self._drain()
        elif current.st_size < self.file.tell():
            self.file.seek(0)  # truncated in place (copytruncate)
            self.partial = b""
            lines += self._drain()
        return lines

    def _drain(self) -> list[str]:
        lines = []
        while True:
            chunk = self.file.read(READ_CHUNK)
            if not chunk:
                return lines
            *complete, self.partial = (self.partial + chunk).split(b"\n")
            if len(self.partial) > MAX_LINE:
                complete.append(self.partial)
                self.partial = b""
            lines.extend(line.decode("utf-8", "replace") for line in complete)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class LogTail:
    """Calls ``on_line(line)`` for each line appended to any of ``paths`` after ``start()``."""

    def __init__(self, paths, on_line: Callable[[str], None]):
        self.on_line = on_line
        self._lock = threading.Lock()
        self._files: dict[Path, _FollowedFile] = {}
        self._observer = None
        self.set_paths(paths)

    def set_paths(self, paths) -> None:
        """Follow these paths from now on (on reload); paths already followed keep their place."""
        wanted = [Path(p).absolute() for p in paths]
        with self._lock:
            for path in list(self._files):
                if path not in wanted:
                    self._files.pop(path).close()
            for path in wanted:
                if path not in self._files:
                    self._files[path] = _FollowedFile(path, from_start=False)
        if self._observer is not None:
            self._restart_observer()

    def start(self) -> None:
        self._restart_observer()

    def _restart_observer(self) -> None:
        self._stop_observer()
        observer = Observer()
        handler = _Changed(self)
        for directory in {p.parent for p in self._files}:
            if directory.is_dir():
                observer.schedule(handler, str(directory), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def poll(self) -> int:
        """Read what is new in every file; how many lines were handed on."""
        with self._lock:
            lines = [line for followed in self._files.values() for line in followed.read_lines()]
        for line in lines:
            try:
                self.on_line(line)
            except Exception:  # one bad line must not stop the tail
                log.exception("handling a bookie log line failed")
        return len(lines)

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def stop(self) -> None:
        self._stop_observer()
        with self._lock:
            for followed in self._files.values():
                followed.close()
            self._files.clear()


class _Changed(FileSystemEventHandler):
    def __init__(self, tail: LogTail):
        self.tail = tail

    def on_any_event(self, event) -> None:
        if event.is_directory:
            return
        touched = {Path(os.fsdecode(event.src_path))}
        if getattr(event, "dest_path", None):
            touched.add(Path(os.fsdecode(event.dest_path)))
        if touched & set(self.tail._files):
            self.tail.poll()
