"""Writes the minimal structural schemas of the two custom resources the recipes use.

No PyPI package ships the CRDs themselves (the `kserve` and `kubeflow-training` wheels hold
Python models generated from the upstream OpenAPI specs, not the CRD YAML), so the schemas
are written here: the field names of each object are those of the SDK's generated model
(`attribute_map`), Kubernetes types are `$ref`s into the Kubernetes schema that
`kubernetes-validate` bundles, and the few enums and rules come from the upstream Go types
and webhooks named in README.md. Every object is closed (`additionalProperties: false`), like
`kubectl apply`'s strict field validation against the real CRD.

    pip download --no-deps kserve==0.21.0 kubeflow-training==1.9.4 -d /tmp/wheels
    python deploy/k8s/crds/make_schemas.py /tmp/wheels
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import zipfile
from importlib import resources

HERE = os.path.dirname(os.path.abspath(__file__))
KUBERNETES_VERSION = "1.35"  # whose PodSpec/Container field names decide what is a $ref
K8S = "https://kubernetes.io/api/_definitions.json#/$defs/"
NOT_MODELLED = {"description": "not modelled here: any value (see README.md)"}
FRAMEWORKS = (
    "huggingface lightgbm onnx paddle pmml pytorch sklearn tensorflow triton xgboost"
).split()


def attribute_map(wheel: str, module: str) -> list[str]:
    """The JSON field names of a generated SDK model, in the SDK's order."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read(module).decode("utf-8")
    body = re.search(r"attribute_map = \{(.*?)\}", source, re.S)
    if body is None:
        raise ValueError(f"No attribute_map in {module} of {wheel}")
    return re.findall(r"'[a-z0-9_]+': '([A-Za-z0-9]+)'", body.group(1))


def kubernetes_properties(kind: str) -> set[str]:
    path = (
        resources.files("kubernetes_validate")
        / "kubernetes-json-schema"
        / f"v{KUBERNETES_VERSION}.0-local-strict"
        / "_definitions.json"
    )
    definitions = json.loads(path.read_text())["$defs"]
    return set(definitions[f"io.k8s.api.core.v1.{kind}"]["properties"])


def closed(names: list[str], own: dict, kind: str) -> dict:
    """An object with exactly `names`: `own` types, else the Kubernetes `kind`'s field."""
    k8s = kubernetes_properties(kind)
    properties = {}
    for name in names:
        if name in own:
            properties[name] = own[name]
        elif name in k8s:
            properties[name] = {"$ref": f"{K8S}io.k8s.api.core.v1.{kind}/properties/{name}"}
        else:
            properties[name] = NOT_MODELLED
    return {"type": "object", "additionalProperties": False, "properties": properties}


def inference_service(wheel: str) -> dict:
    def names(model: str) -> list[str]:
        return attribute_map(wheel, f"kserve/models/{model}.py")

    extension_own = {
        "storageUri": {"type": "string", "minLength": 1},
        "runtimeVersion": {"type": "string"},
        "protocolVersion": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]},
        "storage": {"$ref": "#/$defs/StorageSpec"},
    }
    model_own = {
        **extension_own,
        "modelFormat": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
        },
        "runtime": {"type": "string"},
    }
    predictor_own = {
        "minReplicas": {"type": "integer", "minimum": 0},
        "maxReplicas": {"type": "integer", "minimum": 0},
        "scaleTarget": {"type": "integer"},
        "scaleMetric": {"enum": ["cpu", "memory", "concurrency", "rps"]},
        "scaleMetricType": {"enum": ["Utilization", "AverageValue"]},
        "containerConcurrency": {"type": "integer", "minimum": 0},
        "timeout": {"type": "integer", "minimum": 0},
        "canaryTrafficPercent": {"type": "integer", "minimum": 0, "maximum": 100},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "model": {"$ref": "#/$defs/ModelSpec"},
        "storageUris": {"type": "array"},
        "storageContainerName": {"type": "string"},
        **{name: {"$ref": "#/$defs/PredictorExtensionSpec"} for name in FRAMEWORKS},
    }
    spec_names = names("v1beta1_inference_service_spec")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:keras-transformer:crds:serving.kserve.io:v1beta1:InferenceService",
        "title": "InferenceService serving.kserve.io/v1beta1: a minimal structural schema "
        "(README.md)",
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "serving.kserve.io/v1beta1"},
            "kind": {"const": "InferenceService"},
            "metadata": {
                "allOf": [
                    {"$ref": f"{K8S}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                    {
                        "$comment": "KServe's webhook: a DNS-1035 label",
                        "required": ["name"],
                        "properties": {
                            "name": {
                                "type": "string",
                                "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$",
                                "maxLength": 63,
                            }
                        },
                    },
                ]
            },
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["predictor"],
                "properties": {
                    name: {"$ref": "#/$defs/PredictorSpec"} if name == "predictor" else NOT_MODELLED
                    for name in spec_names
                },
            },
            "status": {"type": "object"},
        },
        "$defs": {
            "PredictorSpec": closed(names("v1beta1_predictor_spec"), predictor_own, "PodSpec"),
            "PredictorExtensionSpec": closed(
                names("v1beta1_predictor_extension_spec"), extension_own, "Container"
            ),
            "ModelSpec": closed(names("v1beta1_model_spec"), model_own, "Container"),
            "StorageSpec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string"},
                    "path": {"type": "string"},
                    "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    }


