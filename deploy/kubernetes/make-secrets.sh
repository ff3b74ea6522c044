#!/usr/bin/env bash
# Writes the settings files that hold headway's secrets into DIR, each readable by its
# owner only, with fresh random tokens. They never go into git (use a folder under
# .headway/, which is ignored) and never into a ConfigMap: docs/kubernetes.md turns each
# into a Secret of its own, compose.yaml mounts each as a secret of its own.
#
#   make-secrets.sh dev DIR       the dev overlay: gateway.toml worker.toml billing.toml
#                                 executor.toml (one Secret each: headway-secrets-<role>),
#                                 postgres-password for its in-cluster Postgres, and for
#                                 the Job headway-db-roles the owner's db-owner.toml and
#                                 db-roles/ (each role's Postgres password)
#   make-secrets.sh prod DIR      the prod overlay: the same four files, with the external
#                                 services' URLs (and their credentials) taken from
#                                 POSTGRES_URL, REDIS_URL and NATS_URL; a role's own
#                                 database URL (its own Postgres role) from
#                                 POSTGRES_URL_GATEWAY, _WORKER, _BILLING or _EXECUTOR
#                                 where set, else POSTGRES_URL; the cache's own Redis
#                                 from CACHE_REDIS_URL, if set (the gateways')
#   make-secrets.sh compose DIR   compose.yaml: the same files as dev (db-owner.toml is
#                                 also the one-off model import's)
#
# Each role gets only what it uses (tests/unit/test_secrets.py checks it against the code):
# its database URL (postgres_url) for all, its own Postgres role's in dev and compose
# (headway_<role>, made with only its grants by `headway db roles`, which alone reads the
# owner's URL; docs/security.md), the weights token for the gateways (which check
# it) and the workers (which present it), the executor token for the gateways and the
# executors, the console's session secret for the gateways; in prod the Redis URL for the
# gateways alone, the NATS URL for the gateways, billing consumers and executors.
# Refuses to overwrite: new tokens would lock out the pods running on the old.
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
for name in gateway.toml worker.toml billing.toml executor.toml db-owner.toml db-roles postgres-password; do
  if [[ -e $dir/$name ]]; then
    echo "$0: $dir/$name exists; not replacing it (the running pods use its tokens)" >&2
    exit 1
  fi
done
umask 077

weights_token=$(token)
executor_token=$(token)
session_secret=$(token)

# Each role's database URL: its own Postgres role's. Dev and compose make the roles in their
# own Postgres (the Job headway-db-roles, compose's db-roles: `headway db roles` as the owner,
# the superuser `headway`, with the passwords in db-roles/); in prod POSTGRES_URL_<ROLE>.
case $mode in
  dev | compose)
    password=$(token)
    printf '%s' "$password" >"$dir/postgres-password"
    host=headway-postgres.headway.svc.cluster.local
    [[ $mode == compose ]] && host=postgres
    printf 'postgres_url = "%s"\n' "postgresql://headway:$password@$host:5432/headway" \
      >"$dir/db-owner.toml"
    mkdir "$dir/db-roles"
    for role in gateway worker billing executor; do
      role_password=$(token)
      printf '%s' "$role_password" >"$dir/db-roles/$role"
      printf -v "postgres_$role" '%s' \
        "postgresql://headway_$role:$role_password@$host:5432/headway"
    done
    redis_line=""
    nats_line=""
    cache_table=""
    ;;
  prod)
    shared=$(toml_value POSTGRES_URL "${POSTGRES_URL:-}")
    for role in gateway worker billing executor; do
      own="POSTGRES_URL_${role^^}"
      if [[ -n ${!own:-} ]]; then
        printf -v "postgres_$role" '%s' "$(toml_value "$own" "${!own}")"
      else
        printf -v "postgres_$role" '%s' "$shared"
      fi
    done
    redis_line="redis_url = \"$(toml_value REDIS_URL "${REDIS_URL:-}")\""
    nats_line="nats_url = \"$(toml_value NATS_URL "${NATS_URL:-}")\""
    cache_table=""
    if [[ -n ${CACHE_REDIS_URL:-} ]]; then
      # The results cache's own Redis, never the quota one (docs/redis.md); without it
      # each gateway's cache stays in its memory.
      cache_table="
[redis]
cache_url = \"$(toml_value CACHE_REDIS_URL "$CACHE_REDIS_URL")\"
"
    fi
    ;;
esac

# The URL lines first (top-level keys), then the tables.
printf 'postgres_url = "%s"\n%s\n%s\n\n[batches]\nexecutor_token = "%s"\n\n[weights]\ntoken = "%s"\n\n[observability.console]\nsession_secret = "%s"\n%s' \
  "$postgres_gateway" "$redis_line" "$nats_line" "$executor_token" "$weights_token" \
  "$session_secret" "$cache_table" >"$dir/gateway.toml"
printf 'postgres_url = "%s"\n\n[weights]\ntoken = "%s"\n' \
  "$postgres_worker" "$weights_token" >"$dir/worker.toml"
printf 'postgres_url = "%s"\n%s\n' "$postgres_billing" "$nats_line" >"$dir/billing.toml"
printf 'postgres_url = "%s"\n%s\n\n[batches]\nexecutor_token = "%s"\n' \
  "$postgres_executor" "$nats_line" "$executor_token" >"$dir/executor.toml"

if [[ $mode == compose ]]; then
  # Compose bind-mounts secret files as they are: the containers' uid (10001) must read
  # them. The folder stays 0700, so no other user of this machine can.
  chmod 755 "$dir/db-roles"
  chmod 644 "$dir"/{gateway,worker,billing,executor,db-owner}.toml "$dir/postgres-password" \
    "$dir"/db-roles/*
fi
echo "wrote $dir/{gateway,worker,billing,executor}.toml${password:+, $dir/postgres-password, \
$dir/db-owner.toml and $dir/db-roles/}"
