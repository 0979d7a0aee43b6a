"""TF Serving's configuration files, read into TF Serving's own messages.

``--model_config_file`` is parsed with ``google.protobuf.text_format`` into
``tensorflow.serving.ModelServerConfig`` from ``tensorflow-serving-api`` and
``--monitoring_config_file`` into ``tensorflow.serving.MonitoringConfig`` (`monitoring_proto.py`)
(and ``--batching_parameters_file`` by the same :func:`parse_text_file`, in `batching_config.py`).
A misspelt field, a value of the wrong type, or an option the stand-in does not run is a
:class:`ConfigError` naming the file, the line and the field. On top of the
schema, the checks TF Serving's ``ServerCore`` makes at startup (``server_core.cc``) apply:
unique model names, an absolute ``base_path`` or URI, a ``tensorflow`` platform, and version labels
only with ``--allow_version_labels_for_unavailable_models`` (TF Serving assigns labels before
any version has loaded, so without that flag a config with labels fails to start).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from google.protobuf import text_format

from keras_transformer import storage
from keras_transformer.serving.monitoring_proto import DEFAULT_PROMETHEUS_PATH, MonitoringConfig

TENSORFLOW_PLATFORM = "tensorflow"
LABELS_FLAG = "--allow_version_labels_for_unavailable_models"

_PARSE_ERROR_PREFIX = re.compile(r"^\d+:\d+ : ")
# io::ParseURI (tensorflow/core/platform/path.cc): a scheme is [a-zA-Z][0-9a-zA-Z.]* then ://.
_URI_SCHEME = re.compile(r"^[A-Za-z][0-9A-Za-z.]*://")
_FIELD_BEFORE = re.compile(r"([A-Za-z_]\w*)\s*:?\s*[\[{<]?\s*[^:{<\[]*$")


class ConfigError(ValueError):
    """A configuration file TF Serving would reject, or that the stand-in cannot run."""


def _strip_comment(line: str) -> str:
    """The line without a trailing ``#`` comment (``#`` inside quotes is kept)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote and line[i - 1] != "\\":
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def field_line(text: str, field: str, after: int = 1) -> int | None:
    """The first line (1-based, at or after ``after``) that sets ``field``, if any."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(field)}\s*[:{{<\[]")
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= after and pattern.search(_strip_comment(line)):
            return number
    return None


def field_error(path: str, line: int | None, field: str, message: str) -> ConfigError:
    """``path:line: field F: message``, the form of every error about a field's value."""
    where = f"{path}:{line}" if line else path
    return ConfigError(f"{where}: field {field}: {message}")


