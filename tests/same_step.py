"""`assert_same_step`: two models took the same training step (remat against none)."""

import numpy as np


def assert_same_step(model, other, rtol=1e-4, atol=1e-6):
    """Asserts that `model` and `other` (same architecture, same initial weights, trained on
    the same batches with Adam) hold the same weights.

    Attention's key biases are left out: they shift every score of a query by the same
    amount, which softmax ignores, so their gradient is zero in exact arithmetic and rounding
    noise of either side; Adam's first steps (about lr * sign(gradient)) turn that noise into
    whole steps.
    """
    for weight, a, b in zip(model.weights, model.get_weights(), other.get_weights()):
        if not weight.path.endswith("/key/bias"):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=weight.path)
