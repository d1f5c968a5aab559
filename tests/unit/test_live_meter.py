"""The live view's power and energy: the node agents' measured GPU power where it can be read, the linear model
elsewhere, labelled (backends/meter.py)."""

from __future__ import annotations

import pytest

from wattsched.backends.driver import LiveDriver
from wattsched.backends.meter import LiveMeter, gpu_power_from_metrics
from wattsched.backends.slurm.backend import SlurmBackend
from wattsched.backends.slurm.fake import FakeSlurm
from wattsched.backends.store import JobStore
from wattsched.experiments.config import SimulationConfig
from wattsched.experiments.run import build_scheduler

METRICS = """# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="gpu1"} 301.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",Hostname="gpu1"} 98.5
DCGM_FI_DEV_POWER_USAGE{gpu="2",Hostname="gpu1"} 60
DCGM_FI_DEV_POWER_USAGE{gpu="3",Hostname="gpu1"} 60
"""


def test_gpu_power_is_the_sum_of_the_agent_gauges():
    assert gpu_power_from_metrics(METRICS) == pytest.approx(520.0)
    with pytest.raises(ValueError, match="no DCGM_FI_DEV_POWER_USAGE"):
        gpu_power_from_metrics("# nothing here\n")


def _cluster():
    fake = FakeSlurm.uniform(2)
    fake.submit(2, duration_s=20)
    backend = SlurmBackend(runner=fake, retry_wait_s=0.0, clock=lambda: fake.now)
    driver = LiveDriver(backend, build_scheduler(SimulationConfig().scheduler, None), JobStore(":memory:"))
    driver.step()
    return fake, driver, driver.cluster


def test_measured_gpu_power_wins_over_the_model_and_the_source_says_so():
    *_, c = _cluster()
    modelled = c.meter.power_w
    assert c.view.power_source == "model"
    readings = {"http://gpu1:9400/metrics": METRICS}

    def fetch(url: str) -> str:
        if url not in readings:
            raise OSError("connection refused")
        return readings[url]

    meter = LiveMeter(c, "http://{node}:9400/metrics", fetch=fetch, scrape_interval_s=0.0)
    meter.sample()
    gpu1 = c.node_index["gpu1"]
    model_gpu1 = float(meter.model_gpu_w()[gpu1])
    assert meter.power_w == pytest.approx(modelled - model_gpu1 + 520.0)
    assert meter.source == "agents on 1 of 2 powered nodes, model elsewhere"
    readings["http://gpu2:9400/metrics"] = METRICS
    meter.sample()
    assert meter.source.startswith("agents (GPU power measured on every powered node")


def test_energy_integrates_the_power_between_observations():
    fake, driver, c = _cluster()
    before = c.meter.energy_j
    power = c.meter.power_w
    fake.advance(fake.now + 10)
    driver.step()
    assert c.meter.energy_j - before == pytest.approx(power * 10, rel=1e-9)
    assert c.view.energy_used_j() == c.meter.energy_j
