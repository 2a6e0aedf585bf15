#!/usr/bin/env bash
# Regenerates bench/RESULTS.md and its plots (bench/results/*.png) on this machine.
#
#   bash bench/run_all.sh           # full: peers at 1e7 and 1e8, scaling to 1e9, bench 1e8 + 1e9
#   bash bench/run_all.sh --quick   # minutes: peers at 1e6 and 1e7, scaling to 1e8, bench 1e7 + 1e8
#   --steps=peers,scaling,bench     # run only these steps, in this order (default all), then
#                                   # render everything
#   --render-only                   # rewrite RESULTS.md's generated sections from the logs
#                                   # of earlier runs (a section without logs is kept)
#   --snapshot                      # measure the committed seenstore (git archive HEAD into
#                                   # scratch/), not the working tree others may be editing
#   --ten  (= --steps=bench10)      # seenstore bench at 1e8 (batches 1e7), 1e9 and 1e10 in one
#                                   # go (1e10: spilled batches, ~1 h and ~45 GB of disk here),
#                                   # the three on one plot (bench/results/bench10.png); renders
#                                   # only its own section of RESULTS.md. $BENCH10_RUNS
#                                   # (keys[:batch] ...) and $BENCH10_ARGS (more bench options)
#                                   # override the runs, e.g. for a dry run. The first run is
#                                   # repeated $BENCH10_BASE_REPEATS times (default 2) after
#                                   # the others: the ratio's base is the median of all.
#   --ten-render                    # rewrite the --ten section and plot from its logs only
#   $BENCH_PEER_KEYS                # the peers step runs only these sizes (e.g. "1e7"); the
#                                   # section still shows every size of the mode from the logs
#
# Needs the [bench] extra (pip install -e '.[bench]'). Raw logs and JSON go to
# $BENCH_LOGS (default scratch/bench-logs, git-ignored); each records the code version
# it measured, shown in its section. Peers over $PEER_LIMIT seconds (default 900) are
# reported as such. Steps run one at a time: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=full
STEPS=peers,scaling,bench
SNAPSHOT=0
TEN_RENDER_ONLY=0
for arg in "$@"; do
  case $arg in
    --quick) MODE=quick ;;
    --render-only) STEPS= ;;
    --steps=*) STEPS=${arg#--steps=} ;;
    --snapshot) SNAPSHOT=1 ;;
    --ten) STEPS=bench10 ;;
    --ten-render) STEPS=bench10; TEN_RENDER_ONLY=1 ;;
    *) echo "usage: bash bench/run_all.sh [--quick] [--steps=a,b] [--render-only] [--snapshot] [--ten] [--ten-render]" >&2
       exit 2 ;;
  esac
done
# BENCH_RUNS: keys[:batch]. The smaller run uses the peers' stream (batches of keys/10),
# so its floor sits beside the peers table; the larger one the default batch size.
if [[ $MODE == full ]]; then
  PEER_KEYS=(1e7 1e8); SCALE_MAX=1e9; BENCH_RUNS=(1e8:1e7 1e9)
else
  PEER_KEYS=(1e6 1e7); SCALE_MAX=1e8; BENCH_RUNS=(1e7:1e6 1e8)
fi
read -r -a TEN_RUNS <<< "${BENCH10_RUNS:-1e8:1e7 1e9 1e10}"
read -r -a TEN_ARGS <<< "${BENCH10_ARGS:-}"
TEN_BASE_REPEATS=${BENCH10_BASE_REPEATS:-2}  # the first run again after the others
TEN_WORK=${BENCH10_DIR:-scratch/bench10-work}  # the stores, removed after each run
LOGS=${BENCH_LOGS:-scratch/bench-logs}
PEER_LIMIT=${PEER_LIMIT:-900}
OUT=bench/results
mkdir -p "$LOGS" "$OUT"
PY=${PYTHON:-python}
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
code_of() { cat "$LOGS/$1.code" 2>/dev/null || echo "unknown code version"; }

