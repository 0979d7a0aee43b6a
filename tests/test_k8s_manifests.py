"""The Kubernetes recipes of `deploy/k8s/`, checked without a cluster.

* Every YAML document under `deploy/k8s/` parses and is a kind this file validates; each
  recipe's `kustomization.yaml` lists every manifest of its folder.
* Core resources (and the ConfigMap that kustomize's `configMapGenerator` makes) validate
  against the Kubernetes JSON schemas that `kubernetes-validate` bundles, in strict mode (an
  unknown field fails), for each of `KUBERNETES_VERSIONS`.
* The custom resources (Kubeflow `TFJob`, KServe `InferenceService`) validate against the
  schemas in `deploy/k8s/crds/` (their README says where they come from), whose Kubernetes
  types resolve into the same bundled schemas.
* Cross-references: the ConfigMap's files are `serving/`'s (models.config parsed as TF
  Serving's `ModelServerConfig`), Prometheus scrapes monitoring.config's metrics path on the
  REST port, the Deployment runs `serving/docker-compose.yml`'s flags and
  image, probes and KServe use the model name models.config declares, ports agree, the
  training Job's worker count agrees with its TF_CONFIG, the commands parse with the
  `keras-transformer` CLI, and paths on the bucket agree between training, export and serving.

Each check that compares manifests is a function returning the problems it finds, and is run
on deliberately broken copies too, so that a check that cannot fail would show.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib
import importlib.util
import json
import os
import re
from importlib import resources

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from keras_transformer.serving.monitoring_proto import DEFAULT_PROMETHEUS_PATH, MonitoringConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(REPO, "deploy", "k8s")

# The oldest minor version Kubernetes supports upstream today (1.35; 1.34 reached its end of
# life in October 2026) and the newest that kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.35", "1.37")

CORE_KINDS = {
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
    ("batch/v1", "Job"),
}
CRD_SCHEMAS = {
    ("kubeflow.org/v1", "TFJob"): "tfjob.kubeflow.org_v1.schema.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): (
        "inferenceservice.serving.kserve.io_v1beta1.schema.json"
    ),
}
KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
# The kustomize fields `build` below implements; anything else would be applied unchecked.
KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions"}

GRPC_PORT, REST_PORT = 8500, 8501  # TF Serving's defaults, as in serving/docker-compose.yml
BUCKET = "gs://BUCKET/"  # the placeholder deploy/k8s/README.md tells users to replace
TRAINING_IMAGE = "REGISTRY/keras-transformer-nmt"


# --- loading --------------------------------------------------------------------------------


def yaml_files() -> list[str]:
    found = []
    for root, _, files in os.walk(K8S):
        found += [os.path.join(root, f) for f in files if f.endswith((".yaml", ".yml"))]
    return sorted(found)


def load_yaml(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def build(folder: str) -> list[dict]:
    """What `kubectl apply -k folder` applies: kustomize's resources and generated ConfigMaps.

    Implements the part of kustomize the recipes use (`resources` files and folders,
    `configMapGenerator` with `files`, `generatorOptions.disableNameSuffixHash`).
    """
    (kustomization,) = load_yaml(os.path.join(folder, "kustomization.yaml"))
    unknown = set(kustomization) - KUSTOMIZATION_FIELDS
    assert not unknown, f"{folder}: kustomize fields this test does not implement: {unknown}"
    assert kustomization.get("generatorOptions", {}) in ({}, {"disableNameSuffixHash": True})
    documents = []
    for entry in kustomization.get("resources", []):
        path = os.path.normpath(os.path.join(folder, entry))
        documents += build(path) if os.path.isdir(path) else load_yaml(path)
    for generator in kustomization.get("configMapGenerator", []):
        assert set(generator) == {"name", "files"}, generator
        data = {os.path.basename(f): read(os.path.join(folder, f)) for f in generator["files"]}
        documents.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": generator["name"]},
                "data": data,
            }
        )
    return documents


RECIPES = {
    "serving": os.path.join(K8S, "serving"),
    "kserve": os.path.join(K8S, "kserve"),
    "indexed-job": os.path.join(K8S, "training", "indexed-job"),
    "tfjob": os.path.join(K8S, "training", "tfjob"),
    "export": os.path.join(K8S, "training", "export"),
}


@functools.cache
def _built(name: str) -> tuple[dict, ...]:
    return tuple(build(RECIPES[name]))


def recipe(name: str) -> list[dict]:
    """The documents `kubectl apply -k` applies for recipe `name` (a copy to edit freely)."""
    return copy.deepcopy(list(_built(name)))


def find(documents, kind: str, name: str | None = None) -> dict:
    matches = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def all_documents() -> list[dict]:
    """Every manifest under deploy/k8s, plus the ConfigMaps the recipes generate."""
    documents = [d for path in yaml_files() for d in load_yaml(path)]
    manifests = [d for d in documents if (d["apiVersion"], d["kind"]) != KUSTOMIZATION]
    generated = [d for name in RECIPES for d in recipe(name) if d["kind"] == "ConfigMap"]
    return manifests + generated


def pod_specs(document: dict) -> list[dict]:
    """The pod specs of a workload (a TFJob has one per replica type)."""
    kind = document["kind"]
    if kind in ("Deployment", "Job"):
        return [document["spec"]["template"]["spec"]]
    if kind == "TFJob":
        return [r["template"]["spec"] for r in document["spec"]["tfReplicaSpecs"].values()]
    if kind == "InferenceService":
        return [document["spec"]["predictor"]]
    return []


def containers(document: dict) -> list[dict]:
    found = [c for spec in pod_specs(document) for c in spec.get("containers", [])]
    if document["kind"] == "InferenceService":
        found.append(document["spec"]["predictor"]["tensorflow"])
    return found


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def load_entrypoint():
    path = os.path.join(K8S, "training", "tf_config_entrypoint.py")
    spec = importlib.util.spec_from_file_location("tf_config_entrypoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- schemas --------------------------------------------------------------------------------


def schema_folder(version: str):
    return (
        resources.files("kubernetes_validate")
        / "kubernetes-json-schema"
        / (f"v{version}.0-local-strict")
    )


@functools.cache
def crd_validator(api_kind: tuple[str, str], version: str) -> jsonschema.Validator:
    """A validator for a custom resource whose `$ref`s resolve into Kubernetes `version`."""
    with open(os.path.join(K8S, "crds", CRD_SCHEMAS[api_kind]), encoding="utf-8") as f:
        schema = json.load(f)
    definitions = json.loads((schema_folder(version) / "_definitions.json").read_text())
    registry = referencing.Registry().with_resource(
        definitions["$id"], referencing.Resource.from_contents(definitions)
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(document: dict, version: str) -> None:
    """Raises `jsonschema.ValidationError` when `document` does not fit its schema."""
    api_kind = (document["apiVersion"], document["kind"])
    if api_kind in CORE_KINDS:
        kubernetes_validate.validate(document, f"{version}.0", strict=True)
    else:
        crd_validator(api_kind, version).validate(document)


def test_every_yaml_document_is_a_kind_these_tests_validate():
    files = yaml_files()
    assert len(files) >= 15, files
    for path in files:
        documents = load_yaml(path)
        assert documents, f"{path} holds no document"
        for document in documents:
            api_kind = (document.get("apiVersion"), document.get("kind"))
            assert api_kind in CORE_KINDS | set(CRD_SCHEMAS) | {KUSTOMIZATION}, (path, api_kind)
            if api_kind != KUSTOMIZATION:
                # No namespace: `kubectl apply -k ... -n NAMESPACE` decides.
                assert set(document["metadata"]) <= {"name", "labels", "annotations"}, path
                assert document["metadata"]["name"], path


def test_each_kustomization_lists_every_manifest_of_its_folder():
    kustomizations = [p for p in yaml_files() if os.path.basename(p) == "kustomization.yaml"]
    recipe_folders = {os.path.dirname(p) for p in kustomizations}
    assert set(RECIPES.values()) <= recipe_folders
    for path in yaml_files():
        folder = os.path.dirname(path)
        assert folder in recipe_folders, f"{path} is in no kustomization's folder"
        if path not in kustomizations:
            (kustomization,) = load_yaml(os.path.join(folder, "kustomization.yaml"))
            assert os.path.basename(path) in kustomization["resources"], path
    for name in RECIPES:
        assert recipe(name)  # every listed resource and generator file exists


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_match_the_kubernetes_and_crd_schemas(version):
    documents = all_documents()
    kinds = {(d["apiVersion"], d["kind"]) for d in documents}
    assert kinds == CORE_KINDS | set(CRD_SCHEMAS)  # every kind here is exercised
    for document in documents:
        try:
            validate(document, version)
        except jsonschema.ValidationError as e:
            pytest.fail(f"{document['kind']} {document['metadata']['name']}: {e.message}")


def _keys(path: str | tuple) -> list:
    """A dotted path (list indices as numbers), or a tuple of keys that contain dots."""
    if isinstance(path, tuple):
        return list(path)
    return [int(p) if p.isdigit() else p for p in path.split(".")]


def _set(document: dict, path: str | tuple, value) -> dict:
    """A copy of `document` with the field at `path` set to `value`."""
    document = copy.deepcopy(document)
    *parents, last = _keys(path)
    node = document
    for key in parents:
        node = node[key]
    node[last] = value
    return document


def _rename(document: dict, path: str, new_key: str) -> dict:
    """A copy of `document` whose field at `path` is called `new_key`."""
    document = copy.deepcopy(document)
    *parents, last = _keys(path)
    node = document
    for key in parents:
        node = node[key]
    node[new_key] = node.pop(last)
    return document


BROKEN = {
    "misspelt probe": lambda: _rename(
        find(recipe("serving"), "Deployment"),
        "spec.template.spec.containers.0.readinessProbe",
        "readinesProbe",
    ),
    "port as text": lambda: _set(find(recipe("serving"), "Service"), "spec.ports.1.port", "8501"),
    "HPA utilization as text": lambda: _set(
        find(recipe("serving"), "HorizontalPodAutoscaler"),
        "spec.metrics.0.resource.target.averageUtilization",
        "70%",
    ),
    "completions as text": lambda: _set(
        find(recipe("indexed-job"), "Job"), "spec.completions", "2"
    ),
    "config file as a number": lambda: _set(
        find(recipe("serving"), "ConfigMap"), ("data", "batching.config"), 5
    ),
    "TFJob container not named tensorflow": lambda: _set(
        find(recipe("tfjob"), "TFJob"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers.0.name",
        "worker",
    ),
    "TFJob unknown replica type": lambda: _rename(
        find(recipe("tfjob"), "TFJob"), "spec.tfReplicaSpecs.Worker", "Workers"
    ),
    "TFJob misspelt pod field": lambda: _rename(
        find(recipe("tfjob"), "TFJob"),
        "spec.tfReplicaSpecs.Worker.template.spec.serviceAccountName",
        "serviceAccount_name",
    ),
    "InferenceService misspelt storageUri": lambda: _rename(
        find(recipe("kserve"), "InferenceService"),
        "spec.predictor.tensorflow.storageUri",
        "storageURI",
    ),
    "InferenceService bad resources": lambda: _set(
        find(recipe("kserve"), "InferenceService"),
        "spec.predictor.tensorflow.resources.requests",
        ["cpu"],
    ),
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_schemas_reject_a_broken_manifest(case, version):
    with pytest.raises(jsonschema.ValidationError):
        validate(BROKEN[case](), version)


def service_account_problems(documents) -> list[str]:
    """Pods that run as a service account their recipe does not create."""
    accounts = {d["metadata"]["name"] for d in documents if d["kind"] == "ServiceAccount"}
    return [
        f"{d['kind']} {d['metadata']['name']} runs as {spec.get('serviceAccountName')}"
        for d in documents
        for spec in pod_specs(d)
        if spec.get("serviceAccountName") not in accounts
    ]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_pod_runs_as_a_service_account_of_its_recipe(name):
    documents = recipe(name)
    assert any(pod_specs(d) for d in documents)
    assert service_account_problems(documents) == []
    without = [d for d in documents if d["kind"] != "ServiceAccount"]
    assert service_account_problems(without)


# --- serving: TF Serving, its ConfigMap, KServe ----------------------------------------------


def compose_service() -> dict:
    (compose,) = load_yaml(os.path.join(REPO, "serving", "docker-compose.yml"))
    return compose["services"]["tf-serving"]


def compose_image() -> str:
    match = re.fullmatch(r"\$\{TF_SERVING_IMAGE:-(.+)\}", compose_service()["image"])
    assert match, compose_service()["image"]
    return match.group(1)


def parse_model_config(text: str) -> model_server_config_pb2.ModelServerConfig:
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())


def parse_metrics_path(text: str) -> str | None:
    """The Prometheus path a `MonitoringConfig` text enables (TF Serving's default path when
    it names none), or None when it does not enable Prometheus."""
    prometheus = text_format.Parse(text, MonitoringConfig()).prometheus_config
    return (prometheus.path or DEFAULT_PROMETHEUS_PATH) if prometheus.enable else None


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args)


def serving_problems(documents) -> list[str]:
    """How the TF Serving recipe disagrees with itself, serving/ and the KServe recipe."""
    problems = []
    deployment = find(documents, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    args = flags(container["args"])

    # The config files: serving/'s, mounted where the flags say.
    volume = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    files = {}
    for flag in ("model_config_file", "batching_parameters_file", "monitoring_config_file"):
        folder, filename = os.path.split(args[flag])
        source = volume.get(mounts.get(folder, ""), {}).get("configMap", {}).get("name")
        config_map = [d for d in documents if d["kind"] == "ConfigMap"]
        config_map = [d for d in config_map if d["metadata"]["name"] == source]
        if not config_map or filename not in config_map[0]["data"]:
            problems.append(f"--{flag}={args[flag]} is no file of a mounted ConfigMap")
            continue
        files[flag] = config_map[0]["data"][filename]
    if "batching_parameters_file" in files:
        if files["batching_parameters_file"] != read(
            os.path.join(REPO, "serving", "batching.config")
        ):
            problems.append("batching.config differs from serving/batching.config")
    metrics_path = None
    if "monitoring_config_file" in files:
        if files["monitoring_config_file"] != read(
            os.path.join(REPO, "serving", "monitoring.config")
        ):
            problems.append("monitoring.config differs from serving/monitoring.config")
        metrics_path = parse_metrics_path(files["monitoring_config_file"])
        if metrics_path is None:
            problems.append("monitoring.config does not enable the Prometheus metrics")
    name = None
    if "model_config_file" in files:
        ours = parse_model_config(files["model_config_file"])
        reference = parse_model_config(read(os.path.join(REPO, "serving", "models.config")))
        (model,) = ours.model_config_list.config
        name, base_path = model.name, model.base_path
        if base_path != f"{BUCKET}exports/{name}":
            problems.append(f"models.config base_path {base_path} is not {BUCKET}exports/{name}")
        for config in (*ours.model_config_list.config, *reference.model_config_list.config):
            config.ClearField("base_path")
        if ours != reference:
            problems.append("models.config differs from serving/models.config beyond base_path")

    # serving/docker-compose.yml's flags, image and ports.
    if container.get("command") != [compose_service()["entrypoint"][0]]:
        problems.append(f"command {container.get('command')} is not docker-compose's entrypoint")
    if container["args"] != compose_service()["command"]:
        problems.append("args differ from serving/docker-compose.yml's command")
    if container["image"] != compose_image():
        problems.append(f"image {container['image']} is not docker-compose's {compose_image()}")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if ports != {"grpc": int(args["port"]), "http": int(args["rest_api_port"])}:
        problems.append(f"container ports {ports} differ from --port/--rest_api_port")
    if (int(args["port"]), int(args["rest_api_port"])) != (GRPC_PORT, REST_PORT):
        problems.append("TF Serving's ports are not 8500 (gRPC) and 8501 (REST)")
    compose_ports = {
        tuple(map(int, p.split("#")[0].split(":"))) for p in compose_service()["ports"]
    }
    if compose_ports != {(GRPC_PORT, GRPC_PORT), (REST_PORT, REST_PORT)}:
        problems.append(f"docker-compose publishes {compose_ports}")

    # Probes: the model's status URL on the REST port.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container.get(probe, {}).get("httpGet", {})
        port = ports.get(get.get("port"), get.get("port"))
        if (get.get("path"), port) != (f"/v1/models/{name}", REST_PORT):
            problems.append(f"{probe} {get} is not /v1/models/{name} on {REST_PORT}")

    # Prometheus scrapes the metrics path of monitoring.config on the REST port.
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    scrape = (
        annotations.get("prometheus.io/scrape"),
        annotations.get("prometheus.io/path"),
        annotations.get("prometheus.io/port"),
    )
    if scrape != ("true", metrics_path, str(REST_PORT)):
        problems.append(
            f"the pod's prometheus.io annotations {scrape} are not ('true', {metrics_path!r}, "
            f"'{REST_PORT}'): monitoring.config's path on the REST port"
        )

    # The Service, the HPA and the PDB find the pods; the HPA owns the replica count.
    service = find(documents, "Service")
    if not service["spec"]["selector"].items() <= pod_labels.items():
        problems.append("the Service's selector does not select the pods")
    if not deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items():
        problems.append("the Deployment's selector does not select its pods")
    service_ports = {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    if service_ports != {("grpc", GRPC_PORT, "grpc"), ("http", REST_PORT, "http")}:
        problems.append(f"Service ports {service_ports}")
    hpa = find(documents, "HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    if (target["apiVersion"], target["kind"], target["name"]) != (
        deployment["apiVersion"],
        "Deployment",
        deployment["metadata"]["name"],
    ):
        problems.append(f"the HPA scales {target}")
    if "replicas" in deployment["spec"]:
        problems.append("the Deployment sets replicas, which the HPA owns")
    if "cpu" not in container.get("resources", {}).get("requests", {}):
        problems.append("no CPU request, which the HPA's utilization is relative to")
    pdb = find(documents, "PodDisruptionBudget")
    if not pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items():
        problems.append("the PodDisruptionBudget does not select the pods")

    # KServe: the same model name, bucket folder and TF Serving version.
    inference = find(recipe("kserve"), "InferenceService")
    predictor = inference["spec"]["predictor"]["tensorflow"]
    if inference["metadata"]["name"] != name:
        problems.append(f"the InferenceService's name (TF Serving's model name) is not {name}")
    if predictor["storageUri"] != f"{BUCKET}exports/{name}":
        problems.append(f"KServe's storageUri {predictor['storageUri']}")
    if f"tensorflow/serving:{predictor['runtimeVersion']}" != container["image"]:
        problems.append(f"KServe's runtimeVersion {predictor['runtimeVersion']}")
    return problems


def test_serving_recipe_agrees_with_serving_folder_and_kserve():
    assert serving_problems(recipe("serving")) == []


def test_model_config_parses_as_tf_servings_model_server_config():
    config = parse_model_config(read(os.path.join(K8S, "serving", "models.config")))
    (model,) = config.model_config_list.config
    assert model.name == "transformer" and model.model_platform == "tensorflow"
    assert set(model.version_labels.values()) <= set(model.model_version_policy.specific.versions)
    with pytest.raises(text_format.ParseError):
        parse_model_config("model_config_list { config { nme: 'x' } }")


def _config_map_with(documents, filename: str, text: str):
    documents = copy.deepcopy(list(documents))
    find(documents, "ConfigMap")["data"][filename] = text
    return documents


def _with(kind: str, path: str, value):
    def mutate(documents):
        documents = copy.deepcopy(list(documents))
        index = documents.index(find(documents, kind))
        documents[index] = _set(documents[index], path, value)
        return documents

    return mutate


SERVING_BREAKAGES = {
    "a label moved": (
        lambda d: _config_map_with(
            d,
            "models.config",
            read(os.path.join(K8S, "serving", "models.config")).replace("value: 1", "value: 2"),
        ),
        "differs from serving/models.config",
    ),
    "a local base path": (
        lambda d: _config_map_with(
            d,
            "models.config",
            read(os.path.join(K8S, "serving", "models.config")).replace(
                "gs://BUCKET/exports/transformer", "/models/transformer"
            ),
        ),
        "base_path /models/transformer",
    ),
    "another batch size": (
        lambda d: _config_map_with(
            d,
            "batching.config",
            read(os.path.join(K8S, "serving", "batching.config")).replace("32", "64"),
        ),
        "batching.config differs",
    ),
    "probe on another model": (
        _with(
            "Deployment",
            "spec.template.spec.containers.0.livenessProbe.httpGet.path",
            "/v1/models/t",
        ),
        "livenessProbe",
    ),
    "probe on the gRPC port": (
        _with("Deployment", "spec.template.spec.containers.0.readinessProbe.httpGet.port", "grpc"),
        "readinessProbe",
    ),
    "REST port moved": (
        _with("Deployment", "spec.template.spec.containers.0.ports.1.containerPort", 8080),
        "container ports",
    ),
    "Service port swapped": (
        _with("Service", "spec.ports.0.port", REST_PORT),
        "Service ports",
    ),
    "HPA on another Deployment": (
        _with("HorizontalPodAutoscaler", "spec.scaleTargetRef.name", "tf-serving-2"),
        "the HPA scales",
    ),
    "replicas set": (_with("Deployment", "spec.replicas", 2), "sets replicas"),
    "config mounted elsewhere": (
        _with("Deployment", "spec.template.spec.containers.0.volumeMounts.0.mountPath", "/etc"),
        "no file of a mounted ConfigMap",
    ),
    "another monitoring path": (
        lambda d: _config_map_with(
            d,
            "monitoring.config",
            read(os.path.join(K8S, "serving", "monitoring.config")).replace(
                '"/monitoring/prometheus/metrics"', '"/metrics"'
            ),
        ),
        "monitoring.config differs",
    ),
    "prometheus disabled": (
        lambda d: _config_map_with(
            d,
            "monitoring.config",
            read(os.path.join(K8S, "serving", "monitoring.config")).replace(
                "enable: true", "enable: false"
            ),
        ),
        "does not enable",
    ),
    "scrape path elsewhere": (
        _with(
            "Deployment",
            ("spec", "template", "metadata", "annotations", "prometheus.io/path"),
            "/metrics",
        ),
        "prometheus.io annotations",
    ),
    "scrape on the gRPC port": (
        _with(
            "Deployment",
            ("spec", "template", "metadata", "annotations", "prometheus.io/port"),
            str(GRPC_PORT),
        ),
        "prometheus.io annotations",
    ),
    "scraping off": (
        _with(
            "Deployment",
            ("spec", "template", "metadata", "annotations", "prometheus.io/scrape"),
            "false",
        ),
        "prometheus.io annotations",
    ),
    "another image": (
        _with("Deployment", "spec.template.spec.containers.0.image", "tensorflow/serving:2.20.0"),
        "image",
    ),
}


@pytest.mark.parametrize("case", sorted(SERVING_BREAKAGES))
def test_serving_cross_checks_catch(case):
    mutate, expected = SERVING_BREAKAGES[case]
    problems = serving_problems(mutate(recipe("serving")))
    assert any(expected in p for p in problems), problems


# --- training: the Indexed Job, the TFJob, the export Job ------------------------------------


def parse_cli(args: list[str]) -> argparse.Namespace:
    """Parses a container's args as `keras-transformer` does (`cli.main`)."""
    from keras_transformer import cli

    assert args[0] == "keras-transformer", args
    known, rest = cli.build_parser().parse_known_args(args[1:])
    module = importlib.import_module(f"keras_transformer.commands.{known.command}")
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    namespace = parser.parse_args(rest)
    namespace.command = known.command
    return namespace


