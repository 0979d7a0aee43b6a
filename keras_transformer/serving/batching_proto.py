"""``tensorflow.serving.BatchingParameters``, the schema of ``--batching_parameters_file``.

``tensorflow-serving-api`` ships the API and config protos (``ModelServerConfig``, ...) but not
``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``, where
``BatchingParameters`` lives, and no other maintained package does. So the message is declared
here, field for field from that proto (names, numbers, types and wrappers, in its order), and
built with protobuf's own descriptor pool; files are then parsed by ``google.protobuf.text_format``
exactly as TF Serving's ``TextFormat::ParseFromString`` parses them (``max_batch_size { value: 8
}``, ``enable_large_batch_splitting { value: true }``; a bare ``max_batch_size: 8`` is a type
error there and here, while ``allowed_batch_sizes`` and ``pad_variable_length_inputs`` are plain
fields: ``allowed_batch_sizes: [8, 16]``, ``pad_variable_length_inputs: true``).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

_PACKAGE = "tensorflow.serving"
_FILE = "keras_transformer/serving/batching_parameters.proto"

_F = descriptor_pb2.FieldDescriptorProto
# (name, number, type, label, message type), in session_bundle_config.proto's order.
_INT64 = ".google.protobuf.Int64Value"
_FIELDS = (
    ("max_batch_size", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, _INT64),
    ("batch_timeout_micros", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, _INT64),
    ("max_enqueued_batches", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, _INT64),
    ("num_batch_threads", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, _INT64),
    ("thread_pool_name", 5, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.StringValue"),
    (
        "enable_large_batch_splitting",
        8,
        _F.TYPE_MESSAGE,
        _F.LABEL_OPTIONAL,
        ".google.protobuf.BoolValue",
    ),
    ("max_execution_batch_size", 9, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, _INT64),
    ("allowed_batch_sizes", 6, _F.TYPE_INT64, _F.LABEL_REPEATED, None),
    ("pad_variable_length_inputs", 7, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, None),
)


def _build() -> type:
    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    file = descriptor_pb2.FileDescriptorProto(
        name=_FILE,
        package=_PACKAGE,
        syntax="proto3",
        dependency=[wrappers.name],
    )
    message = file.message_type.add(name="BatchingParameters")
    for name, number, type_, label, type_name in _FIELDS:
        field = message.field.add(name=name, number=number, type=type_, label=label)
        if type_name:
            field.type_name = type_name
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{_PACKAGE}.BatchingParameters")
    )


BatchingParameters = _build()
"""The message class: ``BatchingParameters()``, parsed with ``text_format.Parse``."""
