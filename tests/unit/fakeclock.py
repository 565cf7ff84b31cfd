"""A stand-in for a module's `time`: monotonic() reads the fake time and then moves it on by `step`; sleep() records
the interval and moves the time on by it."""

from __future__ import annotations


class Clock:
    def __init__(self, start: float = 1000.0, step: float = 0.0) -> None:
        self.now = start
        self.step = step
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        value = self.now
        self.now += self.step
        return value

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
