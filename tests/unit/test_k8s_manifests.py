"""The Kubernetes manifests in deploy/kubernetes/ (docs/live-kubernetes.md, "Deploying").

No cluster can be reached here, so every object is checked against the OpenAPI models the official
``kubernetes`` Python client ships: each key must be a field of the model (``attribute_map``), each value of the
declared type (``openapi_types``, recursively), each required field present. The KubeSchedulerConfiguration
inside the ConfigMap is checked against the fields of docs (``kubescheduler.config.k8s.io/v1``), and the
manifests against each other: ServiceAccounts, ConfigMaps, ports, URLs, scheduler names and RBAC verbs.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")
k8s = kubernetes.client

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))

# (apiVersion, kind) -> the client's model class. Explicit rather than derived from the names: the client has
# several classes for one kind in different groups (V1Event vs EventsV1Event), and an unknown kind should fail.
MODELS: dict[tuple[str, str], type] = {
    ("v1", "Namespace"): k8s.V1Namespace,
    ("v1", "ServiceAccount"): k8s.V1ServiceAccount,
    ("v1", "ConfigMap"): k8s.V1ConfigMap,
    ("v1", "Service"): k8s.V1Service,
    ("v1", "Pod"): k8s.V1Pod,
    ("apps/v1", "Deployment"): k8s.V1Deployment,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.V1ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.V1ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.V1Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.V1RoleBinding,
}

# Fields holding resource.Quantity values. The models declare them as plain strings ("Dict[str, str]" for
# requests/limits), but the API server also takes YAML numbers there (cpu: 1), so those accept a number or a
# string in Quantity syntax.
QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1PodSpec", "overhead"),
    ("V1EmptyDirVolumeSource", "sizeLimit"),
}
QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")

_LIST = re.compile(r"^(?:List|list)\[(.+)\]$")
_DICT = re.compile(r"^(?:Dict\[str, (.+)\]|dict\(str, (.+)\))$")


# ---------------------------------------------------------------------------------------------------------
# Validator against the client's models


def required_keys(cls: type) -> set[str]:
    """JSON keys the OpenAPI schema marks required for ``cls``.

    The pinned client (37.x) generates its models as pydantic ``BaseModel``s: a field the schema lists under
    ``required`` is generated without a default (``selector: V1LabelSelector``), every other one as
    ``Optional[...] = None``. So ``model_fields[name].is_required()`` is exactly the schema's required list,
    without constructing anything. (Older clients raised from the setter of a required field instead; their
    classes have no ``model_fields``, which is reported rather than silently treated as "nothing required".)
    A field's JSON key is its serialization alias (``var_exec`` -> ``exec``), else its name; that it is one of
    ``attribute_map``'s JSON keys is asserted, so a change in the generator shows up here.
    """
    fields = getattr(cls, "model_fields", None)
    if fields is None:
        raise TypeError(
            f"{cls.__name__} is not a pydantic model: this kubernetes client is older than expected"
        )
    keys = {field.serialization_alias or name for name, field in fields.items() if field.is_required()}
    unknown = keys - set(cls.attribute_map.values())
    if unknown:
        raise TypeError(f"{cls.__name__}: required fields {sorted(unknown)} are not in attribute_map")
    return keys


def _model_class(name: str) -> type | None:
    cls = getattr(k8s, name, None)
    return cls if isinstance(cls, type) and isinstance(getattr(cls, "openapi_types", None), dict) else None


def _check_value(type_name: str, value: Any, path: str, errors: list[str], quantity: bool = False) -> None:
    if value is None:
        return  # an explicit null is the same as leaving the field out
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list ({type_name}), got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check_value(m.group(1), item, f"{path}[{i}]", errors, quantity)
        return
    if m := _DICT.match(type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping ({type_name}), got {type(value).__name__}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            _check_value(m.group(1) or m.group(2), item, f"{path}.{key}", errors, quantity)
        return
    if quantity and type_name == "str":
        ok = (isinstance(value, int | float) and not isinstance(value, bool)) or (
            isinstance(value, str) and QUANTITY.match(value) is not None
        )
        if not ok:
            errors.append(f"{path}: {value!r} is not a quantity (e.g. 500m, 2, 256Mi)")
        return
    if type_name == "str" or type_name in ("datetime", "date", "bytes"):  # dates and base64 travel as strings
        ok = isinstance(value, str)
    elif type_name == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif type_name == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif type_name == "bool":
        ok = isinstance(value, bool)
    elif type_name == "object":
        # Reachable from the kinds in MODELS, "object" is IntOrString (probe ports, targetPort, maxSurge,
        # maxUnavailable) except managedFields[].fieldsV1, which the server writes, never a manifest. A
        # free-form object field would be rejected here and would need a case of its own.
        ok = isinstance(value, int | str) and not isinstance(value, bool)
    elif (cls := _model_class(type_name)) is not None:
        _check_model(cls, value, path, errors)
        return
    else:
        errors.append(f"{path}: the validator does not know the type {type_name!r}")
        return
    if not ok:
        errors.append(f"{path}: expected {type_name}, got {type(value).__name__} {value!r}")


def _check_model(cls: type, value: Any, path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({cls.__name__}), got {type(value).__name__}")
        return
    json_to_python = {json_key: name for name, json_key in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in json_to_python:
            errors.append(f"{path}.{key}: not a field of {cls.__name__}")
            continue
        quantity = (cls.__name__, key) in QUANTITY_FIELDS
        _check_value(cls.openapi_types[json_to_python[key]], item, f"{path}.{key}", errors, quantity)
    for key in sorted(required_keys(cls)):
        if value.get(key) is None:
            errors.append(f"{path}.{key}: required by {cls.__name__} but missing")


def validate(doc: Any) -> list[str]:
    """Problems with one manifest document, each as 'path: what'; empty when it matches its model."""
    if not isinstance(doc, dict):
        return [f"document is a {type(doc).__name__}, not an object"]
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    cls = MODELS.get((api_version, kind))
    if cls is None:
        return [f"no model for apiVersion {api_version!r} kind {kind!r}"]
    errors: list[str] = []
    _check_model(cls, doc, kind, errors)
    if not (doc.get("metadata") or {}).get("name"):
        errors.append(f"{kind}.metadata.name: every manifest needs a name")
    if "status" in doc:
        errors.append(f"{kind}.status: set by the cluster, not in a manifest")
    return errors


# ---------------------------------------------------------------------------------------------------------
# KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1), the fields docs/live-backends.md §2.2 lists

DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")  # Go's time.ParseDuration, as metav1.Duration
SCHEDULER_CONFIG_KEYS = {"apiVersion", "kind", "profiles", "extenders", "leaderElection", "clientConnection"}
PROFILE_KEYS = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
LEADER_ELECTION_KEYS = {
    "leaderElect": bool,
    "leaseDuration": "duration",
    "renewDeadline": "duration",
    "retryPeriod": "duration",
    "resourceLock": str,
    "resourceName": str,
    "resourceNamespace": str,
}
CLIENT_CONNECTION_KEYS = {
    "kubeconfig": str,
    "acceptContentTypes": str,
    "contentType": str,
    "qps": float,
    "burst": int,
}
EXTENDER_KEYS = {
    "urlPrefix": str,
    "filterVerb": str,
    "preemptVerb": str,
    "prioritizeVerb": str,
    "bindVerb": str,
    "weight": int,
    "enableHTTPS": bool,
    "tlsConfig": dict,
    "httpTimeout": "duration",
    "nodeCacheCapable": bool,
    "managedResources": list,
    "ignorable": bool,
}
TLS_KEYS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}


def _typed(value: Any, expected: Any) -> bool:
    if expected == "duration":
        return isinstance(value, str) and DURATION.match(value) is not None
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, expected)


def _check_keys(obj: Any, allowed: dict[str, Any], path: str, errors: list[str]) -> None:
    if not isinstance(obj, dict):
        errors.append(f"{path}: expected an object")
        return
    for key, value in obj.items():
        if key not in allowed:
            errors.append(f"{path}.{key}: not a field")
        elif not _typed(value, allowed[key]):
            errors.append(f"{path}.{key}: {value!r} has the wrong type")


def validate_scheduler_config(cfg: Any) -> list[str]:
    """Problems with a KubeSchedulerConfiguration, each as 'path: what'."""
    if not isinstance(cfg, dict):
        return ["KubeSchedulerConfiguration is not an object"]
    errors: list[str] = []
    for key in sorted(set(cfg) - SCHEDULER_CONFIG_KEYS):
        errors.append(f"{key}: not a top-level field")
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        errors.append(f"apiVersion: {cfg.get('apiVersion')!r}, expected kubescheduler.config.k8s.io/v1")
    if cfg.get("kind") != "KubeSchedulerConfiguration":
        errors.append(f"kind: {cfg.get('kind')!r}")
    profiles = cfg.get("profiles") or []
    if not isinstance(profiles, list) or not profiles:
        errors.append("profiles: expected a non-empty list")
        profiles = []
    for i, profile in enumerate(profiles):
        if not isinstance(profile, dict):
            errors.append(f"profiles[{i}]: expected an object")
            continue
        errors += [f"profiles[{i}].{k}: not a field" for k in sorted(set(profile) - PROFILE_KEYS)]
        if not isinstance(profile.get("schedulerName"), str) or not profile["schedulerName"]:
            errors.append(f"profiles[{i}].schedulerName: required")
    if "leaderElection" in cfg:
        _check_keys(cfg["leaderElection"], LEADER_ELECTION_KEYS, "leaderElection", errors)
    if "clientConnection" in cfg:
        _check_keys(cfg["clientConnection"], CLIENT_CONNECTION_KEYS, "clientConnection", errors)
    extenders = cfg.get("extenders") or []
    if not isinstance(extenders, list):
        errors.append("extenders: expected a list")
        extenders = []
    binders = 0
    for i, ext in enumerate(extenders):
        path = f"extenders[{i}]"
        _check_keys(ext, EXTENDER_KEYS, path, errors)
        if not isinstance(ext, dict):
            continue
        url = ext.get("urlPrefix")
        if (
            not isinstance(url, str)
            or urlsplit(url).scheme not in ("http", "https")
            or not urlsplit(url).netloc
        ):
            errors.append(f"{path}.urlPrefix: required, an http(s) URL; got {url!r}")
        elif (urlsplit(url).scheme == "https") != bool(ext.get("enableHTTPS", False)):
            errors.append(f"{path}: enableHTTPS disagrees with the scheme of urlPrefix {url!r}")
        if ext.get("prioritizeVerb") and not (_typed(ext.get("weight"), int) and ext["weight"] > 0):
            errors.append(f"{path}.weight: must be a positive integer when prioritizeVerb is set")
        binders += bool(ext.get("bindVerb"))
        if isinstance(ext.get("tlsConfig"), dict):
            errors += [f"{path}.tlsConfig.{k}: not a field" for k in sorted(set(ext["tlsConfig"]) - TLS_KEYS)]
        for j, res in enumerate(ext.get("managedResources") or []):
            _check_keys(
                res, {"name": str, "ignoredByScheduler": bool}, f"{path}.managedResources[{j}]", errors
            )
            if not isinstance(res, dict) or not res.get("name"):
                errors.append(f"{path}.managedResources[{j}].name: required")
    if binders > 1:
        errors.append("extenders: only one extender may set bindVerb")
    return errors


# ---------------------------------------------------------------------------------------------------------
# Loading


def _load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


@pytest.fixture(scope="module")
def docs() -> dict[str, list[dict[str, Any]]]:
    return {path.name: _load(path) for path in MANIFESTS}


def _find(docs: dict[str, list[dict[str, Any]]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d
        for file_docs in docs.values()
        for d in file_docs
        if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]


def _one(docs: dict[str, list[dict[str, Any]]], kind: str, name: str) -> dict[str, Any]:
    found = _find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def _flags(argv: list[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs of a command line."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg.partition("=")
            out[key] = value
        elif arg.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[arg] = argv[i + 1]
            i += 1
        i += 1
    return out


def _scheduler_config(docs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    cm = _one(docs, "ConfigMap", "wattsched-scheduler-config")
    return yaml.safe_load(cm["data"]["scheduler-config.yaml"])


# ---------------------------------------------------------------------------------------------------------
# The validators themselves: they must accept what is valid and reject what is not


def test_manifest_files_are_all_there() -> None:
    names = {p.name for p in MANIFESTS}
    assert {
        "namespace.yaml",
        "rbac.yaml",
        "extender.yaml",
        "custom-scheduler.yaml",
        "example-pod.yaml",
    } <= names
    assert (DEPLOY / "Dockerfile").is_file()


def test_required_fields_come_from_the_schema() -> None:
    assert required_keys(k8s.V1DeploymentSpec) == {"selector", "template"}
    assert required_keys(k8s.V1Container) == {"name"}
    assert required_keys(k8s.V1ServicePort) == {"port"}
    assert required_keys(k8s.V1RoleRef) == {"kind", "name"}
    assert required_keys(k8s.V1PolicyRule) == {"verbs"}
    assert required_keys(k8s.V1ObjectMeta) == set()
    assert required_keys(k8s.V1Probe) == set()  # its field var_exec has the JSON key "exec"
    assert "exec" in k8s.V1Probe.attribute_map.values()


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"a": "b"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "command": ["x"],
                            "ports": [{"containerPort": 80, "name": "web"}],
                            "readinessProbe": {"httpGet": {"path": "/", "port": "web"}},
                            "livenessProbe": {"exec": {"command": ["true"]}},
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "256Mi"},
                                "limits": {"cpu": 1},
                            },
                        }
                    ]
                },
            },
        },
    }


def test_validator_accepts_a_valid_deployment() -> None:
    assert validate(_deployment()) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["spec"].update(replica=1), "Deployment.spec.replica: not a field of V1DeploymentSpec"),
        (lambda d: d["spec"].update(replicas="1"), "Deployment.spec.replicas: expected int"),
        (lambda d: d["spec"].update(replicas=True), "Deployment.spec.replicas: expected int"),
        (lambda d: d["spec"].pop("selector"), "Deployment.spec.selector: required by V1DeploymentSpec"),
        (lambda d: _c(d).pop("name"), "containers[0].name: required by V1Container"),
        (lambda d: _c(d).update(command="x y"), "containers[0].command: expected a list"),
        (lambda d: _c(d).update(imagePullPolcy="Always"), "containers[0].imagePullPolcy: not a field"),
        (lambda d: _c(d)["ports"][0].update(containerPort="80"), "ports[0].containerPort: expected int"),
        (lambda d: _c(d)["readinessProbe"]["httpGet"].update(port=[80]), "httpGet.port: expected object"),
        (
            lambda d: _c(d)["livenessProbe"].update(exec={"cmd": ["true"]}),
            "exec.cmd: not a field of V1ExecAction",
        ),
        (
            lambda d: _c(d)["resources"]["requests"].update(cpu="lots"),
            "requests.cpu: 'lots' is not a quantity",
        ),
        (lambda d: d["metadata"]["labels"].update(a=1), "metadata.labels.a: expected str"),
        (lambda d: d["spec"]["template"]["spec"].update(containers={}), "spec.containers: expected a list"),
        (lambda d: d.update(apiVersion="extensions/v1beta1"), "no model for apiVersion 'extensions/v1beta1'"),
        (lambda d: d.update(status={}), "Deployment.status: set by the cluster"),
    ],
)
def test_validator_rejects_a_broken_deployment(mutate: Any, expected: str) -> None:
    doc = _deployment()
    mutate(doc)
    errors = validate(doc)
    assert any(expected in e for e in errors), errors


def _c(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]["containers"][0]


def test_validator_rejects_a_misspelled_key_in_the_real_manifest(
    docs: dict[str, list[dict[str, Any]]],
) -> None:
    deployment = copy.deepcopy(_one(docs, "Deployment", "wattsched-extender"))
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    _container(deployment, "extender")["securityContext"]["readOnlyRootFileSystem"] = True
    errors = validate(deployment)
    assert "Deployment.spec.replica: not a field of V1DeploymentSpec" in errors
    assert any(
        "securityContext.readOnlyRootFileSystem: not a field of V1SecurityContext" in e for e in errors
    )


def test_scheduler_config_validator_rejects_mistakes(docs: dict[str, list[dict[str, Any]]]) -> None:
    good = _scheduler_config(docs)
    assert validate_scheduler_config(good) == []
    cases = [
        ("enableHttps", False, "extenders[0].enableHttps: not a field"),  # the legacy Policy API's spelling
        ("weight", 0, "extenders[0].weight: must be a positive integer"),
        ("weight", "5", "extenders[0].weight: '5' has the wrong type"),
        ("httpTimeout", "5", "extenders[0].httpTimeout: '5' has the wrong type"),
        ("nodeCacheCapable", "true", "extenders[0].nodeCacheCapable: 'true' has the wrong type"),
        ("urlPrefix", "127.0.0.1:8888/energy", "extenders[0].urlPrefix: required, an http(s) URL"),
        ("urlPrefix", "https://127.0.0.1:8888/energy", "extenders[0]: enableHTTPS disagrees"),
        ("managedResources", [{"name": "nvidia.com/gpu", "ignored": True}], "managedResources[0].ignored"),
    ]
    for key, value, expected in cases:
        bad = copy.deepcopy(good)
        bad["extenders"][0][key] = value
        errors = validate_scheduler_config(bad)
        assert any(expected in e for e in errors), (key, value, errors)
    bad = copy.deepcopy(good)
    bad["extender"] = bad.pop("extenders")
    assert "extender: not a top-level field" in validate_scheduler_config(bad)


# ---------------------------------------------------------------------------------------------------------
# The manifests


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_the_client_models(path: Path) -> None:
    documents = _load(path)
    assert documents, f"{path.name} has no documents"
    for doc in documents:
        assert validate(doc) == [], f"{path.name}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_accepted_by_the_client_models_themselves(path: Path) -> None:
    """A second opinion: the client's own (pydantic, strict, extra keys forbidden) model validation."""
    for doc in _load(path):
        model = MODELS[(doc["apiVersion"], doc["kind"])]
        model.model_validate(doc)


