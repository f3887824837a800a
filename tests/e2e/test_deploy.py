"""deploy/ (issue 27): the Kubernetes manifests validate against the Kubernetes schemas (offline) and wire what
the service needs; the Grafana dashboard is in provisioning format and asks only for metrics the service exports;
docker-compose mounts what Grafana's provisioning names."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path

import pytest

from tests.service.svc_support import bundles, make_client  # noqa: F401  (pytest fixtures)

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
GRAFANA = ROOT / "deploy" / "grafana"
K8S_VERSION = "1.30.0"


CRD_GROUPS = ("ray.io/",)  # custom resources (KubeRay's RayCluster): kubernetes-validate has no schema for them


def documents() -> list[dict]:
    return [d for f in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def manifests() -> dict[str, dict]:
    return {d["kind"]: d for d in documents()}


def test_manifests_validate_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate")  # the dev extra; its schemas ship with it (offline)
    found = manifests()
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= set(found)
    for doc in documents():
        if not doc["apiVersion"].startswith(CRD_GROUPS):
            kv.validate(doc, K8S_VERSION, strict=True)
    broken = copy.deepcopy(found["Deployment"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/ready"
    with pytest.raises(kv.ValidationError):  # the validator does refuse a wrong field
        kv.validate(broken, K8S_VERSION, strict=True)


def test_the_deployment_wires_probes_volume_shutdown_and_scraping():
    m = manifests()
    deployment = m["Deployment"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = next(p for p in container["ports"] if p["name"] == "http")["containerPort"]
    assert env["XTAG_PORT"] == str(port) and env["XTAG_HOST"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    mount = next(v for v in container["volumeMounts"] if v["mountPath"] == env["XTAG_BUNDLE_ROOT"])
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] and volume["persistentVolumeClaim"]["readOnly"]
    served = served_models(env)  # two models, each a bundle on the one volume
    assert len(served) == 2 and all(Path(path).parent == Path(mount["mountPath"]) for path in served.values())
    # SIGKILL only after preStop and the drain XTAG_GRACEFUL_SHUTDOWN_S, with a margin under 10 s
    pre_stop = float(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    budget = pre_stop + float(env["XTAG_GRACEFUL_SHUTDOWN_S"])
    assert 0 < pod["spec"]["terminationGracePeriodSeconds"] - budget <= 10
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/port"] == str(port)
    assert notes["prometheus.io/path"] == "/metrics"
    labels = pod["metadata"]["labels"]
    for selector in (m["Service"]["spec"]["selector"], m["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert m["Service"]["spec"]["ports"][0]["targetPort"] in ("http", port)
    target = m["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


def test_the_raycluster_runs_the_deployments_image_with_its_volumes():
    """deploy/k8s/raycluster.yaml, checked by structure since RayCluster is KubeRay's CRD, which
    kubernetes-validate does not know: kind and apiVersion ray.io/v1, a head and a worker group running the
    Deployment's image, the head's GCS port as `ray start` gets it (docs/ray.md's 6390), resources on every
    container, the bundle mounted where the Deployment mounts it, and every claimed volume declared."""
    m = manifests()
    cluster = m["RayCluster"]
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    deployment = m["Deployment"]["spec"]["template"]["spec"]
    image = deployment["containers"][0]["image"]
    bundle_mount = next(v for v in deployment["containers"][0]["volumeMounts"] if v["name"] == "bundles")
    spec = cluster["spec"]
    head, workers = spec["headGroupSpec"], spec["workerGroupSpecs"]
    assert workers and all(g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in workers)
    gcs = next(p for p in head["template"]["spec"]["containers"][0]["ports"] if p["name"] == "gcs-server")
    assert head["rayStartParams"]["port"] == str(gcs["containerPort"]) == "6390"
    claims = {d["metadata"]["name"] for d in documents() if d["kind"] == "PersistentVolumeClaim"}
    for group in (head, *workers):
        pod = group["template"]["spec"]
        [container] = pod["containers"]
        assert container["image"] == image
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]
        assert bundle_mount in container["volumeMounts"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["bundles"] == deployment["volumes"][0]
        for mount in container["volumeMounts"]:
            assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] in claims


def served_models(env: dict) -> dict[str, str]:
    """The models the service would serve with these variables, read by its own settings: {name: path}."""
    from xtag.config.settings import Settings

    keys = ("XTAG_BUNDLE", "XTAG_MODELS", "XTAG_BUNDLE_ROOT", "XTAG_DEFAULT_MODEL")
    given = {k.removeprefix("XTAG_").lower(): v for k, v in env.items() if k in keys}
    return {m.name: str(m.path) for m in Settings(_env_file=None, **given).model_set.models}


def test_compose_serves_two_models_from_one_volume():
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["xtag"]
    env = {k: re.sub(r"\$\{\w+:-(.*)\}", r"\1", str(v)) for k, v in service["environment"].items()}
    served = served_models(env)
    mount = next(v.split(":")[-2] for v in service["volumes"] if v.endswith(":ro"))
    assert len(served) == 2 and all(Path(path).parent == Path(mount) for path in served.values())


def documentation() -> str:
    """The README and every docs page (docs/**/*.md), where the README's reference sections moved (h48-docs)."""
    return "\n".join(page.read_text() for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def quick_bundles() -> set[str]:
    """The bundles the README and the docs pages build with XR-Linear (main.sh's family, about a minute on
    debtags): each `xtag export runs/X --out bundles/X` whose run `xtag train ... --out runs/X` names no other
    family."""
    readme = documentation()
    runs = {
        m.group(2)
        for m in re.finditer(r"^xtag train (.*)--out runs/([\w.-]+)\s*(#.*)?$", readme, flags=re.M)
        if "--model" not in m.group(1) or "--model xlinear" in m.group(1)
    }
    exports = re.findall(r"^xtag export runs/([\w.-]+) --out bundles/([\w.-]+)", readme, flags=re.M)
    return {bundle for run, bundle in exports if run in runs}


def test_the_deployments_and_the_readmes_two_model_examples_serve_bundles_the_quick_path_builds():
    """Every model compose and Kubernetes serve by default, and every bundle the multi-model examples
    (docs/serving/multi-model.md, once the README's) serve, is one the docs build with XR-Linear: they named
    bundles/debtags-lamp, which nothing quick builds."""
    quick = quick_bundles()
    assert {"debtags-xl", "debtags-xl-ub"} <= quick, quick
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for env in (
        *(
            {k: re.sub(r"\$\{\w+:-(.*)\}", r"\1", str(v)) for k, v in svc["environment"].items()}
            for svc in (compose["xtag"], compose["xtag-gpu"])
        ),
        {
            e["name"]: e.get("value")
            for e in manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]
        },
    ):
        served = {Path(path).name for path in served_models(env).values()}
        assert len(served) == 2 and served <= quick, (served, quick)
    page = (ROOT / "docs" / "serving" / "multi-model.md").read_text()
    section = page.split("# Several models in one server", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"bundles/([\w.-]+)", section))
    assert len(named) >= 2 and named <= quick, (named, quick)


