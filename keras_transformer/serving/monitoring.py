"""TF Serving's request metrics, kept per server and exposed in the Prometheus text format.

The metrics are TF Serving's (``servables/tensorflow/util.cc``), with its names, labels,
units (microseconds) and buckets, and recorded where TF Serving records them:

* ``:tensorflow:serving:request_count{model_name, status}``: every REST request under
  ``/v1/`` (``http_server.cc``) and every gRPC ``Predict`` (``prediction_service_impl.cc``;
  TF Serving does not count ``GetModelMetadata`` and ``GetModelStatus`` there), with the
  canonical status code name (``OK``, ``INVALID_ARGUMENT``, ...);
* ``:tensorflow:serving:request_latency{model_name, API, entrypoint}``: the same requests,
  successful ones only; ``API`` is ``Predict`` over gRPC and the path's verb (``predict``)
  over REST, where TF Serving leaves it empty for GET requests; ``entrypoint`` ``GRPC`` or
  ``REST``;
* ``:tensorflow:serving:runtime_latency{model_name, API, runtime}``: the session run of a
  successful predict (``predict_util.cc``), runtime ``TF1``.

The stand-in adds one metric of its own, ``:keras_transformer:serving:request_latency{
model_name, API, entrypoint, status}``: every predict, metadata and status request of both
front ends, failed ones included, ``API`` named by the gRPC method for both (``Predict``,
``GetModelMetadata``, ``GetModelStatus``); its ``_count`` is the count by status.

Names follow TF Serving's exporter (``util/prometheus_exporter.cc``): each character of the TF
metric name outside ``[a-zA-Z0-9_]`` becomes ``:``. The exporter types TF Serving's counters
``counter`` without the ``_total`` suffix, which ``prometheus_client`` cannot write (it adds
``_total`` to a counter's samples), so they are exposed ``untyped`` under TF Serving's exact
names. Histogram buckets are TF's ``Buckets::Exponential(10, 1.8, 33)``: a value lands in the
first bucket whose limit exceeds it, as in TF's ``Histogram::Add``.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from keras_transformer.serving.errors import ServingStatusError

# TF metric names (util.cc) and the stand-in's own, in the same style.
REQUEST_COUNT = "/tensorflow/serving/request_count"
REQUEST_LATENCY = "/tensorflow/serving/request_latency"
RUNTIME_LATENCY = "/tensorflow/serving/runtime_latency"
STANDIN_REQUEST_LATENCY = "/keras_transformer/serving/request_latency"

REST, GRPC = "REST", "GRPC"  # TF Serving's entrypoint label values
TF1_RUNTIME = "TF1"
# The Content-Type of the page: the text format TF Serving's exporter writes.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

_DOCS = {
    REQUEST_COUNT: "The total number of requests.",
    REQUEST_LATENCY: "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
    RUNTIME_LATENCY: "Distribution of wall time (in microseconds) for Tensorflow runtime.",
    STANDIN_REQUEST_LATENCY: (
        "Distribution of wall time (in microseconds) of every request of the development "
        "stand-in, by status (not a TF Serving metric)."
    ),
}
_LABELS = {
    REQUEST_COUNT: ("model_name", "status"),
    REQUEST_LATENCY: ("model_name", "API", "entrypoint"),
    RUNTIME_LATENCY: ("model_name", "API", "runtime"),
    STANDIN_REQUEST_LATENCY: ("model_name", "API", "entrypoint", "status"),
}


def prometheus_name(tf_name: str) -> str:
    """The Prometheus name of a TF metric, as TF Serving's ``GetPrometheusMetricName``.

    Example:
        >>> prometheus_name("/tensorflow/serving/request_count")
        ':tensorflow:serving:request_count'
    """
    name = re.sub(r"[^a-zA-Z0-9_]", ":", tf_name)
    return f"_{name}" if name[:1].isdigit() else name


def exponential_buckets(scale: float, growth_factor: float, count: int) -> tuple[float, ...]:
    """TF's ``monitoring::Buckets::Exponential``: ``count`` limits from ``scale`` up.

    Example:
        >>> exponential_buckets(10, 1.8, 3)
        (10, 18.0, 32.4)
    """
    if scale <= 0 or growth_factor <= 1 or count < 1:
        raise ValueError(
            f"Need scale > 0, growth_factor > 1 and count >= 1, got {scale}, {growth_factor}, "
            f"{count}"
        )
    limits, bound = [], scale
    for _ in range(count):
        limits.append(bound)
        bound *= growth_factor
    return tuple(limits)


# util.cc: "Scale of 10, power of 1.8 with bucket count 33 (~20 minutes)", microseconds.
LATENCY_BUCKETS = exponential_buckets(10, 1.8, 33)


class _Histogram:
    """One label set's buckets (TF's ``Histogram``: the last one ends at +Inf)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_right(LATENCY_BUCKETS, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, int]]:
        limits = [f"{limit:.6g}" for limit in LATENCY_BUCKETS] + ["+Inf"]
        running, out = 0, []
        for limit, count in zip(limits, self.counts):
            running += count
            out.append((limit, running))
        return out


