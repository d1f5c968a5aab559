"""The node agent (wattsched.agent) on the fake NVML: DCGM metrics, the API (reads over TCP, changes over its Unix
socket), errors, restoration. Who may change is tested in test_agent_auth.py.

One test reads real GPUs through pynvml and skips where ``nvmlInit`` fails (no driver, no GPU).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import socket
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.agent_fixtures import running_agent, start_agent_process
from wattsched.agent import fake_nvml
from wattsched.agent.client import AgentClient, AgentRequestError, _UnixHTTPConnection
from wattsched.agent.fake_nvml import FakeNvml, read_state_file
from wattsched.agent.server import (
    DCGM_METRICS,
    LABELS,
    AgentHttpServer,
    GpuAgent,
)
from wattsched.cli.agent import agent_command
from wattsched.cli.main import app


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def samples_by_name(text: str) -> dict[str, dict[str, float]]:
    """{metric name: {gpu index: value}}."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) == set(LABELS)
            found.setdefault(sample.name, {})[sample.labels["gpu"]] = sample.value
    return found


# -- the fake mimics pynvml ------------------------------------------------------------------------------------


def test_fake_nvml_codes_and_errors_match_pynvml() -> None:
    for name in dir(fake_nvml):
        if name.startswith(("NVML_ERROR_", "NVML_CLOCK_", "NVML_TEMPERATURE_")) or name == "NVML_SUCCESS":
            assert getattr(fake_nvml, name) == getattr(pynvml, name), name
    error = fake_nvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    assert isinstance(error, fake_nvml.NVMLError_NoPermission)
    assert str(error) == str(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)) == "Insufficient Permissions"
    assert fake_nvml.NVMLError_NotSupported().value == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_fake_nvml_units_and_constraints() -> None:
    nvml = FakeNvml(gpu_count=1)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle) == [100_000, 400_000]  # mW
    assert nvml.nvmlDeviceGetMemoryInfo(handle).total == 40 * 1024**3  # bytes
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(handle, 500_000)
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(1)


# -- metrics ---------------------------------------------------------------------------------------------------


