"""Ctrl-C (SIGINT) during training: finish the step, checkpoint it, then stop.

A run cut by a time limit (`timeout -s INT`, a device call, a job scheduler) or by a user then
resumes from the step it reached instead of from its last periodic checkpoint. Resuming from
any step is exact (the data and the random numbers of step t depend on t alone), so this
changes no result. A second Ctrl-C interrupts at once. Only a single process defers: under
torchrun the ranks would have to agree on the step, so there SIGINT interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType


class DeferredInterrupt:
    """Context manager: while active, the first SIGINT only sets `requested`."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested = False
        self._previous: object = None

    def __enter__(self) -> DeferredInterrupt:
        if self.enabled:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.enabled and self._previous is not None:  # None: not set from Python
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.requested = True
