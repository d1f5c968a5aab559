"""Benchmark of the Kubernetes backends on the Alibaba v2023 default trace and its 1,213-node cluster.

Sub-commands (default: ``all``, the three in turn):

* ``scheduler``: the custom scheduler (``backends/k8s/scheduler.py``) places the trace's 8,152 pods, fed to it as
  pod events of the in-memory API server (``fake.py``), with FGD; timed against the simulator's packing run of
  the same pods in the same order (``engine/packing.py``), in one process: one untimed run of each first (imports,
  caches), then three of each, alternating (and three of the scheduler without its events, for scale); the
  medians are compared. Target: the scheduler in under 3x the
  simulator's wall time. Every bound pod is checked against the simulator's node and GPUs.
* ``extender``: a load generator against the HTTP extender (``backends/k8s/extender.py``) on 127.0.0.1 only.
  ``prioritize`` and ``filter`` requests with ``nodeCacheCapable`` bodies (``NodeNames``: all 1,213 names; the
  ``Pod``: one of a few hundred trace pods, cycled) are sent open loop at a fixed rate: request i is due at
  t0 + i/rate whatever happened to the earlier ones, and its latency runs from that due time to the last byte
  of the answer, so a slow server is charged for the queue it causes (no coordinated omission). A small pool of
  client threads with persistent ``http.client.HTTPConnection`` s sends them (``--clients``, default 2:
  kube-scheduler calls filter and prioritize for one pod at a time, so an extender seldom has more than one or
  two requests in hand; more connections are more server threads taking turns at its GIL, and a longer tail).
  Targets: p99 < 10 ms at 200 requests/s for 60 s, each verb; then the rate is stepped up (10 s a step) until
  p99 passes 50 ms (down from 200/s instead when 200/s is past it already).

  The server runs in a child process (``multiprocessing``, spawned): its own interpreter and GIL, so the client
  threads never hold up the server's, and on a 2-core machine each side gets a core. The child builds exactly
  what ``wattsched serve k8s-extender`` builds (ClusterWatcher over the in-memory API with the cluster's nodes,
  FGD, seed 42, the trace as FGD's workload; ``sync()`` once; ``ExtenderServer`` on 127.0.0.1, an ephemeral port)
  but runs no informer threads (nothing changes in the in-memory API during the test). ``--server cli`` measures
  the CLI instead, as a subprocess: ``wattsched serve k8s-extender --offline alibaba-v2023 --workload
  alibaba-v2023/default --port N`` (its informers re-watch the in-memory API once a second). The client is this
  process; a client in the server's process would share its GIL and be charged to it.
  The mirror is the empty cluster (the test binds nothing), so every request sees the same feasible nodes and
  FGD's per-class scores are cached after the warm-up: what is measured is the HTTP, JSON and per-node work.
  Where the time of one request goes is printed too: the same verbs called in this process, no HTTP (JSON
  decoding of the request, the verb, JSON encoding of the answer).
* ``resolution``: the loss of resolution of mapping FGD's 0..100 scores to the extender's 0..10. The trace is
  replayed in packing order on a ``K8sCluster`` (the extender's mirror); before each pod is placed, the extender's
  0..10 scores for every feasible node are computed under several mappings, and compared with the simulator's
  pick (``policy.place``). kube-scheduler takes the highest total score and breaks ties at random, so the
  expected fraction of decisions whose top node differs from the simulator's is the mean over decisions of
  (1 - 1/|top set|) when the pick is in the top set, else 1. Then the pod is placed as the simulator places it.

Usage: WATTSCHED_DATA=../shared/data .venv/bin/python benchmarks/bench_k8s.py [all|scheduler|extender|resolution]
       [--data-dir DIR] [--quick] [--duration 60] [--server child|cli] [--profile]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import os

# One thread per process: the numpy work here is many small arrays, threads only add contention.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import http.client  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

TARGET_SCHEDULER_RATIO = 3.0  # the custom scheduler's wall time over the simulator's packing run
TARGET_P99_MS = 10.0  # extender p99 at TARGET_RATE_RPS
TARGET_RATE_RPS = 200.0
KNEE_P99_MS = 50.0  # the rate at which p99 crosses this is reported
STEP_RATES = (200, 300, 400, 600, 800, 1000, 1200, 1600, 2000, 2400, 3200)
DOWN_RATES = (150, 100, 75, 50, 25, 10)  # when 200/s is already over the knee
STEP_S = 10.0
DISTINCT_PODS = 300  # different trace pods cycled through by the load generator
PREFIX = "/energy"
GRACE_S = 10.0  # after the schedule ends, requests still unsent are given up (counted as missed)


def machine() -> str:
    return (
        f"{platform.platform()} | {platform.processor() or platform.machine()} | "
        f"{os.cpu_count()} logical CPUs | Python {platform.python_version()}"
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def seeds(seed: int = 42) -> tuple[np.random.Generator, np.random.Generator]:
    """(order rng, policy rng) as experiments/run.py draws them."""
    s = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(s[0]), np.random.default_rng(s[1])


# ----- scheduler ----------------------------------------------------------------------------------------------
def simulate(inputs, seed: int = 42):
    """The simulator's packing run of the trace with FGD (no inflation): (wall s, outcome)."""
    from wattsched.engine.packing import run_packing
    from wattsched.policies.base import PLACEMENT_POLICIES

    rng_order, rng_policy = seeds(seed)
    policy = PLACEMENT_POLICIES.create("fgd")
    t0 = time.perf_counter()
    outcome = run_packing(inputs.jobs, inputs.cluster, policy, rng_order, rng_policy, inflate=0.0)
    return time.perf_counter() - t0, outcome


