"""speculab._progress off a terminal (output piped, a log): a line when work is announced, then one every few
seconds and one where a part ends, each with the total, the time so far and the time left of the current part
(each decode is one); a fake clock makes the times exact."""

from __future__ import annotations

import io

from speculab._progress import advance, expect, progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_piped_progress_prints_totals_and_time_left_every_few_seconds():
    clock, out = Clock(), io.StringIO()
    with progress("decoding (all runs)", stream=out, every=5.0, clock=clock):
        expect(400, "SD(K=∞): 4 runs of 100 tokens")
        for _ in range(10):  # 10 steps of 20 tokens, 2 s apart: a line every 5 s
            clock.now += 2.0
            advance(20)
        clock.now += 1.0
        expect(200, "Autoregressive(): 2 runs of 100 tokens")  # the next decode: a part of its own
        clock.now += 9.0
        advance(100)
        advance(100)
    lines = out.getvalue().splitlines()
    assert lines == [
        "decoding (all runs): 0 of 400 tokens (0%), 0 s so far, time left not known yet — SD(K=∞): 4 runs of "
        "100 tokens",
        "decoding (all runs): 60 of 400 tokens (15%), 6 s so far, about 34 s left — SD(K=∞): 4 runs of 100 tokens",
        "decoding (all runs): 120 of 400 tokens (30%), 12 s so far, about 28 s left — SD(K=∞): 4 runs of 100 tokens",
        "decoding (all runs): 180 of 400 tokens (45%), 18 s so far, about 22 s left — SD(K=∞): 4 runs of 100 tokens",
        "decoding (all runs): 200 of 400 tokens (50%), 21 s so far, about 21 s left — SD(K=∞): 4 runs of 100 tokens",
        "decoding (all runs), part 2: 0 of 200 tokens (0%), 0 s so far, time left not known yet — Autoregressive(): "
        "2 runs of 100 tokens",
        "decoding (all runs), part 2: 100 of 200 tokens (50%), 9 s so far, about 9 s left — Autoregressive(): 2 runs "
        "of 100 tokens",
        "decoding (all runs), part 2: 200 of 200 tokens (100%), 9 s so far, about 0 s left — Autoregressive(): 2 "
        "runs of 100 tokens",
    ]


def test_durations_past_a_minute_and_nothing_outside_a_display_or_when_disabled():
    clock, out = Clock(), io.StringIO()
    with progress("d", total=10, stream=out, every=0.0, clock=clock):
        clock.now = 125.0
        advance(5)
    # printed once: the line at the end is the same as the last, not printed again
    assert out.getvalue().splitlines() == ["d: 5 of 10 tokens (50%), 2 min 5 s so far, about 2 min 5 s left"]
    expect(5)
    advance(5)  # no display open: nothing, no error
    with progress("d", stream=out, enabled=False) as bar:
        expect(5, "x")
        advance(5)
    assert bar is None and len(out.getvalue().splitlines()) == 1


def test_a_command_counts_its_own_stages_and_holds_the_decodes_inside_them():
    """``plan`` announces its stages as parts of a known number, each in units of its own, and the decodes inside a
    stage (which would each start a part of tokens) report nothing (:func:`held`)."""
    from speculab._progress import held

    clock, out = Clock(), io.StringIO()
    with progress("planning", stream=out, every=float("inf"), clock=clock):
        expect(3, "timing the models", unit="decode", parts=2)
        for _ in range(3):
            with held():
                expect(100, "SD(K=2): 1 run of 100 tokens")  # a decode inside the stage: not a part
                advance(100)
            clock.now += 4.0
            advance(1)
        expect(2, "the exact rounds", unit="context")
        advance(2)
        expect(0, "nothing to do: no part")
    assert out.getvalue().splitlines() == [
        "planning, part 1 of 2: 0 of 3 decodes (0%), 0 s so far, time left not known yet — timing the models",
        "planning, part 1 of 2: 3 of 3 decodes (100%), 12 s so far, about 0 s left — timing the models",
        "planning, part 2 of 2: 0 of 2 contexts (0%), 0 s so far, time left not known yet — the exact rounds",
        "planning, part 2 of 2: 2 of 2 contexts (100%), 0 s so far, about 0 s left — the exact rounds",
    ]
