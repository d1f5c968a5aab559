"""Rebuild src/wattsched/data/datasets.json from a local copy of the datasets and their PROVENANCE.md files.

Usage: python tools/make_dataset_registry.py [DATA_DIR] [--out PATH] [--check]

DATA_DIR (default ../shared/data) holds one folder per dataset. For every data file the upstream raw URL is
derived from the folder's PROVENANCE.md (repository, full commit, upstream path); sha256 and size are computed
from the local, byte-identical copy. The local md5 and size are checked against the PROVENANCE inventory so a
drifted copy cannot slip into the registry. Nothing is copied: only the JSON registry is written.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from wattsched.core.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "src" / "wattsched" / "data" / "datasets.json"
SKIPPED_PREFIXES = ("PROVENANCE", "LICENSE", "README")
RAW = "https://raw.githubusercontent.com"

# Short descriptions, licences and citations (from docs/datasets.md). The URL source is appended to each
# description by the generator.
META: dict[str, dict[str, str]] = {
    "alibaba-gpu-v2023": {
        "description": "Alibaba GPU-sharing cluster trace v2023 (openb): 1523 nodes / 6212 GPUs and "
        "pod lists, the FGD/PWR input.",
        "licence": "research/study use only (alibaba/clusterdata terms); do not redistribute",
        "citation": "Weng et al., 'Beware of Fragmentation: Scheduling GPU-Sharing Workloads with "
        "Fragmentation Gradient Descent', USENIX ATC'23",
    },
    "alibaba-pai-v2020": {
        "description": "Alibaba PAI GPU trace 2020: machine spec (1,896 machines) and table schemas only.",
        "licence": "CC BY 4.0",
        "citation": "Weng et al., 'MLaaS in the Wild: Workload Analysis and Scheduling in Large-Scale "
        "Heterogeneous GPU Clusters', NSDI'22",
    },
    "philly-pollux": {
        "description": "Microsoft Philly job-level trace (82,247 jobs) as shipped by the Pollux artifact, "
        "plus the Pollux workloads.",
        "licence": "Apache-2.0 (Pollux artifact); Philly trace CC BY 4.0",
        "citation": "Jeon et al., 'Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training "
        "Workloads', USENIX ATC'19; Qiao et al., 'Pollux', OSDI'21",
    },
    "gavel-traces": {
        "description": "Gavel Philly-VC-shaped synthetic traces (seed 0), physical-cluster traces and "
        "measured throughputs.",
        "licence": "MIT",
        "citation": "Narayanan et al., 'Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning "
        "Workloads', OSDI'20",
    },
    "tiresias-traces": {
        "description": "60- and 480-job Tiresias-format traces, Philly HyperDrive trace, cluster specs.",
        "licence": "Apache-2.0 (Tiresias files); no licence, all rights reserved (mltiply files "
        "480_job_trace.csv, philly_hyperdrive_workload.csv)",
        "citation": "Gu et al., 'Tiresias: A GPU Cluster Manager for Distributed Deep Learning', NSDI'19; "
        "Mahajan et al., 'Themis: Fair and Efficient GPU Cluster Scheduling', NSDI'20",
    },
    "helios-artifact": {
        "description": "Helios (SenseTime) and Philly derived per-minute cluster time series and GPU counts.",
        "licence": "MIT (HeliosArtifact); CC BY 4.0 (HeliosData)",
        "citation": "Hu et al., 'Characterization and Prediction of Deep Learning Workloads in Large-Scale "
        "GPU Datacenters', SC'21",
    },
    "elasticflow-throughputs": {
        "description": "Training throughput vs #GPUs and batch size (A100, T4) and cluster specs.",
        "licence": "Apache-2.0",
        "citation": "Gu et al., 'ElasticFlow: An Elastic Serverless Training Platform for Distributed Deep "
        "Learning', ASPLOS'23",
    },
    "zeus-power": {
        "description": "Zeus GPU power and time-per-epoch vs power limit and batch size (4 GPUs), "
        "epochs-to-target.",
        "licence": "Apache-2.0",
        "citation": "You et al., 'Zeus: Understanding and Optimizing GPU Energy Consumption of DNN "
        "Training', NSDI'23",
    },
    "electricity-prices-greendcc": {
        "description": "Hourly wholesale electricity prices CAISO, PJM, NYISO, DE-LU, 2020-2024 "
        "(processed and standardized).",
        "licence": "MIT (green-dcc repository); market data under the operators' terms",
        "citation": "HewlettPackard/green-dcc; CAISO OASIS, PJM Data Miner 2, NYISO, ENTSO-E/EPEX",
    },
    "carbon-intensity-greendcc": {
        "description": "Hourly grid carbon intensity CAISO, PJM, NYISO, DE-LU, GB, 2021-2024.",
        "licence": "MIT (green-dcc repository); data under Electricity Maps terms (attribution required)",
        "citation": "Electricity Maps (electricitymaps.com), via HewlettPackard/green-dcc",
    },
}

# alibaba-gpu-v2023 has no PROVENANCE.md. Its CSVs are byte-identical to alibaba/clusterdata
# cluster-trace-gpu-v2023/csv/ and to the FGD simulator's data/csv/; the FGD copy is pinned because
# docs/fgd-pwr.md names that commit.
FIXED_SOURCES: dict[str, tuple[str, str, str, str]] = {
    # dataset: (repo, commit, local prefix, upstream prefix)
    "alibaba-gpu-v2023": (
        "hkust-adsl/kubernetes-scheduler-simulator",
        "8f3d6417353c5083c6d56617f255fadd8dc306bc",
        "csv/",
        "data/csv/",
    ),
}

INVENTORY_ROW = re.compile(
    r"^\|\s*`(?P<local>[^`]+)`\s*\|\s*(?P<repo>[\w.-]+/[\w.-]+)[^|@]*@\s*`(?P<commit>[0-9a-f]{7,40})`\s*:"
    r"\s*`(?P<upstream>[^`]+)`\s*\|\s*(?P<bytes>[\d,]+)\s*\|\s*`(?P<md5>[0-9a-f]{32})`"
)
FULL_COMMIT = re.compile(r"\b[0-9a-f]{40}\b")
UPSTREAM_LINE = re.compile(
    r"Upstream:\s*(?:https://)?github\.com/(?P<repo>[\w.-]+/[\w.-]+)\s*@\s*(?P<commit>[0-9a-f]{40})"
)
PATHS_LINE = re.compile(r"^-\s*Paths:\s*(?P<globs>.+?)(?=^-\s|\Z)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    upstream_path: str
    size: int | None = None
    md5: str | None = None


def raw_url(src: Source) -> str:
    return f"{RAW}/{src.repo}/{src.commit}/{quote(src.upstream_path, safe='/=')}"


def data_files(folder: Path) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(SKIPPED_PREFIXES) and not p.name.startswith(".")
    )


def digests(path: Path) -> tuple[str, str, int]:
    sha, md5, size = hashlib.sha256(), hashlib.md5(), 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), md5.hexdigest(), size


def sources_from_provenance(name: str, text: str) -> dict[str, Source]:
    """Map local relpath -> upstream source, from the inventory table or the 'Upstream:/Paths:' lines."""
    full_commits = set(FULL_COMMIT.findall(text))
    out: dict[str, Source] = {}
    for line in text.splitlines():
        m = INVENTORY_ROW.match(line)
        if not m:
            continue
        short = m["commit"]
        matches = [c for c in full_commits if c.startswith(short)]
        if len(matches) != 1:
            out[m["local"]] = Source(
                m["repo"], "", m["upstream"]
            )  # unresolved; fails later if it is a data file
            continue
        size = int(m["bytes"].replace(",", ""))
        out[m["local"]] = Source(m["repo"], matches[0], m["upstream"], size, m["md5"])
    if out:
        return out
    up = UPSTREAM_LINE.search(text)
    paths = PATHS_LINE.search(text)
    if not (up and paths):
        return {}
    globs = [g.strip() for g in re.split(r"[,\s]+", paths["globs"]) if g.strip()]
    return {"__globs__": Source(up["repo"], up["commit"], "\n".join(globs))}


def resolve(name: str, relpath: str, sources: dict[str, Source]) -> Source:
    if name in FIXED_SOURCES:
        repo, commit, local_prefix, upstream_prefix = FIXED_SOURCES[name]
        if relpath.startswith(local_prefix):
            return Source(repo, commit, upstream_prefix + relpath[len(local_prefix) :])
    if relpath in sources:
        src = sources[relpath]
        if not src.commit:
            sys.exit(f"{name}/{relpath}: no full commit in PROVENANCE.md matches the inventory's short hash")
        return src
    if "__globs__" in sources:
        base = sources["__globs__"]
        rel = PurePosixPath(relpath)
        for pattern in base.upstream_path.splitlines():
            pat = PurePosixPath(pattern)
            # the local folder is the tail of the upstream one: throughputs_A100/ <- .../throughputs_A100/
            if fnmatch.fnmatch(rel.name, pat.name) and (
                str(rel.parent) == "." or pat.parent.as_posix().endswith("/" + rel.parent.as_posix())
            ):
                return Source(base.repo, base.commit, (pat.parent / rel.name).as_posix())
    sys.exit(f"{name}/{relpath}: no upstream source found in PROVENANCE.md")


def build(data_dir: Path) -> dict:
    entries = []
    for name, meta in META.items():
        folder = data_dir / name
        if not folder.is_dir():
            sys.exit(f"missing dataset folder: {folder}")
        prov = folder / "PROVENANCE.md"
        sources = sources_from_provenance(name, prov.read_text(encoding="utf-8")) if prov.exists() else {}
        files, origins = [], set()
        for relpath in data_files(folder):
            src = resolve(name, relpath, sources)
            sha, md5, size = digests(folder / relpath)
            if src.md5 is not None and (src.md5 != md5 or src.size != size):
                sys.exit(f"{name}/{relpath}: local copy differs from PROVENANCE inventory (md5/size)")
            files.append({"path": relpath, "url": raw_url(src), "sha256": sha, "size": size})
            origins.add(f"{src.repo}@{src.commit[:12]}")
        description = f"{meta['description']} Source: {', '.join(sorted(origins))}."
        if name == "alibaba-gpu-v2023":
            description += (
                " URLs point at the FGD simulator's data/csv/; the same bytes are in alibaba/clusterdata "
                "cluster-trace-gpu-v2023/csv/."
            )
        entries.append(
            {
                "name": name,
                "description": description,
                "licence": meta["licence"],
                "citation": meta["citation"],
                "files": files,
            }
        )
    extra = sorted(p.name for p in data_dir.iterdir() if p.is_dir() and p.name not in META)
    if extra:
        print(f"note: folders without registry metadata were skipped: {', '.join(extra)}", file=sys.stderr)
    return {"datasets": entries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not up to date")
    args = parser.parse_args(argv)
    text = json.dumps(build(args.data_dir), indent=2, ensure_ascii=False) + "\n"
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date; rerun tools/make_dataset_registry.py", file=sys.stderr)
            return 1
        return 0
    write_text(args.out, text)
    n_files = sum(len(d["files"]) for d in json.loads(text)["datasets"])
    print(f"wrote {args.out}: {len(META)} datasets, {n_files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