def schedule(inputs, order: list[int], post_events: bool = True, profile: bool = False):
    """The custom scheduler on the in-memory API: the nodes listed first, then one ADDED event per pod in
    `order`; the timed part is the sync that reads those events, places and binds every pod, and the wait for
    its events to go out. (wall s, scheduler, api, profile or None)."""
    from wattsched.backends.k8s.fake import FakeCoreV1Api
    from wattsched.backends.k8s.replay import nodes_of, pods_of
    from wattsched.backends.k8s.scheduler import CustomScheduler
    from wattsched.policies.base import PLACEMENT_POLICIES

    api = FakeCoreV1Api(nodes_of(inputs.cluster))
    sched = CustomScheduler(
        api, PLACEMENT_POLICIES.create("fgd"), workload=inputs.jobs, seed=42, post_events=post_events
    )
    sched.sync()
    for pod in pods_of(inputs.jobs, order):
        api.add_pod(pod)
    gc.collect()
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    sched.sync()
    sched.events.flush(timeout_s=120.0)
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
    return wall, sched, api, prof


def compare_placements(outcome, sched) -> tuple[int, int, int, int]:
    """(same node and GPUs, different, bound by the scheduler but not placed by the simulator, placed by the
    simulator but not bound)."""
    same = differ = extra = 0
    bound_keys = set()
    for uid, (_, placement) in sched.placements.items():
        k = int(uid.rsplit("pod-", 1)[1])
        bound_keys.add(k)
        sim = outcome.placements[k]
        if sim is None:
            extra += 1
        elif [(n, tuple(g)) for n, g, _, _ in sim] == [(n, tuple(g)) for n, g, _, _ in placement]:
            same += 1
        else:
            differ += 1
    missing = sum(1 for k, p in enumerate(outcome.placements) if p is not None and k not in bound_keys)
    return same, differ, extra, missing


