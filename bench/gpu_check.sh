#!/usr/bin/env bash
# GPU check: every GPU path of commbench in one prepared run on one GPU, planned for <= 8 minutes
# (480 s) including its own start-up. Each step runs under `timeout` at its budget; a step that
# fails or runs out is recorded and the next one still runs.
#
#   bash bench/gpu_check.sh                 on a machine with a GPU, from the repository root
#   bash bench/gpu_check.sh --dry-run       every step's plumbing on this CPU (a stand-in device,
#                                           tiny shapes, gloo): run in CI by tests/test_gpu_check.py
#   OUT=DIR bash bench/gpu_check.sh         write there (default bench/gpu/DATE-DEVICE; dry run: a
#                                           fresh temporary folder)
#   TAR=FILE ...                            also pack the folder into FILE (the device tool brings
#                                           back at most 8 files, 2 folders down)
#   BUDGET_SCALE=K ...                      multiply every budget by K (dry run: 5, since a shared
#                                           CPU runs the stand-in steps slower than a GPU machine)
#
# Steps and budgets (seconds; sum 450 of the 480 planned):
#   step          budget  what
#   environment       20  torch, CUDA, NCCL versions; nvidia-smi
#   topo              20  commbench topo --json (NVML: GPU, PCIe, NVLink, NICs)        -> topo.json
#   nccl-sweep        90  commbench run, world size 1, NCCL, CUDA events, 1K-1G, five ops at the
#                         adaptive defaults (busbw is 0 with one rank; time and algbw show the path)
#   cuda-graphs       30  the same, -G (CUDA graphs), 8 B-64 KiB all_reduce
#   overlap           60  commbench overlap: an 8192^3 GEMM on one stream, NCCL on another
#   calibrate         90  commbench calibrate --quick --dtype bf16 --fp8 (BF16 and FP8 GEMMs) -> processor.json
#   fp8               20  an e4m3 GEMM via torch._scaled_mm where the device has FP8  -> fp8.json
#   train             90  the validation GPT, a few steps at 4 single-GPU layouts (accumulation,
#                         recomputation), predicted (planner, from processor.json, written first) vs
#                         measured step time and torch.cuda.max_memory_allocated      -> train.json
#   timers            20  host clock vs CUDA events on the same GEMM                   -> timers.json
#   summary           10  every step's status, seconds and budget                      -> summary.json
# Logs of every step: logs/STEP.txt; steps.tsv: step, status (ok / failed RC / timeout), seconds, budget.
# Where pip cannot reach an index, carry wheels in .whl/ (pydantic, pydantic-core,
# annotated-types, typing-inspection, rich): they are installed to /tmp/site first.
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if [ $DRY = 1 ]; then
  OUT=${OUT:-$(mktemp -d /tmp/gpu-check-dry-XXXXXX)}
else
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
  OUT=${OUT:-bench/gpu/$(date -u +%Y%m%d)-${device:-unknown-gpu}}
fi
mkdir -p "$OUT/logs"
: > "$OUT/steps.tsv"
DRY_FLAG=$([ $DRY = 1 ] && echo --dry-run)
BUDGET_SCALE=${BUDGET_SCALE:-$([ $DRY = 1 ] && echo 5 || echo 1)}
echo "gpu_check: output in $OUT$([ $DRY = 1 ] && echo ' (dry run: stand-in CPU device)')"

step() {  # step NAME BUDGET_S COMMAND...: run it under its budget, log it, record how it ended
  local name=$1 budget=$(( $2 * BUDGET_SCALE )) start end rc status
  shift 2
  start=$(date +%s.%N)
  timeout "$budget" bash -c '"$@"' step "$@" > "$OUT/logs/$name.txt" 2>&1  # bash -c: functions too
  rc=$?
  end=$(date +%s.%N)
  case $rc in 0) status=ok ;; 124) status=timeout ;; *) status="failed $rc" ;; esac
  printf '%s\t%s\t%.1f\t%s\n' "$name" "$status" "$(awk "BEGIN { print $end - $start }")" "$budget" >> "$OUT/steps.tsv"
  echo "== $name: $status ($(tail -1 "$OUT/steps.tsv" | cut -f3) s of $budget)"
  tail -3 "$OUT/logs/$name.txt" | sed 's/^/   /'
}
cb() { python3 -m commbench "$@"; }

environment() {
  python3 -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '| device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
}
topo() { cb topo --json > "$OUT/topo.json"; }
export OUT
export -f cb environment topo

if [ $DRY = 1 ]; then  # the same commands on gloo and the CPU, tiny shapes
  COMM=(--nproc 1 --backend gloo) SWEEP=(-b 1K -e 16K) GRAPH=(-b 8 -e 64) GEMM=64 OVERLAP=(-b 1K -e 4K -n 2)
  CALIBRATE=(--device cpu --dtype fp32 --gemm-dims 64,128 --attention 64x2x32 --repeats 2)
else
  COMM=(--nproc 1 --backend nccl) SWEEP=(-b 1K -e 1G) GRAPH=(-b 8 -e 64K) GEMM=8192 OVERLAP=()
  CALIBRATE=(--device cuda --dtype bf16 --quick --fp8)  # BF16 and FP8 (torch._scaled_mm) GEMMs
fi
OPS=all_reduce,all_gather,reduce_scatter,all_to_all,broadcast

step environment 20 environment
step topo 20 topo
step nccl-sweep 90 cb run "${COMM[@]}" "${SWEEP[@]}" --ops $OPS --out "$OUT" --run-id nccl-sweep --no-progress
step cuda-graphs 30 cb run "${COMM[@]}" -G "${GRAPH[@]}" --ops all_reduce --out "$OUT" --run-id nccl-graph --no-progress
step overlap 60 cb overlap "${COMM[@]}" --gemm-size $GEMM "${OVERLAP[@]}" --out "$OUT" --run-id overlap --no-progress
step calibrate 90 cb calibrate "${CALIBRATE[@]}" --out "$OUT/processor.json" --no-progress
step fp8 20 python3 bench/gpu_steps.py fp8 --out "$OUT" $DRY_FLAG
step train 90 python3 bench/gpu_steps.py train --out "$OUT" --processor "$OUT/processor.json" $DRY_FLAG
step timers 20 python3 bench/gpu_steps.py timers --out "$OUT" $DRY_FLAG
python3 bench/gpu_steps.py summary --out "$OUT" $DRY_FLAG > "$OUT/logs/summary.txt" 2>&1 || echo "== summary failed"
[ -n "${TAR:-}" ] && tar -czf "$TAR" -C "$(dirname "$OUT")" "$(basename "$OUT")"
failed=$(cut -f2 "$OUT/steps.tsv" | grep -vc '^ok$')
echo "== gpu_check: $failed step(s) not ok; output in $OUT"
[ "$failed" = 0 ]
