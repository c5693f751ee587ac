import pytest

from parrot.engines.sim_pacing import LATE_TIMER_S, StepPacer


def test_on_a_real_clock_a_late_timer_is_made_up_but_not_a_stall():
    """Back-to-back iterations are paced from where the previous one ended on paper: a timer
    that woke up to LATE_TIMER_S late shortens the next sleep by as much (the lateness never
    adds up over a run); a longer stall is not made up, and on a virtual clock (never late)
    every sleep is the iteration's own time."""
    pacer = StepPacer()
    assert pacer.sleep_for(0.0045, 100.0) == 0.0045            # the first: from now
    assert pacer.sleep_for(0.0045, 100.0045) == 0.0045         # on time
    assert pacer.sleep_for(0.0045, 100.00975) == pytest.approx(0.00375)   # 0.75 ms late
    assert pacer.step_end == pytest.approx(100.0135)
    assert pacer.sleep_for(0.0045, 100.5) == 0.0045            # a stall: not made up
    assert 0.00075 < LATE_TIMER_S


def test_after_idling_the_next_iteration_starts_now():
    """Time spent waiting for work is not lateness: without `idle` the 1 ms wait below would
    shorten the next iteration to 3.5 ms."""
    pacer = StepPacer()
    pacer.sleep_for(0.0045, 100.0)       # ends on paper at 100.0045
    pacer.idle(100.0055)                 # then 1 ms without work
    assert pacer.sleep_for(0.0045, 100.0055) == 0.0045