def training_config(args: list[str]):
    from keras_transformer.config import load_config

    namespace = parse_cli(args)
    assert namespace.command == "train"
    overrides = list(namespace.overrides)
    if namespace.run_dir:
        overrides.append(f"training.run_dir={namespace.run_dir}")
    return load_config(namespace.config, overrides)


def indexed_job_env(job: dict, index: int) -> dict[str, str]:
    """The environment the Job controller and the kubelet give worker `index`."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    labels = {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    env = {"JOB_COMPLETION_INDEX": str(index)}
    for name, entry in env_of(container).items():
        if "value" in entry:
            env[name] = entry["value"]
        else:
            field = entry["valueFrom"]["fieldRef"]["fieldPath"]
            match = re.fullmatch(r"metadata\.labels\['(.+)'\]", field)
            assert match and match.group(1) in labels, field
            env[name] = labels[match.group(1)]
    return env


def indexed_job_problems(documents) -> list[str]:
    """How the Indexed Job, its headless Service and its workers' TF_CONFIG disagree."""
    problems = []
    job = find(documents, "Job")
    service = find(documents, "Service")
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = env_of(container)
    workers = int(env["NUM_WORKERS"]["value"])
    if spec.get("completionMode") != "Indexed":
        problems.append("the Job is not Indexed")
    if not spec.get("completions") == spec.get("parallelism") == workers:
        problems.append(
            f"completions {spec.get('completions')}, parallelism {spec.get('parallelism')} "
            f"and NUM_WORKERS {workers} differ"
        )
    name = service["metadata"]["name"]
    if service["spec"].get("clusterIP") != "None":
        problems.append("the Service is not headless")
    if not service["spec"].get("publishNotReadyAddresses"):
        problems.append("the Service does not publish the addresses of pods not yet ready")
    if pod.get("subdomain") != name or env["SERVICE_NAME"].get("value") != name:
        problems.append(f"subdomain/SERVICE_NAME are not the headless Service's name {name}")
    if service["spec"]["selector"] != {"batch.kubernetes.io/job-name": job["metadata"]["name"]}:
        problems.append("the Service does not select the Job's pods")
    port = int(env["TF_WORKER_PORT"]["value"])
    container_ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    service_ports = {
        (p["port"], container_ports.get(p["targetPort"])) for p in service["spec"]["ports"]
    }
    if service_ports != {(port, port)}:
        problems.append(f"TF_WORKER_PORT {port}, container ports and Service ports differ")

    # What the image's entrypoint makes of each worker's environment.
    entrypoint = load_entrypoint()
    job_name = job["metadata"]["name"]
    hosts = [f"{job_name}-{i}.{name}:{port}" for i in range(workers)]
    for index in range(spec.get("completions") or 0):
        try:
            config = json.loads(entrypoint.tf_config_from_env(indexed_job_env(job, index)))
        except ValueError as e:
            problems.append(f"worker {index}: {e}")
            continue
        expected = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        if config != expected:
            problems.append(f"worker {index}'s TF_CONFIG is {config}, expected {expected}")
    return problems


