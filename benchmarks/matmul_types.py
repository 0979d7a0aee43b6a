"""TensorFlow's CPU matmul by weight type, without XLA (the kernels an export's graph runs):
float32, bfloat16, int8 x int8 -> int32 (`tf.matmul(..., output_type=tf.int32)`, what
Keras's int8 layers call) and oneDNN's `QuantizedMatMulWithBias` (quint8 x qint8), each as
`tf.function`, at the shapes of a decoding step (rows: batch x beam tokens) and of a
batch (512 rows), d_model 512 and d_ff 2048. Prints ms per call (median of 5 runs of 50
calls) and each type's speed relative to float32.

    python benchmarks/matmul_types.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _machine  # noqa: F401, E402  (first: sets the package's oneDNN default before TF)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _machine import cpu_model  # noqa: E402

SHAPES = ((4, 512, 2048), (128, 512, 2048), (128, 2048, 512), (512, 512, 2048), (128, 512, 8000))


def _ms(fn, calls: int = 50, runs: int = 5) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(times)


def _functions(m: int, k: int, n: int) -> dict[str, tf.types.experimental.PolymorphicFunction]:
    rng = np.random.default_rng(0)
    a = tf.constant(rng.standard_normal((m, k)), tf.float32)
    b = tf.constant(rng.standard_normal((k, n)), tf.float32)
    a16, b16 = tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16)
    a8, b8 = tf.cast(a * 30, tf.int8), tf.cast(b * 30, tf.int8)
    qa = tf.quantization.quantize(a, -4.0, 4.0, tf.quint8, mode="MIN_FIRST")
    qb = tf.quantization.quantize(b, -4.0, 4.0, tf.qint8, mode="SCALED").output
    bias = tf.zeros([n])

    def onednn():
        return tf.raw_ops.QuantizedMatMulWithBias(
            a=qa.output,
            b=qb,
            bias=bias,
            min_a=qa.output_min,
            max_a=qa.output_max,
            min_b=-4.0,
            max_b=4.0,
            Toutput=tf.qint32,
            input_quant_mode="MIN_FIRST",
        )[0]

    return {
        "float32": tf.function(lambda: tf.matmul(a, b)),
        "bfloat16": tf.function(lambda: tf.matmul(a16, b16)),
        "int8 (BatchMatMulV3)": tf.function(lambda: tf.matmul(a8, b8, output_type=tf.int32)),
        "int8 (oneDNN quantized)": tf.function(onednn),
    }


def main() -> None:
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; TF {tf.__version__}\n")
    names = list(_functions(*SHAPES[0]))
    print("| M x K x N | " + " | ".join(f"{n} ms" for n in names) + " |")
    print("| --- |" + " --- |" * len(names))
    for shape in SHAPES:
        times = {name: _ms(fn) for name, fn in _functions(*shape).items()}
        cells = [f"{t:.3f} ({times['float32'] / t:.2f}x)" for t in times.values()]
        print(f"| {' x '.join(map(str, shape))} | " + " | ".join(cells) + " |")
    print("\n(x: speed relative to float32; > 1 is faster)")


if __name__ == "__main__":
    main()
