"""How the project's commands (`vsi-wild`, `python -m vsi_wild.deploy`) end their process."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_process(code: int | str | None) -> NoReturn:
    """End the process as the interpreter's exit would, but for the native libraries' teardown after
    it: Arrow's thread pool, destroyed by the C++ runtime once Python has finalised, now and then
    aborted a command that had done its work and written its output ("terminate called without an
    active exception", SIGABRT; apache/arrow#34314; seen once in CI's `vsi-wild sources`). The
    non-daemon threads are waited for and the atexit handlers (Prefect's, logging's) run, as at a
    normal exit; the streams are flushed; then the process ends with the command's exit code.
    ``code`` is what ``sys.exit`` takes: None is 0, a string is printed to stderr and exits 1."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # the reader left (`| head`), or the stream is closed
            stream.flush()
    os._exit(code)
