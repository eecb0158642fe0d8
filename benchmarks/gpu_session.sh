#!/usr/bin/env bash
# The device check a session with an accelerator runs once (DEVELOPERS.md): `make run`'s job,
# bench_round.py at 1 M and 10 M agents, and the paper sweep (bench_sweep.py), each under its
# own time limit so one slow piece cannot cost the others. Run from the repository root on a
# machine whose Python has JAX with CUDA, flax and optax; gymnax, gymnasium and dp-accounting
# come as wheels in .whl/ (docs of the device tool), with typer 0.20.1 and click 8.5.1 where the
# image's typer is 0.26 or later (pyproject.toml). SKIP_RUN / SKIP_ROUND leave a piece out.
# Writes everything to $OUT (default ./gpu-out).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
PY=${PY:-python3}
if [ -d .whl ] && [ -z "${NO_WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1 PRIVRL_CACHE_DIR=off
log() { echo "## $*" | tee -a "$OUT/log.md"; }
step() {  # step LIMIT_S NAME CMD...: run, time and log one piece
  local limit=$1 name=$2; shift 2
  log "$name: $*"
  local t0=$(date +%s%N)
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt" | grep -v "^\s*$" | tail -25 >> "$OUT/log.md"
  local rc=${PIPESTATUS[0]}
  log "$name: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms wall (limit $limit s)"
}
{ date -u; nvidia-smi -L 2>/dev/null; git log -1 --format=%h 2>/dev/null;
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
} 2>&1 | tee "$OUT/log.md"
[ -z "${SKIP_RUN:-}" ] && step ${T_RUN:-150} make-run $PY -m privrl run pgc-a3c --preset tuned --mechanism laplace \
  --epsilon 5 --trials 8 --submissions 30000 --no-progress --out "$OUT/run-dir"
[ -z "${SKIP_ROUND:-}" ] && step ${T_ROUND:-200} round $PY benchmarks/bench_round.py --agents ${AGENTS:-1000000 10000000} \
  --group ${BLOCKS:-111111 138889} --waves ${WAVES:-1 4} --devices 1 --repeats ${REPEATS:-3}
step ${T_SWEEP:-200} sweep $PY benchmarks/bench_sweep.py ${SWEEP_ARGS:-}
rm -rf "$OUT/run-dir"
