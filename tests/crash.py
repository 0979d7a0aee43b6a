"""`CrashAt`: a training process killed after a given optimizer step."""

import keras


class CrashAt(keras.callbacks.Callback):
    """Raises `KeyboardInterrupt` after the optimizer step `step` (1-based), as a killed
    process would stop."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= self.step:
            raise KeyboardInterrupt(f"simulated crash at step {self.step}")
