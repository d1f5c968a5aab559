"""The node agent on real GPUs, reads only: what `wattsched agent --nvml real` serves, checked on the hardware.

    PYTHONPATH=src:DEPS python tools/gpu_agent_check.py [--nvml real|fake] [--out DIR]

It needs only the agent's own dependencies (nvidia-ml-py, prometheus-client) beside `src/`, so it runs on a GPU
machine without the rest of wattsched's stack. It never changes a GPU setting: the lent GPU machines' rules say to
leave the accelerator's settings as they are, so the write path (power limits, locked clocks, restoring them on
exit) stays tested on the fake NVML only (tests/integration/test_agent.py).

1. The agent's view of every GPU through NVML, and every DCGM-named metric over HTTP from the agent's server, with
   plausibility checks (watts not milliwatts, MHz, MiB, the limit inside its constraints, the energy counter rising
   over two seconds on Volta and newer).
2. The server as the CLI runs it (`serve_until_stopped`) in a child process, stopped with SIGTERM: it must exit 0
   and report nothing to restore, and the GPUs' power limits must be the same as before.
3. A request outside the supported range, over the agent's Unix socket (the only way in for changes), is refused
   (HTTP 400) with the range in the message, before NVML is called (so nothing changes); the same request over
   TCP is refused (HTTP 403) before it is even read as a change.

Writes OUT/gpu_agent_check.json and prints a summary; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from wattsched.agent.client import AgentClient, AgentRequestError  # noqa: E402
from wattsched.agent.nvml import load_nvml  # noqa: E402
from wattsched.agent.server import AgentHttpServer, AgentSocketServer, GpuAgent  # noqa: E402

CHILD = """
import sys
sys.path.insert(0, {src!r})
from wattsched.agent.nvml import load_nvml
from wattsched.agent.server import AgentHttpServer, GpuAgent, serve_until_stopped
server = AgentHttpServer(GpuAgent(load_nvml({kind!r})), "127.0.0.1", 0, write_socket=None)
print(server.port, flush=True)
failures = serve_until_stopped(server)
print("restore failures:", failures, flush=True)
sys.exit(1 if failures else 0)
"""


def samples(text: str) -> dict[str, dict[str, float]]:
    """{metric name: {gpu index: value}} from the Prometheus text format."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[sample.labels.get("gpu", "")] = sample.value
    return out


def check(checks: list[dict], name: str, ok: bool, detail: str) -> None:
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)


