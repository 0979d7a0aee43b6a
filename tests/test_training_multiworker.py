"""`fit` under `MultiWorkerMirroredStrategy`: two worker processes on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 300

WORKER = textwrap.dedent(
    """
    import json, os, sys
    out = sys.argv[1]
    import numpy as np
    import tensorflow as tf
    from keras_transformer.model_config import TransformerConfig
    from keras_transformer.training import build_transformer, compile_model, is_chief, make_strategy

    strategy = make_strategy("multi_worker")
    rng = np.random.default_rng(0)  # the same data on both workers; tf.data shards it
    source = rng.integers(4, 16, (2048, 8)).astype("int32")
    target_in = np.concatenate([np.full((2048, 1), 2, "int32"), source], 1)
    target_out = np.concatenate([source, np.full((2048, 1), 3, "int32")], 1)
    data = tf.data.Dataset.from_tensor_slices(((source, target_in), target_out))
    train = data.batch(32, drop_remainder=True).repeat()
    validation = data.take(128).batch(32)
    config = TransformerConfig(source_vocab_size=16, target_vocab_size=16, num_encoder_layers=1,
                               num_decoder_layers=1, d_model=32, num_heads=4, d_ff=64, dropout=0.1,
                               max_length=16)
    with strategy.scope():
        model = build_transformer(config)
        compile_model(model, warmup_steps=20, jit_compile=bool(int(os.environ["JIT"])))
    history = model.fit(train, epochs=3, steps_per_epoch=12, validation_data=validation,
                        verbose=2)
    weights = [w.numpy() for w in model.weights]
    np.savez(os.path.join(out, "weights.npz"), *weights)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"history": history.history, "chief": is_chief(strategy),
                   "replicas": strategy.num_replicas_in_sync,
                   "iterations": int(model.optimizer.iterations.numpy()),
                   "per_replica_jit": model.per_replica_jit_compile}, f)
    """
)


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _run_workers(tmp_path, jit):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes, outs = [], []
    try:
        for index in range(2):
            out = tmp_path / f"worker{index}"
            out.mkdir()
            env = dict(os.environ)
            env.update(
                TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": index}}
                ),
                PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
                TF_CPP_MIN_LOG_LEVEL="2",
                CUDA_VISIBLE_DEVICES="",
                JIT=str(int(jit)),
            )
            log = open(out / "log.txt", "w")  # noqa: SIM115
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(script), str(out)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(tmp_path),
                )
            )
            outs.append(out)
        deadline = time.monotonic() + TIMEOUT_S
        for process in processes:
            process.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for process, out in zip(processes, outs):
        assert process.returncode == 0, (out / "log.txt").read_text()[-4000:]
    results = [json.loads((out / "result.json").read_text()) for out in outs]
    weights = [np.load(out / "weights.npz") for out in outs]
    return results, weights


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True], ids=["no_xla", "per_replica_xla"])
def test_fit_under_multi_worker_mirrored_strategy(tmp_path, jit):
    results, weights = _run_workers(tmp_path, jit)
    assert [r["chief"] for r in results] == [True, False]
    for result in results:
        assert result["replicas"] == 2
        assert result["iterations"] == 36
        assert result["per_replica_jit"] is jit
        losses = result["history"]["loss"]
        assert losses[0] > losses[1] > losses[2], losses
        assert np.isfinite(result["history"]["val_loss"]).all()
    # Both workers hold the same weights.
    assert sorted(weights[0].files) == sorted(weights[1].files)
    for name in weights[0].files:
        np.testing.assert_array_equal(weights[0][name], weights[1][name])
    assert results[0]["history"]["loss"] == pytest.approx(results[1]["history"]["loss"])
