import os
import sys
from pathlib import Path

import pytest

from throttle import NO_JITTER, BackoffPolicy, Backoff, DiskLoad, ManualClock, Pacer, parse_diskstats
from throttle.diskload import device_number

# A 5.x kernel line (17 counters), a 4.x line (11), a short old-style partition line, and noise.
SAMPLE = """\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 10521 8525 1732018 3708 6419 16103 4372304 8317 0 2640 12491 7113 31 1635936 438 921 27
 254       1 vda1 10400 8500 1730000 3700 6400 16100 4372000 8300 0 2600 12400
   8       1 sda1 1234 5678 910 1112
 not a diskstats line at all
 253 x dm-0 1 2 3 4 5 6 7 8 9 10 11
"""


def test_parse_diskstats_reads_the_busy_time_of_every_full_line():
    stats = parse_diskstats(SAMPLE)
    assert set(stats) == {(7, 0), (254, 0), (254, 1)}
    assert stats[(254, 0)].name == "vda"
    assert stats[(254, 0)].io_ticks_ms == 2640
    assert stats[(254, 1)].io_ticks_ms == 2600  # a partition is a device of its own
    assert stats[(7, 0)].io_ticks_ms == 0


def diskstats_line(major: int, minor: int, name: str, io_ticks_ms: int) -> str:
    counters = [0] * 17
    counters[9] = io_ticks_ms
    return f"{major:4d} {minor:7d} {name} " + " ".join(map(str, counters)) + "\n"


class FakeProc:
    """Serves /proc/diskstats texts whose busy time for one device the test sets."""

    def __init__(self, device: tuple[int, int], io_ticks_ms: int = 0):
        self.device = device
        self.io_ticks_ms = io_ticks_ms
        self.listed = True

    def read(self) -> str:
        text = diskstats_line(7, 0, "loop0", 0)
        if self.listed:
            text += diskstats_line(*self.device, "fakedisk", self.io_ticks_ms)
        return text


@pytest.fixture
def fake(tmp_path):
    clock = ManualClock()
    proc = FakeProc(device_number(tmp_path), io_ticks_ms=1000)
    return tmp_path, clock, proc


def test_utilisation_is_busy_time_over_wall_time_between_two_samples(fake):
    path, clock, proc = fake
    load = DiskLoad(path, read_diskstats=proc.read, clock=clock)
    assert load.device == "fakedisk"
    clock.advance(2.0)
    proc.io_ticks_ms += 500
    assert load.utilisation() == pytest.approx(0.25)
    clock.advance(1.0)
    proc.io_ticks_ms += 1000
    assert load.utilisation() == pytest.approx(1.0)
    clock.advance(1.0)
    assert load.utilisation() == 0.0


def test_utilisation_is_clamped_and_survives_the_32_bit_wrap(fake):
    path, clock, proc = fake
    proc.io_ticks_ms = 2**32 - 100
    load = DiskLoad(path, read_diskstats=proc.read, clock=clock)
    clock.advance(1.0)
    proc.io_ticks_ms = 300
    assert load.utilisation() == pytest.approx(0.4)
    clock.advance(1.0)
    proc.io_ticks_ms += 5000  # counters of merged queues can run ahead of the wall clock
    assert load.utilisation() == 1.0


def test_no_time_passed_gives_unknown(fake):
    path, clock, proc = fake
    load = DiskLoad(path, read_diskstats=proc.read, clock=clock)
    assert load.utilisation() is None


def test_a_device_missing_from_diskstats_is_unknown_not_an_error(fake):
    path, clock, proc = fake
    proc.listed = False
    load = DiskLoad(path, read_diskstats=proc.read, clock=clock)
    clock.advance(1.0)
    assert load.device is None
    assert load.utilisation() is None


def test_unreadable_diskstats_is_unknown_not_an_error(tmp_path):
    def no_proc() -> str:
        raise FileNotFoundError("/proc/diskstats")

    clock = ManualClock()
    load = DiskLoad(tmp_path, read_diskstats=no_proc, clock=clock)
    clock.advance(1.0)
    assert load.utilisation() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc/diskstats")