def bench_scheduler(inputs, args) -> bool:
    print(f"\n== scheduler: custom scheduler vs simulator packing run, FGD, default trace ({load()})")
    _, outcome = simulate(inputs)  # untimed warm-up of both
    order = outcome.order.tolist()
    schedule(inputs, order)
    sims, k8s, quiet = [], [], []
    sched = None
    for rep in range(3):
        gc.collect()
        s, outcome = simulate(inputs)
        sims.append(s)
        q, _, _, _ = schedule(inputs, order, post_events=False)
        quiet.append(q)
        del sched
        gc.collect()
        k, sched, api, _ = schedule(inputs, order)
        k8s.append(k)
        print(f"  rep {rep + 1}: simulator {s:.2f} s, custom scheduler {k:.2f} s, without events {q:.2f} s "
              f"({load()})", flush=True)  # fmt: skip
    sim_s, k8s_s = statistics.median(sims), statistics.median(k8s)
    same, differ, extra, missing = compare_placements(outcome, sched)
    placed = int(outcome.placed.sum())
    print(f"  pods {len(order)}; simulator placed {placed}; scheduler bound {sched.stats.bound} "
          f"(API bindings {len(api.bindings)}, events posted {sched.events.posted}, "
          f"unschedulable reported {sched.stats.unschedulable}, conflicts {sched.stats.conflicts})")  # fmt: skip
    print(f"  placements: {same} same node and GPUs as the simulator, {differ} different, {extra} bound but "
          f"unplaced in the simulator, {missing} placed in the simulator but not bound")  # fmt: skip
    ratio = k8s_s / sim_s
    ok = ratio < TARGET_SCHEDULER_RATIO and differ == extra == missing == 0 and sched.stats.bound == placed
    print(f"  median of 3: simulator {sim_s:.2f} s, custom scheduler {k8s_s:.2f} s "
          f"({len(order) / k8s_s:,.0f} pods/s); ratio {ratio:.2f} "
          f"[target < {TARGET_SCHEDULER_RATIO:g}: {met(ratio < TARGET_SCHEDULER_RATIO)}]")  # fmt: skip
    print(f"  for scale: without events (post_events=False) {statistics.median(quiet):.2f} s "
          f"(ratio {statistics.median(quiet) / sim_s:.2f})")  # fmt: skip
    if args.profile:
        import pstats

        del sched
        gc.collect()
        _, _, _, prof = schedule(inputs, order, profile=True)
        print("  cProfile of one scheduler run (main thread only; the events thread is not seen):")
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(18)
    return ok


# ----- extender -----------------------------------------------------------------------------------------------
def _serve_child(data_dir: str | None, conn) -> None:
    """The extender in a spawned child: sends its port, serves until the parent says stop (or goes away)."""
    import logging

    from wattsched.backends.k8s.extender import Extender, ExtenderServer
    from wattsched.backends.k8s.fake import FakeCoreV1Api
    from wattsched.backends.k8s.replay import nodes_of
    from wattsched.backends.k8s.watcher import ClusterWatcher
    from wattsched.experiments.fgd_pwr import trace_inputs
    from wattsched.policies.base import PLACEMENT_POLICIES

    logging.basicConfig(level=logging.WARNING)
    inputs = trace_inputs("default", data_dir)
    watcher = ClusterWatcher(
        FakeCoreV1Api(nodes_of(inputs.cluster)),
        PLACEMENT_POLICIES.create("fgd"),
        seed=42,
        workload=inputs.jobs,
    )
    watcher.sync()
    extender = Extender(watcher)
    server = ExtenderServer(extender, "127.0.0.1", 0, PREFIX)
    server.start()
    conn.send(server.port)
    with contextlib.suppress(EOFError):
        conn.recv()  # "stop", or EOFError when the parent is gone
    conn.send(dict(extender.calls))
    server.stop()


class Server:
    """The extender under test, in a child process; a context manager that always ends the child."""

    def __init__(self, mode: str, data_dir: str | None):
        self.mode = mode
        self.data_dir = data_dir
        self.port = 0
        self.proc = None
        self.conn = None
        self.log = None
        self.calls = None

    def __enter__(self) -> Server:
        if self.mode == "child":
            ctx = multiprocessing.get_context("spawn")
            self.conn, child = ctx.Pipe()
            self.proc = ctx.Process(target=_serve_child, args=(self.data_dir, child), daemon=True)
            self.proc.start()
            if not self.conn.poll(180):
                raise RuntimeError("the extender child did not start within 180 s")
            self.port = int(self.conn.recv())
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            env = dict(os.environ)
            if self.data_dir:
                env["WATTSCHED_DATA"] = self.data_dir
            exe = Path(sys.executable).parent / "wattsched"
            self.log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(
                [str(exe), "serve", "k8s-extender", "--offline", "alibaba-v2023", "--workload",
                 "alibaba-v2023/default", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "WARNING"],
                env=env, stdout=subprocess.DEVNULL, stderr=self.log,
            )  # fmt: skip
            deadline = time.monotonic() + 180
            while True:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(
                        f"wattsched serve k8s-extender did not come up: {self.log.read()[-2000:]}"
                    )
                try:
                    c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                    c.request("GET", f"{PREFIX}/healthz")
                    if c.getresponse().status == 200:
                        c.close()
                        break
                    c.close()
                except OSError:
                    pass
                time.sleep(0.2)
        return self

    def __exit__(self, *exc) -> None:
        if self.mode == "child":
            try:
                self.conn.send("stop")
                if self.conn.poll(10):
                    self.calls = self.conn.recv()
            except (OSError, EOFError):
                pass
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(5)
        else:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.log.close()


