#!/usr/bin/env bash
# GGD on one GPU (issue 24, item 3): the training step's speed (benchmarks/ggd_speed.py trainer=gpu), then one run
# of the authors' schedule (experiment=ggd_cfq_groupmax_authors_schedule: batch 512, 100 epochs, dev every second
# epoch) alone on the card, timed end to end. Its rows and run directory go to OUT, to be merged here afterwards:
#   ../shared/tools/device-pack cfq/preprocessed/mcd1     # on the CPU machine, after CFQ was tagged once
#   bash benchmarks/ggd_gpu.sh OUT [SEED] [MAX_TIME]     # on the GPU machine (sources .device/setup.sh if there)
#   python benchmarks/merge_results.py OUT/runs.csv                              # back on the CPU machine
#   python benchmarks/merge_results.py OUT/ggd_speed.csv results/ggd_speed.csv
# MAX_TIME (Lightning's DD:HH:MM:SS, default 00:00:07:40) stops training early where a lease is shorter than the
# schedule: the run is then tested from its best checkpoint, its row says how many epochs it trained, and its
# last.ckpt (in OUT/run.tgz) resumes it anywhere with resume=true.
set -uo pipefail
out=${1:?usage: bash benchmarks/ggd_gpu.sh OUT [SEED] [MAX_TIME]}
seed=${2:-1}
max_time=${3:-00:00:07:40}
mkdir -p "$out"
if [ -f .device/setup.sh ]; then source .device/setup.sh || exit 1; fi
export ZOO_RUNS=${ZOO_RUNS:-/tmp/zoo-runs} PYTHONUNBUFFERED=1
start=$(date +%s)
python3 benchmarks/ggd_speed.py experiment=ggd_cfq_groupmax_authors_schedule trainer=gpu --steps 40 --warmup 10 \
  --out "$out/ggd_speed.csv" 2>&1 | grep -v "profiler\|USDT" | tail -3
echo "speed measured after $(( $(date +%s) - start )) s"
python3 benchmarks/run.py experiment=ggd_cfq_groupmax_authors_schedule seed="$seed" trainer=gpu \
  "+trainer.max_time=\"$max_time\"" results_file="$out/runs.csv" > "$out/run.log" 2>&1
status=$?
echo "run ended ($status) after $(( $(date +%s) - start )) s"
grep -E "INFO|Error|error" "$out/run.log" | tail -8
run_dir=$ZOO_RUNS/ggd-authors_sizes-groupmax-authors_schedule/cfq_mcd1/seed$seed
tar czf "$out/run.tgz" -C "$(dirname "$run_dir")" "$(basename "$run_dir")" && ls -la "$out"
exit $status
