"""Seconds by stage (seenstore/runtime/clock.py), on a clock the test moves."""

import threading
import time

import pytest

from seenstore.runtime import clock as clockmod
from seenstore.runtime.clock import Clock


class FakeTime:
    """``perf_counter``, ``process_time`` and ``thread_time`` the test sets."""

    def __init__(self):
        self.wall, self.process, self.thread = 100.0, 10.0, 1.0

    def perf_counter(self):
        return self.wall

    def process_time(self):
        return self.process

    def thread_time(self):
        return self.thread

    def step(self, wall, process, thread):
        self.wall += wall
        self.process += process
        self.thread += thread


@pytest.fixture
def fake(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(clockmod, "time", t)
    return t


def test_spans_of_a_stage_add_up_in_wall_and_process_cpu_seconds(fake):
    c = Clock()
    t = c.start()
    fake.step(2.0, 0.5, 0.25)
    c.stop("sort", t)
    t = c.start()
    fake.step(1.0, 1.0, 0.5)
    c.stop("check", t)
    t = c.start()
    fake.step(3.0, 0.25, 0.125)
    c.stop("sort", t)
    assert c.wall == {"sort": 5.0, "check": 1.0}
    assert c.cpu == {"sort": 0.75, "check": 1.0}  # the process's, not the thread's


def test_laps_time_what_ran_since_the_previous_one_in_thread_cpu(fake):
    c = Clock(thread_cpu=True)
    fake.step(1.0, 5.0, 0.5)
    c.lap("wait")
    fake.step(2.0, 5.0, 1.5)
    c.lap("check")
    c.lap("write")  # nothing ran since
    assert c.wall == {"wait": 1.0, "check": 2.0, "write": 0.0}
    assert c.cpu == {"wait": 0.5, "check": 1.5, "write": 0.0}


def test_add_to_sums_every_stage_into_figures_named_by_stage(fake):
    total = {"check_s": 1.0, "check_cpu_s": 0.5}
    for _ in range(2):
        c = Clock(thread_cpu=True)
        fake.step(1.0, 0.0, 0.25)
        c.lap("sort_wait")
        fake.step(2.0, 0.0, 2.0)
        c.lap("check")
        c.add_to(total)
    assert total == {"check_s": 5.0, "check_cpu_s": 4.5, "sort_wait_s": 2.0,
                     "sort_wait_cpu_s": 0.5}


def test_thread_cpu_leaves_out_other_threads_and_process_cpu_counts_them():
    def burn():
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    mine, process = Clock(thread_cpu=True), Clock()
    other = threading.Thread(target=burn)
    other.start()
    other.join()
    mine.lap("wait")
    process.lap("wait")
    assert mine.cpu["wait"] < 0.1
    assert process.cpu["wait"] >= 0.15
    assert mine.wall["wait"] >= 0.15 and process.wall["wait"] >= 0.15