def test_compose_mounts_the_bundle_root_under_the_name_the_service_reads():
    """README and compose named the host's bundle folder XTAG_BUNDLE_DIR and XTAG_BUNDLES_DIR, which nothing reads:
    it is XTAG_BUNDLE_ROOT, the setting xtag reads for its bundle directory, in both (and in every docs page)."""
    from xtag.config.settings import flat_fields

    assert "bundle_root" in flat_fields()
    text = (ROOT / "docker-compose.yml").read_text()
    mounted = set(re.findall(r"\$\{(\w+):-[^}]*\}:/bundles:ro", text))
    assert mounted == {"XTAG_BUNDLE_ROOT"}, mounted
    assert "XTAG_BUNDLE_ROOT" in (ROOT / "docs" / "serving" / "deployment.md").read_text()
    assert not re.search(r"XTAG_BUNDLES?_DIR", documentation() + text)


def dashboard() -> dict:
    return json.loads((GRAFANA / "dashboards" / "xtag.json").read_text())


def test_grafana_is_provisioned_and_compose_mounts_it():
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    source = sources["datasources"][0]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "xtag.yml").read_text())["providers"][0]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in compose["grafana"]["volumes"] if v.startswith("./"))
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    d = dashboard()  # the provisioning format: a dashboard model with panels, each querying the provisioned source
    assert d["uid"] and d["title"] and d["panels"]
    for panel in d["panels"]:
        assert panel["datasource"]["uid"] == source["uid"] and panel["targets"], panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])


def test_every_dashboard_query_names_a_metric_the_service_exports(make_client, bundles, tmp_path):
    from xtag.service.state.model_slot import load_and_warm
    from xtag.service.state.shadow import declare

    c = make_client(admin_key="k", feedback_db=str(tmp_path / "feedback.sqlite3"))
    shadow = load_and_warm(bundles["b"], "warm up")  # so that the shadow panels' series exist too
    scorer = c.app.state.registry.current.shadow = declare(c.app, "tiny-a", "tiny-b", lambda: shadow)
    doc = {"id": "d1", "text": "python script"}
    c.post("/v1/predict/batch", json={"documents": [doc], "k": 3})
    c.post("/v1/feedback", json={"documents": [{**doc, "labels": ["lang::python"]}]}, headers={"X-Admin-Key": "k"})
    c.get("/v1/drift")
    c.put("/v1/admin/models/tiny-a/traffic", json={"weights": {"1": 100}}, headers={"X-Admin-Key": "k"})  # a change
    deadline = time.monotonic() + 30
    while scorer.counts["documents"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    exported = set(re.findall(r"^(xtag_\w+)", c.get("/metrics").text, re.MULTILINE))
    d = dashboard()
    queries = [t["expr"] for p in d["panels"] for t in p["targets"]] + [a["expr"] for a in d["annotations"]["list"]]
    titles = " ".join(p["title"] for p in d["panels"]).lower()
    for needed in (
        "requests per second", "latency", "error", "503", "predictor call", "drift", "head / torso", "shadow", "live p@k",
        "by version", "traffic weight",
    ):  # fmt: skip
        assert needed in titles, needed  # the built-in page's panels plus drift
    for query in queries:
        for name in re.findall(r"\b(xtag_\w+)", query):
            assert name in exported, (name, query)


def test_the_dashboard_has_a_model_variable_that_every_prediction_query_uses():
    d = dashboard()
    variable = {v["name"]: v for v in d["templating"]["list"]}["model"]
    assert "label_values(xtag_model_info, model)" in variable["definition"] and variable["includeAll"]
    per_model = (
        "xtag_http_request",
        "xtag_predict",
        "xtag_label_drift",
        "xtag_model_",
        "xtag_shadow_",
        "xtag_traffic_",
    )
    queries = [t["expr"] for p in d["panels"] for t in p["targets"]] + [a["expr"] for a in d["annotations"]["list"]]
    for query in queries:
        for selector in re.findall(r"(xtag_\w+)(\{[^}]*\})?", query):
            name, labels = selector
            if name.startswith(per_model) and name != "xtag_http_requests_in_flight":
                assert 'model=~"$model"' in labels, query
