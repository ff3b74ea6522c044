#!/bin/bash
# A first start of `headway up` (empty data dir: the default model is imported), 8 embed and
# 8 rerank requests of 32 texts, then the PSS of the supervisor and of every child.
#   scripts/first-start-memory.sh TREE LABEL   (TREE: a checkout, e.g. a worktree of REV)
set -u
tree=$(cd "$1" && pwd); label=$2
py=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
dir=$(mktemp -d); cd "$dir"
PYTHONPATH=$tree/src "$py" -m headway up --port 0 --data-dir "$dir/.headway" > up.log 2>&1 &
for i in $(seq 1 240); do grep -q "headway is ready" up.log && break; sleep 0.5; done
URL=$(grep -o "ready on http://[0-9.:]*" up.log | cut -d' ' -f3)
TEXTS=$(python3 -c "print(','.join('\"text number %d about pumps, seals and bearings\"' % i for i in range(32)))")
for i in $(seq 1 8); do
  curl -s -o /dev/null $URL/v1/embeddings -H "authorization: Bearer demo-key-search-app" -H "content-type: application/json" -d "{\"model\":\"all-MiniLM-L6-v2\",\"input\":[$TEXTS]}"
  curl -s -o /dev/null $URL/v1/rerank -H "authorization: Bearer demo-key-support-bot" -H "content-type: application/json" -d "{\"query\":\"pump\",\"documents\":[$TEXTS]}"
done
SUP=$(pgrep -f "headway up --port 0 --data-dir $dir/.headway" | head -1)
python3 - "$SUP" "$label" <<'PY'
import os, sys
sup, label = int(sys.argv[1]), sys.argv[2]
pids = [sup] + [int(e) for e in os.listdir("/proc") if e.isdigit() and
        int(open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()[1]) == sup]
rows = []
for pid in pids:
    pss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/smaps_rollup") if l.startswith("Pss:"))
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    name = "supervisor (up)" if pid == sup else " ".join(argv[3:6])
    rows.append((name, pss / 1024))
for name, mib in rows:
    print(f"{label:8} {name:32} {mib:7.1f}")
print(f"{label:8} {'all':32} {sum(m for _, m in rows):7.1f}  ({len(rows)} processes)")
PY
pkill -INT -f "headway up --port 0 --data-dir $dir/.headway"
for i in $(seq 1 60); do pgrep -f "$dir/.headway" >/dev/null || break; sleep 0.5; done