def request_bodies(inputs, order: list[int]) -> list[bytes]:
    """`DISTINCT_PODS` trace pods, spread over the arrival order, each as a nodeCacheCapable ExtenderArgs."""
    from wattsched.backends.k8s.replay import pods_of

    names = [str(n) for n in inputs.cluster.node_names]
    picks = [order[int(k)] for k in np.linspace(0, len(order) - 1, DISTINCT_PODS)]
    return [
        json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        for pod in pods_of(inputs.jobs, picks)
    ]


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> bytes:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return data


def check_answers(port: int, bodies: list[bytes], n_nodes: int) -> str:
    """Every body once to each verb, closed loop (warms FGD's score cache); checks the answers' shape; returns
    a line with the one-at-a-time service times."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times: dict[str, list[float]] = {"prioritize": [], "filter": []}
    for body in bodies:
        for verb in times:
            t0 = time.perf_counter()
            data = _post(conn, f"{PREFIX}/{verb}", body)
            times[verb].append(time.perf_counter() - t0)
            answer = json.loads(data)
            if verb == "prioritize":
                assert len(answer) == n_nodes and all(0 <= a["Score"] <= 10 for a in answer), answer[:3]
            else:
                seen = len(answer["NodeNames"]) + len(answer["FailedNodes"])
                assert seen + len(answer["FailedAndUnresolvableNodes"]) == n_nodes, answer["Error"]
    conn.close()
    # the second half: the first half warmed the caches
    return ", ".join(f"{verb} p50 {np.median(t[len(t) // 2 :]) * 1e3:.2f} ms" for verb, t in times.items())


def cpu_s(pid: int | None) -> float:
    """CPU seconds a process has used (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


def offered(
    port: int,
    verb: str,
    bodies: list[bytes],
    rate: float,
    duration: float,
    clients: int,
    pid: int | None = None,
) -> dict:
    """Open-loop load: request i due at t0 + i/rate for `duration` s; latency from due time to full answer."""
    n = int(rate * duration)
    due = np.empty(n)
    done = np.full(n, np.nan)
    errors: list[str] = []
    counter = itertools.count()
    path = f"{PREFIX}/{verb}"
    t0 = time.perf_counter() + 0.05
    give_up = t0 + duration + GRACE_S

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GRACE_S)
        try:
            while True:
                i = next(counter)
                if i >= n:
                    return
                t = t0 + i / rate
                due[i] = t
                now = time.perf_counter()
                if now > give_up:
                    continue  # missed: left NaN
                if t > now:
                    time.sleep(t - now)
                try:
                    _post(conn, path, bodies[i % len(bodies)])
                    done[i] = time.perf_counter()
                except (OSError, RuntimeError, http.client.HTTPException) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GRACE_S)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    cpu0 = cpu_s(pid)
    for th in threads:
        th.start()
    for th in threads:
        th.join(duration + 2 * GRACE_S + 5)
    server_cpu = (cpu_s(pid) - cpu0) / max(time.perf_counter() - t0, 1e-9)
    ok = ~np.isnan(done)
    lat_ms = np.where(ok, (done - due) * 1e3, np.inf)  # a missed request counts as endlessly late
    end = float(np.nanmax(done)) if ok.any() else t0 + duration
    pct = {q: float(np.percentile(lat_ms, q, method="higher")) for q in (50, 95, 99)}
    return {
        "verb": verb, "rate": rate, "duration": duration, "sent": n, "answered": int(ok.sum()),
        "errors": len(errors), "first_error": errors[0] if errors else "",
        "achieved": int(ok.sum()) / max(end - t0, 1e-9),
        "p50": pct[50], "p95": pct[95], "p99": pct[99], "max": float(lat_ms.max()), "server_cpu": server_cpu,
    }  # fmt: skip


