"""Inference services for CE-DLA (workloads/inference.py): rates from CSV or the diurnal generator, GPUs per hour
from the M/M/c sizing, reconstructed serving rates from the training tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wattsched.core.errors import InputError
from wattsched.perf.queueing import gpus_needed
from wattsched.perf.tables import elasticflow_tables
from wattsched.workloads.inference import (
    DiurnalRate,
    InferenceService,
    read_rates_csv,
    service_rate_rps,
    service_rate_table,
)

PERFDATA = Path(__file__).resolve().parent.parent / "fixtures" / "perfdata"


def test_diurnal_rates_are_seeded_and_peak_at_the_peak_hour():
    shape = DiurnalRate(base_rps=10.0, peak_rps=90.0, peak_hour=14.0, noise_sigma=0.0)
    day = shape.series(24, seed=1)
    assert int(np.argmax(day)) == 14 and day[14] == pytest.approx(90.0) and day[2] == pytest.approx(10.0)
    noisy = DiurnalRate(noise_sigma=0.2)
    a, b = noisy.series(24 * 60, seed=7), noisy.series(24 * 60, seed=7)
    assert np.array_equal(a, b) and not np.array_equal(a, noisy.series(24 * 60, seed=8))
    clean = DiurnalRate(noise_sigma=0.0).series(24 * 60, seed=7)
    assert a.mean() == pytest.approx(clean.mean(), rel=0.03)  # the noise has mean 1


def test_gpus_per_hour_follow_the_rate():
    rates = DiurnalRate(base_rps=5.0, peak_rps=200.0, noise_sigma=0.0).series(24, seed=0)
    svc = InferenceService("chat", "bert", rates, slo_s=0.2, slo_kind="p95")
    gpus = svc.gpus_per_hour(service_rate_rps=30.0)
    assert gpus[14] == gpus.max() and gpus[2] == gpus.min() >= 1
    assert gpus[14] == gpus_needed(float(rates[14]), 30.0, 0.2, "p95")
    with pytest.raises(ValueError, match="service chat"):
        svc.gpus_per_hour(service_rate_rps=5.0)  # p95 of one request alone is 0.6 s > 0.2 s


def test_rates_csv_is_read_and_bad_cells_name_file_line_and_column(tmp_path):
    good = tmp_path / "rates.csv"
    good.write_text("hour,chat,vision\n0,10,0\n1,12.5,3\n2,8,1\n")
    rates = read_rates_csv(good)
    assert list(rates) == ["chat", "vision"] and rates["chat"].tolist() == [10.0, 12.5, 8.0]
    bad = tmp_path / "bad.csv"
    bad.write_text("hour,chat\n0,10\n1,-3\n")
    with pytest.raises(InputError) as err:
        read_rates_csv(bad)
    assert "bad.csv:3: field 'chat'" in str(err.value)
    gap = tmp_path / "gap.csv"
    gap.write_text("hour,chat\n0,10\n2,10\n")
    with pytest.raises(InputError, match="hours 0, 1, 2"):
        read_rates_csv(gap)
    none = tmp_path / "none.csv"
    none.write_text("hour\n0\n")
    with pytest.raises(InputError, match="no service column"):
        read_rates_csv(none)


def test_serving_rates_come_from_the_training_tables():
    tables = elasticflow_tables("T4", PERFDATA)
    table = service_rate_table(tables)
    assert len(table) == len(tables)
    row = table[table.model == "cifar10"].iloc[0]
    # cifar10 batch 128 trains at 10 it/s on one T4 (fixture): 1,280 samples/s, served at 3x
    assert row.train_samples_per_s == pytest.approx(1280.0)
    assert row.serve_requests_per_s == pytest.approx(service_rate_rps(1280.0)) == pytest.approx(3840.0)


def test_service_validates_its_slo():
    with pytest.raises(ValueError, match="SLO kind"):
        InferenceService("s", "bert", [1.0], slo_s=1.0, slo_kind="p99")
    with pytest.raises(ValueError, match="positive"):
        InferenceService("s", "bert", [1.0], slo_s=0.0)


def test_service_jobs_hold_the_mmc_gpus_for_each_hour():
    from wattsched.core.jobs import INFERENCE
    from wattsched.workloads.inference import service_jobs

    rates = np.array([0.0, 50.0, 400.0])
    svc = InferenceService("web", "m", rates, slo_s=0.1, slo_kind="p95")
    jobs = service_jobs([svc], {"m": 100.0}, start_hour=5, source="test")
    assert jobs.job_id.tolist() == ["web@h5", "web@h6", "web@h7"]
    assert jobs.submit_s.tolist() == [5 * 3600.0, 6 * 3600.0, 7 * 3600.0]
    assert (jobs.duration_s == 3600.0).all() and (jobs.job_class == INFERENCE).all()
    assert jobs.num_gpu.tolist() == [int(gpus_needed(r, 100.0, 0.1, "p95")) for r in rates]
    busy = jobs.num_gpu > 0
    # utilisation of the hour's GPUs: lambda / (c mu), below 1 for a stable queue
    assert np.allclose(jobs.gpu_util[busy], rates[busy] / (jobs.num_gpu[busy] * 100.0))
    assert (jobs.gpu_util[busy] < 1).all() and jobs.request_rate_rps.tolist() == rates.tolist()


def test_rates_csv_must_name_known_services_and_cover_the_run(tmp_path):
    from wattsched.workloads.inference import build_services

    good = tmp_path / "r.csv"
    good.write_text("hour,resnet50\n0,100\n1,200\n2,300\n")
    services, _ = build_services(str(good), hours=2, seed=0, start_hour=1)
    assert services[0].model.startswith("ResNet-50") and services[0].rates_rps.tolist() == [200.0, 300.0]
    bad = tmp_path / "b.csv"
    bad.write_text("hour,nosuch\n0,1\n")
    with pytest.raises(InputError, match=r"nosuch.*not a known service"):
        build_services(str(bad), hours=1, seed=0)
    with pytest.raises(InputError, match="the run needs 5"):
        build_services(str(good), hours=5, seed=0)


def test_service_hour_replicas_spread_over_nodes_but_training_jobs_do_not():
    """Two 4-GPU nodes with 2 GPUs free on each: a 3-GPU service-hour (independent replicas) fits across them, a
    3-GPU training job (one node) does not."""
    from dataclasses import replace

    from tests.conftest import make_cluster, make_jobs, state_with
    from wattsched.core.requests import RequestBook
    from wattsched.policies.base import PLACEMENT_POLICIES

    spec = make_cluster([(4, "V100", 32000, 262144)] * 2)
    jobs = make_jobs([{"gpus": 3}, {"gpus": 3}])
    jobs = replace(jobs, request_rate_rps=np.array([np.nan, 120.0]))
    book = RequestBook.build(jobs, spec)
    assert book.gang.tolist() == [False, True]
    assert book.request_class[0] != book.request_class[1]
    placement = PLACEMENT_POLICIES.create("best-fit")
    placement.bind(spec, np.random.default_rng(0))
    state = state_with(spec, [[1000, 1000, 0, 0], [1000, 1000, 0, 0]])
    assert placement.place(state, book.request(0)) is None
    spread = placement.place(state, book.request(1))
    assert spread is not None and sum(len(gpus) for _, gpus, _, _ in spread) == 3 and len(spread) == 2


def test_a_service_hour_that_starts_late_ends_late_or_never_runs_violates_its_slo():
    """Four service-hours at 100 requests/s: on time; started 60 s late; on half its GPUs (its requests end an hour
    late); never served; and an inference job of two hours that ends on time. Ends within a second are on time."""
    from dataclasses import replace

    from tests.conftest import make_jobs
    from wattsched.core.jobs import INFERENCE
    from wattsched.experiments.run import _service_metrics

    jobs = make_jobs(
        [{"gpus": 2}] * 4 + [{"gpus": 1}, {"gpus": 2}]
    )  # the last one is a training job: not a service-hour
    jobs = replace(
        jobs,
        submit_s=np.array([0.0, 3600.0, 7200.0, 10800.0, 0.0, 0.0]),
        duration_s=np.array([3600.0] * 5 + [7200.0]),
        job_class=np.array([INFERENCE] * 4 + [0, INFERENCE], dtype=np.int8),
        request_rate_rps=np.array([100.0] * 4 + [np.nan, 100.0]),
    )
    start = np.array([0.0, 3660.0, 7200.0, np.nan, 50.0, 0.0])
    end = np.array([3600.4, 7260.0, 14400.0, np.nan, 99999.0, 7200.0])
    metrics = _service_metrics(jobs, start, end)
    assert metrics["service_hours"] == 5
    assert metrics["slo_violation_hours"] == 3
    assert metrics["slo_violation_requests"] == pytest.approx(100.0 * (60.0 + 3600.0 + 3600.0))