if [[ -n $STEPS ]]; then
  if [[ $SNAPSHOT == 1 ]]; then
    SNAP=scratch/bench-snapshot
    rm -rf "$SNAP" && mkdir -p "$SNAP" && git archive HEAD | tar -x -C "$SNAP"
    export PYTHONPATH="$PWD/$SNAP${PYTHONPATH:+:$PYTHONPATH}"
    CODE="commit $(git rev-parse --short HEAD) (snapshot of the commit, via git archive)"
  else
    CODE="commit $(git rev-parse --short HEAD)"
    [[ -n $(git status --porcelain -- seenstore) ]] && CODE="$CODE + uncommitted changes in seenstore/"
  fi
  (cd / && "$PY" -c "import seenstore; print('measuring', seenstore.__file__)") >&2
fi

BENCH_DIR=bench
[[ $SNAPSHOT == 1 && -n $STEPS ]] && BENCH_DIR=$SNAP/bench  # scripts from the snapshot too
# one --ten run: ten_run KEYS[:BATCH] LOG_NAME LABEL -> LOGS/LOG_NAME.{json,txt,err},
# returns the bench's exit code; its store is removed afterwards
ten_run() {
  local k=${1%%:*} args=() rc=0
  [[ $1 == *:* ]] && args=(--batch "${1#*:}")
  echo "[$(stamp)] seenstore bench $k ${args[*]-} ${TEN_ARGS[*]-} (bench10$3)" >&2
  rm -f "$LOGS/$2.json"
  "$PY" -m seenstore.cli bench --keys "$k" ${args[@]+"${args[@]}"} \
    ${TEN_ARGS[@]+"${TEN_ARGS[@]}"} --quiet --dir "$TEN_WORK/$k" \
    --save "$LOGS/$2.json" > "$LOGS/$2.txt" 2> "$LOGS/$2.err" || rc=$?
  echo "[$(stamp)] bench10 $k$3: exit $rc" >&2
  rm -rf "${TEN_WORK:?}/$k"
  return $rc
}

IFS=, read -r -a step_list <<< "$STEPS"
for step in ${step_list[@]+"${step_list[@]}"}; do
  case $step in
    peers)
      read -r -a run_keys <<< "${BENCH_PEER_KEYS:-${PEER_KEYS[*]}}"
      for k in "${run_keys[@]}"; do
        echo "[$(stamp)] peers $k" >&2
        echo "$CODE, $(stamp)" > "$LOGS/peers-$k.code"
        "$PY" "$BENCH_DIR/peers.py" --keys "$k" --time-limit "$PEER_LIMIT" \
          --plot "$OUT/peers-$k.png" --json "$LOGS/peers-$k.json" > "$LOGS/peers-$k.md"
      done ;;
    scaling)
      echo "[$(stamp)] scaling" >&2
      echo "$CODE, $(stamp)" > "$LOGS/scaling.code"
      "$PY" "$BENCH_DIR/scaling.py" --max-keys "$SCALE_MAX" --plot "$OUT/scaling.png" \
        --json "$LOGS/scaling.json" > "$LOGS/scaling.txt" ;;
    bench)
      for run in "${BENCH_RUNS[@]}"; do
        k=${run%%:*}; batch_args=()
        [[ $run == *:* ]] && batch_args=(--batch "${run#*:}")
        echo "[$(stamp)] seenstore bench $k ${batch_args[*]-}" >&2
        echo "$CODE, $(stamp)" > "$LOGS/bench-$k.code"
        rc=0
        seenstore bench --keys "$k" ${batch_args[@]+"${batch_args[@]}"} --quiet \
          --plot "$OUT/bench-$k.png" --save "$LOGS/bench-$k.json" > "$LOGS/bench-$k.txt" || rc=$?
        echo "$rc" > "$LOGS/bench-$k.rc"
      done ;;
    bench10)
      if [[ $TEN_RENDER_ONLY == 1 ]]; then  # the section and plot from the logs alone
        "$PY" "$BENCH_DIR/bench10.py" plot "$LOGS" "$OUT/bench10.png" || true
        continue
      fi
      for run in "${TEN_RUNS[@]}"; do
        k=${run%%:*}
        echo "$CODE, $(stamp)" > "$LOGS/bench10-$k.code"
        rc=0
        ten_run "$run" "bench10-$k" "" || rc=$?
        echo "$rc" > "$LOGS/bench10-$k.rc"
      done
      # the first run (the base of the 1e10/1e8 ratio: a few seconds, on a host whose
      # speed moves 1.2-2x within the hour) again after the others, so the base
      # brackets them; its median is the base, every repeat listed
      rm -f "$LOGS"/bench10rep-*
      k=${TEN_RUNS[0]%%:*}
      for ((r = 1; r <= TEN_BASE_REPEATS; r++)); do
        ten_run "${TEN_RUNS[0]}" "bench10rep-$k-$r" ", base repeat $r" || true
      done
      "$PY" "$BENCH_DIR/bench10.py" plot "$LOGS" "$OUT/bench10.png" || true ;;
    *) echo "unknown step $step (peers, scaling, bench, bench10)" >&2; exit 2 ;;
  esac