def show(r: dict) -> str:
    return (
        f"{r['verb']:10s} offered {r['rate']:6.0f}/s for {r['duration']:.0f} s: achieved {r['achieved']:7.1f}/s, "
        f"answered {r['answered']}/{r['sent']}, errors {r['errors']}; latency ms p50 {r['p50']:.2f} "
        f"p95 {r['p95']:.2f} p99 {r['p99']:.2f} max {r['max']:.2f}; server CPU {r['server_cpu']:.0%} of a core"
        + (f" (first error: {r['first_error']})" if r["errors"] else "")
    )


def knee(
    port: int, verb: str, bodies: list[bytes], step_s: float, clients: int, pid: int | None
) -> tuple[dict | None, ...]:
    """(the last step under KNEE_P99_MS, the first over): the rate stepped up from 200/s; when 200/s is over
    already, stepped down instead. Every step is `step_s` long; at most len(STEP_RATES) + len(DOWN_RATES)."""

    def step(rate: float) -> dict:
        r = offered(port, verb, bodies, rate, step_s, clients, pid)
        print(f"  step {show(r)} ({load()})", flush=True)
        return r

    first = step(STEP_RATES[0])
    if first["p99"] >= KNEE_P99_MS:
        over = first
        for rate in DOWN_RATES:
            r = step(rate)
            if r["p99"] < KNEE_P99_MS:
                return r, over
            over = r
        return None, over
    under = first
    for rate in STEP_RATES[1:]:
        r = step(rate)
        if r["p99"] >= KNEE_P99_MS:
            return under, r
        under = r
    return under, None


def describe(r: dict | None, side: str) -> str:
    if r is None:
        return f"{side} the rates tried"
    return f"{r['rate']:.0f}/s offered (achieved {r['achieved']:.0f}/s, p99 {r['p99']:.1f} ms)"


def service_split(inputs, bodies: list[bytes]) -> list[str]:
    """The verbs called in this process on the same mirror, no HTTP: median ms of decoding, the verb, encoding."""
    from wattsched.backends.k8s.extender import Extender
    from wattsched.backends.k8s.fake import FakeCoreV1Api
    from wattsched.backends.k8s.replay import nodes_of
    from wattsched.backends.k8s.watcher import ClusterWatcher
    from wattsched.policies.base import PLACEMENT_POLICIES

    watcher = ClusterWatcher(FakeCoreV1Api(nodes_of(inputs.cluster)), PLACEMENT_POLICIES.create("fgd"), seed=42,
                             workload=inputs.jobs)  # fmt: skip
    watcher.sync()
    extender = Extender(watcher)
    lines = []
    for verb in ("prioritize", "filter"):
        call = getattr(extender, verb)
        for body in bodies:  # warm the score cache
            call(json.loads(body))
        parts = np.zeros((len(bodies), 3))
        for i, body in enumerate(bodies):
            t0 = time.perf_counter()
            args = json.loads(body)
            t1 = time.perf_counter()
            answer = call(args)
            t2 = time.perf_counter()
            if not isinstance(answer, bytes):  # prioritize answers encoded already
                json.dumps(answer).encode()
            parts[i] = (t1 - t0, t2 - t1, time.perf_counter() - t2)
        med = np.median(parts, axis=0) * 1e3
        lines.append(f"{verb} {med.sum():.2f} ms = decode {med[0]:.2f} + {verb} {med[1]:.2f} + encode "
                     f"{med[2]:.2f}")  # fmt: skip
    return lines


