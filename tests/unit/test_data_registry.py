"""Dataset registry, download (against a local HTTP server, never the network) and the `data` CLI."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wattsched.cli.data import data_app
from wattsched.core.errors import UnknownNameError, WattschedError
from wattsched.data import fetch as fetch_mod
from wattsched.data import registry

EXPECTED_NAMES = {
    "alibaba-gpu-v2023",
    "alibaba-pai-v2020",
    "philly-pollux",
    "gavel-traces",
    "tiresias-traces",
    "helios-artifact",
    "elasticflow-throughputs",
    "zeus-power",
    "electricity-prices-greendcc",
    "carbon-intensity-greendcc",
}
FAKE = "fake-set"
GOOD_BYTES = b"job,gpus\na,1\nb,4\n"


# --- registry -------------------------------------------------------------------------------------


def test_registry_has_every_dataset_with_well_formed_files():
    all_datasets = registry.datasets()
    assert set(all_datasets) == EXPECTED_NAMES
    for ds in all_datasets.values():
        assert ds.files, ds.name
        assert ds.licence and ds.citation and ds.description
        paths = [f.path for f in ds.files]
        assert len(paths) == len(set(paths)), ds.name
        for f in ds.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256), (ds.name, f.path)
            assert f.url.startswith("https://raw.githubusercontent.com/"), (ds.name, f.path)
            # pinned to a full commit, never a branch
            assert re.search(r"/[0-9a-f]{40}/", f.url), (ds.name, f.url)
            assert f.size > 0
            assert not f.path.startswith("/") and ".." not in f.path.split("/")
            assert not f.path.rsplit("/", 1)[-1].startswith(("PROVENANCE", "LICENSE", "README"))


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        registry.dataset("nope")
    message = str(info.value)
    assert "nope" in message
    for name in EXPECTED_NAMES:
        assert name in message


@pytest.mark.realdata
def test_local_copy_matches_registry_checksums():
    data_dir = os.environ.get("WATTSCHED_DATA")
    if not data_dir:
        pytest.skip("WATTSCHED_DATA is not set (point it at ../shared/data to check the registry checksums)")
    root = Path(data_dir).expanduser()
    present = [
        (ds.name, f, root / ds.name / f.path)
        for ds in registry.datasets().values()
        for f in ds.files
        if (root / ds.name / f.path).is_file()
    ]
    if not present:
        pytest.skip(f"no registered dataset file found under WATTSCHED_DATA={root}")
    wrong = [
        f"{name}/{f.path}"
        for name, f, path in present
        if path.stat().st_size != f.size or fetch_mod.file_sha256(path) != f.sha256
    ]
    assert not wrong, f"{len(wrong)} local files differ from the registry: {wrong[:5]}"


# --- fetch against a local server -----------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # keep pytest output clean
        pass


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A local HTTP server over a served/ dir; yields (base_url, served_dir). No external network."""
    served = tmp_path / "served"
    served.mkdir()
    # urllib would send 127.0.0.1 through a configured proxy otherwise
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "*")
    monkeypatch.delenv("WATTSCHED_MIRROR", raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _fake_dataset(
    monkeypatch: pytest.MonkeyPatch, content: bytes, path: str = "sub/jobs.csv"
) -> registry.DataFile:
    file = registry.DataFile(
        path=path,
        url=f"https://example.invalid/{path}",
        sha256=hashlib.sha256(content).hexdigest(),
        size=len(content),
    )
    fake = registry.Dataset(FAKE, "tiny test set", "CC0", "none", (file,))
    monkeypatch.setattr(registry, "datasets", lambda: {FAKE: fake})
    return file


def _serve(served: Path, path: str, content: bytes) -> None:
    target = served / FAKE / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)


def test_fetch_downloads_then_skips(mirror, tmp_path, monkeypatch):
    base_url, served = mirror
    file = _fake_dataset(monkeypatch, GOOD_BYTES)
    _serve(served, file.path, GOOD_BYTES)
    dest = tmp_path / "cache"

    events: list[fetch_mod.FileProgress] = []
    paths = fetch_mod.fetch(FAKE, dest=dest, base_url=base_url, progress=events.append, timeout=5)
    assert paths == [dest / FAKE / file.path]
    assert paths[0].read_bytes() == GOOD_BYTES
    assert events[-1].state == "done" and events[-1].bytes_done == len(GOOD_BYTES)
    assert not list(paths[0].parent.glob(".*.tmp"))

    # Second run: the server no longer has the file, so a re-download would fail; it must be skipped.
    (served / FAKE / file.path).unlink()
    events.clear()
    assert fetch_mod.fetch(FAKE, dest=dest, base_url=base_url, progress=events.append, timeout=5) == paths
    assert [e.state for e in events] == ["skipped"]


def test_fetch_uses_mirror_env_and_cache_dir(mirror, tmp_path, monkeypatch):
    base_url, served = mirror
    file = _fake_dataset(monkeypatch, GOOD_BYTES, path="msr/seed=0/a b.trace")
    _serve(served, file.path, GOOD_BYTES)
    monkeypatch.setenv("WATTSCHED_MIRROR", base_url + "/")
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "envcache"))
    (path,) = fetch_mod.fetch(FAKE, timeout=5)
    assert path == tmp_path / "envcache" / FAKE / "msr" / "seed=0" / "a b.trace"
    assert path.read_bytes() == GOOD_BYTES