def test_kube_scheduler_configuration(docs: dict[str, list[dict[str, Any]]]) -> None:
    cfg = _scheduler_config(docs)
    assert validate_scheduler_config(cfg) == []
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["energy-aware-extender"]
    (ext,) = cfg["extenders"]
    assert ext == {
        "urlPrefix": "http://127.0.0.1:8888/energy",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 5,
        "bindVerb": "bind",
        "preemptVerb": "",
        "enableHTTPS": False,
        "httpTimeout": "5s",
        "nodeCacheCapable": True,
        "ignorable": False,
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
    }


def test_extender_pod_wiring(docs: dict[str, list[dict[str, Any]]]) -> None:
    deployment = _one(docs, "Deployment", "wattsched-extender")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}

    # kube-scheduler reads its configuration from the mounted ConfigMap.
    scheduler = _container(deployment, "kube-scheduler")
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.31.0"
    assert scheduler["command"] == ["kube-scheduler", "--config=/etc/wattsched/scheduler-config.yaml"]
    config_path = Path(_flags(scheduler["command"])["--config"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in scheduler["volumeMounts"] if config_path.is_relative_to(m["mountPath"])]
    config_map_name = volumes[mount["name"]]["configMap"]["name"]
    config_map = _one(docs, "ConfigMap", config_map_name)
    assert config_map["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert config_path.relative_to(mount["mountPath"]).as_posix() in config_map["data"]

    # The extender answers where the configuration sends kube-scheduler.
    extender = _container(deployment, "extender")
    assert extender["image"] == "ghcr.io/OWNER/wattsched:latest"
    assert extender["command"][:3] == ["wattsched", "serve", "k8s-extender"]
    flags = _flags(extender["command"])
    assert flags["--placement"] == "fgd"
    url = urlsplit(_scheduler_config(docs)["extenders"][0]["urlPrefix"])
    assert (url.hostname, url.port, url.path) == (flags["--host"], int(flags["--port"]), flags["--prefix"])
    assert flags["--host"] == "127.0.0.1"  # same pod: loopback only
    assert int(flags["--port"]) in [p["containerPort"] for p in extender["ports"]]
    healthz = f"http://127.0.0.1:{flags['--port']}{flags['--prefix']}/healthz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert healthz in " ".join(extender[probe]["exec"]["command"]), probe

    for container in pod["containers"]:
        for m in container.get("volumeMounts", []):
            assert m["name"] in volumes, (container["name"], m["name"])


def test_service_targets_the_extender_port(docs: dict[str, list[dict[str, Any]]]) -> None:
    service = _one(docs, "Service", "wattsched-extender")
    deployment = _one(docs, "Deployment", "wattsched-extender")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container_ports = [
        p for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
    ]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8888
    target = port.get("targetPort", port["port"])
    (matched,) = [p for p in container_ports if target in (p.get("name"), p["containerPort"])]
    assert matched["containerPort"] == 8888


def test_custom_scheduler_and_example_pod(docs: dict[str, list[dict[str, Any]]]) -> None:
    from wattsched.core.gpus import GPU_CATALOG

    deployment = _one(docs, "Deployment", "wattsched-scheduler")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "wattsched"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["wattsched", "serve", "k8s-scheduler"]
    flags = _flags(container["command"])
    assert flags == {"--placement": "fgd", "--scheduler-name": "energy-aware"}

    (pod,) = _find(docs, "Pod")
    assert pod["spec"]["schedulerName"] == flags["--scheduler-name"]
    (cuda,) = pod["spec"]["containers"]
    assert cuda["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert cuda["resources"]["requests"]["nvidia.com/gpu"] == "1"  # extended resources: request == limit
    models = pod["metadata"]["annotations"]["alibabacloud.com/gpu-card-model"].split("|")
    assert models == ["V100M16", "V100M32"]
    assert set(models) <= set(GPU_CATALOG)


def test_pods_run_locked_down(docs: dict[str, list[dict[str, Any]]]) -> None:
    """Both schedulers: non-root, read-only root, no privilege escalation, no capabilities, bounded resources."""
    deployments = _find(docs, "Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {"wattsched-extender", "wattsched-scheduler"}
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert deployment["metadata"]["namespace"] == "wattsched"
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            where = f"{deployment['metadata']['name']}/{c['name']}"
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert "privileged" not in sc, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (where, kind)


# ---------------------------------------------------------------------------------------------------------
# RBAC

WATTSCHED_RULES = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods/binding", "create"),
    ("", "bindings", "create"),
    ("", "events", "create"),
    ("", "events", "patch"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
}

# Built-in roles the second kube-scheduler is bound to (Kubernetes docs, "Configure Multiple Schedulers").
SYSTEM_ROLES = {
    ("ClusterRole", "system:kube-scheduler", None),
    ("ClusterRole", "system:volume-scheduler", None),
    ("Role", "extension-apiserver-authentication-reader", "kube-system"),
}


def _rule_triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def _wildcards(rules: list[dict[str, Any]]) -> list[str]:
    return [
        f"{field}: {value}"
        for rule in rules
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")
        for value in rule.get(field, [])
        if "*" in value
    ]


def test_rbac_lives_in_rbac_yaml(docs: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    for name, file_docs in docs.items():
        if name != "rbac.yaml":
            assert not [d["kind"] for d in file_docs if d["kind"] in kinds], name


def test_wattsched_cluster_role_is_least_privilege(docs: dict[str, list[dict[str, Any]]]) -> None:
    (role,) = _find(docs, "ClusterRole")  # the only role this folder defines
    assert role["metadata"]["name"] == "wattsched"
    assert _rule_triples(role["rules"]) == WATTSCHED_RULES
    assert _wildcards(role["rules"]) == []
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
    assert _find(docs, "Role") == []


def test_rbac_checks_can_fail() -> None:
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]
    assert _wildcards(rules) == ["verbs: *"]
    extra = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}]
    assert ("", "pods", "delete") in _rule_triples(extra) - WATTSCHED_RULES


def test_service_accounts_and_bindings(docs: dict[str, list[dict[str, Any]]]) -> None:
    accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in _find(docs, "ServiceAccount")}
    assert accounts == {("wattsched", "wattsched"), ("wattsched", "wattsched-kube-scheduler")}

    # Every Deployment runs as a ServiceAccount defined in rbac.yaml, in its own namespace.
    for deployment in _find(docs, "Deployment"):
        sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert (deployment["metadata"]["namespace"], sa) in accounts, deployment["metadata"]["name"]
    extender = _one(docs, "Deployment", "wattsched-extender")
    assert extender["spec"]["template"]["spec"]["serviceAccountName"] == "wattsched-kube-scheduler"

    defined_cluster_roles = {r["metadata"]["name"] for r in _find(docs, "ClusterRole")}
    granted: dict[tuple[str, str], set[tuple[str, str, str | None]]] = {a: set() for a in accounts}
    for binding in _find(docs, "ClusterRoleBinding") + _find(docs, "RoleBinding"):
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        namespace = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        role = (ref["kind"], ref["name"], namespace if ref["kind"] == "Role" else None)
        assert ref["name"] in defined_cluster_roles or role in SYSTEM_ROLES, role
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            account = (subject["namespace"], subject["name"])
            assert account in accounts, account
            granted[account].add(role)

    # The custom scheduler gets wattsched's own rules and nothing else; the extender pod (a second
    # kube-scheduler plus the extender) gets the standard second-scheduler roles and wattsched's rules.
    assert granted[("wattsched", "wattsched")] == {("ClusterRole", "wattsched", None)}
    assert granted[("wattsched", "wattsched-kube-scheduler")] == SYSTEM_ROLES | {
        ("ClusterRole", "wattsched", None)
    }


def test_namespaced_objects_are_in_the_namespace(docs: dict[str, list[dict[str, Any]]]) -> None:
    (namespace,) = _find(docs, "Namespace")
    assert namespace["metadata"]["name"] == "wattsched"
    for doc in _find(docs, "ConfigMap") + _find(docs, "Service") + _find(docs, "ServiceAccount"):
        assert doc["metadata"]["namespace"] == "wattsched", doc["metadata"]["name"]


def test_dockerfile_runs_wattsched_as_non_root(docs: dict[str, list[dict[str, Any]]]) -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    instructions = [line for line in text.splitlines() if re.match(r"^[A-Z]+ ", line)]
    assert instructions[0] == "FROM python:3.11-slim"
    assert "RUN pip install -r requirements.lock" in instructions
    assert any(line.startswith("RUN pip install --no-deps .") for line in instructions)
    (user,) = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert 'ENTRYPOINT ["wattsched"]' in instructions
    # The manifests run as the image's (numeric, non-root) user.
    uid = int(user.split(":")[0])
    assert uid > 0
    for deployment in _find(docs, "Deployment"):
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid
