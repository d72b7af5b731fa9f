#!/usr/bin/env bash
# GPU check: the NCCL path, CUDA-event timing, NVML topology and compute/communication overlap
# on one GPU, in a few minutes. Prints a short report; full outputs go under ${OUT:-gpu-check}/.
#
#   bash bench/gpu_check.sh            (from the repository root, on a machine with a GPU)
#
# What it runs:
#   1. commbench topo --json                      NVML: GPU, PCIe, NVLink, NICs
#   2. commbench run --nproc 1 --backend nccl     all_reduce, all_gather, reduce_scatter, all_to_all,
#      -b 1K -e 1G                                broadcast at world size 1 with CUDA-event timing
#                                                 (busbw is 0 by definition with one rank; algbw
#                                                 and time still show the NCCL path's cost)
#   3. the same with -G (CUDA graphs) for 8 B-64 KiB: small-message latency without launch cost
#   4. commbench overlap --nproc 1                a GEMM on one stream with an NCCL collective on
#                                                 another (when the overlap command is present)
# Where pip cannot reach an index, carry wheels in .whl/ (pydantic, pydantic-core,
# annotated-types, typing-inspection, rich): they are installed to /tmp/site first.
set -u
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
cb() { timeout "${STEP_TIMEOUT:-240}" python3 -m commbench "$@"; }
status=0

echo "== environment"
python3 -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '| nccl', '.'.join(map(str, torch.cuda.nccl.version())), '|', torch.cuda.get_device_name(0))" || status=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null

echo "== topology (NVML)"
cb topo --json > "$OUT/topo.json" || status=1
cb topo | head -40

echo "== NCCL sweep, world size 1, CUDA events, 1K-1G"
cb run --nproc 1 --backend nccl -b 1K -e 1G --ops all_reduce,all_gather,reduce_scatter,all_to_all,broadcast \
   --out "$OUT" --run-id nccl-sweep --no-progress 2>&1 | tee "$OUT/nccl-sweep.txt" | grep -E "^#  *[a-z_]+:|^ +(1024|1048576|67108864|1073741824) |Out of bounds|Results" || status=1

echo "== CUDA graphs, 8 B-64 KiB all_reduce"
cb run --nproc 1 --backend nccl -G -b 8 -e 64K --ops all_reduce --out "$OUT" --run-id nccl-graph --no-progress 2>&1 \
   | tee "$OUT/nccl-graph.txt" | grep -E "^ +(8|1024|65536) |Out of bounds" || status=1

if python3 -m commbench overlap --help >/dev/null 2>&1; then
  echo "== overlap: GEMM on one stream, NCCL collective on another"
  cb overlap --nproc 1 --gemm-size 8192 --out "$OUT" --run-id overlap 2>&1 | tee "$OUT/overlap.txt" | tail -25 || status=1
fi
echo "== gpu_check status: $status"
exit $status
