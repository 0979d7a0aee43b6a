"""``tensorflow.serving.BatchingParameters``, the schema of ``--batching_parameters_file``.

``tensorflow-serving-api`` ships the API and config protos (``ModelServerConfig``, ...) but not
``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``, where
``BatchingParameters`` lives, and no other maintained package does. So the message is declared
here, field for field (names, types, wrappers) from that proto, and built with protobuf's own
descriptor pool; files are then parsed by ``google.protobuf.text_format`` exactly as TF
Serving's ``TextFormat::ParseFromString`` parses them (``max_batch_size { value: 8 }``; a bare
``max_batch_size: 8`` is a type error there and here).

Fields 1-7 are those of the published proto. ``enable_large_batch_splitting`` and
``max_execution_batch_size`` were added to TF Serving later; they are declared so that a file
using them gets "not supported by the stand-in" rather than "no such field". Text format
matches fields by name, so their field numbers here (8, 9) play no part in parsing.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

_PACKAGE = "tensorflow.serving"
_FILE = "keras_transformer/serving/batching_parameters.proto"

_F = descriptor_pb2.FieldDescriptorProto
# (name, number, type, label, message type)
_FIELDS = (
    ("max_batch_size", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".google.protobuf.StringValue"),
    ("allowed_batch_sizes", 6, _F.TYPE_INT64, _F.LABEL_REPEATED, None),
    ("pad_variable_length_inputs", 7, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, None),
    ("enable_large_batch_splitting", 8, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, None),
    (
        "max_execution_batch_size",
        9,
        _F.TYPE_MESSAGE,
        _F.LABEL_OPTIONAL,
        ".google.protobuf.Int64Value",
    ),
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
