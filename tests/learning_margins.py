"""Prints the learning tests' scores under several seeds, beside their thresholds: the
margins that must hold on any CPU (oneDNN's numerics differ between Intel and AMD) and seed.

    python tests/learning_margins.py --seeds 0 1 2 3 4

Each seed sets the weights' initialisation and the training and test data. The suite's
setup comes first (`conftest.py`: the package imported before TensorFlow, so its oneDNN
default holds as in the tests; two logical CPUs), so the scores are the tests' own: a script
that imported TensorFlow first would run Eigen's kernels on an AVX2-only CPU, where the
tests run oneDNN's. Under `pytest -n 2` each worker has one intra-op thread; set
`TF_NUM_INTRAOP_THREADS=1` to score as they do.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))

import conftest  # noqa: E402, F401, I001  # isort: skip  (first: the suite's setup)
import test_decoding  # noqa: E402
import test_tasks_fit  # noqa: E402
import test_training_fit  # noqa: E402
from _machine import cpu_model  # noqa: E402

# name -> (scores(seed), the least of each score, the bound each score stays under).
LEARNING = {
    **test_tasks_fit.LEARNING,
    "copy": (test_training_fit.copy_scores, test_training_fit.COPY_LEAST, {}),
    "reverse": (
        test_decoding.reverse_scores,
        test_decoding.REVERSE_LEAST,
        test_decoding.REVERSE_MOST,
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--tests", nargs="+", default=sorted(LEARNING), choices=sorted(LEARNING))
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; seeds {args.seeds}")
    failed = False
    for test in args.tests:
        scores, least, most = LEARNING[test]
        rows = {seed: scores(seed) for seed in args.seeds}
        for name, limit in [*least.items(), *most.items()]:
            values = [rows[seed][name] for seed in args.seeds]
            below = name in most
            worst = max(values) if below else min(values)
            ok = worst < limit if below else worst >= limit
            failed |= not ok
            print(
                f"{test:18s} {name:20s} "
                + " ".join(f"{v:.4f}" for v in values)
                + f"  worst {worst:.4f} {'<' if below else '>='} {limit:.4f}: "
                + ("ok" if ok else "MISSED")
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
