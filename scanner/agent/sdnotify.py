"""systemd's notify protocol without a library: one datagram per message to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


class SystemdNotifier:
    """Sends READY=1, WATCHDOG=1, STOPPING=1 and STATUS=...; does nothing when not run by systemd."""

    def __init__(self, environ=os.environ):
        address = environ.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # an abstract socket
        self._address = address or None
        watchdog = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        mine = not pid or (pid.isdigit() and int(pid) == os.getpid())
        usec = int(watchdog) if watchdog.isdigit() and mine else 0
        self.watchdog_interval = usec / 2e6 if usec else None  # ping at half the timeout, as systemd advises

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines; False if there is no socket or sending failed."""
        if self._address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Never wait on a listener that does not read: a lost ping is better than a scheduler held up.
                sock.sendto(message, socket.MSG_DONTWAIT, self._address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")
