#!/usr/bin/env bash
# One command for a lent machine with many cores (the `device` tool's H200 machine has 16): a study claim with
# many seeds, its runs side by side on the CPUs (the tiny models run faster there than on a GPU, whose kernel
# launches dominate at this size), stopped at LIMIT seconds; whatever finished is summarised, and the runs (less
# their checkpoints and models) are packed into OUT/study.tgz, since only a few files come back from such a
# machine. The study resumes where it stopped: unpack the archive into runs/ and run the same claim again.
#
#   OUT=/tmp/out bash scripts/device_study.sh                      # summary claim, 8 seeds, 16 jobs, 480 s
#   CLAIM=summary SEEDS=2 JOBS=2 QUICK=1 OUT=/tmp/out bash scripts/device_study.sh   # tiny, on 2 cores
#
# On a machine without mosaic-gym's dependencies, wheels in .whl/ (gymnasium, Farama-Notifications, bm25s:
# see the device tool's README) are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/device-out}
CLAIM=${CLAIM:-summary}
SEEDS=${SEEDS:-8}
JOBS=${JOBS:-16}
LIMIT=${LIMIT:-480}
ITERATIONS=${ITERATIONS:-}
STUDY=${STUDY:-runs/device-study}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
mkdir -p "$OUT"
if [ -d .whl ] && ! "$PY" -c "import gymnasium, bm25s" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
args=(study "$CLAIM" --seeds "$SEEDS" --jobs "$JOBS" --out "$STUDY" --no-progress)
[ -n "${QUICK:-}" ] && args+=(--quick)
[ -n "$ITERATIONS" ] && args+=(--iterations "$ITERATIONS")
{ nproc; "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
  > "$OUT/machine.txt" 2>&1
start=$(date +%s)
timeout "$LIMIT" "$PY" -m mosaic_gym.cli "${args[@]}" > "$OUT/study.log" 2>&1
echo "study exit $? after $(( $(date +%s) - start )) s" >> "$OUT/study.log"
summary=(study "$CLAIM" --seeds "$SEEDS" --out "$STUDY" --summary-only --no-progress)
[ -n "${QUICK:-}" ] && summary+=(--quick)
"$PY" -m mosaic_gym.cli "${summary[@]}" > "$OUT/results.md" 2>&1
tar czf "$OUT/study.tgz" --exclude='*.pt' --exclude='*/model' --exclude='*/final' --exclude='*.tmp' "$STUDY"
ls -la "$OUT"
tail -5 "$OUT/study.log"