def tf_job(wheel: str) -> dict:
    def names(model: str) -> list[str]:
        return attribute_map(wheel, f"kubeflow/training/models/kubeflow_org_v1_{model}.py")

    run_policy = {
        "activeDeadlineSeconds": {"type": "integer", "minimum": 0},
        "backoffLimit": {"type": "integer", "minimum": 0},
        "cleanPodPolicy": {"enum": ["", "All", "Running", "None"]},
        "managedBy": {"enum": ["", "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"]},
        "schedulingPolicy": {"$ref": "#/$defs/SchedulingPolicy"},
        "suspend": {"type": "boolean"},
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
    }
    scheduling_policy = {
        "minAvailable": {"type": "integer"},
        "minResources": {
            "type": "object",
            "additionalProperties": {"$ref": f"{K8S}io.k8s.apimachinery.pkg.api.resource.Quantity"},
        },
        "priorityClass": {"type": "string"},
        "queue": {"type": "string"},
        "scheduleTimeoutSeconds": {"type": "integer"},
    }
    spec = {
        "enableDynamicWorker": {"type": "boolean"},
        "runPolicy": {"$ref": "#/$defs/RunPolicy"},
        "successPolicy": {"enum": ["", "AllWorkers"]},
        "tfReplicaSpecs": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": ["Chief", "Master", "PS", "Worker", "Evaluator"]},
            "additionalProperties": {"$ref": "#/$defs/ReplicaSpec"},
            "not": {
                "$comment": "the operator's webhook: not more than one Chief or Master",
                "required": ["Chief", "Master"],
            },
        },
    }
    replica = {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {
            "allOf": [
                {"$ref": f"{K8S}io.k8s.api.core.v1.PodTemplateSpec"},
                {
                    "$comment": "the operator's webhook: a container named tensorflow, with an "
                    "image",
                    "required": ["spec"],
                    "properties": {
                        "spec": {
                            "required": ["containers"],
                            "properties": {
                                "containers": {
                                    "contains": {
                                        "required": ["name", "image"],
                                        "properties": {
                                            "name": {"const": "tensorflow"},
                                            "image": {"type": "string", "minLength": 1},
                                        },
                                    }
                                }
                            },
                        }
                    },
                },
            ]
        },
    }
    for model, own in [
        ("tf_job_spec", spec),
        ("run_policy", run_policy),
        ("scheduling_policy", scheduling_policy),
        ("replica_spec", replica),
    ]:
        if sorted(names(model)) != sorted(own):
            raise ValueError(f"{model}: the SDK has {names(model)}, the schema {sorted(own)}")

    def obj(properties: dict, required: list[str] | None = None) -> dict:
        schema = {"type": "object", "additionalProperties": False}
        if required:
            schema["required"] = required
        return {**schema, "properties": properties}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:keras-transformer:crds:kubeflow.org:v1:TFJob",
        "title": "TFJob kubeflow.org/v1: a minimal structural schema (README.md)",
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "kubeflow.org/v1"},
            "kind": {"const": "TFJob"},
            "metadata": {"$ref": f"{K8S}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
            "spec": {"$ref": "#/$defs/TFJobSpec"},
            "status": {"type": "object"},
        },
        "$defs": {
            "TFJobSpec": obj(spec, ["tfReplicaSpecs"]),
            "RunPolicy": obj(run_policy),
            "SchedulingPolicy": obj(scheduling_policy),
            "ReplicaSpec": obj(replica, ["template"]),
        },
    }


def dump(value, indent: int = 0, width: int = 100) -> str:
    """JSON with each value on one line where it fits in `width` columns."""
    line = json.dumps(value, ensure_ascii=False)
    if len(line) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return line
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {dump(v, indent + 2, width)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dump(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def main(wheel_dir: str) -> None:
    (kserve,) = glob.glob(os.path.join(wheel_dir, "kserve-*.whl"))
    (training,) = glob.glob(os.path.join(wheel_dir, "kubeflow_training-*.whl"))
    for name, schema in [
        ("inferenceservice.serving.kserve.io_v1beta1.schema.json", inference_service(kserve)),
        ("tfjob.kubeflow.org_v1.schema.json", tf_job(training)),
    ]:
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(dump(schema) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
