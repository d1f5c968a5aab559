"""A sharing model changes only what happens on shared GPUs: a job alone on its GPUs runs and draws the same under
every sharing model (docs/perf.md §4.2, docs/eaco.md §2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import make_cluster
from wattsched.core.jobs import JobTable
from wattsched.core.settings import DEFAULT_SETTING
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import run_simulation
from wattsched.perf.colocation import SHARING_MODELS, sharing_model
from wattsched.perf.model import PerformanceModel
from wattsched.perf.restart import RestartModel

MODELS = ["alexnet", "resnet18", "resnet50", "vgg16", "bert", "gpt2"]


def _models():
    jobs = JobTable.build(
        job_id=[f"j{i}" for i in range(len(MODELS))],
        submit_s=[0.0] * len(MODELS),
        duration_s=[3600.0] * len(MODELS),
        num_gpu=[1] * len(MODELS),
        model_name=MODELS,
    )
    spec = make_cluster([(8, "A100", 64_000, 786_432)])
    out = {}
    for name in SHARING_MODELS:
        perf, _ = PerformanceModel.build(
            jobs, spec, RestartModel(), None, sharing=sharing_model(name), generated=True
        )
        out[name] = perf
    return out


def test_a_job_alone_has_the_same_rate_load_and_power_under_every_sharing_model():
    models = _models()
    slicing = models["slicing"]
    for name, perf in models.items():
        for j in range(len(MODELS)):
            assert perf.gpu_load(j, 0, DEFAULT_SETTING) == slicing.gpu_load(j, 0, DEFAULT_SETTING), (name, j)
            assert perf.solo_rate(j, 0, 1, 1, 1, DEFAULT_SETTING) == slicing.solo_rate(
                j, 0, 1, 1, 1, DEFAULT_SETTING
            )
            assert perf.gpu_power_w(j, 0, DEFAULT_SETTING) == slicing.gpu_power_w(j, 0, DEFAULT_SETTING)
            assert perf.shared_factor(j, 0, [[]]) == 1.0
            assert perf.shared_load(j, 0, DEFAULT_SETTING, [[]]) == slicing.gpu_load(j, 0, DEFAULT_SETTING)


def test_the_fitted_model_still_changes_co_located_jobs():
    models = _models()
    eaco, slicing = models["eaco"], models["slicing"]
    a, b = MODELS.index("alexnet"), MODELS.index("vgg16")
    # interference below saturation: a co-located job slows down a little under eaco, not at all under slicing
    assert eaco.shared_factor(a, 0, [[b]]) < 1.0
    # power overlap: the lighter job adds beta times its solo load
    beta = eaco.sharing.power_overlap
    light = a if eaco.job_load[a] < eaco.job_load[b] else b
    heavy = b if light == a else a
    assert eaco.shared_load(light, 0, DEFAULT_SETTING, [[heavy]]) == pytest.approx(
        beta * slicing.gpu_load(light, 0, DEFAULT_SETTING)
    )
    assert eaco.shared_load(heavy, 0, DEFAULT_SETTING, [[light]]) == slicing.gpu_load(
        heavy, 0, DEFAULT_SETTING
    )


def _run(sharing: str):
    cfg = SimulationConfig(
        synthetic={"num_jobs": 150, "share_fraction": 0.0},
        performance="generated",
        assign_models="always",
        power_model="dvfs",
        power_manager="idle-timeout",
        queue="fifo",
        placement="best-fit",
        sharing_model=sharing,
        seed=7,
    )
    return run_simulation(cfg)


def test_a_run_without_co_location_is_identical_under_slicing_and_eaco():
    slicing, eaco = _run("slicing"), _run("eaco")
    cols = ["job_id", "start_s", "end_s", "jct_s", "status", "placement", "work"]
    pd.testing.assert_frame_equal(slicing.jobs[cols], eaco.jobs[cols])
    assert eaco.summary["energy_kwh"] == slicing.summary["energy_kwh"]
    assert eaco.summary["energy_by_component_kwh"] == slicing.summary["energy_by_component_kwh"]
    assert np.isfinite(slicing.summary["energy_kwh"]) and slicing.summary["energy_kwh"] > 0


def test_eaco_measured_loads_are_a_job_model_setting_and_match_the_fit_on_shared_gpus():
    """`gpu_loads: eaco-measured` gives every run EaCO's Table 1 loads (alone too, under any sharing model); with
    them a co-located pair slows down and draws exactly as the calibrated model (checked against Table 3 in
    test_eaco.py) says: the engine's loads and the fit's loads are the same numbers."""
    jobs = JobTable.build(
        job_id=["a", "b"], submit_s=[0.0, 0.0], duration_s=[3600.0] * 2, num_gpu=[1, 1],
        model_name=["alexnet", "resnet50"],
    )  # fmt: skip
    spec = make_cluster([(8, "V100", 64_000, 786_432)])
    fit = sharing_model("eaco")
    built = {
        (name, loads): PerformanceModel.build(
            jobs, spec, RestartModel(), None, sharing=sharing_model(name), generated=True,
            loads=fit if loads else None,
        )[0]
        for name in SHARING_MODELS
        for loads in (False, True)
    }  # fmt: skip
    measured = [fit.loads["alexnet"], fit.loads["resnet50"]]
    for (name, loads), perf in built.items():
        expected = measured if loads else [built[("slicing", False)].job_load[j] for j in (0, 1)]
        assert list(perf.job_load) == pytest.approx(expected), (name, loads)  # alone: the job model's loads
    perf = built[("eaco", True)]
    total = perf.shared_load(0, 0, DEFAULT_SETTING, [[1]]) + perf.shared_load(1, 0, DEFAULT_SETTING, [[0]])
    assert total == pytest.approx(fit.gpu_load(measured))
    assert perf.shared_factor(0, 0, [[1]]) == pytest.approx(fit.speed(measured[0], [measured[1]]))
    assert perf.describe()["gpu_loads"] == "eaco-measured"
    assert built[("eaco", False)].describe()["gpu_loads"] == "catalog"
