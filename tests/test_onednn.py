"""`keras_transformer.onednn`: importing the package before TensorFlow turns TensorFlow's
oneDNN kernels on (x86-64 Linux), a value the user set is kept, and a process that imported
TensorFlow first keeps TensorFlow's choice."""

import os
import platform
import subprocess
import sys

import pytest

from keras_transformer.onednn import ONEDNN_ENV, use_onednn_by_default

X86_64_LINUX = sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")

# What TensorFlow decided (it reads the variable while it is imported).
PROBE = """
import os
import keras_transformer
from tensorflow.python.util import _pywrap_util_port
print(os.environ.get("{env}"), _pywrap_util_port.IsMklEnabled())
"""


def _probe(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != ONEDNN_ENV}
    if value is not None:
        env[ONEDNN_ENV] = value
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(env=ONEDNN_ENV)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.skipif(not X86_64_LINUX, reason="the default applies to x86-64 Linux only")
@pytest.mark.parametrize(("value", "expected"), [(None, "1 True"), ("0", "0 False")])
def test_the_package_imported_first_turns_onednn_on_unless_told_not_to(value, expected):
    assert _probe(value) == expected


def test_tensorflow_imported_first_keeps_its_choice(monkeypatch):
    import tensorflow  # noqa: F401

    monkeypatch.delenv(ONEDNN_ENV, raising=False)
    assert use_onednn_by_default() is False
    assert ONEDNN_ENV not in os.environ


def test_a_value_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(ONEDNN_ENV, "0")
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert use_onednn_by_default() is False
    assert os.environ[ONEDNN_ENV] == "0"


@pytest.mark.skipif(not X86_64_LINUX, reason="the default applies to x86-64 Linux only")
def test_unset_before_tensorflow_is_set_to_one(monkeypatch):
    monkeypatch.delenv(ONEDNN_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert use_onednn_by_default() is True
    assert os.environ[ONEDNN_ENV] == "1"
