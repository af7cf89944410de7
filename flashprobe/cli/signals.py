"""How the command's own process takes SIGINT and SIGTERM.

- While the commands are imported (torch first, about a second), a Ctrl-C is held and acted on
  after: a KeyboardInterrupt inside an import leaves modules half-initialised, and what then
  ran was anything from a traceback to the whole suite (the interrupt swallowed).
- SIGTERM (a scheduler's stop, plain `timeout`, `docker stop`) stops the command as Ctrl-C
  does: during training the step finishes and is checkpointed (train.interrupt), elsewhere a
  KeyboardInterrupt, one line and exit 143 instead of 130. Not under torchrun, whose ranks
  would each have to finish the same step (there SIGTERM keeps its default: stop at once), nor
  in a --jobs shard process, which stops at once on its parent's SIGTERM (runner.parallel).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The stop signal this process received last, if any (its exit code is 128 + its number).
received: signal.Signals | None = None


@contextlib.contextmanager
def holding_interrupts() -> Iterator[list[int]]:
    """Hold SIGINT inside the block; the list it yields names the signals that arrived."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield arrived
    finally:  # None: a handler not set from Python (an embedding host's); Python's is default
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if arrived:
        _note(signal.SIGINT)


def terminate_as_interrupt() -> None:
    """From here on, SIGTERM does what SIGINT does (see the module docstring)."""
    single = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    if single and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _as_interrupt)


def interrupt_exit_code() -> int:
    """130 after a Ctrl-C, 143 after a SIGTERM: the shell's codes for either signal."""
    return 128 + (received or signal.SIGINT)


def _as_interrupt(signum: int, frame: FrameType | None) -> None:
    _note(signal.SIGTERM)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # Python's default raises KeyboardInterrupt; training's defers it
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _note(signum: signal.Signals) -> None:
    global received
    received = signum