def bench_extender(inputs, args) -> bool:
    duration = 10.0 if args.quick else args.duration
    step_s = 5.0 if args.quick else STEP_S
    print(f"\n== extender: open-loop load on 127.0.0.1, server {args.server}, {args.clients} client threads, "
          f"{DISTINCT_PODS} trace pods, {inputs.cluster.num_nodes} NodeNames a request ({load()})")  # fmt: skip
    _, outcome = simulate(inputs)
    bodies = request_bodies(inputs, outcome.order.tolist())
    print(f"  request body {np.mean([len(b) for b in bodies]) / 1024:.1f} KiB on average")
    print(f"  in this process, no HTTP (medians): {'; '.join(service_split(inputs, bodies))}")
    all_ok = True
    with Server(args.server, args.data_dir) as server:
        print(
            f"  one at a time (closed loop, warm): {check_answers(server.port, bodies, inputs.cluster.num_nodes)}"
        )
        for verb in ("prioritize", "filter"):
            r = offered(server.port, verb, bodies, TARGET_RATE_RPS, duration, args.clients, server.proc.pid)
            ok = r["p99"] < TARGET_P99_MS and r["errors"] == 0 and r["answered"] == r["sent"]
            all_ok &= ok
            print(f"  {show(r)} [target p99 < {TARGET_P99_MS:g} ms at {TARGET_RATE_RPS:.0f}/s: {met(ok)}] "
                  f"({load()})", flush=True)  # fmt: skip
        for verb in ("prioritize", "filter"):
            under, over = knee(server.port, verb, bodies, step_s, args.clients, server.proc.pid)
            print(f"  {verb}: p99 crosses {KNEE_P99_MS:g} ms between {describe(under, 'below')} and "
                  f"{describe(over, 'above')}", flush=True)  # fmt: skip
    if server.calls:
        print(f"  the server answered {server.calls}")
    return all_ok


# ----- resolution ---------------------------------------------------------------------------------------------
def _linear(raw: np.ndarray) -> np.ndarray:
    """FGD's 0..100 to 0..10, rounded half up: round(raw * 10 / 100)."""
    return np.floor(raw * 10 / 100 + 0.5).astype(np.int64)


def _truncated(raw: np.ndarray) -> np.ndarray:
    """FGD's 0..100 to 0..10 as Go's integer arithmetic would: raw * 10 / 100, truncated."""
    return raw * 10 // 100


def _min_max(raw: np.ndarray) -> np.ndarray:
    """The lowest raw score to 0, the highest to 10, linear in between, rounded half up; no pick rule."""
    low, high = int(raw.min()), int(raw.max())
    if high <= low:
        return np.zeros(raw.size, np.int64)
    return np.floor((raw - low) / (high - low) * 10 + 0.5).astype(np.int64)


MAPPINGS = {
    "raw FGD score 0..100 (no mapping, for scale)": lambda raw: raw,
    "(a) wattsched: pick 10, others min-max into 0..9": None,  # cluster.prioritize's own answer
    "(b) linear round(raw*10/100)": _linear,
    "(b') linear, truncated (Go int raw*10/100)": _truncated,
    "(c) min-max linear into 0..10, no pick rule": _min_max,
}


