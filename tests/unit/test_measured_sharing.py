"""The sharing model fitted to measurement (perf/measured.py): hand-computed speeds and power, invariants, the fit
recovering known parameters, and on the real H200 dataset the shipped constants and their per-row errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import require_real_file
from wattsched.perf.measured import (
    H200_SWITCH_OVERHEAD,
    H200_SWITCH_POWER,
    MEASURED,
    MeasuredSharing,
    check_rows,
    colocate_measured,
    energy_saving,
    fit_sharing,
)
from wattsched.perf.profiles import MeasuredSet, Profiles, Solo, load_profiles

FIXTURES = Path(__file__).parent.parent / "fixtures" / "profiles"


def test_two_gpu_bound_jobs_by_hand():
    # alpha: u 0.95, 490 W alone; beta: u 0.96, 600 W; held 150 W; o = 0.125, lambda = 0.296.
    model = MeasuredSharing(switch_overhead=0.125, switch_power=0.296)
    speeds = model.speeds([0.95, 0.96])
    # 0.875 of the GPU's time split evenly (both ask for more than half): 0.4375 each.
    assert speeds == pytest.approx([0.4375 / 0.95, 0.4375 / 0.96])
    assert model.switching([0.95, 0.96], speeds) == pytest.approx(0.125)
    alpha = 0.4375 / 0.95 * 340 + 0.296 * 0.125 * 340 / 0.95 / 2
    beta = 0.4375 / 0.96 * 450 + 0.296 * 0.125 * 450 / 0.96 / 2
    assert model.set_power_w([0.95, 0.96], [490, 600], 150) == pytest.approx(150 + alpha + beta)
    assert 150 + alpha + beta == pytest.approx(526.95, abs=0.01)  # about the mean of 490 and 600, not the max


def test_input_bound_jobs_overlap_at_full_speed_and_power_adds():
    speeds = MEASURED.speeds([0.05, 0.2])
    assert speeds == pytest.approx([1.0, 1.0])
    assert MEASURED.switching([0.05, 0.2], speeds) == 0.0
    assert MEASURED.set_power_w([0.05, 0.2], [160, 220], 150) == pytest.approx(150 + 10 + 70)


def test_small_demand_keeps_its_speed_next_to_a_gpu_bound_job():
    speeds = MEASURED.speeds([0.1, 0.95])
    assert speeds[0] == pytest.approx(1.0)  # max-min fair: its 0.1 is served in full
    assert speeds[1] == pytest.approx((1 - MEASURED.switch_overhead - 0.1) / 0.95)


def test_alone_is_unchanged():
    assert MEASURED.speed(0.9, []) == 1.0
    assert MEASURED.set_power_w([0.9], [432.0], 150) == 432.0


@settings(max_examples=200, deadline=None)
@given(
    utils=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4),
    powers=st.lists(st.floats(150.0, 700.0), min_size=4, max_size=4),
)
def test_invariants(utils, powers):
    powers = powers[: len(utils)]
    speeds, terms = MEASURED.power_terms_w(utils, powers, 150.0)
    u = np.maximum(utils, 0.01)
    assert np.all(speeds > 0) and np.all(speeds <= 1.0)
    assert float((speeds * u).sum()) <= 1.0 - MEASURED.switch_overhead + 1e-9  # handed-out time
    assert np.all(terms >= 0)
    assert MEASURED.set_power_w(utils, powers, 150.0) == pytest.approx(150.0 + float(terms.sum()))
    if u.sum() <= 1 - MEASURED.switch_overhead:
        assert np.allclose(speeds, 1.0)


def _synthetic_profiles(model: MeasuredSharing) -> Profiles:
    """Three jobs alone and their pairs, the pairs 'measured' as the model predicts them."""
    solos = {
        "a": (0.95, 450.0, 100.0), "b": (0.97, 550.0, 40.0), "c": (0.9, 620.0, 20.0),
    }  # fmt: skip
    out = Profiles()
    for name, (u, p, rate) in solos.items():
        out.solos[("H200", name, 8, "gpu-bound")] = Solo(
            "H200", name, 8, "gpu-bound", rate, p, u, 1, 0, 0, "x"
        )
    out.held_idle_w["H200"] = [150.0]
    for pair in (("a", "b"), ("a", "c"), ("b", "c")):
        utils = [solos[m][0] for m in pair]
        powers = [solos[m][1] for m in pair]
        speeds = model.speeds(utils)
        out.sets.append(MeasuredSet(
            "H200", "gpu-bound", "+".join(pair), tuple((m, 8) for m in pair),
            tuple(float(s) * solos[m][2] for s, m in zip(speeds, pair, strict=True)),
            model.set_power_w(utils, powers, 150.0), 0.0, 10.0, "x",
        ))  # fmt: skip
    return out


def test_fit_recovers_known_parameters():
    truth = MeasuredSharing(switch_overhead=0.2, switch_power=0.5)
    fitted, rows = fit_sharing(_synthetic_profiles(truth))
    assert fitted.switch_overhead == pytest.approx(0.2, abs=0.002)
    assert fitted.switch_power == pytest.approx(0.5, abs=0.01)
    assert all(abs(r.power_error) < 1e-3 for r in rows)


def test_fit_needs_sets_of_two():
    with pytest.raises(ValueError, match="no set of two"):
        fit_sharing(load_profiles([FIXTURES / "sweep.csv"], default_gpu="H200"))


def test_energy_saving_definition():
    # Together at 500 W each job runs at half speed: the same work alone costs 0.5 x 400 + 0.5 x 600 = 500 W-s/s.
    assert energy_saving(500.0, [0.5, 0.5], [400.0, 600.0]) == pytest.approx(0.0)
    assert energy_saving(250.0, [1.0, 1.0], [200.0, 200.0]) == pytest.approx(1 - 250 / 400)


def test_colocate_from_fixture_profiles():
    p = load_profiles([FIXTURES / "pair.csv"])
    out = colocate_measured(p, ["alpha", "beta", "gamma"], "H200")
    assert set(out["jobs"]) == {"alpha", "beta", "gamma"}
    assert out["jobs"]["gamma"]["speed"] == pytest.approx(1.0)  # its 0.2 fits within its fair share
    assert out["jobs"]["alpha"]["speed"] < 0.5
    assert "prediction" in out["notes"][0]
    pair = colocate_measured(p, ["beta", "alpha"], "H200")
    assert pair["set"]["measured"]["power_w"] == 530.0  # the measured set is shown beside the prediction
    assert json.loads(json.dumps(pair))["set"]["energy_saving"] == pytest.approx(pair["set"]["energy_saving"])


def test_colocate_unknown_model_names_what_is_profiled():
    from wattsched.core.errors import WattschedError

    with pytest.raises(WattschedError, match="profiled there: alpha, beta, gamma"):
        colocate_measured(load_profiles([FIXTURES / "pair.csv"]), ["delta"], "H200")


# --- the real dataset -----------------------------------------------------------------------------------------
def _dataset() -> Profiles:
    gpu = require_real_file("h200-colocation-probe", "gpu-bound.csv")
    inp = require_real_file("h200-colocation-probe", "input-bound.csv")
    return load_profiles([gpu, inp])


@pytest.mark.realdata
def test_shipped_constants_are_the_fit_on_the_dataset():
    fitted, rows = fit_sharing(_dataset())
    assert fitted.switch_overhead == pytest.approx(H200_SWITCH_OVERHEAD, abs=0.002)
    assert fitted.switch_power == pytest.approx(H200_SWITCH_POWER, abs=0.002)
    assert len(rows) == 8


@pytest.mark.realdata
def test_dataset_rows_gpu_bound_within_three_percent():
    rows = check_rows(_dataset())
    gpu_bound = [r for r in rows if r.regime == "gpu-bound"]
    assert len(gpu_bound) == 4
    for r in gpu_bound:
        assert max(abs(e) for e in r.speed_errors) < 0.03, r
        assert abs(r.power_error) < 0.03, r
        assert r.saving_model < 0 and r.saving_measured < 0  # co-locating GPU-bound jobs costs energy
    for r in rows:
        if r.regime == "input-bound":
            assert r.saving_model > 0.25 and r.saving_measured > 0.25  # and input-bound ones save
