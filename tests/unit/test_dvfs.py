"""DVFS / power-limit response: Zeus curve fitting, the HKBU clock model, and the simulator interface.

``tests/fixtures/dvfs/zeus-power`` holds made-up workloads in the Zeus CSV layout, generated from known curve
parameters (listed in FIXTURE_PARAMS), plus one excluded NCF row and one configuration without a reference row.
``realdata`` tests read the real traces under ``WATTSCHED_DATA``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import require_real_file
from wattsched.core.errors import InputError, UnknownNameError, WattschedError
from wattsched.core.gpus import GPU_CATALOG
from wattsched.core.settings import GpuSetting
from wattsched.energy import dvfs, hkbu, zeus
from wattsched.energy.dvfs import dvfs_response, energy_optimal_power_limit
from wattsched.energy.hkbu import HKBU_1080TI_MEDIAN, HKBU_2070S_MEDIAN, HkbuParams
from wattsched.energy.zeus import response_source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "dvfs"
# gpu: (a, b, k, q) used to generate the fixture CSVs
FIXTURE_PARAMS = {
    "v100": (0.8, 0.95, 0.7, 0.95),
    "a40": (1.8, 0.8, 0.75, 0.9),
    "rtx6000": (1.5, 0.85, 0.8, 0.97),
    "p100": (0.4, 0.85, 0.5, 0.83),
}


@pytest.fixture(autouse=True)
def _no_download_cache(tmp_path_factory, monkeypatch):
    # Keep a developer's ~/.cache/wattsched out of the lookup, so only the data dirs given are searched.
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path_factory.mktemp("empty-cache")))


def _load_tool():
    spec = importlib.util.spec_from_file_location("fit_dvfs_tool", ROOT / "tools" / "fit_dvfs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------- fitting


def test_reader_normalises_excludes_and_drops_unreferenced_configs():
    z = zeus.read_zeus_power(FIX / "zeus-power" / "summary_power_a40.csv")
    assert z.rows == 12 and z.rows_excluded == 1 and z.configs_without_reference == 1
    assert z.power_limit_max_w == 300
    assert z.p.size == 8  # 2 configurations x 4 limits below the maximum
    assert np.allclose(np.unique(z.p), [1 / 3, 0.5, 2 / 3, 5 / 6])
    # both configurations normalise to the same curve despite different reference times and powers
    first, second = z.config == 0, z.config == 1
    assert np.allclose(z.speed[first], z.speed[second]) and np.allclose(z.power[first], z.power[second])
    assert np.all(z.speed <= 1 + 1e-12)


@pytest.mark.parametrize("gpu", sorted(FIXTURE_PARAMS))
def test_fit_recovers_fixture_parameters(gpu):
    z = zeus.read_zeus_power(FIX / "zeus-power" / zeus.zeus_file(gpu))
    curve = zeus.fit_curve(z.p, z.speed, z.power)
    a, b, k, q = FIXTURE_PARAMS[gpu]
    assert curve.a == pytest.approx(a, abs=1e-6)
    assert curve.b == pytest.approx(b, abs=1e-6)
    assert curve.k == pytest.approx(k, abs=1e-6)
    assert curve.q == pytest.approx(q, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    a=st.floats(0.2, 2.0),
    b=st.floats(0.7, 1.0),
    k=st.floats(0.2, 0.9),
    q=st.floats(0.7, 1.0),
)
def test_fit_recovers_random_parameters(a, b, k, q):
    p = np.repeat(np.linspace(0.36, 0.96, 13), 3)
    true = zeus.PowerLimitCurve(a, b, k, q, p_min=0.36)
    curve = zeus.fit_curve(p, true.speed(p), true.power(p))
    assert curve.a == pytest.approx(a, abs=1e-4) and curve.b == pytest.approx(b, abs=1e-4)
    assert curve.k == pytest.approx(k, abs=1e-4) and curve.q == pytest.approx(q, abs=1e-4)


def test_fit_quality_ceiling_is_level_means():
    p = np.array([0.5, 0.5, 0.8, 0.8])
    y = np.array([0.6, 0.8, 0.9, 1.0])
    q = zeus.fit_quality(p, y, np.array([0.7, 0.7, 0.95, 0.95]))
    assert q["r2"] == pytest.approx(q["r2_best_function_of_p"])  # the fitted values ARE the level means
    assert q["rmse"] == pytest.approx(math.sqrt((0.01 + 0.01 + 0.0025 + 0.0025) / 4))
    assert q["max_abs_error"] == pytest.approx(0.1)


def test_fit_document_on_fixtures_and_tool_check(tmp_path, capsys):
    doc = zeus.fit_zeus_curves(FIX)
    assert set(doc["fits"]) == {*zeus.ZEUS_GPUS, zeus.GENERIC}
    assert doc["fits"]["v100"]["speed"]["r2"] == pytest.approx(1.0, abs=1e-9)
    assert doc["fits"]["generic"]["p_min"] == pytest.approx(1 / 3)
    assert len(doc["fits"]["generic"]["inputs"]) == 4 and "levels" not in doc["fits"]["generic"]
    tool = _load_tool()
    out = tmp_path / "fit.json"
    assert tool.main(["--data-dir", str(FIX), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == doc
    assert tool.main(["--data-dir", str(FIX), "--out", str(out), "--check"]) == 0
    assert "matches the re-fit" in capsys.readouterr().out
    tampered = json.loads(out.read_text())
    tampered["fits"]["a40"]["speed"]["a"] += 1e-6
    out.write_text(json.dumps(tampered))
    assert tool.main(["--data-dir", str(FIX), "--out", str(out), "--check"]) == 1
    assert "/fits/a40/speed/a" in capsys.readouterr().err


def test_refit_is_reproducible_byte_for_byte():
    first = zeus.fit_json_text(zeus.fit_zeus_curves(FIX))
    assert zeus.fit_json_text(zeus.fit_zeus_curves(FIX)) == first
    assert "date" not in first.lower() and "time" not in json.loads(first)  # nothing run-dependent


def test_bad_zeus_rows_are_located(tmp_path):
    bad = tmp_path / "summary_power_v100.csv"
    bad.write_text(
        "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
        "toy,net,8,sgd,250,10,200\n"
        "toy,net,8,sgd,200,-3,150\n"
    )
    with pytest.raises(InputError, match=r"summary_power_v100.csv:3: field 'time_per_epoch'"):
        zeus.read_zeus_power(bad)
    bad.write_text("dataset,network,power_limit\ntoy,net,250\n")
    with pytest.raises(InputError, match="missing column"):
        zeus.read_zeus_power(bad)


def test_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(WattschedError, match="wattsched data fetch zeus-power"):
        zeus.fit_zeus_curves(tmp_path)


# ---------------------------------------------------------------------------------- stored fit + interface


def test_stored_fit_is_canonical_and_complete():
    text = (ROOT / "src" / "wattsched" / "energy" / zeus.FIT_FILE).read_text(encoding="utf-8")
    doc = json.loads(text)
    assert zeus.fit_json_text(doc) == text  # the committed file is exactly what the tool writes
    assert set(doc["fits"]) == {*zeus.ZEUS_GPUS, zeus.GENERIC}
    for name in doc["fits"]:
        c = zeus.zeus_curve(name)
        assert float(c.speed(1.0)) == 1.0 and float(c.power(1.0)) == 1.0
        assert float(c.speed(c.p_min)) > 0
        assert len(doc["fits"][name]["inputs"][0]["sha256"]) == 64


def test_response_source_mapping():
    for gpu in ("V100", "V100M16", "V100M32", "V100-PCIE"):
        assert response_source(gpu) == "v100"
    assert response_source("P100") == "p100"
    assert response_source("A40") == "a40"
    assert response_source("RTX6000") == "rtx6000"
    for gpu in ("A100", "G3", "A10", "G2", "T4", "H100", "H100-PCIE", "A100-PCIE"):
        assert response_source(gpu) == "generic"
    with pytest.raises(UnknownNameError):
        response_source("K80")


@pytest.mark.parametrize("gpu", sorted(GPU_CATALOG))
def test_power_limit_response_monotone_and_one_at_max(gpu):
    lo, hi = dvfs.power_limit_range(gpu)
    p = np.linspace(lo, hi, 200)
    speed, scale = dvfs.power_limit_response(gpu, p)
    assert np.all(np.diff(speed) >= -1e-12) and np.all(np.diff(scale) >= -1e-12)
    assert np.all((speed > 0) & (speed <= 1)) and np.all((scale >= 0) & (scale <= 1))
    assert dvfs_response(gpu, GpuSetting(power_limit_fraction=1.0)) == (1.0, 1.0)
    assert dvfs_response(gpu, GpuSetting()) == (1.0, 1.0)
    assert dvfs_response(gpu, GpuSetting(power_limit_fraction=float(p[50]))) == pytest.approx(
        (speed[50], scale[50])
    )


@pytest.mark.parametrize("gpu", sorted(GPU_CATALOG))
def test_sm_clock_response_monotone_and_one_at_max(gpu):
    lo, hi = dvfs.sm_clock_range(gpu)
    f = np.linspace(lo, hi, 200)
    speed, scale = dvfs.sm_clock_response(gpu, f)
    assert np.all(np.diff(speed) > 0) and np.all(np.diff(scale) > 0)
    assert speed[0] < 1 and scale[0] < 1
    assert dvfs_response(gpu, GpuSetting(sm_clock_fraction=1.0)) == (1.0, 1.0)


def test_power_scale_reproduces_measured_relative_power():
    # For a fully busy GPU, idle + (max - idle) * scale must equal power(p) x max: the fitted total-power ratio.
    m = GPU_CATALOG["V100-PCIE"]
    curve = zeus.zeus_curve("v100")
    for p in (0.45, 0.6, 0.8):
        _, scale = dvfs_response("V100-PCIE", GpuSetting(power_limit_fraction=p))
        total = m.idle_w + (m.max_w - m.idle_w) * scale
        assert total == pytest.approx(float(curve.power(p)) * m.max_w)


def test_sm_clock_uses_hkbu_normalised_form():
    f = 0.8
    speed, scale = dvfs_response("A100", GpuSetting(sm_clock_fraction=f))
    h = HKBU_2070S_MEDIAN
    vc = 2 * (f - 0.5) ** 2 + 0.5
    assert speed == pytest.approx((h.t0 + h.D) / (h.t0 + h.D * (h.delta / f + 1 - h.delta)))
    assert scale == pytest.approx((h.gamma + h.cg * vc**2 * f) / (h.gamma + h.cg))


@pytest.mark.parametrize(
    ("gpu", "setting", "pattern"),
    [
        (
            "V100",
            GpuSetting(power_limit_fraction=0.45),
            r"V100: power limit fraction 0.45 \(135 W\).*\(150-300 W",
        ),
        ("A100", GpuSetting(power_limit_fraction=0.3), r"A100: power limit fraction 0.3 \(120 W\).*0.3333-1"),
        ("T4", GpuSetting(power_limit_fraction=0.5), r"T4: power limit fraction 0.5 \(35 W\)"),
        ("A40", GpuSetting(power_limit_fraction=1.1), r"A40: power limit fraction 1.1 \(330 W\)"),
        ("H100", GpuSetting(sm_clock_fraction=0.3), r"H100: sm clock fraction 0.3 \(594 MHz\).*0.5-1"),
        ("P100", GpuSetting(sm_clock_fraction=1.05), r"P100: sm clock fraction 1.05"),
    ],
)
def test_out_of_range_settings_raise(gpu, setting, pattern):
    with pytest.raises(WattschedError, match=pattern):
        dvfs_response(gpu, setting)


def test_bad_settings_and_names_raise():
    with pytest.raises(WattschedError, match="not both"):
        GpuSetting(power_limit_fraction=0.8, sm_clock_fraction=0.8)
    with pytest.raises(WattschedError, match="finite"):
        GpuSetting(power_limit_fraction=math.nan)
    with pytest.raises(UnknownNameError):
        dvfs_response("K80", GpuSetting())
    with pytest.raises(WattschedError, match="V100"):
        dvfs.power_limit_response("V100", [0.9, 0.2])


@pytest.mark.parametrize("gpu", sorted(GPU_CATALOG))
def test_energy_optimal_power_limit_is_the_grid_minimum(gpu):
    lo, hi = dvfs.power_limit_range(gpu)
    p_opt = energy_optimal_power_limit(gpu)
    assert lo - 1e-9 <= p_opt <= hi
    grid = np.linspace(lo, hi, 500)
    assert dvfs.relative_energy_per_work(gpu, p_opt) <= dvfs.relative_energy_per_work(gpu, grid).min() + 1e-6
    assert float(dvfs.relative_energy_per_work(gpu, 1.0)) == pytest.approx(1.0)


def test_energy_optimum_saves_energy_on_fitted_gpus():
    for gpu in ("V100", "A40", "RTX6000", "A100"):
        assert float(dvfs.relative_energy_per_work(gpu, energy_optimal_power_limit(gpu))) < 0.95


# ---------------------------------------------------------------------------------------------- HKBU model


def test_voltage_mapping_and_inverse():
    fc = np.linspace(0.5, 1.12, 50)
    assert np.allclose(hkbu.core_clock_for_voltage(hkbu.core_voltage(fc)), fc)
    assert float(hkbu.core_voltage(1.0)) == 1.0 and float(hkbu.core_voltage(0.5)) == 0.5
    assert float(hkbu.core_clock_for_voltage(1.25)) == pytest.approx(1.112, abs=1e-3)


def test_hkbu_medians_documented():
    assert HKBU_2070S_MEDIAN.t_star == pytest.approx(1.0) and HKBU_1080TI_MEDIAN.t_star == pytest.approx(1.0)
    assert HKBU_2070S_MEDIAN.p_star == pytest.approx(134.3)
    assert "kernels, not DNNs" in HKBU_2070S_MEDIAN.label
    assert HKBU_2070S_MEDIAN.vc_grid[-1] == pytest.approx(1.1)
    assert HKBU_1080TI_MEDIAN.vc_grid[-1] == pytest.approx(1.25)


hkbu_params = st.builds(
    HkbuParams,
    t0=st.floats(0.0, 0.3),
    D=st.floats(0.3, 2.0),
    delta=st.floats(0.0, 1.0),
    p0=st.floats(20.0, 200.0),
    gamma=st.floats(1.0, 150.0),
    cg=st.floats(1.0, 60.0),
    vc_steps=st.integers(2, 16),
)
FM_GRID = np.linspace(hkbu.FM_MIN, hkbu.FM_MAX, 70_001)


@settings(max_examples=200, deadline=None)
@given(params=hkbu_params, vc=st.floats(0.5, 1.25))
def test_closed_form_memory_clock_matches_brute_force(params, vc):
    fm_star = float(hkbu.optimal_memory_clock(params, vc))
    fc = float(hkbu.core_clock_for_voltage(vc))
    e_grid = hkbu.hkbu_energy(params, fc, FM_GRID)
    e_star = float(hkbu.hkbu_energy(params, fc, fm_star))
    assert hkbu.FM_MIN <= fm_star <= hkbu.FM_MAX
    assert e_star <= e_grid.min() * (1 + 1e-12)  # nothing on the grid beats the closed form
    assert e_grid.min() - e_star <= 1e-8 * e_star  # and the grid gets arbitrarily close to it
    i = int(np.argmin(e_grid))
    if 0 < i < FM_GRID.size - 1:  # interior: the grid minimum sits next to the closed form
        assert abs(FM_GRID[i] - fm_star) < 2e-3 or abs(e_grid[i] - e_star) <= 1e-9 * e_star


def test_closed_form_memory_clock_default_params_interior():
    fm = hkbu.optimal_memory_clock(HKBU_2070S_MEDIAN, HKBU_2070S_MEDIAN.vc_grid)
    fc = hkbu.core_clock_for_voltage(HKBU_2070S_MEDIAN.vc_grid)
    for f, m in zip(fc, fm, strict=True):
        brute = FM_GRID[np.argmin(hkbu.hkbu_energy(HKBU_2070S_MEDIAN, f, FM_GRID))]
        assert m == pytest.approx(brute, abs=1e-4)


@settings(max_examples=100, deadline=None)
@given(params=hkbu_params, theta=st.floats(0.9, 3.0))
def test_theta_adjust_is_min_energy_under_the_bound(params, theta):
    bound = theta * params.t_star
    s = hkbu.theta_adjust(bound, params)
    t_min = hkbu.minimum_time(params)
    effective = max(bound, t_min)
    assert s.time <= effective * (1 + 1e-9)
    assert s.energy == pytest.approx(s.time * s.power)
    # brute force over the Vc grid x a fine memory-clock grid
    fc = hkbu.core_clock_for_voltage(params.vc_grid)[:, None]
    fm = np.linspace(hkbu.FM_MIN, hkbu.FM_MAX, 7001)[None, :]
    t = hkbu.hkbu_time(params, fc, fm)
    e = np.where(t <= effective * (1 + 1e-12), hkbu.hkbu_energy(params, fc, fm), np.inf)
    assert s.energy <= e.min() * (1 + 1e-9)


def test_theta_adjust_edges():
    h = HKBU_1080TI_MEDIAN
    free = hkbu.theta_adjust(math.inf, h)
    assert free == hkbu.energy_optimal_setting(h)
    fastest = hkbu.theta_adjust(0.0, h)  # below t_min: raised to t_min, only the fastest setting meets it
    assert fastest.vc == pytest.approx(1.25) and fastest.fm == pytest.approx(hkbu.FM_MAX)
    assert fastest.time == pytest.approx(hkbu.minimum_time(h))
    tight = hkbu.theta_adjust(1.0, h)
    assert tight.time <= 1.0 + 1e-12 and tight.energy >= free.energy


# ----------------------------------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_realdata_refit_reproduces_stored_fit():
    root = require_real_file("zeus-power", "summary_power_v100.csv").parents[1]
    for gpu in zeus.ZEUS_GPUS:
        require_real_file("zeus-power", zeus.zeus_file(gpu))
    refit = zeus.fit_zeus_curves(root)
    assert zeus.fit_differences(refit, zeus.stored_fit(), tol=1e-9) == []


@pytest.mark.realdata
def test_realdata_v100_shape_facts():
    require_real_file("zeus-power", "summary_power_v100.csv")
    fit = zeus.stored_fit()["fits"]["v100"]
    curve = zeus.zeus_curve("v100")
    assert float(curve.speed(0.6)) == pytest.approx(0.89, abs=0.05)  # docs §4 median at 0.6 x PLmax
    assert 0.5 <= energy_optimal_power_limit("V100") <= 0.75
    assert 0.5 <= fit["energy_optimal_p_measured_median"] <= 0.75
    # The fit's own optimum (0.41) sits where its energy curve is flat: within 1% of the value at the
    # measured median optimum.
    p_meas = fit["energy_optimal_p_measured_median"]
    e_min = float(curve.relative_energy(curve.energy_optimal_p()))
    assert float(curve.relative_energy(p_meas)) - e_min < 0.01
    # Every curve is nearly as good as the best possible function of p alone.
    for entry in zeus.stored_fit()["fits"].values():
        for part in ("speed", "power"):
            assert entry[part]["r2"] >= entry[part]["r2_best_function_of_p"] - 0.05


@pytest.mark.realdata
def test_realdata_a40_collapses_below_half_limit():
    require_real_file("zeus-power", "summary_power_a40.csv")
    a40, p100 = zeus.zeus_curve("a40"), zeus.zeus_curve("p100")
    assert float(a40.relative_energy(a40.p_min)) > 1.2  # energy goes up at 1/3 PL (docs §4)
    assert float(p100.speed(0.5)) > 0.9  # P100 nearly flat
