#!/usr/bin/env bash
# The main job, end to end on one CPU machine: set up, train a small de->en model on
# Multi30k, export it for TF Serving, serve it with TF Serving's REST and gRPC APIs, answer one
# request over each.
#
#   bash serving/quickstart.sh
#
# Multi30k is read from $KERAS_TRANSFORMER_MULTI30K_DIR, else from ../shared/data/multi30k
# beside the repository when present, else downloaded from the published URLs. The server is
# the development stand-in (python, TF Serving's REST and gRPC contracts): where Docker runs,
# serve the same export with `docker compose -f serving/docker-compose.yml up` instead.
# Environment: PORT (REST, default 8501), GRPC_PORT (8500), RUN_DIR (runs/quickstart),
# EXPORT_DIR (exports), EPOCHS (1), VENV (.venv).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${PORT:-8501}
GRPC_PORT=${GRPC_PORT:-8500}
RUN_DIR=${RUN_DIR:-runs/quickstart}
EXPORT_DIR=${EXPORT_DIR:-exports}
EPOCHS=${EPOCHS:-1}
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/keras-transformer" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
# The package with the stand-in server's dependencies (aiohttp, tensorflow-serving-api).
"$VENV/bin/python" -m pip install -q -e ".[serve]"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
export TF_CPP_MIN_LOG_LEVEL=2

if [ -z "${KERAS_TRANSFORMER_MULTI30K_DIR:-}" ] && [ -d ../shared/data/multi30k ]; then
  KERAS_TRANSFORMER_MULTI30K_DIR=$(cd ../shared/data/multi30k && pwd)
  export KERAS_TRANSFORMER_MULTI30K_DIR
fi

if [ -f "$RUN_DIR/model.keras" ] && [ ! -d "$RUN_DIR/backup" ]; then
  # A finished run, which `keras-transformer train` refuses to train over: served again.
  echo "== 1/5 train: $RUN_DIR holds a finished run, kept (remove it, or set RUN_DIR, to train anew)"
else
  echo "== 1/5 train (Multi30k de->en, small model, $EPOCHS epoch(s)) -> $RUN_DIR"
  keras-transformer train --config multi30k_de_en --run-dir "$RUN_DIR" \
    --set model.num_encoder_layers=2 --set model.num_decoder_layers=2 \
    --set model.d_model=128 --set model.num_heads=4 --set model.d_ff=512 \
    --set data.vocab_size=4000 --set data.batch_size=64 \
    --set translation.max_source_length=40 --set translation.max_target_length=40 \
    --set training.epochs="$EPOCHS" --set training.warmup_steps=400 \
    --set training.learning_rate_scale=2.0 --set translation.bleu_every=null \
    --set training.verbose=2
fi

echo "== 2/5 export -> $EXPORT_DIR/transformer/<version>"
VERSION_DIR=$(keras-transformer export "$RUN_DIR" --base-path "$EXPORT_DIR" \
  --model-name transformer --beam-size 4)
echo "exported $VERSION_DIR"

echo "== 3/5 serve on 127.0.0.1: REST $PORT, gRPC $GRPC_PORT (stand-in with TF Serving's APIs)"
keras-transformer --log-level WARNING serve --model_base_path "$EXPORT_DIR/transformer" \
  --model_name transformer --rest_api_port "$PORT" --port "$GRPC_PORT" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/v1/models/transformer" | grep -q AVAILABLE; then
    break
  fi
  kill -0 $SERVER 2>/dev/null || { echo "the server exited" >&2; exit 1; }
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/v1/models/transformer"
echo

echo "== 4/5 POST /v1/models/transformer:predict"
curl -sf -X POST "http://127.0.0.1:$PORT/v1/models/transformer:predict" \
  -H 'Content-Type: application/json' \
  -d '{"instances": ["Ein Hund läuft durch den Schnee.", "Zwei Männer spielen Fußball."]}'
echo

echo "== 5/5 gRPC PredictionService/Predict"
python - "$GRPC_PORT" <<'PY'
import sys

from keras_transformer.serving.client import ServingClient

client = ServingClient(f"grpc://127.0.0.1:{sys.argv[1]}", "transformer", timeout=60)
print(client.predict(["Ein Hund läuft durch den Schnee.", "Zwei Männer spielen Fußball."]))
PY
