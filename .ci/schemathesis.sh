#!/usr/bin/env bash
# Schemathesis against live services on a real PostgreSQL (issue 14): each service's own
# /openapi.json drives the requests; any server error, response that violates the schema or
# undocumented status code fails the run. Needs DATABASE_URL (a maintenance database of a
# PostgreSQL server: .ci/run starts one) and the services' debug binaries (built here).
# Usage: .ci/schemathesis.sh [EXAMPLES_PER_OPERATION]   (default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
examples=${1:-100}
venv=${SCHEMATHESIS_VENV:-/opt/schemathesis-venv}
if [ ! -x "$venv/bin/schemathesis" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q schemathesis
fi
"$venv/bin/schemathesis" --version
: "${DATABASE_URL:?DATABASE_URL must name a PostgreSQL server}"
# The binaries of the workspace's test build (as test_support::cargo_bins asks for them):
# after `cargo test --workspace` this builds nothing.
cargo test -q --workspace --no-run
work=$(mktemp -d /tmp/schemathesis.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fresh_db() {
    local name=$1
    psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
    echo "${DATABASE_URL%/*}/$name"
}
wait_ready() {
    for _ in $(seq 1 100); do
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
            "$1/health/ready" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "$1 did not become ready" >&2; return 1
}

client_token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
eval "$(./target/debug/lock-server --generate-signing-key | grep -v '^#' | sed 's/^/export /')"
# Every check but positive_data_acceptance: JSON Schema's `integer` admits `1.0`, which our
# wire refuses on purpose (C3 ct3-conventions: tokens and TTLs are JSON integers; `1.0` and
# `+3` are 400, naming the field), so "schema-valid" `1.0` bodies are refused by design.
checks=(--checks all --exclude-checks positive_data_acceptance)
run() { "$venv/bin/schemathesis" run "$@" "${checks[@]}" --max-examples "$examples" --seed 1 --no-color; }
# What a failed pass leaves to read: the service's warnings and errors.
show_log() {
    echo "--- $1: WARN and ERROR lines (last 20)"
    grep -E '"level":"(WARN|ERROR)"' "$work/$1.log" | tail -20 || true
}

start_lock_server() {
    port=$(free_port)
    DATABASE_URL=$(fresh_db schemathesis_lock) LOCK_SERVER_BIND="127.0.0.1:$port" \
        LOCK_CLIENT_TOKEN="$client_token" LOCK_ADMIN_TOKEN="admin-$client_token" \
        LOCK_UNSAFE_ALLOW_NON_DURABLE_STORE=true UNSAFE_PLAINTEXT_HTTP=true LOG_FORMAT=json RUST_LOG=warn \
        ./target/debug/lock-server >"$work/lock-server.log" 2>&1 &
    lock_pid=$!
    pids+=("$lock_pid")
    lock="http://127.0.0.1:$port"
    wait_ready "$lock"
}
lock_passes() {
    echo "lock-server L1-L7 and health, as a lock client: $examples examples per operation"
    run "$lock/openapi.json" --exclude-path '/v1/locks/{lock_key}/revoke' \
        -H "Authorization: Bearer $client_token" || return 1
    echo "lock-server L8, as an operator"
    run "$lock/openapi.json" --include-path '/v1/locks/{lock_key}/revoke' \
        -H "Authorization: Bearer admin-$client_token"
}
start_lock_server
if ! lock_passes; then
    show_log lock-server
    # A forward step of this host's wall clock against its monotonic clock (a VM's clock
    # set after a pause) is what the lock-server's store-clock guard exists for: it answers
    # 503 STORE_UNAVAILABLE for the longest lease, and schemathesis counts every 5xx. That
    # one cause, shown in the log, earns one more try on a fresh replica; any other fails.
    if ! grep -q '"event":"store_clock_stepped"' "$work/lock-server.log"; then exit 1; fi
    echo "the host's wall clock stepped during the run (store_clock_stepped above): once more on a fresh lock-server"
    kill "$lock_pid"
    start_lock_server
    lock_passes || { show_log lock-server; exit 1; }
fi

# payment-resource: one pass per role (each operation is tried with its own role's
# credential), then health and metrics, which need none. Fenced writes get schemathesis' own
# X-Fencing-Token / X-Fencing-Proof values: their refusals (400, 403 PROOF_INVALID) are
# part of what is checked.
port=$(free_port)
PAYMENT_BIND="127.0.0.1:$port" UNSAFE_PLAINTEXT_HTTP=true DATABASE_URL=$(fresh_db schemathesis_pay) \
    PAYMENT_CREATOR_TOKEN="creator-$client_token" PAYOUT_EXECUTOR_TOKEN="executor-$client_token" \
    PAYMENT_PROXY_TOKEN="proxy-$client_token" PAYMENT_ADMIN_TOKEN="admin-$client_token" \
    PAYMENT_READER_TOKEN="reader-$client_token" FENCE_PUBLIC_KEYS="$FENCE_PUBLIC_KEYS" LOG_FORMAT=json RUST_LOG=warn \
    ./target/debug/payment-resource >"$work/payment-resource.log" 2>&1 &
pids+=($!)
pay="http://127.0.0.1:$port"
wait_ready "$pay"
for pass in "creator P0_create" "executor P1_list_claimable P2_claim P3_post" \
    "proxy reserve record_outcome" "admin refence" "reader P1_get get_submission ledger_summary"; do
    read -r role operations <<<"$pass"
    include=()
    for operation in $operations; do include+=(--include-operation-id "$operation"); done
    echo "payment-resource as $role: $operations"
    run "$pay/openapi.json" "${include[@]}" -H "Authorization: Bearer $role-$client_token"
done
echo "payment-resource, health and metrics"
run "$pay/openapi.json" --include-method GET --exclude-operation-id P1_list_claimable \
    --exclude-operation-id P1_get --exclude-operation-id get_submission \
    --exclude-operation-id ledger_summary