def parse_text_file(path: str | os.PathLike[str], message: Any) -> tuple[Any, str]:
    """Parse the text-format file at ``path`` into ``message``; returns (message, text).

    Raises:
        ConfigError: ``path:line:column: field F: ...`` for a field the schema does not have,
            a value of the wrong type or malformed syntax (``text_format``'s own message).
    """
    path = os.fspath(path)
    try:
        text = storage.read_text(path)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the file: {e}") from None
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn()
        detail = _PARSE_ERROR_PREFIX.sub("", str(e))
        named = re.search(r'has no field named "(\w+)"', detail)
        if named:
            field = named.group(1)
        else:  # the field whose value failed: the last name before the column
            lines = text.splitlines()
            head = lines[line - 1][: max(column - 1, 0)] if 0 < line <= len(lines) else ""
            found = _FIELD_BEFORE.search(_strip_comment(head))
            field = found.group(1) if found else "?"
        raise ConfigError(
            f"{path}:{line}:{column}: field {field}: {detail} (schema: "
            f"{message.DESCRIPTOR.full_name})"
        ) from None
    return message, text


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One model of the server, from ``ModelServerConfig.model_config_list.config``.

    ``version_policy`` is ``("latest", n)``, ``("all", None)`` or ``("specific", versions)``.
    """

    name: str
    base_path: str
    version_policy: tuple[str, Any] = ("latest", 1)
    version_labels: dict[str, int] = dataclasses.field(default_factory=dict)


def uri_is_relative_path(uri: str) -> bool:
    """Whether a base path is relative, as TF Serving's ``UriIsRelativePath``
    (``server_core.cc``): no ``scheme://`` (``gs://``, ``s3://``, ``ram://``) and not absolute.

    Example:
    >>> uri_is_relative_path("models/toy"), uri_is_relative_path("gs://bucket/toy")
    (True, False)
    """
    return not _URI_SCHEME.match(uri) and not os.path.isabs(uri)


def single_model_config(name: str, base_path: str | os.PathLike[str]) -> ModelConfig:
    """What ``--model_name``/``--model_base_path`` configure (TF Serving's
    ``BuildSingleModelConfig``): the latest version of one TensorFlow model. A URI
    (``gs://...``) is kept as given; a relative local path is made absolute."""
    path = os.fspath(base_path)
    return ModelConfig(name, path if _URI_SCHEME.match(path) else os.path.abspath(path))


def _version_policy(entry: Any) -> tuple[str, Any]:
    policy = entry.model_version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return ("all", None)
    if choice == "specific":
        return ("specific", frozenset(int(v) for v in policy.specific.versions))
    if choice == "latest":
        return ("latest", max(1, int(policy.latest.num_versions)))
    return ("latest", 1)


def label_unavailable_message(model: str, version: int) -> str:
    """TF Serving's refusal of a label whose version is not AVAILABLE
    (``ServerCore::UpdateModelVersionLabelMap``)."""
    return (
        f"Request to assign label to version {version} of model {model}, which is not "
        "currently available for inference"
    )


def read_model_server_config(
    path: str | os.PathLike[str], refuse_labels: bool = False
) -> list[ModelConfig]:
    """Read a ``--model_config_file`` and check its models as TF Serving's ``ServerCore`` does
    (``ValidateModelConfigList``). Labels are checked against the versions loaded when the
    config is applied (``ServerCore.reload_config``); ``refuse_labels`` refuses any, as TF
    Serving does for its first config without ``--allow_version_labels_for_unavailable_models``.

    Raises:
        ConfigError: ``path:line: field F: ...`` naming what TF Serving would refuse.
    """
    from tensorflow_serving.config import model_server_config_pb2

    config, text = parse_text_file(path, model_server_config_pb2.ModelServerConfig())
    return models_of(config, os.fspath(path), text, refuse_labels)


def models_of(
    config: Any, path: str, text: str = "", refuse_labels: bool = False
) -> list[ModelConfig]:
    """The models of a ``ModelServerConfig`` message, checked (see
    :func:`read_model_server_config`); ``path`` and ``text`` (the message's text, when it came
    from a file) locate an error."""
    choice = config.WhichOneof("config")
    if choice != "model_config_list":
        field = choice or "model_config_list"
        raise field_error(
            path,
            field_line(text, field),
            field,
            "the server needs a model_config_list (TF Serving does not support "
            "custom_model_config)",
        )
    models: list[ModelConfig] = []
    start = 0  # the line of the current entry's name, found after the previous entry's
    lines = text.splitlines()
    for entry in config.model_config_list.config:
        quoted = re.compile(rf"""(?<![\w.])name\s*:\s*["']{re.escape(entry.name)}["']""")
        start = next(
            (
                n
                for n in range(start + 1, len(lines) + 1)
                if quoted.search(_strip_comment(lines[n - 1]))
            ),
            start + 1,
        )
        models.append(_check_model(path, text, entry, start, models))
        if entry.version_labels and refuse_labels:
            label, version = sorted(entry.version_labels.items())[0]
            raise field_error(
                path,
                field_line(text, "version_labels", start),
                "version_labels",
                f"FAILED_PRECONDITION: {label_unavailable_message(entry.name, version)} "
                f"(label {label!r}; TF Serving assigns labels before any version has loaded: "
                f"start with {LABELS_FLAG}=true)",
            )
    # An empty list is a config too: TF Serving then serves no model (a reload to it unloads
    # every model: FileSystemStoragePathSource::UpdateConfig un-aspires the ones it drops).
    return models


def load_model_server_config(
    path: str | os.PathLike[str], allow_version_labels_for_unavailable_models: bool = False
) -> list[ModelConfig]:
    """Read a ``--model_config_file`` for startup, as TF Serving reads its first config.

    Args:
        path: a ``ModelServerConfig`` in protobuf text format.
        allow_version_labels_for_unavailable_models: TF Serving's flag. TF Serving assigns
            labels before any version has loaded, so without it a config with
            ``version_labels`` is refused (FAILED_PRECONDITION "Request to assign label to
            version N of model M, which is not currently available for inference").

    Returns:
        The models, in file order.

    Example (not run as a doctest: it reads a file relative to the project root):

    ```python
    load_model_server_config("serving/models.config", True)[0].name  # 'transformer'
    ```
    """
    return read_model_server_config(path, not allow_version_labels_for_unavailable_models)


def _check_model(
    path: str, text: str, entry: Any, start: int, previous: list[ModelConfig]
) -> ModelConfig:
    def fail(field: str, message: str) -> ConfigError:
        return field_error(path, field_line(text, field, start) or start, field, message)

    if not entry.name:
        raise fail("name", "every model needs a name")
    if any(m.name == entry.name for m in previous):
        raise fail("name", f"Illegal to list model {entry.name} multiple times in config list")
    if entry.model_type and entry.model_platform:
        raise fail(
            "model_type",
            "Illegal setting both ModelServerConfig::model_type (deprecated) and "
            "ModelServerConfig::model_platform.",
        )
    platform = entry.model_platform
    if entry.model_type:
        platform = TENSORFLOW_PLATFORM if entry.model_type == 1 else str(entry.model_type)
    if not platform:
        raise fail(
            "model_platform",
            "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
            f'ModelServerConfig::model_platform (set model_platform: "{TENSORFLOW_PLATFORM}")',
        )
    if platform != TENSORFLOW_PLATFORM:
        raise fail("model_platform", f"Model {entry.name} requests unsupported platform {platform}")
    if uri_is_relative_path(entry.base_path):
        raise fail(
            "base_path",
            f"Expected model {entry.name} to have an absolute path or URI; got "
            f"base_path()={entry.base_path}",
        )
    if entry.HasField("logging_config"):
        raise fail("logging_config", "request logging is not supported by the stand-in")
    labels = {str(k): int(v) for k, v in entry.version_labels.items()}
    return ModelConfig(entry.name, entry.base_path, _version_policy(entry), labels)


def load_monitoring_config(path: str | os.PathLike[str]) -> str | None:
    """Read a ``--monitoring_config_file``: the path the Prometheus metrics are served at.

    As TF Serving's ``CreateAndStartHttpServer`` (``model_servers/http_server.cc``): with
    ``prometheus_config { enable: true }`` the page is served at ``path``, or at
    ``/monitoring/prometheus/metrics`` when ``path`` is empty; without ``enable: true``
    (an empty file included) nothing is served.

    Args:
        path: a ``MonitoringConfig`` in protobuf text format.

    Returns:
        The metrics path, or None when Prometheus is not enabled.

    Raises:
        ConfigError: a schema error (``path:line:column: field F: ...``), or a metrics path
            that does not start with ``/`` (no request path could ever match it).

    Example (not run as a doctest: it reads a file relative to the project root):

    ```python
    load_monitoring_config("serving/monitoring.config")  # '/monitoring/prometheus/metrics'
    ```
    """
    config, text = parse_text_file(path, MonitoringConfig())
    prometheus = config.prometheus_config
    if not prometheus.enable:
        return None
    metrics_path = prometheus.path or DEFAULT_PROMETHEUS_PATH
    if not metrics_path.startswith("/"):
        raise field_error(
            os.fspath(path),
            field_line(text, "path"),
            "path",
            f"the metrics path must start with '/', got {metrics_path!r} (TF Serving would "
            "register it and never match a request)",
        )
    return metrics_path
