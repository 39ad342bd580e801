"""The one rule for how long a configuration may take (process/deadline.py), which the
supervisor applies and rank 0 builds each batch's deadline on."""

from mpitune.process.deadline import LAUNCH_ALLOWANCE_S, TIMEOUT_FACTOR, TIMEOUT_FLOOR_S, config_limit_s


def test_the_specs_timeout_wins_over_what_was_measured():
    assert config_limit_s(7.0, [100.0]) == 7.0


def test_without_a_timeout_the_limit_follows_the_median_above_a_floor():
    assert config_limit_s(None, []) == TIMEOUT_FLOOR_S
    assert config_limit_s(None, [0.1, 0.2, 0.3]) == TIMEOUT_FLOOR_S
    assert config_limit_s(None, [10.0, 20.0, 30.0, 1000.0]) == TIMEOUT_FACTOR * 25.0


def test_the_floor_grows_with_the_launches_asked_beyond_what_it_already_covers():
    assert config_limit_s(None, [], iterations=7) == TIMEOUT_FLOOR_S
    assert config_limit_s(None, [], iterations=100_000) == 100_000 * LAUNCH_ALLOWANCE_S
    # Racing makes most configurations short: their median must not undercut a fully timed one.
    assert config_limit_s(None, [0.01] * 9, iterations=100_000) == 100_000 * LAUNCH_ALLOWANCE_S
    assert config_limit_s(None, [10.0, 20.0, 30.0], iterations=100_000) == TIMEOUT_FACTOR * 20.0
    assert config_limit_s(5.0, [], iterations=100_000) == 5.0  # the spec's timeout_s is the user's to set