done

ten_section() {
  echo "## 1e8, 1e9 and 1e10 keys in one invocation (\`bash bench/run_all.sh --ten\`)"
  echo
  echo "Each \`seenstore bench\` run with the default stream (1e8 in batches of 1e7, the others"
  echo "with the batch size and path the planner chose from the memory and disk it found:"
  echo "batches bigger than memory are generated straight into spill buckets and admitted by"
  echo "\`SeenStore.add_new_file\`, one store sweep per batch). Measured at"
  echo "$(code_of "bench10-${TEN_RUNS[0]%%:*}"); exit codes:"
  for run in "${TEN_RUNS[@]}"; do
    k=${run%%:*}; echo -n " $k: $(cat "$LOGS/bench10-$k.rc" 2>/dev/null || echo '?')"
  done
  echo "."
  echo
  "$PY" "$BENCH_DIR/bench10.py" render "$LOGS"
  echo
  echo "![ns per offered key against keys stored, and by stage](results/bench10.png)"
}

if [[ $STEPS == bench10 ]]; then  # only this section of RESULTS.md, the rest kept
  echo "[$(stamp)] writing the bench10 section of bench/RESULTS.md" >&2
  ten_section > "$LOGS/bench10-section.md"
  "$PY" "$BENCH_DIR/bench10.py" splice "$LOGS/bench10-section.md" bench/RESULTS.md
  echo "[$(stamp)] done: bench/RESULTS.md" >&2
  exit 0
fi

