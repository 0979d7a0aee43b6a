"""One loaded model version, run the way TF Serving's C++ server runs it.

Each version is loaded through the TF1 session loader (``tf.compat.v1.saved_model.loader.load``'s
steps with the ``serve`` tag into its own ``Graph`` + ``Session``; as TF Serving's C++ loader,
nothing is restored when ``variables/variables.index`` is missing), after ``tensorflow_text`` is
imported so tf-text's ops resolve, and its SignatureDefs run by the tensor names in the
MetaGraphDef. Requests are checked as ``predict_util.cc`` checks them (signature, inputs,
``output_filter``), with TF Serving's messages. TF Serving's XLA rule holds: a graph that needs
XLA compilation does not load unless ``--xla_cpu_compilation_enabled=true``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keras_transformer import storage
from keras_transformer.serving.errors import ServingStatusError, code_name_of, invalid
from keras_transformer.serving.ops import XLA_FLAG, xla_requirements

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
SERVE_TAG = "serve"
_XLA_LISTED = 5


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """How each version's session is made and run (TF Serving's session flags).

    Args:
        intra_op_threads: ``--tensorflow_intra_op_parallelism`` (0: TensorFlow's choice).
        inter_op_threads: ``--tensorflow_inter_op_parallelism`` (0: TensorFlow's choice).
        xla_compilation_enabled: ``--xla_cpu_compilation_enabled``.
        signature_method_name_check: ``--enable_signature_method_name_check``: a request's
            signature must have its API's method name (``tensorflow/serving/classify`` for
            Classify; one of predict, classify, regress for Predict).
    """

    intra_op_threads: int = 0
    inter_op_threads: int = 0
    xla_compilation_enabled: bool = False
    signature_method_name_check: bool = False


def is_complete_saved_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a ``saved_model.pb`` (or ``.pbtxt``): a SavedModel to load."""
    return any(
        storage.exists(os.path.join(path, name)) for name in ("saved_model.pb", "saved_model.pbtxt")
    )


def _import_tf_text() -> None:
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        logger.info("tensorflow_text is not installed; tf-text ops are not registered")


def _xla_error(needs_xla: Sequence[str]) -> str:
    listed = "; ".join(needs_xla[:_XLA_LISTED])
    more = len(needs_xla) - _XLA_LISTED
    return (
        f"XLA compilation disabled: this SavedModel needs XLA compilation ({listed}"
        + (f"; and {more} more" if more > 0 else "")
        + f"), which tensorflow_model_server disables unless started with {XLA_FLAG}"
    )


class Servable:
    """One model version: a session, its SignatureDefs, and an optional batcher.

    Args:
        name: the model name.
        version: the version number (its directory name).
        path: the version directory.
        options: session options.

    Raises:
        tf.errors.OpError: the SavedModel does not load (or needs XLA, as INTERNAL).

    Example (not run as a doctest: it needs an export on disk):

    ```python
    servable = Servable("toy", 1, "/models/toy/1")
    servable.predict("serving_default", {"sentences": np.array([b"a"], object)})
    ```
    """

    def __init__(
        self, name: str, version: int, path: str, options: SessionOptions | None = None
    ) -> None:
        import tensorflow as tf

        from keras_transformer.compat import saved_model_loader, silence_tf_deprecation

        _import_tf_text()
        options = options or SessionOptions()
        self.name, self.version, self.path = name, version, path
        if not is_complete_saved_model(path):  # session_bundle_util.cc, MaybeSavedModelDirectory
            raise tf.errors.NotFoundError(
                None,
                None,
                "Specified file path does not appear to contain a SavedModel bundle (should "
                f"have a file called `saved_model.pb`)\nSpecified file path: {path}",
            )
        config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=options.intra_op_threads,
            inter_op_parallelism_threads=options.inter_op_threads,
        )
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=config)
        self._run_options = tf.compat.v1.RunOptions
        try:
            with self._graph.as_default(), silence_tf_deprecation():
                self.meta_graph_def = _load_saved_model(
                    saved_model_loader(path), self._session, path
                )
            if not options.xla_compilation_enabled:
                needs_xla = xla_requirements(self.meta_graph_def.graph_def)
                if needs_xla:
                    raise tf.errors.InternalError(None, None, _xla_error(needs_xla))
        except Exception:
            self._session.close()
            raise
        self.signatures = dict(self.meta_graph_def.signature_def)
        self.method_name_check = options.signature_method_name_check
        self._op_error = tf.errors.OpError
        self.batcher: Any = None  # a batcher.BatchScheduler, set by the model manager
        self._in_flight = 0
        self._idle = threading.Condition()

    # -- use counting: an unload waits for the requests that hold the version ---------------

    def acquire(self) -> None:
        """Count a request in; :meth:`close` waits until it is released."""
        with self._idle:
            self._in_flight += 1

    def release(self) -> None:
        """Count a request out."""
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    # -- requests -----------------------------------------------------------------------------

    def rest_signature(self, signature_name: str) -> Any:
        """The SignatureDef for a REST request (the REST handler's message when unknown)."""
        if signature_name not in self.signatures:
            raise invalid(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.signatures[signature_name]

    def check_inputs(self, signature_name: str, aliases: Sequence[str]) -> Any:
        """The request's SignatureDef, checked against the aliases of its inputs as TF
        Serving checks them before it parses them (``RunPredict``: the signature,
        ``VerifySignature``, ``VerifyRequestInputsSize``, then ``GetInputValues``' missing
        alias, tensorflow/cc/saved_model/util.cc)."""
        signature = self.signatures.get(signature_name or DEFAULT_SIGNATURE)
        if signature is None:
            raise ServingStatusError(
                "FAILED_PRECONDITION", f'Serving signature key "{signature_name}" not found.'
            )
        if self.method_name_check:
            _verify_method_name(signature)
        sent, wanted = set(aliases), set(signature.inputs)
        if len(sent) != len(wanted):
            raise invalid(
                f"input size does not match signature: {len(sent)}!={len(wanted)} "
                f"len({{{','.join(sorted(sent))}}}) != len({{{','.join(sorted(wanted))}}}). "
                f"Sent extra: {{{','.join(sorted(sent - wanted))}}}. Missing but required: "
                f"{{{','.join(sorted(wanted - sent))}}}."
            )
        missing = sorted(wanted - sent)
        if missing:
            alias = missing[0]
            raise invalid(
                f"Signature input alias: {alias}(feed name: {signature.inputs[alias].name}) not "
                "found in request and no default value provided. Inputs expected to be in the "
                f"request {{{','.join(sorted(sent))}}}, or default input alias set: "
            )
        return signature

    def prepare(
        self,
        signature_name: str,
        arrays: Mapping[str, np.ndarray],
        output_filter: Sequence[str] = (),
    ) -> tuple[Any, list[str]]:
        """Check a request as TF Serving's ``PreProcessPrediction`` does.

        Returns:
            ``(signature, output aliases to fetch)``.
        """
        signature = self.check_inputs(signature_name, list(arrays))
        # The output filter, alias by alias (PreProcessPrediction), before the session run's
        # feed checks.
        seen: set[str] = set()
        for alias in output_filter:
            if alias not in signature.outputs:
                raise invalid(
                    f"output tensor alias not found in signature: {alias} Outputs expected to "
                    f"be in the set {{{','.join(sorted(signature.outputs))}}}."
                )
            if alias in seen:
                raise invalid(f"duplicate output tensor alias: {alias}")
            seen.add(alias)
        outputs = list(output_filter) or list(signature.outputs)
        for position, alias in enumerate(sorted(arrays)):
            _check_dtype(position, signature.inputs[alias], arrays[alias])
        return signature, outputs

    def run(
        self,
        signature_name: str,
        arrays: Mapping[str, np.ndarray],
        output_aliases: Sequence[str] | None = None,
        timeout_ms: int = 0,
    ) -> dict[str, np.ndarray]:
        """One session run of a signature on named arrays (checked with :meth:`prepare`);
        ``timeout_ms > 0`` ends it with DEADLINE_EXCEEDED after that long (``RunOptions``)."""
        signature, outputs = self.prepare(signature_name, arrays, output_aliases or ())
        feeds = {signature.inputs[alias].name: arrays[alias] for alias in arrays}
        fetches = {alias: signature.outputs[alias].name for alias in outputs}
        options = self._run_options(timeout_in_ms=timeout_ms) if timeout_ms > 0 else None
        try:
            result = self._session.run(fetches, feed_dict=feeds, options=options)
        except self._op_error as e:
            # The C++ server answers the bare status message, without Python's prefix.
            message = re.sub(r"^Graph execution error:\s*", "", e.message)
            raise ServingStatusError(code_name_of(e), message) from None
        except (ValueError, TypeError) as e:  # feed shape/dtype checks in Session.run
            raise invalid(str(e)) from None
        return {alias: np.asarray(value) for alias, value in result.items()}

    def predict(
        self,
        signature_name: str,
        arrays: Mapping[str, np.ndarray],
        output_filter: Sequence[str] = (),
        timeout_ms: int = 0,
    ) -> dict[str, np.ndarray]:
        """Run a request, through the batcher when there is one (then every request goes
        through it, as with TF Serving's ``--enable_batching``); ``timeout_ms`` (0: none) is the
        request's session-run timeout: REST's ``--rest_api_timeout_in_ms``, gRPC's client
        deadline."""
        signature_name = signature_name or DEFAULT_SIGNATURE
        self.prepare(signature_name, arrays, output_filter)
        if self.batcher is not None:
            outputs = self.batcher.submit(signature_name, arrays, timeout_ms)
            return {k: outputs[k] for k in (output_filter or outputs)}
        return self.run(signature_name, arrays, output_filter, timeout_ms)

    def close(self) -> None:
        """Wait for the requests in flight, with no time limit, then close.

        As TF Serving's ``BasicManager::ExecuteUnload``: ``UpdateServingMap`` blocks until the
        last handle to the version is released, however long that takes, and only then is
        the version unloaded (a request is never left with a closed session).
        """
        with self._idle:
            if self._in_flight:
                logger.info(
                    "model %s: version %d waits for %d request(s) in flight before unloading",
                    self.name,
                    self.version,
                    self._in_flight,
                )
            self._idle.wait_for(lambda: self._in_flight == 0)
        if self.batcher is not None:
            self.batcher.stop()
            # The batcher holds this servable's ``run``: drop it so the version is freed by
            # reference counting once the manager lets go of it.
            self.batcher = None
        self._session.close()


def _load_saved_model(loader: Any, session: Any, path: str) -> Any:
    """``tf.compat.v1.saved_model.loader.load``, except that the variables are restored only
    when ``variables/variables.index`` exists: as TF Serving's C++ loader (``loader.cc``,
    ``RunRestore``), a version without it loads with nothing restored, and AVAILABLE."""
    saver, _ = loader.load_graph(session.graph, [SERVE_TAG])
    index = os.path.join(path, "variables", "variables.index")
    if storage.exists(index):
        loader.restore_variables(session, saver)
    else:
        logger.info(
            "The specified SavedModel has no variables; no checkpoints were restored. "
            "File does not exist: %s",
            index,
        )
    loader.run_init_ops(session, [SERVE_TAG])
    return loader.get_meta_graph_def_from_tags([SERVE_TAG])


def _verify_method_name(signature: Any) -> None:
    """``predict_util.cc``'s ``VerifySignature`` (``--enable_signature_method_name_check``)."""
    import tensorflow as tf

    methods = (
        tf.saved_model.PREDICT_METHOD_NAME,
        tf.saved_model.CLASSIFY_METHOD_NAME,
        tf.saved_model.REGRESS_METHOD_NAME,
    )
    if signature.method_name not in methods:
        raise ServingStatusError(
            "INTERNAL",
            f"Expected prediction signature method_name to be one of {{{', '.join(methods)}}}. "
            f"Was: {signature.method_name}",
        )


def _check_dtype(position: int, info: Any, array: np.ndarray) -> None:
    """TF's feed check, in its words (``FunctionCallFrame::SetArgs``: "Expects arg[0] to be
    string but float is provided", dtypes as ``DataTypeString`` writes them), made before the
    run: ``Session.run`` would otherwise convert a feed of another type silently."""
    import tensorflow as tf

    from keras_transformer.serving.codec import data_type_string

    expected = tf.dtypes.as_dtype(info.dtype)
    if array.dtype == object or array.dtype.kind in "SU":
        got = tf.string
    else:
        try:
            got = tf.dtypes.as_dtype(array.dtype)
        except TypeError:
            got = None
    if got != expected:
        got_name = data_type_string(got.as_datatype_enum) if got is not None else array.dtype
        raise invalid(
            f"Expects arg[{position}] to be {data_type_string(expected.as_datatype_enum)} but "
            f"{got_name} is provided"
        )
