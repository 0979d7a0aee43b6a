"""``tensorflow.serving.MonitoringConfig``, the schema of ``--monitoring_config_file``.

``tensorflow-serving-api`` 2.21 ships ``model_server_config_pb2`` and the other config protos
but not ``tensorflow_serving/config/monitoring_config.proto`` (``from
tensorflow_serving.config import monitoring_config_pb2`` is an ImportError), so its two
messages are declared here, field for field, and built with protobuf's own descriptor pool, as
``batching_proto.py`` does for ``BatchingParameters``. Files are then parsed by
``google.protobuf.text_format`` as TF Serving's ``ParseProtoTextFile`` parses them::

    prometheus_config {
      enable: true
      path: "/monitoring/prometheus/metrics"
    }
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# PrometheusExporter::kPrometheusPath (util/prometheus_exporter.cc): served when
# prometheus_config.enable is true and path is empty.
DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"

_PACKAGE = "tensorflow.serving"
_FILE = "keras_transformer/serving/monitoring_config.proto"

_F = descriptor_pb2.FieldDescriptorProto
# message -> (name, number, type, message type) of its fields, from monitoring_config.proto.
_MESSAGES = {
    "PrometheusConfig": (
        ("enable", 1, _F.TYPE_BOOL, None),
        ("path", 2, _F.TYPE_STRING, None),
    ),
    "MonitoringConfig": (
        ("prometheus_config", 1, _F.TYPE_MESSAGE, f".{_PACKAGE}.PrometheusConfig"),
    ),
}


def _build() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name=_FILE, package=_PACKAGE, syntax="proto3")
    for message_name, fields in _MESSAGES.items():
        message = file.message_type.add(name=message_name)
        for name, number, type_, type_name in fields:
            field = message.field.add(name=name, number=number, type=type_, label=_F.LABEL_OPTIONAL)
            if type_name:
                field.type_name = type_name
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _MESSAGES
    }


_CLASSES = _build()
MonitoringConfig = _CLASSES["MonitoringConfig"]
"""The message class: ``MonitoringConfig()``, parsed with ``text_format.Parse``."""
PrometheusConfig = _CLASSES["PrometheusConfig"]
"""``MonitoringConfig.prometheus_config``'s class."""
