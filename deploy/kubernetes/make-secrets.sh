#!/usr/bin/env bash
# Writes the settings files that hold headway's secrets into DIR, each readable by its
# owner only, with fresh random tokens. They never go into git (use a folder under
# .headway/, which is ignored) and never into a ConfigMap: docs/kubernetes.md turns them
# into Secrets, compose.yaml mounts them as its secrets.
#
#   make-secrets.sh dev DIR       the dev overlay: gateway.toml worker.toml billing.toml
#                                 executor.toml (the keys of the Secret headway-secrets),
#                                 and postgres-password for its in-cluster Postgres
#   make-secrets.sh prod DIR      the prod overlay: the same four files, with the external
#                                 services' URLs (and their credentials) taken from
#                                 POSTGRES_URL, REDIS_URL and NATS_URL (and the
#                                 cache's own Redis from CACHE_REDIS_URL, if set)
#   make-secrets.sh compose DIR   compose.yaml: headway.toml (every service's) and
#                                 postgres-password
#
# Each role gets only what it uses: the registry and ledger (postgres_url) for all, the
# weights token for the gateways (which check it) and the workers (which present it), the
# executor token for the gateways and the executors, the console's session secret for the
# gateways. Refuses to overwrite: new tokens would lock out the pods running on the old.
set -euo pipefail

usage() {
  echo "usage: $0 dev|prod|compose DIR" >&2
  exit 2
}

[[ $# -eq 2 ]] || usage
mode=$1
dir=$2
case $mode in
  dev | prod | compose) ;;
  *) usage ;;
esac

# 32 random bytes, URL-safe base64 without padding (as Python's secrets.token_urlsafe).
token() {
  head -c 32 /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_'
}

# A value for a TOML basic string: no quote, backslash or control character to escape.
toml_value() {
  local name=$1 value=$2
  if [[ -z $value ]]; then
    echo "$0: $name is empty" >&2
    exit 2
  fi
  if [[ $value == *[\"\\]* || $value =~ [[:cntrl:]] ]]; then
    echo "$0: $name holds a quote, a backslash or a control character" >&2
    exit 2
  fi
  printf '%s' "$value"
}

mkdir -p "$dir"
chmod 700 "$dir"
for name in gateway.toml worker.toml billing.toml executor.toml headway.toml postgres-password; do
  if [[ -e $dir/$name ]]; then
    echo "$0: $dir/$name exists; not replacing it (the running pods use its tokens)" >&2
    exit 1
  fi
done
umask 077

weights_token=$(token)
executor_token=$(token)
session_secret=$(token)

case $mode in
  dev)
    password=$(token)
    printf '%s' "$password" >"$dir/postgres-password"
    postgres_url="postgresql://headway:$password@headway-postgres.headway.svc.cluster.local:5432/headway"
    services=""
    ;;
  compose)
    password=$(token)
    printf '%s' "$password" >"$dir/postgres-password"
    postgres_url="postgresql://headway:$password@postgres:5432/headway"
    services=""
    ;;
  prod)
    postgres_url=$(toml_value POSTGRES_URL "${POSTGRES_URL:-}")
    services="redis_url = \"$(toml_value REDIS_URL "${REDIS_URL:-}")\"
nats_url = \"$(toml_value NATS_URL "${NATS_URL:-}")\"
"
    if [[ -n ${CACHE_REDIS_URL:-} ]]; then
      # The results cache's own Redis, never the quota one (docs/redis.md); without it
      # each gateway's cache stays in its memory.
      services+="
[redis]
cache_url = \"$(toml_value CACHE_REDIS_URL "$CACHE_REDIS_URL")\"
"
    fi
    ;;
esac

gateway="postgres_url = \"$postgres_url\"
$services
[batches]
executor_token = \"$executor_token\"

[weights]
token = \"$weights_token\"

[observability.console]
session_secret = \"$session_secret\"
"

if [[ $mode == compose ]]; then
  printf '%s' "$gateway" >"$dir/headway.toml"
  # Compose bind-mounts secret files as they are: the containers' uid (10001) must read
  # them. The folder stays 0700, so no other user of this machine can.
  chmod 644 "$dir/headway.toml" "$dir/postgres-password"
  echo "wrote $dir/headway.toml and $dir/postgres-password"
  exit 0
fi

printf '%s' "$gateway" >"$dir/gateway.toml"
printf 'postgres_url = "%s"\n\n[weights]\ntoken = "%s"\n' \
  "$postgres_url" "$weights_token" >"$dir/worker.toml"
nats_line=""
if [[ $mode == prod ]]; then
  nats_line="nats_url = \"$NATS_URL\""
fi
printf 'postgres_url = "%s"\n%s\n' "$postgres_url" "$nats_line" >"$dir/billing.toml"
printf 'postgres_url = "%s"\n%s\n\n[batches]\nexecutor_token = "%s"\n' \
  "$postgres_url" "$nats_line" "$executor_token" >"$dir/executor.toml"
echo "wrote $dir/{gateway,worker,billing,executor}.toml${password:+ and $dir/postgres-password}"