class ServingMetrics:
    """One server's metrics, in their own ``prometheus_client`` registry.

    Each server has its own (several can run in one process). Thread-safe.

    Example:
        >>> metrics = ServingMetrics()
        >>> metrics.record_request("toy", "Predict", GRPC, "OK", 1200, tf_serving_api="Predict")
        >>> b':tensorflow:serving:request_count{model_name="toy",status="OK"} 1.0' in metrics.page()
        True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, ...], int] = {}
        self._histograms: dict[str, dict[tuple[str, ...], _Histogram]] = {
            REQUEST_LATENCY: {},
            RUNTIME_LATENCY: {},
            STANDIN_REQUEST_LATENCY: {},
        }
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def _observe(self, metric: str, labels: tuple[str, ...], usec: float) -> None:
        cells = self._histograms[metric]
        cell = cells.get(labels)
        if cell is None:
            cell = cells[labels] = _Histogram()
        cell.add(usec)

    def record_request(
        self,
        model_name: str,
        api: str,
        entrypoint: str,
        status: str,
        latency_usec: float,
        tf_serving_api: str | None,
    ) -> None:
        """Count one answered request.

        Args:
            model_name: the request's model name ("" when the request named none).
            api: the stand-in's API name (the gRPC method: ``Predict``, ...).
            entrypoint: ``REST`` or ``GRPC``.
            status: the canonical status code name of the answer.
            latency_usec: wall time from receipt to answer, microseconds.
            tf_serving_api: the ``API`` label TF Serving gives this request, or None where
                TF Serving does not record it (gRPC metadata and status).
        """
        with self._lock:
            self._observe(
                STANDIN_REQUEST_LATENCY, (model_name, api, entrypoint, status), latency_usec
            )
            if tf_serving_api is None:
                return
            key = (model_name, status)
            self._counts[key] = self._counts.get(key, 0) + 1
            if status == "OK":
                self._observe(
                    REQUEST_LATENCY, (model_name, tf_serving_api, entrypoint), latency_usec
                )

    def record_runtime(self, model_name: str, api: str, latency_usec: float) -> None:
        """Time one successful session run (``RecordRuntimeLatency``)."""
        with self._lock:
            self._observe(RUNTIME_LATENCY, (model_name, api, TF1_RUNTIME), latency_usec)

    def collect(self) -> Iterator[Metric]:
        """The metric families (``prometheus_client``'s collector interface)."""
        with self._lock:
            counts = dict(self._counts)
            histograms = {
                metric: {labels: (h.buckets(), h.sum) for labels, h in cells.items()}
                for metric, cells in self._histograms.items()
            }
        count_family = Metric(prometheus_name(REQUEST_COUNT), _DOCS[REQUEST_COUNT], "unknown")
        for labels, value in sorted(counts.items()):
            count_family.add_sample(
                count_family.name, dict(zip(_LABELS[REQUEST_COUNT], labels)), value
            )
        yield count_family
        for metric, cells in histograms.items():
            family = HistogramMetricFamily(
                prometheus_name(metric), _DOCS[metric], labels=_LABELS[metric]
            )
            for labels, (buckets, total) in sorted(cells.items()):
                family.add_metric(list(labels), buckets, total)
            yield family

    def page(self) -> bytes:
        """The Prometheus text page of every metric."""
        return generate_latest(self.registry)


def elapsed_usec(start_ns: int) -> int:
    """Whole microseconds since ``time.monotonic_ns()`` was ``start_ns`` (TF's ``NowMicros``
    difference)."""
    return (time.monotonic_ns() - start_ns) // 1000


def counted_rpc(api: str, tf_serving_api: str | None) -> Callable:
    """Decorate a gRPC servicer method (of an object with ``core.metrics``) to record it.

    The status is ``OK`` when the method returns, else the code the method aborted with
    (``context.code()``), or ``UNKNOWN`` (grpcio's answer to an uncaught exception).

    Args:
        api: the stand-in's API name (the method's name).
        tf_serving_api: TF Serving's ``API`` label, or None where TF Serving does not record
            the method.
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def call(self: Any, request: Any, context: Any) -> Any:
            start, status = time.monotonic_ns(), "UNKNOWN"
            try:
                response = method(self, request, context)
                status = "OK"
                return response
            except ServingStatusError as e:
                status = e.code
                raise
            except BaseException:
                code = context.code()
                status = code.name if code is not None else "UNKNOWN"
                raise
            finally:
                name = request.model_spec.name if request.HasField("model_spec") else ""
                self.core.metrics.record_request(
                    name, api, GRPC, status, elapsed_usec(start), tf_serving_api
                )

        return call

    return decorate
