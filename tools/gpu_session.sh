#!/usr/bin/env bash
# The one prepared script for a session lent a GPU (the `device` tool's `run`; ../shared/notes/gpu-regime.md, sec. 7).
# It runs, each under its own time limit, writing as it goes under $OUT (a time-out keeps what finished):
#   1. make gpu-smoke's checks on CUDA (every lab decoder, sd.lab.StaticLM captured as CUDA graphs included)
#   2. benchmarks/measure_gpu.py: the real pair's shapes, eager and captured columns -> $OUT/gpu_reference.json
#   3. the byte pair's `make measure --device cuda` (a short run) -> $OUT/byte_pair_cuda.json
# Prepare here first: the pinned transformers as a wheel, carried (it is ignored by git: name it in `carry`):
#   .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl transformers==5.24.0
# then: run(command="bash tools/gpu_session.sh", carry=[".whl"], timeout_s=600). Try it here with
#   OUT=/tmp/gpu_session GPU_SESSION_DEVICE=cpu bash tools/gpu_session.sh   (tiny shapes, the code path only)
set -u -o pipefail
OUT=${OUT:?set OUT to the folder the results go to}
DEVICE=${GPU_SESSION_DEVICE:-cuda}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$DEVICE" = cpu ] && PY=.venv/bin/python
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
step() {  # step NAME SECONDS COMMAND...: one line before and after, the output in $OUT/NAME.txt
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit} s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.txt"
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
}
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" \
  | tee "$OUT/versions.txt"
if [ "$DEVICE" = cpu ]; then
  step gpu_smoke 120 "$PY" tools/gpu_smoke.py --device cpu --samples 200
  step measure_gpu 120 "$PY" benchmarks/measure_gpu.py --tiny --json "$OUT/gpu_reference.json"
  step byte_pair_cuda 120 "$PY" benchmarks/measure_speedup.py --device cpu --repeats 1 --prompts 1 --n-new 16 \
    --reps 2 --ks 1,4 --batches 1,4 --batch-reps 3 --json "$OUT/byte_pair_cuda.json"
else
  step gpu_smoke 150 "$PY" tools/gpu_smoke.py --device cuda
  step measure_gpu 300 "$PY" benchmarks/measure_gpu.py --random --reps 10 --json "$OUT/gpu_reference.json"
  step byte_pair_cuda 120 "$PY" benchmarks/measure_speedup.py --device cuda --repeats 2 --json "$OUT/byte_pair_cuda.json"
fi