def test_indexed_job_gives_every_worker_its_tf_config():
    documents = recipe("indexed-job")
    assert indexed_job_problems(documents) == []
    job = find(documents, "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    workers = int(env_of(container)["NUM_WORKERS"]["value"])
    assert workers >= 2
    # Only "worker" tasks: worker 0 is the chief (keras_transformer.training.is_chief).
    entrypoint = load_entrypoint()
    config = json.loads(entrypoint.tf_config_from_env(indexed_job_env(job, 0)))
    assert list(config["cluster"]) == ["worker"] and config["task"]["index"] == 0


INDEXED_JOB_BREAKAGES = {
    "parallelism": (_with("Job", "spec.parallelism", 3), "parallelism 3"),
    "completions": (_with("Job", "spec.completions", 3), "completions 3"),
    "NUM_WORKERS": (
        _with("Job", "spec.template.spec.containers.0.env.0.value", "3"),
        "NUM_WORKERS 3",
    ),
    "not indexed": (_with("Job", "spec.completionMode", "NonIndexed"), "not Indexed"),
    "subdomain": (_with("Job", "spec.template.spec.subdomain", "workers"), "subdomain"),
    "not headless": (_with("Service", "spec.clusterIP", "10.0.0.1"), "not headless"),
    "port": (_with("Job", "spec.template.spec.containers.0.ports.0.containerPort", 2223), "port"),
}


@pytest.mark.parametrize("case", sorted(INDEXED_JOB_BREAKAGES))
def test_indexed_job_cross_checks_catch(case):
    mutate, expected = INDEXED_JOB_BREAKAGES[case]
    documents = recipe("indexed-job")
    # The "NUM_WORKERS" case edits the first variable.
    assert find(documents, "Job")["spec"]["template"]["spec"]["containers"][0]["env"][0] == {
        "name": "NUM_WORKERS",
        "value": "2",
    }
    problems = indexed_job_problems(mutate(documents))
    assert any(expected in p for p in problems), problems


def training_problems(indexed_job: dict, tf_job: dict, export_job: dict) -> list[str]:
    """How the two training recipes and the export Job disagree with each other and serving."""
    problems = []
    (job_container,) = indexed_job["spec"]["template"]["spec"]["containers"]
    replicas = tf_job["spec"]["tfReplicaSpecs"]
    if set(replicas) != {"Worker"}:
        return [f"TFJob replica types {sorted(replicas)}: worker 0 would not be the chief"]
    (tf_container,) = replicas["Worker"]["template"]["spec"]["containers"]
    if replicas["Worker"].get("replicas") != int(env_of(job_container)["NUM_WORKERS"]["value"]):
        problems.append("the TFJob and the Indexed Job have different worker counts")
    for field in ("image", "args", "resources", "volumeMounts"):
        if job_container.get(field) != tf_container.get(field):
            problems.append(f"the TFJob's and the Indexed Job's containers differ in {field}")
    tf_ports = {p.get("name"): p["containerPort"] for p in tf_container.get("ports", [])}
    if tf_ports != {"tfjob-port": 2222}:
        problems.append(f"TFJob ports {tf_ports}: the operator's TF_CONFIG uses tfjob-port 2222")
    if indexed_job["spec"]["template"]["spec"].get("volumes") != replicas["Worker"]["template"][
        "spec"
    ].get("volumes"):
        problems.append("the TFJob's and the Indexed Job's volumes differ")

    config = training_config(job_container["args"])
    if config.training.strategy != "multi_worker":
        problems.append(f"training.strategy is {config.training.strategy}")
    run_dir = config.training.run_dir
    if not run_dir.startswith(f"{BUCKET}runs/"):
        problems.append(f"the run directory {run_dir} is not under {BUCKET}runs/")
    data_dir = config.data.data_dir or ""
    mounts = [m["mountPath"] for m in job_container.get("volumeMounts", [])]
    if not any(data_dir.startswith(m + "/") for m in mounts):
        problems.append(f"data.data_dir {data_dir} is on no mounted volume")

    (export_container,) = export_job["spec"]["template"]["spec"]["containers"]
    export = parse_cli(export_container["args"])
    if export.command != "export" or export.run_dir != run_dir:
        problems.append(f"the export Job exports {export.run_dir}, training writes {run_dir}")
    model = parse_model_config(read(os.path.join(K8S, "serving", "models.config")))
    (served,) = model.model_config_list.config
    if export.model_name != served.name:
        problems.append(f"export --model-name {export.model_name} is not {served.name}")
    if f"{export.base_path}/{export.model_name}" != served.base_path:
        problems.append(f"export --base-path {export.base_path} is not where TF Serving reads")
    if export_container["image"] != job_container["image"]:
        problems.append("the export Job runs another image")
    return problems


def training_recipes():
    return (
        find(recipe("indexed-job"), "Job"),
        find(recipe("tfjob"), "TFJob"),
        find(recipe("export"), "Job"),
    )


def test_training_recipes_agree_and_parse_with_the_cli():
    assert training_problems(*training_recipes()) == []


TRAINING_BREAKAGES = {
    "TFJob with a Chief": (
        1,
        lambda d: _rename(d, "spec.tfReplicaSpecs.Worker", "Chief"),
        "replica types",
    ),
    "TFJob worker count": (
        1,
        lambda d: _set(d, "spec.tfReplicaSpecs.Worker.replicas", 3),
        "counts",
    ),
    "TFJob args": (
        1,
        lambda d: _set(d, "spec.tfReplicaSpecs.Worker.template.spec.containers.0.args.4", "x"),
        "differ in args",
    ),
    "no multi_worker": (
        0,
        lambda d: _set(d, "spec.template.spec.containers.0.args.7", "training.strategy=default"),
        "strategy",
    ),
    "local run dir": (
        0,
        lambda d: _set(d, "spec.template.spec.containers.0.args.5", "runs/de-en"),
        "not under",
    ),
    "export of another run": (
        2,
        lambda d: _set(d, "spec.template.spec.containers.0.args.2", "gs://BUCKET/runs/x"),
        "exports gs://BUCKET/runs/x",
    ),
    "export elsewhere": (
        2,
        lambda d: _set(d, "spec.template.spec.containers.0.args.4", "gs://BUCKET/models"),
        "--base-path",
    ),
}


@pytest.mark.parametrize("case", sorted(TRAINING_BREAKAGES))
def test_training_cross_checks_catch(case):
    which, mutate, expected = TRAINING_BREAKAGES[case]
    documents = list(training_recipes())
    documents[which] = mutate(documents[which])
    problems = training_problems(*documents)
    assert any(expected in p for p in problems), problems


def test_a_training_command_the_cli_rejects_fails_the_check():
    job = find(recipe("indexed-job"), "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    with pytest.raises(ValueError, match="unknown|Unknown|no field"):
        training_config([*container["args"], "--set", "training.strategyy=multi_worker"])


# --- the entrypoint that writes TF_CONFIG ----------------------------------------------------


ENV = {
    "JOB_COMPLETION_INDEX": "1",
    "NUM_WORKERS": "2",
    "JOB_NAME": "train",
    "SERVICE_NAME": "workers",
    "TF_WORKER_PORT": "2222",
    "PEER_DNS_TIMEOUT_S": "10",  # a broken stub fails the test instead of waiting 10 minutes
}


def test_entrypoint_sets_tf_config_waits_for_peers_and_runs_the_command(monkeypatch):
    entrypoint = load_entrypoint()
    resolved, executed = [], []
    failures = {"train-0.workers": 2}  # worker 0's DNS record appears late

    def resolve(host, port):
        resolved.append((host, port))
        if failures.get(host, 0) > 0:
            failures[host] -= 1
            raise OSError("Name or service not known")

    monkeypatch.setattr(entrypoint.socket, "getaddrinfo", resolve)
    monkeypatch.setattr(entrypoint.time, "sleep", lambda s: None)
    monkeypatch.setattr(entrypoint.os, "execvpe", lambda *a: executed.append(a))
    entrypoint.main(["keras-transformer", "train"], ENV)
    ((program, argv, env),) = executed
    assert (program, argv) == ("keras-transformer", ["keras-transformer", "train"])
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["train-0.workers:2222", "train-1.workers:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert resolved.count(("train-0.workers", 2222)) == 3
    assert ("train-1.workers", 2222) in resolved


def test_entrypoint_keeps_a_tfjobs_tf_config_and_runs_single_processes_as_they_are():
    entrypoint = load_entrypoint()
    assert entrypoint.tf_config_from_env({**ENV, "TF_CONFIG": '{"cluster": {}}'}) is None
    assert entrypoint.tf_config_from_env({}) is None  # e.g. the export Job


def test_entrypoint_rejects_an_inconsistent_indexed_job():
    entrypoint = load_entrypoint()
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX=2, NUM_WORKERS=2"):
        entrypoint.tf_config_from_env({**ENV, "JOB_COMPLETION_INDEX": "2"})
    with pytest.raises(ValueError, match="Missing: SERVICE_NAME"):
        entrypoint.tf_config_from_env({k: v for k, v in ENV.items() if k != "SERVICE_NAME"})
    with pytest.raises(TimeoutError, match="train-0.workers did not resolve"):
        entrypoint.wait_for_peers(
            entrypoint.tf_config_from_env(ENV), 0, resolve=_unresolvable, sleep=lambda s: None
        )


def _unresolvable(host, port):
    raise OSError("Name or service not known")


# --- images, placeholders, the Dockerfile ----------------------------------------------------


def test_images_and_bucket_paths_use_the_readmes_placeholders():
    from keras_transformer import __version__

    for document in all_documents():
        for container in containers(document):
            image = container.get("image") or ""
            if "keras-transformer" in image:
                assert image == f"{TRAINING_IMAGE}:{__version__}", image
    # Every bucket path is gs://BUCKET/..., so the README's sed replaces all of them.
    for root, _, files in os.walk(K8S):
        for filename in files:
            if filename.endswith((".yaml", ".config")):
                lines = read(os.path.join(root, filename)).splitlines()
                text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
                for uri in re.findall(r"\b(?:gs|s3)://[^\s\"']*", text):
                    assert uri.startswith(BUCKET), (filename, uri)


def test_dockerfile_installs_this_package_and_the_entrypoint():
    folder = os.path.join(K8S, "training")
    dockerfile = read(os.path.join(folder, "Dockerfile"))
    copied = re.findall(r"^COPY (.+) \S+$", dockerfile, re.M)
    for sources in copied:
        for source in sources.split():
            assert os.path.exists(os.path.join(REPO, source)), source
    assert "deploy/k8s/training/tf_config_entrypoint.py" in " ".join(copied)
    assert re.search(
        r'^ENTRYPOINT \["python", "/usr/local/bin/tf_config_entrypoint.py"\]$', dockerfile, re.M
    )
    ignore = read(os.path.join(folder, "Dockerfile.dockerignore"))
    for sources in copied:
        for source in sources.split():
            assert f"!{source}" in ignore or f"!{source}/**" in ignore, source
    # `keras-transformer` on PyPI is another project; the distribution is keras-transformer-nmt.
    for root, _, files in os.walk(K8S):
        for filename in files:
            text = read(os.path.join(root, filename))
            assert not re.search(r"pip install[^\n]*\bkeras-transformer(?!-nmt)\b", text), filename