echo "[$(stamp)] writing bench/RESULTS.md" >&2
versions=$("$PY" - <<'EOF'
import importlib.metadata as md, platform, sqlite3
names = ["seenstore", "numpy", "numba", "duckdb", "rocksdict", "lmdb", "rbloom", "matplotlib"]
out = [f"Python {platform.python_version()}", f"SQLite {sqlite3.sqlite_version}"]
for n in names:
    try:
        out.append(f"{n} {md.version(n)}")
    except md.PackageNotFoundError:
        out.append(f"{n} (not installed)")
print(", ".join(out))
EOF
)
# Each generated section goes between its <!-- name --> markers of RESULTS.md
# (bench/splice.py), so the sections written by hand between them survive; a section
# whose logs are missing is left as it was.
put() { "$PY" "$BENCH_DIR/splice.py" "$1" "$LOGS/section-$1.md" bench/RESULTS.md; }
[[ -f bench/RESULTS.md ]] || echo "# seenstore benchmark results" > bench/RESULTS.md
cat > "$LOGS/section-head.md" <<EOF
Sections between \`<!-- name -->\` markers are generated by \`bash bench/run_all.sh\`
(do not edit them by hand: re-run the script); each names the seenstore code and the
time it measured, and the machine below is the one of the script's last measuring run
($MODE mode, rendered $(stamp)). Sections outside the markers were written by hand
from the runs they name. Raw JSON and logs: \`$LOGS/\` (not committed).

## Machine

- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, shared with other work while this ran (load average now: $(cut -d' ' -f1-3 /proc/loadavg)): figures are noisy
- CPU and numpy's SIMD dispatch: $("$PY" -c 'from seenstore.keys.sort import machine_summary, describe; print(machine_summary() + "; sort used by the store: " + describe()["sort"])')
- Memory: $(free -g | awk '/^Mem:/ {print $2}') GiB; disk: $(df -h . | awk 'NR==2 {print $2 " " $1}')
- Kernel: $(uname -sr)
- Versions: $versions

## The stream

Every figure below uses the same deterministic crawl-like stream (\`seenstore/bench/workload.py\`,
described in \`docs/bench.md\`): each batch holds 10% in-batch repeats, and of the other
slots 50% keys re-offered from earlier batches and 50% fresh keys; the top 20 key bits
are a Zipf(1)-distributed host over 2^20 buckets. The exact set of new keys of every batch
is known from the generator and every engine's answer is checked against it.
EOF
# the machine is this invocation's: rewritten only when it measured something
[[ -n $STEPS ]] && put head
if compgen -G "$LOGS/bench-*.txt" > /dev/null; then
  {
    echo "## Headline: \`seenstore bench\`"
    echo
    for run in "${BENCH_RUNS[@]}"; do
      k=${run%%:*}; batch_arg=
      [[ $run == *:* ]] && batch_arg=" --batch ${run#*:}"
      echo "### \`seenstore bench --keys $k$batch_arg\`"
      echo
      echo "Measured at $(code_of "bench-$k"); exit code $(cat "$LOGS/bench-$k.rc" 2>/dev/null || echo '?')."
      echo
      echo '```'
      cat "$LOGS/bench-$k.txt" 2>/dev/null || echo "(not run)"
      echo '```'
      echo
      echo "![per-batch ns/key by stage, $k keys](results/bench-$k.png)"
      echo
    done
  } > "$LOGS/section-headline.md"
  put headline
fi
if compgen -G "$LOGS/peers-*.md" > /dev/null; then
  {
    echo "## Peers: the same stream, one engine at a time"
    echo
    echo "Each peer runs alone in its own subprocess (peak RSS is its own, including the"
    echo "interpreter and one generated batch); only the engine's work is timed. ns/key is per"
    echo "offered key; \`x seenstore\` is the peer's time over seenstore's in the same run;"
    echo "disk B/key is allocated bytes over distinct keys stored. Time limit $PEER_LIMIT s per peer."
    echo
    for k in "${PEER_KEYS[@]}"; do
      echo "### \`python bench/peers.py --keys $k --time-limit $PEER_LIMIT\`"
      echo
      echo "Measured at $(code_of "peers-$k")."
      echo
      cat "$LOGS/peers-$k.md" 2>/dev/null || echo "(not run)"
      echo
      echo "![ns/key per batch against store size, $k keys](results/peers-$k.png)"
      echo
    done
  } > "$LOGS/section-peers.md"
  put peers
fi
if [[ -f $LOGS/scaling.txt ]]; then
  {
    echo "## Scaling: one batch against a growing store"
    echo
    echo "\`python bench/scaling.py --max-keys $SCALE_MAX\`, measured at $(code_of scaling)."
    echo
    grep -v '^N=' "$LOGS/scaling.txt"
    echo
    echo "![batch cost against store size](results/scaling.png)"
  } > "$LOGS/section-scaling.md"
  put scaling
fi
if compgen -G "$LOGS/bench10-*.txt" > /dev/null; then
  ten_section > "$LOGS/bench10-section.md"
  "$PY" "$BENCH_DIR/bench10.py" splice "$LOGS/bench10-section.md" bench/RESULTS.md
fi
echo "[$(stamp)] done: bench/RESULTS.md" >&2
