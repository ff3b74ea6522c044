#!/bin/bash
# `bench path` and `bench spine` at REV and at this tree, in turns, in one run:
#   scripts/ab-bench.sh REV [OUT_DIR]
# REV is checked out into a temporary worktree. Each run is a fresh `headway bench` with
# that tree's product (and its tooling: tools/src, or src/headway/bench in a tree from
# before the tooling left it) first on PYTHONPATH, so the processes it starts run that
# code (PATH_TURNS=3, PATH_SECONDS=10, SPINE_TURNS=2, SPINE_SECONDS=5 by default). The
# sections land in OUT_DIR (default: a new temporary folder) as
# path-{before,after}-N.md and spine-{before,after}-N.md. Compare the runs of one call.
set -eu
rev=$1
out=${2:-$(mktemp -d)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
before=$(mktemp -d)/before
data=$(mktemp -d)
git -C "$here" worktree add --detach "$before" "$rev" >/dev/null
trap 'git -C "$here" worktree remove --force "$before"' EXIT
path_of() { if [ -d "$1/tools/src" ]; then echo "$1/src:$1/tools/src"; else echo "$1/src"; fi; }
run() { # label tree bench-args...
  local label=$1 tree=$2; shift 2
  echo "$label $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$tree" && PYTHONPATH=$(path_of "$tree") "$py" -m headway bench "$@" --data-dir "$data") \
    > "$out/$label.md"
}
for turn in $(seq "${PATH_TURNS:-3}"); do
  run "path-before-$turn" "$before" path --seconds "${PATH_SECONDS:-10}"
  run "path-after-$turn" "$here" path --seconds "${PATH_SECONDS:-10}"
done
for turn in $(seq "${SPINE_TURNS:-2}"); do
  run "spine-before-$turn" "$before" spine --seconds "${SPINE_SECONDS:-5}"
  run "spine-after-$turn" "$here" spine --seconds "${SPINE_SECONDS:-5}"
done
echo "sections in $out"