def test_metrics_have_dcgm_names_labels_and_units() -> None:
    clock = ManualClock()
    nvml = FakeNvml(gpu_count=2, clock=clock)
    with running_agent(nvml) as (client, _agent):
        clock.now += 10.0  # 10 s at 180 W: the counter grows by 1,800,000 mJ
        found = samples_by_name(client.metrics())
        text = client.metrics()
    assert {name for name, _, _ in DCGM_METRICS} <= set(found)
    gpu0 = {name: values["0"] for name, values in found.items()}
    assert gpu0["DCGM_FI_DEV_POWER_USAGE"] == 180.0  # W, from 180,000 mW
    assert gpu0["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 400.0  # W, from 400,000 mW
    assert gpu0["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == fake_nvml.INITIAL_ENERGY_MJ + 1_800_000  # mJ
    assert gpu0["DCGM_FI_DEV_FB_USED"] == 4096.0  # MiB, from 4 GiB in bytes
    assert gpu0["DCGM_FI_DEV_FB_FREE"] == 40 * 1024 - 4096.0
    assert gpu0["DCGM_FI_DEV_FB_TOTAL"] == 40 * 1024
    assert gpu0["DCGM_FI_DEV_SM_CLOCK"] == 1410.0  # MHz
    assert gpu0["DCGM_FI_DEV_MEM_CLOCK"] == 1215.0
    assert gpu0["DCGM_FI_DEV_GPU_UTIL"] == 40.0
    assert gpu0["DCGM_FI_DEV_MEM_COPY_UTIL"] == 20.0
    assert gpu0["DCGM_FI_DEV_GPU_TEMP"] == 40.0
    assert found["DCGM_FI_DEV_GPU_UTIL"]["1"] == 50.0
    assert 'device="nvidia1",gpu="1",modelName="NVIDIA A100-SXM4-40GB",pci_bus_id="00000000:11:00.0"' in text
    assert 'Hostname="node7"' in text and 'UUID="GPU-fa4e0000-0000-0000-0000-000000000000"' in text


def test_energy_metric_left_out_where_unsupported() -> None:
    with running_agent(FakeNvml(gpu_count=1, energy_supported=False)) as (client, _agent):
        found = samples_by_name(client.metrics())
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in found
    assert found["DCGM_FI_DEV_POWER_USAGE"] == {"0": 180.0}


# -- settings over HTTP ----------------------------------------------------------------------------------------


def test_set_and_reset_power_limit_restores_the_value_before_the_agent() -> None:
    nvml = FakeNvml(gpu_count=2)
    nvml.gpus[0].power_limit_mw = 300_000  # an operator's limit, not the default
    with running_agent(nvml) as (client, _agent):
        assert client.set_power_limit(0, 250)["power_limit_w"] == 250.0
        state = client.set_power_limit(0, 150.5)
        assert nvml.gpus[0].power_limit_mw == 150_500
        assert state["original_power_limit_w"] == 300.0 and state["power_limit_range_w"] == [100.0, 400.0]
        assert samples_by_name(client.metrics())["DCGM_FI_DEV_POWER_MGMT_LIMIT"]["0"] == 150.5
        assert client.reset(0)["power_limit_w"] == 300.0
        assert nvml.gpus[0].power_limit_mw == 300_000
        assert nvml.gpus[1].power_limit_mw == 400_000  # untouched


def test_lock_and_reset_clocks() -> None:
    nvml = FakeNvml(gpu_count=2)
    with running_agent(nvml) as (client, _agent):
        state = client.lock_clocks(1, 900, 1200)
        assert state["locked_clocks_mhz"] == [900, 1200] and state["sm_clock_range_mhz"] == [210, 1410]
        assert nvml.gpus[1].locked_clocks_mhz == (900, 1200)
        assert samples_by_name(client.metrics())["DCGM_FI_DEV_SM_CLOCK"]["1"] == 1200.0
        assert client.state()["gpus"][1]["locked_clocks_mhz"] == [900, 1200]
        assert client.reset_clocks(1)["locked_clocks_mhz"] is None
        assert nvml.gpus[1].locked_clocks_mhz is None


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda c: c.set_power_limit(0, 450), "GPU 0 (NVIDIA A100-SXM4-40GB): power limit 450 W is outside"),
        (lambda c: c.set_power_limit(1, 50), "power limit 50 W is outside the supported range 100-400 W"),
        (lambda c: c.lock_clocks(0, 100, 1200), "locked clocks 100-1200 MHz are outside the supported SM"),
        (lambda c: c.lock_clocks(0, 900, 1500), "clock range 210-1410 MHz"),
        (lambda c: c.lock_clocks(0, 1200, 900), "min 1200 MHz is above max 900 MHz"),
    ],
)
def test_out_of_range_requests_are_refused_with_the_range(call, expected: str) -> None:
    nvml = FakeNvml(gpu_count=2)
    with running_agent(nvml) as (client, _agent):
        with pytest.raises(AgentRequestError) as refused:
            call(client)
        assert refused.value.status == 400
        assert expected in str(refused.value)
    assert nvml.calls == []  # refused before NVML saw it


def test_nvml_permission_and_support_errors_become_clear_answers() -> None:
    with running_agent(FakeNvml(gpu_count=1, deny_set=True)) as (client, _agent):
        with pytest.raises(AgentRequestError) as denied:
            client.set_power_limit(0, 200)
        assert denied.value.status == 403
        message = str(denied.value)
        assert "GPU 0: setting the power limit failed: NVML_ERROR_NO_PERMISSION" in message
        assert "needs root" in message and "Traceback" not in message
        assert client.state()["gpus"][0]["power_limit_w"] == 400.0  # reads still work
    with running_agent(FakeNvml(gpu_count=1, locked_clocks_supported=False)) as (client, _agent):
        with pytest.raises(AgentRequestError) as unsupported:
            client.lock_clocks(0, 900, 1200)
        assert unsupported.value.status == 501
        assert "NVML_ERROR_NOT_SUPPORTED" in str(unsupported.value)


