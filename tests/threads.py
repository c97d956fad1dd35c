"""Running a call on a real thread in tests, with its result and how long it took."""

import threading
import time


def run_in_thread(function):
    result = {}

    def target():
        started = time.monotonic()
        result["value"] = function()
        result["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result
