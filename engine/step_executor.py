"""Run other torch work on the engine's step thread, between two steps.

On a CPU, the engine's step and any other torch work in the same process (the cache's
embedder, the compressor's token scorer) share the cores. Run at the same time, each one's
OpenMP team loses cores in the middle of a parallel region and every op waits for its
slowest thread: a decode step that an embedding overlaps can take twice as long. Run in
turn on one thread, each gets every core for its few milliseconds. `StepThreadExecutor` is a
`concurrent.futures.Executor`, so `loop.run_in_executor(engine.executor, fn, *args)` works.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepJob:
    """One call waiting for the step thread."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future = field(default_factory=Future)

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # cancelled while it waited
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # handed to the caller, like any executor
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class StepThreadExecutor(Executor):
    """Queues calls for the step loop, which runs them before its next step (waking it when
    it is idle). `post` is the loop's inbox; `ensure_running` starts the loop if needed."""

    def __init__(self, post: Callable[[StepJob], None],
                 ensure_running: Callable[[], None]) -> None:
        self._post = post
        self._ensure_running = ensure_running
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if self._shutdown:
            raise RuntimeError("the engine's step thread is shut down")
        job = StepJob(fn, args, kwargs)
        self._ensure_running()
        self._post(job)
        return job.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True