def _raw(client: AgentClient, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    """One request over the agent's socket, answered whatever its status."""
    connection = _UnixHTTPConnection(str(client.socket_path), 5)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _raw_tcp(client: AgentClient, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(client.base_url + path, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_malformed_requests_get_json_errors() -> None:
    with running_agent(FakeNvml(gpu_count=1)) as (client, _agent):
        cases = [
            ("POST", "/gpus/0/power-limit", b"{not json", 400, "not JSON"),
            ("POST", "/gpus/0/power-limit", b'{"watt": 200}', 400, "needs a number 'watts'"),
            ("POST", "/gpus/0/power-limit", b'{"watts": true}', 400, "needs a number 'watts'"),
            ("POST", "/gpus/0/locked-clocks", b'{"min_mhz": 900.5, "max_mhz": 1000}', 400, "whole number"),
            ("POST", "/gpus/3/power-limit", b'{"watts": 200}', 404, "no GPU 3 on node7 (GPUs 0-0)"),
            ("GET", "/nowhere", None, 404, "no such endpoint"),
            ("POST", "/gpus", b"{}", 405, "not allowed"),
        ]
        for method, path, body, status, text in cases:
            got_status, payload = _raw(client, method, path, body)
            assert (got_status, text in payload["error"]) == (status, True), (path, payload)


def test_close_restores_everything_and_refuses_later_changes() -> None:
    nvml = FakeNvml(gpu_count=2)
    with running_agent(nvml) as (client, agent):
        client.set_power_limit(0, 200)
        client.lock_clocks(1, 600, 900)
        assert agent.close() == []
        assert nvml.gpus[0].power_limit_mw == 400_000 and nvml.gpus[1].locked_clocks_mhz is None
        with pytest.raises(AgentRequestError) as refused:
            client.set_power_limit(0, 200)
        assert refused.value.status == 503


# -- reads over TCP, changes over the socket only ---------------------------------------------------------------


def test_binds_localhost_by_default() -> None:
    agent = GpuAgent(FakeNvml(gpu_count=1))
    server = AgentHttpServer(agent, port=0)  # the default host
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()
        agent.close()
    assert inspect.signature(agent_command).parameters["host"].default == "127.0.0.1"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/gpus/0/power-limit", b'{"watts": 200}'),
        ("POST", "/gpus/0/locked-clocks", b'{"min_mhz": 900, "max_mhz": 1200}'),
        ("DELETE", "/gpus/0", None),
        ("DELETE", "/gpus/0/power-limit", None),
        ("POST", "/jobs/5/start", b'{"gpus": [0]}'),
        ("POST", "/jobs/5/end", b"{}"),
    ],
)
def test_every_change_over_tcp_is_refused_and_names_the_socket(
    method: str, path: str, body: bytes | None
) -> None:
    nvml = FakeNvml(gpu_count=1)
    with running_agent(nvml) as (client, agent):
        status, payload = _raw_tcp(client, method, path, body)
        assert status == 403, payload
        assert f"{method} {path} refused" in payload["error"] and str(client.socket_path) in payload["error"]
        assert _raw_tcp(client, "GET", "/gpus/0")[0] == 200  # reads are fine
        assert agent.jobs.job_gpus == {} and agent.changed == {}
    assert nvml.calls == []


def _own_non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))  # no packet is sent; this only picks the outgoing address
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_other_hosts_read_but_cannot_change_when_bound_wide() -> None:
    address = _own_non_loopback_address()
    if address is None:
        pytest.skip("no non-loopback address on this machine")
    nvml = FakeNvml(gpu_count=1)
    with running_agent(nvml, host="0.0.0.0") as (local, _agent):
        remote = AgentClient(address, int(local.base_url.rsplit(":", 1)[1]))
        assert "DCGM_FI_DEV_POWER_USAGE" in remote.metrics()  # reads are fine
        with pytest.raises(AgentRequestError) as refused:
            remote.set_power_limit(0, 200)
        assert refused.value.status == 403 and "only over the agent's Unix socket" in str(refused.value)
        assert local.set_power_limit(0, 200)["power_limit_w"] == 200.0
    assert nvml.gpus[0].power_limit_mw == 400_000  # restored when the agent closed


