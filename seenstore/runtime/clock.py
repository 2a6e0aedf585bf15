"""Wall and CPU seconds by stage: the one clock the store's figures are read from.

``Clock()`` sums, per stage name, wall seconds (``wall[stage]``) and CPU seconds
(``cpu[stage]``) of the whole process (``time.process_time``), or with
``thread_cpu=True`` of the calling thread only (``time.thread_time``: where stages
run beside each other on several threads, each counts its own). Two ways to time:
``t = clock.start()`` ... ``clock.stop(stage, t)`` times a span (spans of one stage
add up); ``clock.lap(stage)`` times what ran since the previous lap (or since the
clock was made). ``add_to(total)`` adds every stage into a dict of figures as
``<stage>_s`` and ``<stage>_cpu_s``. A clock is not shared between threads.
"""

from __future__ import annotations

import time


class Clock:
    """Seconds by stage (see the module docstring): ``wall`` and ``cpu`` are dicts
    from stage name to seconds, in the order the stages were first timed."""

    def __init__(self, thread_cpu: bool = False) -> None:
        self.wall: dict = {}
        self.cpu: dict = {}
        self._cpu_time = time.thread_time if thread_cpu else time.process_time
        self._mark = self.start()

    def start(self) -> tuple:
        """The time now, to hand to ``stop``."""
        return time.perf_counter(), self._cpu_time()

    def stop(self, stage: str, t: tuple) -> None:
        """Add the seconds since ``t`` (``start``'s) to ``stage``."""
        self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - t[0]
        self.cpu[stage] = self.cpu.get(stage, 0.0) + self._cpu_time() - t[1]

    def lap(self, stage: str) -> None:
        """Add the seconds since the previous lap (or the clock's making) to ``stage``."""
        now = self.start()
        self.wall[stage] = self.wall.get(stage, 0.0) + now[0] - self._mark[0]
        self.cpu[stage] = self.cpu.get(stage, 0.0) + now[1] - self._mark[1]
        self._mark = now

    def add_to(self, total: dict) -> None:
        """Add each stage's seconds to ``total[<stage>_s]`` and ``total[<stage>_cpu_s]``."""
        for stage, wall in self.wall.items():
            total[stage + "_s"] = total.get(stage + "_s", 0.0) + wall
            total[stage + "_cpu_s"] = total.get(stage + "_cpu_s", 0.0) + self.cpu[stage]
