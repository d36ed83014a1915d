#!/usr/bin/env bash
# Waits until every container of the compose stack is running and, where it has a health
# check, healthy (a one-shot, like tls-init, has exited 0); prints one line per container. Exits 1 naming the laggards after the
# deadline (default 180 s), so a stack that cannot start says so instead of hanging.
#   deploy/compose-wait.sh [SECONDS] [docker-compose options, e.g. -f compose.yaml -f compose.etcd.yaml]
set -euo pipefail
cd "$(dirname "$0")/.."
deadline=$(($(date +%s) + ${1:-180}))
shift || true
while :; do
    ids=$(docker-compose "$@" ps -q)
    if [ -z "$ids" ]; then
        echo "deploy/compose-wait.sh: no containers: run docker-compose up -d first" >&2
        exit 1
    fi
    # name, state, health ("none" without a health check; "done" for a one-shot that exited 0)
    states=$(docker inspect -f '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else if and (eq .State.Status "exited") (eq .State.ExitCode 0) (or (eq .HostConfig.RestartPolicy.Name "") (eq .HostConfig.RestartPolicy.Name "no"))}}done{{else}}none{{end}}' $ids | sed 's|^/||' | sort)
    waiting=$(awk '!($2 == "exited" && $3 == "done") && ($2 != "running" || ($3 != "healthy" && $3 != "none"))' <<<"$states")
    if [ -z "$waiting" ]; then
        awk '{ printf "  %-40s %s%s\n", $1, $2, ($3 == "none" ? "" : ", " $3) }' <<<"$states"
        exit 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "deploy/compose-wait.sh: not healthy in time:" >&2
        awk '{ printf "  %-40s %s, %s\n", $1, $2, $3 }' <<<"$waiting" >&2
        exit 1
    fi
    sleep 2
done