def test_unreachable_agent_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens on it
    with pytest.raises(AgentRequestError, match="unreachable") as failed:
        AgentClient("127.0.0.1", port, timeout_s=2).state()
    assert failed.value.status is None
    with tempfile.TemporaryDirectory() as tmp:
        missing = os.path.join(tmp, "agent.sock")
        with pytest.raises(AgentRequestError) as failed:
            AgentClient(socket_path=missing, timeout_s=2).set_power_limit(0, 200)
        assert failed.value.status is None
        assert (
            str(failed.value)
            == f"agent at {missing} unreachable: no such socket (is `wattsched agent` running?)"
        )
        with socket.socket(socket.AF_UNIX) as stale:  # a socket file nobody listens on
            stale.bind(missing)
            with pytest.raises(AgentRequestError, match="unreachable: connection refused"):
                AgentClient(socket_path=missing, timeout_s=2).reset(0)


# -- the CLI process: restoration on SIGTERM and SIGINT -------------------------------------------------------


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_agent_process_restores_settings_on_signal(tmp_path: Path, stop_signal: signal.Signals) -> None:
    state_file = tmp_path / "fake-nvml.json"
    preset = {"gpus": [{"power_limit_mw": 300_000, "locked_clocks_mhz": None}] * 2, "deny_set": False}
    state_file.write_text(json.dumps(preset))
    process, _port, socket_line = start_agent_process(state_file)
    try:
        client = AgentClient(socket_path=str(tmp_path / "agent.sock"))
        client.set_power_limit(0, 200)
        client.lock_clocks(1, 900, 1200)
        during = read_state_file(state_file)["gpus"]
        assert during[0]["power_limit_mw"] == 200_000 and during[1]["locked_clocks_mhz"] == [900, 1200]
        process.send_signal(stop_signal)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "GPU settings restored" in out and "Traceback" not in err
    assert f"changes only on {tmp_path / 'agent.sock'} (srw-rw----" in socket_line
    assert not (tmp_path / "agent.sock").exists()  # removed on the way out
    after = read_state_file(state_file)["gpus"]
    assert [gpu["power_limit_mw"] for gpu in after] == [300_000, 300_000]
    assert [gpu["locked_clocks_mhz"] for gpu in after] == [None, None]


# -- real NVML -------------------------------------------------------------------------------------------------


def _nvml_available() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_cli_without_nvidia_driver_prints_one_error_line() -> None:
    if _nvml_available():
        pytest.skip("a GPU is present: `agent --nvml real` would start serving")
    result = CliRunner().invoke(app, ["agent", "--nvml", "real", "--port", "0"])
    assert result.exit_code == 2
    assert "NVML initialisation failed: NVML_ERROR_" in result.output and "Traceback" not in result.output


def test_real_nvml_read_path() -> None:
    """Reads only: it never changes a setting of a real GPU."""
    if not _nvml_available():
        pytest.skip("no NVIDIA GPU or driver (pynvml.nvmlInit failed)")
    agent = GpuAgent(pynvml)
    try:
        assert agent.devices, "nvmlInit worked but NVML lists no GPU"
        server = AgentHttpServer(agent, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            client = AgentClient("127.0.0.1", server.port)
            found = samples_by_name(client.metrics())
            state = client.state()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        assert agent.close() == []
    for device in agent.devices:
        gpu = str(device.index)
        assert device.uuid.startswith(("GPU-", "MIG-")) and device.device_node.startswith("nvidia")
        assert 0 < found["DCGM_FI_DEV_POWER_USAGE"][gpu] < 2000  # W, not mW
        assert 0 < found["DCGM_FI_DEV_SM_CLOCK"][gpu] < 5000  # MHz
        assert found["DCGM_FI_DEV_FB_USED"][gpu] + found["DCGM_FI_DEV_FB_FREE"][gpu] > 1000  # MiB
        low, high = state["gpus"][device.index]["power_limit_range_w"]
        assert 0 < low <= found["DCGM_FI_DEV_POWER_MGMT_LIMIT"][gpu] <= high < 2000
