"""The terminal's progress printer: a bar redrawn in place on a TTY, one line per segment elsewhere."""

import io

import pytest

from dask_podracer.population.orchestrator import Progress
from dask_podracer.progress import ProgressPrinter
from dask_podracer.train import SegmentResult

UP_AND_CLEAR = "\x1b[1A\r\x1b[2K"


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def result(key: str, score: float) -> SegmentResult:
    return SegmentResult(key=key, parent=None, algorithm="sac", env="Pendulum-v1", hparams={}, score=score,
                         segment_env_steps=1000, lineage_env_steps=1000, train_seconds=1.0, eval_seconds=0.1, generation=0,
                         device="cpu", metrics={})


# a run of 100 s: -900 (best), -1000 (not better), a failure, -300 (new best)
EVENTS = [
    Progress(10.0, 1, 0, 1000, -900.0, result("s000000-a", -900.0), 0, None, 2),
    Progress(20.0, 2, 0, 2000, -900.0, result("s000001-b", -1000.0), 1, None, 2),
    Progress(25.0, 2, 1, 2000, -900.0, None, None, "SegmentError: non-finite loss", 1),
    Progress(50.0, 3, 1, 3000, -300.0, result("s000003-d", -300.0), 0, None, 2),
]


def test_on_a_tty_one_status_line_is_redrawn_and_news_stays_above_it():
    stream = Stream(tty=True)
    printer = ProgressPrinter(100.0, stream)
    for event in EVENTS:
        printer(event)
    text = stream.getvalue()
    assert text.count(UP_AND_CLEAR) == 3  # every redraw but the first erases the previous status line
    # what the terminal shows in the end: each erase removes the line before it
    screen: list[str] = []
    for chunk in text.split(UP_AND_CLEAR):
        if screen:
            screen.pop()
        screen += chunk.splitlines()
    assert screen == [
        "10.0s new best -900.0: s000000-a (sac, 1,000 env steps so far)",
        "25.0s segment failed: SegmentError: non-finite loss",
        "50.0s new best -300.0: s000003-d (sac, 3,000 env steps so far)",
        ("[############............]  50% of 1m40s | best -300.0 | done 3 failed 1 | running 2 | 0.08 seg/s | "
         "60 steps/s"),
    ]
    assert text.endswith("\n")  # whatever prints next (the CLI's summary) starts on its own line


def test_without_a_tty_every_segment_gets_one_plain_line():
    stream = Stream(tty=False)
    printer = ProgressPrinter(100.0, stream)
    for event in EVENTS:
        printer(event)
    lines = stream.getvalue().splitlines()
    assert "\x1b" not in stream.getvalue() and len(lines) == 4
    assert lines[0] == ("[   10.0s  10% of budget] s000000-a sac  score    -900.0 (rank 1) | best -900.0 | done 1 "
                        "failed 0 running 2 | 0.10 seg/s | 100 steps/s | 1,000 env steps")
    assert "s000001-b sac  score   -1000.0 (rank 2) | best -900.0" in lines[1]
    assert "segment failed: SegmentError: non-finite loss | best -900.0 | done 2 failed 1 running 1" in lines[2]
    assert lines[3].startswith("[   50.0s  50% of budget] s000003-d") and "| best -300.0 |" in lines[3]


def test_the_mode_follows_the_stream_and_the_budget_must_be_positive():
    assert ProgressPrinter(10.0, Stream(tty=True)).tty and not ProgressPrinter(10.0, Stream(tty=False)).tty
    with pytest.raises(ValueError, match="budget_seconds must be > 0"):
        ProgressPrinter(0.0, Stream(tty=True))