def test_real_paths_on_this_machine_do_not_raise():
    load = DiskLoad(Path(__file__).parent)
    utilisation = load.utilisation()
    assert utilisation is None or 0.0 <= utilisation <= 1.0
    # procfs has an anonymous device that no diskstats line lists.
    proc = DiskLoad("/proc")
    assert proc.device is None
    assert proc.utilisation() is None


def test_a_missing_path_names_itself(tmp_path):
    missing = tmp_path / "no-such-ledger-dir"
    with pytest.raises(FileNotFoundError, match="no-such-ledger-dir"):
        DiskLoad(missing)


def test_busy_samples_halve_the_factor_down_to_the_floor():
    backoff = Backoff(BackoffPolicy(busy_above=0.7, decrease=0.5, floor=0.1))
    assert [backoff.update(0.9) for _ in range(5)] == pytest.approx([0.5, 0.25, 0.125, 0.1, 0.1])


def test_idle_samples_recover_step_by_step_and_the_middle_band_holds():
    backoff = Backoff(BackoffPolicy(idle_below=0.5, recover_step=0.2, floor=0.1))
    for _ in range(5):
        backoff.update(1.0)
    assert backoff.update(0.6) == pytest.approx(0.1)  # between the thresholds: hold
    assert [backoff.update(0.1) for _ in range(6)] == pytest.approx([0.3, 0.5, 0.7, 0.9, 1.0, 1.0])
    backoff.update(1.0)
    assert backoff.update(None) == pytest.approx(0.5 + 0.2)  # unknown load counts as idle


@pytest.mark.parametrize("fields, message", [
    ({"busy_above": 0.3, "idle_below": 0.5}, "thresholds"),
    ({"busy_above": 1.5}, "thresholds"),
    ({"decrease": 1.0}, "decrease"),
    ({"recover_step": 0}, "recover_step"),
    ({"floor": 0}, "floor"),
])
def test_bad_backoff_policies_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        BackoffPolicy(**fields)


def pacer_on(path, clock, proc, rate=1_000_000):
    load = DiskLoad(path, read_diskstats=proc.read, clock=clock)
    return Pacer(rate, disk_loads=[load], clock=clock, jitter=NO_JITTER, control_interval=1.0)


def test_pacer_backs_off_to_the_floor_while_the_disk_is_busy_and_recovers(fake):
    path, clock, proc = fake
    pacer = pacer_on(path, clock, proc)
    rates = []
    for _ in range(5):
        clock.advance(1.0)
        proc.io_ticks_ms += 900
        rates.append(pacer.effective_rate())
    assert rates == pytest.approx([500_000, 250_000, 125_000, 100_000, 100_000])
    rates = []
    for _ in range(10):
        clock.advance(1.0)
        proc.io_ticks_ms += 50
        rates.append(pacer.effective_rate())
    assert rates == sorted(rates) and rates[0] == pytest.approx(200_000)
    assert rates[-1] == pytest.approx(1_000_000)


def test_backed_off_pacer_charges_at_the_reduced_rate(fake):
    path, clock, proc = fake
    pacer = pacer_on(path, clock, proc, rate=1000)
    clock.advance(1.0)
    proc.io_ticks_ms += 1000
    assert pacer.effective_rate() == pytest.approx(500)
    waited_before = sum(clock.waits)
    pacer.take_bytes(50)  # the burst, 0.1 s of the reduced rate
    pacer.take_bytes(250)
    assert sum(clock.waits) - waited_before == pytest.approx(0.5)


def test_pacer_on_an_unlisted_device_never_backs_off(fake):
    path, clock, proc = fake
    proc.listed = False
    pacer = pacer_on(path, clock, proc)
    for _ in range(5):
        clock.advance(1.0)
        assert pacer.effective_rate() == 1_000_000
