#!/usr/bin/env bash
# GGD on one GPU (issue 24, item 3): the training step's speed (benchmarks/ggd_speed.py trainer=gpu), then runs of
# EXPERIMENT (default experiment=ggd_cfq, the authors' schedule), one per seed of SEEDS, all
# at once on the card, each timed end to end. Several at once because one run leaves the card nearly idle: its step
# is many small kernels launched from the CPU, 1.6% of the card's matmul rate (README, "On a GPU"). Each run's batches
# are collated by WORKERS (default 3) DataLoader processes, so that the collate overlaps the steps and the first
# epoch's encoding is spread over them. Rows and run directories go to OUT, to be merged here afterwards:
#   ../shared/tools/device-pack cfq/preprocessed/mcd1     # on the CPU machine, after CFQ was tagged once
#   bash benchmarks/ggd_gpu.sh OUT [SEEDS] [MAX_TIME] [EXPERIMENT]   # on the GPU machine (sources .device/setup.sh)
#   python benchmarks/merge_results.py OUT/runs.csv                              # back on the CPU machine
#   python benchmarks/merge_results.py OUT/ggd_speed.csv results/ggd_speed.csv
#   python benchmarks/merge_results.py OUT/cfq_edge_match.csv results/cfq_edge_match.csv   # each run's breakdown
#   tar xzf OUT/runs.tgz -C runs                          # the run directories, to resume or retest them here
# SEEDS: "1" or "3,4,5". MAX_TIME (Lightning's DD:HH:MM:SS, default 00:00:07:40) stops training early where a lease
# is shorter than the schedule: the run is then tested from its best checkpoint, its row says how many epochs it
# trained, and its last.ckpt resumes it anywhere with ckpt_path=last (the best checkpoint so far stays a candidate).
# Further arguments are overrides for every run. SPEED=0 skips the speed measurement; TRAINER=default tries the script
# on a CPU (SPEED=0 TRAINER=default bash benchmarks/ggd_gpu.sh /tmp/out 1,2 00:00:01:00 EXPERIMENT debug=smoke).
set -uo pipefail
out=${1:?usage: bash benchmarks/ggd_gpu.sh OUT [SEEDS] [MAX_TIME] [EXPERIMENT] [OVERRIDE ...]}
seeds=${2:-1}
max_time=${3:-00:00:07:40}
experiment=${4:-ggd_cfq}
trainer=${TRAINER:-gpu}
mkdir -p "$out"
if [ -f .device/setup.sh ]; then source .device/setup.sh || exit 1; fi
export ZOO_RUNS=${ZOO_RUNS:-/tmp/zoo-runs} PYTHONUNBUFFERED=1
start=$(date +%s)
if [ "${SPEED:-1}" != 0 ]; then
  python3 benchmarks/ggd_speed.py experiment="$experiment" trainer="$trainer" --steps 40 --warmup 10 \
    --out "$out/ggd_speed.csv" 2>&1 | grep -v "profiler\|USDT" | tail -3
  echo "speed measured after $(( $(date +%s) - start )) s"
fi
pids=()
for seed in ${seeds//,/ }; do
  python3 benchmarks/run.py experiment="$experiment" seed="$seed" trainer="$trainer" data.num_workers="${WORKERS:-3}" \
    "+trainer.max_time=\"$max_time\"" results_file="$out/runs.csv" "${@:5}" > "$out/run_seed$seed.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
echo "runs ended ($status) after $(( $(date +%s) - start )) s"
grep -hE "INFO|Error|error" "$out"/run_seed*.log | tail -12
tar czf "$out/runs.tgz" -C "$ZOO_RUNS" . && ls -la "$out"
exit $status