def test_checksum_mismatch_raises_and_leaves_nothing(mirror, tmp_path, monkeypatch):
    base_url, served = mirror
    file = _fake_dataset(monkeypatch, GOOD_BYTES)
    bad = b"job,gpus\na,1\nb,8\n"
    _serve(served, file.path, bad)
    dest = tmp_path / "cache"

    with pytest.raises(fetch_mod.ChecksumError) as info:
        fetch_mod.fetch(FAKE, dest=dest, base_url=base_url, timeout=5)
    message = str(info.value)
    assert file.path in message
    assert file.sha256 in message
    assert hashlib.sha256(bad).hexdigest() in message
    assert isinstance(info.value, WattschedError)
    leftovers = [p for p in dest.rglob("*") if p.is_file()] if dest.exists() else []
    assert leftovers == []


def test_http_404_names_the_url(mirror, tmp_path, monkeypatch):
    base_url, _served = mirror
    file = _fake_dataset(monkeypatch, GOOD_BYTES)  # nothing served
    dest = tmp_path / "cache"
    with pytest.raises(fetch_mod.DownloadError) as info:
        fetch_mod.fetch(FAKE, dest=dest, base_url=base_url, timeout=5)
    message = str(info.value)
    assert "404" in message
    assert f"{base_url}/{FAKE}/{file.path}" in message
    assert not (dest / FAKE / file.path).exists()


def test_unreachable_host_is_a_clear_error(tmp_path, monkeypatch):
    _fake_dataset(monkeypatch, GOOD_BYTES)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "*")
    # A port that was just free: connection refused, no network involved.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(fetch_mod.DownloadError, match=rf"http://127\.0\.0\.1:{port}/"):
        fetch_mod.fetch(FAKE, dest=tmp_path, base_url=f"http://127.0.0.1:{port}", timeout=5)


def test_verify_reports_mismatch_and_missing(tmp_path, monkeypatch):
    file = _fake_dataset(monkeypatch, GOOD_BYTES)
    copy = tmp_path / "data" / FAKE / file.path
    copy.parent.mkdir(parents=True)
    copy.write_bytes(GOOD_BYTES)
    folder, problems = fetch_mod.verify(FAKE, tmp_path / "data")
    assert folder == tmp_path / "data" / FAKE and problems == []

    copy.write_bytes(b"tampered\n")
    _, problems = fetch_mod.verify(FAKE, tmp_path / "data")
    assert [p.path for p in problems] == [file.path] and "sha256 mismatch" in problems[0].reason

    copy.unlink()
    _, problems = fetch_mod.verify(FAKE, tmp_path / "data")
    assert problems[0].reason == "missing"


# --- CLI ------------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_list_shows_datasets_and_availability(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "emptycache"))
    monkeypatch.setenv("COLUMNS", "200")
    local = tmp_path / "data" / "zeus-power"
    for f in registry.dataset("zeus-power").files:
        (local / f.path).parent.mkdir(parents=True, exist_ok=True)
        (local / f.path).write_bytes(b"x")
    result = runner.invoke(data_app, ["list", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    for name in EXPECTED_NAMES:
        assert name in result.stdout
    zeus_row = next(line for line in result.stdout.splitlines() if "zeus-power" in line)
    assert "yes" in zeus_row
    philly_row = next(line for line in result.stdout.splitlines() if "philly-pollux" in line)
    assert "no" in philly_row.split("│")[-2]


def test_cli_fetch_unknown_name_exits_2_without_traceback(tmp_path):
    result = runner.invoke(data_app, ["fetch", "nope", "--dest", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown dataset 'nope'")
    assert "Traceback" not in result.output


def test_cli_fetch_http_error_exits_2(mirror, tmp_path, monkeypatch):
    base_url, _served = mirror
    _fake_dataset(monkeypatch, GOOD_BYTES)
    result = runner.invoke(data_app, ["fetch", FAKE, "--dest", str(tmp_path), "--base-url", base_url])
    assert result.exit_code == 2
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "HTTP 404" in error_lines[0]
    assert "Traceback" not in result.output


def test_cli_fetch_success_reports_destination(mirror, tmp_path, monkeypatch):
    base_url, served = mirror
    file = _fake_dataset(monkeypatch, GOOD_BYTES)
    _serve(served, file.path, GOOD_BYTES)
    result = runner.invoke(data_app, ["fetch", FAKE, "--dest", str(tmp_path / "d"), "--base-url", base_url])
    assert result.exit_code == 0, result.output
    assert str(tmp_path / "d" / FAKE) in result.stdout
    assert "1 downloaded" in result.stdout
    assert (tmp_path / "d" / FAKE / file.path).read_bytes() == GOOD_BYTES


def test_cli_verify(tmp_path, monkeypatch):
    file = _fake_dataset(monkeypatch, GOOD_BYTES)
    monkeypatch.setenv("WATTSCHED_CACHE", str(tmp_path / "emptycache"))
    copy = tmp_path / "data" / FAKE / file.path
    copy.parent.mkdir(parents=True)
    copy.write_bytes(GOOD_BYTES)
    ok = runner.invoke(data_app, ["verify", FAKE, "--data-dir", str(tmp_path / "data")])
    assert ok.exit_code == 0 and "match the registry" in ok.stdout

    copy.write_bytes(b"tampered\n")
    bad = runner.invoke(data_app, ["verify", FAKE, "--data-dir", str(tmp_path / "data")])
    assert bad.exit_code == 1 and "sha256 mismatch" in bad.stderr

    missing = runner.invoke(data_app, ["verify", FAKE, "--data-dir", str(tmp_path / "elsewhere")])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: no local copy")
