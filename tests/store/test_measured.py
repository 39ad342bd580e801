"""Reading measured data: Kernel Tuner caches (as its writer leaves them) and mpitune files."""

import math

import pytest
from conftest import kt_cache

from mpitune.errors import UserError
from mpitune.store import measured


@pytest.mark.parametrize("dangling,gz", [(False, False), (True, False), (True, True)])
def test_kernel_tuner_cache_with_every_kind_of_entry(tmp_path, dangling, gz):
    path = kt_cache(str(tmp_path / ("c.json.gz" if gz else "c.json")), dangling, gz)
    data = measured.load(path)
    assert data.kernel_name == "k" and data.device_name == "Test GPU" and data.problem_size == [64, 64]
    table = data.lookup()
    assert table[(1, 2)].status == "ok" and table[(1, 2)].time_ms == 1.0
    assert table[(1, 1)].compile_s == pytest.approx(0.1) and table[(1, 1)].benchmark_s == pytest.approx(0.02)
    assert table[(1, 1)].times_ms == [2.1, 2.0, 1.9]
    assert table[(2, 1)].status == "compile_error"
    assert table[(2, 2)].status == "runtime_error" and math.isnan(table[(2, 2)].time_ms)
    assert table[(3, 1)].status == "invalid"
    assert table[(3, 2)].status == "runtime_error" and "illegal" in table[(3, 2)].error


def test_a_prior_takes_the_times_of_the_configurations_that_passed_and_none_of_the_others(tmp_path):
    data = measured.load(kt_cache(str(tmp_path / "c.json")))
    times = dict(zip(data.configs, data.prior_time_ms()))
    assert (times[(1, 1)], times[(1, 2)]) == (2.0, 1.0)
    assert all(math.isnan(times[c]) for c in ((2, 1), (2, 2), (3, 1), (3, 2)))


def test_garbage_is_refused_with_the_file_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(UserError, match=r"bad\.json"):
        measured.load(str(bad))
    with pytest.raises(UserError, match="no such file"):
        measured.load(str(tmp_path / "none.json"))


def test_real_caches_match_their_published_counts(shared_caches):
    counts = {"convolution_A100": (4362, 4201), "pnpoly_RTX_3090": (4092, 3774)}
    for name, (total, valid) in counts.items():
        data = measured.load(str(shared_caches / f"{name}.json.gz"))
        assert len(data.configs) == total
        assert sum(m.status == "ok" for m in data.measurements) == valid
