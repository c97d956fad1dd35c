"""What bounds one agent's moves: the hourly budget and the failed-disk breaker, kept across restarts."""

from __future__ import annotations

import logging

from scanner.repair.blast_radius import BlastRadius, DamageFigures, FailedDiskBreaker, MoveBudget

SETTINGS = BlastRadius(moves_per_hour=3, move_bytes_per_hour=1000, failed_disk_ledger_share=0.05,
                       failed_disk_min_ledgers=20, failed_disk_log_share=0.10, failed_disk_min_logs=5)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_budget_allows_so_many_moves_an_hour_and_remembers_them_across_a_restart(tmp_path):
    clock = Clock()
    budget = MoveBudget(tmp_path, SETTINGS, clock)
    for _ in range(3):
        assert budget.refusal() is None
        budget.spend(100)
        clock.now += 60
    refusal = budget.refusal()
    assert refusal is not None and "3 fragments, 300 bytes moved in the last hour" in refusal
    assert "the next move in 3420s" in refusal  # the first of the three leaves the hour then
    restarted = MoveBudget(tmp_path, SETTINGS, clock)
    assert restarted.refusal() == refusal
    clock.now += 3420
    assert restarted.refusal() is None


def test_the_budget_counts_bytes_too(tmp_path):
    budget = MoveBudget(tmp_path, SETTINGS, Clock())
    budget.spend(999)
    assert budget.refusal() is None
    budget.spend(1)
    assert "1000 bytes moved" in budget.refusal()
    assert budget.to_json() == {"moves_last_hour": 2, "bytes_last_hour": 1000, "moves_per_hour": 3,
                                "move_bytes_per_hour": 1000}


def test_a_healthy_bookie_with_a_few_damaged_ledgers_never_trips_the_breaker(tmp_path):
    breaker = FailedDiskBreaker(tmp_path, SETTINGS, Clock())
    # 19 ledgers of 100,000 and 4 of 5,000 logs: under both floors.
    assert breaker.judge(DamageFigures(19, 100_000, 4, 5_000))
    # A small bookie: the floors, not the shares, decide.
    assert breaker.judge(DamageFigures(19, 30, 4, 6))
    assert not breaker.tripped and not (tmp_path / "repair-breaker.json").exists()


def test_damage_in_most_entry_logs_trips_the_breaker_once_and_it_stays_tripped_across_a_restart(tmp_path, caplog):
    clock = Clock()
    breaker = FailedDiskBreaker(tmp_path, SETTINGS, clock)
    with caplog.at_level(logging.ERROR, logger="scanner.repair.blast_radius"):
        assert not breaker.judge(DamageFigures(12, 400, 30, 40))  # 30 of 40 logs
        assert not breaker.judge(DamageFigures(15, 400, 35, 40))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "disk looks failed: damage open in 12 of 400 ledgers and 30 of 40 entry logs" in errors[0]
    assert "decommissionbookie" in errors[0]
    restarted = FailedDiskBreaker(tmp_path, SETTINGS, clock)
    assert restarted.tripped and restarted.to_json()["figures"].startswith("damage open in 12 of 400")
    assert not restarted.judge(DamageFigures(0, 400, 3, 40))  # under the threshold, not under half of it
    assert restarted.judge(DamageFigures(0, 400, 2, 40))  # the damage ended: moves resume
    assert not FailedDiskBreaker(tmp_path, SETTINGS, clock).tripped


def test_damage_in_a_share_of_the_ledgers_trips_the_breaker(tmp_path):
    breaker = FailedDiskBreaker(tmp_path, SETTINGS, Clock())
    assert breaker.judge(DamageFigures(499, 10_000, 0, 5_000))
    assert not breaker.judge(DamageFigures(500, 10_000, 0, 5_000))  # 5 %