def limits_w(agent: GpuAgent) -> list[float]:
    return [agent.gpu_state(d.index)["power_limit_w"] for d in agent.devices]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvml", choices=("real", "fake"), default="real")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    checks: list[dict] = []
    report: dict = {"python": sys.version.split()[0], "platform": platform.platform(), "nvml": args.nvml}
    nvml = load_nvml(args.nvml)
    agent = GpuAgent(nvml)
    report["driver"] = agent.state().get("driver_version")
    report["gpus"] = [agent.gpu_state(d.index) for d in agent.devices]
    check(
        checks,
        "GPUs listed",
        len(agent.devices) > 0,
        f"{len(agent.devices)} GPU(s): {[d.name for d in agent.devices]}",
    )
    before = limits_w(agent)

    socket_dir = tempfile.mkdtemp(prefix="wattsched-agent-check-")
    socket_path = os.path.join(socket_dir, "agent.sock")
    server = AgentHttpServer(agent, "127.0.0.1", 0, write_socket=socket_path)
    socket_server = AgentSocketServer(agent, socket_path)
    for each in (server, socket_server):
        threading.Thread(target=each.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    client = AgentClient("127.0.0.1", server.port)  # reads over TCP
    writer = AgentClient(socket_path=socket_path)  # changes over the socket
    try:
        first = samples(client.metrics())
        time.sleep(2.0)
        text = client.metrics()
        second = samples(text)
        report["metrics_text"] = text
        state = client.state()
        for device in agent.devices:
            gpu = str(device.index)
            power = second["DCGM_FI_DEV_POWER_USAGE"][gpu]
            check(checks, f"gpu{gpu} power in W", 0 < power < 2000, f"{power:.1f} W")
            sm = second["DCGM_FI_DEV_SM_CLOCK"][gpu]
            check(checks, f"gpu{gpu} SM clock in MHz", 0 < sm < 5000, f"{sm:.0f} MHz")
            mem = second["DCGM_FI_DEV_FB_USED"][gpu] + second["DCGM_FI_DEV_FB_FREE"][gpu]
            check(checks, f"gpu{gpu} framebuffer in MiB", mem > 1000, f"used + free = {mem:.0f} MiB")
            low, high = state["gpus"][device.index]["power_limit_range_w"]
            limit = second["DCGM_FI_DEV_POWER_MGMT_LIMIT"][gpu]
            check(
                checks,
                f"gpu{gpu} limit within constraints",
                0 < low <= limit <= high < 2000,
                f"{low} <= {limit} <= {high} W",
            )
            temp = second.get("DCGM_FI_DEV_GPU_TEMP", {}).get(gpu)
            check(checks, f"gpu{gpu} temperature", temp is not None and 0 < temp < 120, f"{temp} C")
            energy = (
                first.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {}).get(gpu),
                second.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {}).get(gpu),
            )
            if energy[0] is not None and energy[1] is not None:
                rise_j = (energy[1] - energy[0]) / 1e3
                check(
                    checks,
                    f"gpu{gpu} energy counter rises",
                    0 < rise_j < 2000 * 3,
                    f"+{rise_j:.1f} J in ~2 s (power {power:.0f} W)",
                )
            # over TCP: refused as a change, whatever the value
            try:
                client.set_power_limit(device.index, high + 100.0)
                check(checks, f"gpu{gpu} change over TCP refused", False, "accepted")
            except AgentRequestError as exc:
                check(checks, f"gpu{gpu} change over TCP refused", exc.status == 403, str(exc)[:160])
            # out of range: refused before NVML is called
            try:
                writer.set_power_limit(device.index, high + 100.0)
                check(checks, f"gpu{gpu} out-of-range refused", False, "accepted")
            except Exception as exc:  # the client raises with the agent's message
                check(
                    checks,
                    f"gpu{gpu} out-of-range refused",
                    "range" in str(exc).lower() or "outside" in str(exc).lower(),
                    str(exc)[:160],
                )
        present = sorted(n for n in second if n.startswith("DCGM_FI_"))
        report["metric_names"] = present
        check(checks, "DCGM names served", len(present) >= 8, ", ".join(present))
    finally:
        for each in (server, socket_server):
            each.shutdown()
            each.server_close()
        os.rmdir(socket_dir)
    restored = agent.close()
    check(checks, "nothing to restore after reads", restored == [], str(restored))
    check(checks, "power limits unchanged", limits_w(GpuAgent(load_nvml(args.nvml))) == before, f"{before} W")

    # the server as the CLI runs it, stopped by SIGTERM
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(src=str(SRC), kind=args.nvml)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    port = int(child.stdout.readline().strip())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            served = resp.status == 200 and b"DCGM_FI_DEV_POWER_USAGE" in resp.read()
    except urllib.error.URLError as exc:
        served = False
        print(exc)
    child.send_signal(signal.SIGTERM)
    try:
        tail = child.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:  # a hang is a failed check, reported with what the child printed
        child.kill()
        tail = "no exit within 60 s of SIGTERM: " + child.communicate()[0]
    check(checks, "child agent served /metrics", served, f"port {port}")
    check(
        checks,
        "SIGTERM: clean exit, nothing to restore",
        child.returncode == 0 and "[]" in tail,
        f"rc {child.returncode}, {tail.strip()[-120:]}",
    )
    check(
        checks,
        "power limits unchanged after the child",
        limits_w(GpuAgent(load_nvml(args.nvml))) == before,
        "",
    )

    report["checks"] = checks
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_agent_check.json").write_text(json.dumps(report, indent=2, default=str))
    failed = [c["check"] for c in checks if not c["ok"]]
    print(
        f"{len(checks) - len(failed)}/{len(checks)} checks passed" + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