def bench_resolution(inputs, args) -> bool:
    from wattsched.backends.k8s.cluster import K8sCluster
    from wattsched.backends.k8s.objects import node_info, pod_request
    from wattsched.backends.k8s.replay import nodes_of, pods_of
    from wattsched.policies.base import PLACEMENT_POLICIES

    print(
        f"\n== resolution: FGD scores mapped to the extender's 0..10, default trace, packing order ({load()})"
    )
    t_start = time.perf_counter()
    _, outcome = simulate(inputs)
    order = outcome.order.tolist()
    cluster = K8sCluster([node_info(n) for n in nodes_of(inputs.cluster)], PLACEMENT_POLICIES.create("fgd"),
                         inputs.jobs, seed=42)  # fmt: skip
    names = [str(n) for n in inputs.cluster.node_names]
    miss = dict.fromkeys(MAPPINGS, 0)
    tied = dict.fromkeys(MAPPINGS, 0)
    expected = dict.fromkeys(MAPPINGS, 0.0)
    top_size = dict.fromkeys(MAPPINGS, 0)
    worse = dict.fromkeys(MAPPINGS, 0)  # the top set holds a node with a lower FGD score than the pick's
    p_worse = dict.fromkeys(MAPPINGS, 0.0)  # chance that a random top node has a lower FGD score
    margin_one = 0  # (a): the runner-up scored 9, one point under the pick's 10
    decisions = single = unplaced = differ_from_sim = 0
    for k, raw_pod in enumerate(pods_of(inputs.jobs, order)):
        pod = pod_request(raw_pod)
        placement = cluster.place(pod)
        if placement is None:
            unplaced += 1
            continue
        pick = str(cluster.spec.node_names[placement[0][0]])
        sim = outcome.placements[k]
        differ_from_sim += sim is None or sim[0][0] != placement[0][0]
        where, _, raw = cluster.scores(pod, names)
        feasible = [names[i] for i in where.tolist()]
        decisions += 1
        single += len(feasible) == 1
        at = feasible.index(pick)
        ours = dict(zip(names, cluster.prioritize(pod, names).tolist(), strict=True))
        for label, mapping in MAPPINGS.items():
            scores = np.array([ours[n] for n in feasible]) if mapping is None else mapping(raw)
            top = np.flatnonzero(scores == scores.max())
            if at in top:
                expected[label] += 1.0 - 1.0 / top.size
            else:
                expected[label] += 1.0
                miss[label] += 1
            tied[label] += top.size > 1
            top_size[label] += top.size
            lower = int((raw[top] < raw[at]).sum())
            worse[label] += lower > 0
            p_worse[label] += lower / top.size
            if mapping is None and len(feasible) > 1:
                margin_one += int(np.sort(scores)[-2]) == 9
        cluster.assume(pod, placement, in_flight=False)
    print(f"  {len(order)} pods: {decisions} decisions (pods placed; {single} with one feasible node), "
          f"{unplaced} placed nowhere; the mirror's picks differ from the simulator's run in {differ_from_sim}; "
          f"{time.perf_counter() - t_start:.1f} s")  # fmt: skip
    print(f"  {'mapping':48s} {'pick not top':>12s} {'top tied':>9s} {'mean |top|':>10s} "
          f"{'E[top != pick]':>14s} {'top has worse':>13s} {'P(worse)':>9s}")  # fmt: skip
    for label in MAPPINGS:
        print(f"  {label:48s} {miss[label] / decisions:12.2%} {tied[label] / decisions:9.2%} "
              f"{top_size[label] / decisions:10.1f} {expected[label] / decisions:14.2%} "
              f"{worse[label] / decisions:13.2%} {p_worse[label] / decisions:9.2%}")  # fmt: skip
    print(
        "  E[top != pick]: the expected fraction of decisions where kube-scheduler's top node (ties broken at "
        "random) is not the simulator's pick; P(worse): the chance it has a lower FGD score than the pick"
    )
    print(
        f"  (a): the runner-up scores 9, one point under the pick, in {margin_one / decisions:.2%} of decisions"
    )
    return differ_from_sim == 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "what", nargs="?", default="all", choices=("all", "scheduler", "extender", "resolution")
    )
    parser.add_argument("--data-dir", default=None, help="dataset directory (default: $WATTSCHED_DATA)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds at 200 requests/s (extender)")
    parser.add_argument("--quick", action="store_true", help="extender: 10 s at 200/s, 5-s rate steps")
    parser.add_argument("--server", choices=("child", "cli"), default="child",
                        help="extender in a spawned child (default) or the `wattsched serve` CLI")  # fmt: skip
    parser.add_argument(
        "--clients", type=int, default=2, help="client threads (connections) of the load generator"
    )
    parser.add_argument("--profile", action="store_true", help="scheduler: cProfile one run")
    args = parser.parse_args()

    from wattsched.core.errors import WattschedError
    from wattsched.experiments.fgd_pwr import trace_inputs

    print(f"machine: {machine()}; {load()}")
    try:
        t0 = time.perf_counter()
        inputs = trace_inputs("default", args.data_dir)
    except WattschedError as exc:
        print(f"error: {exc}\n(set WATTSCHED_DATA to the dataset directory, or --data-dir)", file=sys.stderr)
        return 2
    print(f"load default trace ({len(inputs.jobs)} pods) + cluster ({inputs.cluster.num_nodes} nodes): "
          f"{time.perf_counter() - t0:.2f} s")  # fmt: skip
    ok = True
    if args.what in ("all", "scheduler"):
        ok &= bench_scheduler(inputs, args)
    if args.what in ("all", "extender"):
        ok &= bench_extender(inputs, args)
    if args.what in ("all", "resolution"):
        ok &= bench_resolution(inputs, args)
    print(f"\n{'all targets met' if ok else 'a target was missed'} ({load()})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
