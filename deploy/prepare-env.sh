#!/usr/bin/env bash
# Prepares the compose stack's .env: every secret .env.example names gets a fresh random value
# unless .env already holds a real one, and the lock-servers get a generated signing key pair.
# A value of yours is never overwritten; a placeholder copied from .env.example (change-me-...,
# replace-with-...) or a missing line is. Prints the names it filled, never a value.
#
#   deploy/prepare-env.sh            # .env beside compose.yaml
#   ENV_FILE=/path/.env deploy/prepare-env.sh
#
# The signing key comes from the lock-server itself (`--generate-signing-key`): this
# checkout's release binary (deploy/build-images.sh builds it), else the locally built image,
# else LOCK_SERVER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
env_file=${ENV_FILE:-.env}
umask 077
touch "$env_file"

# The value of KEY in .env, or nothing.
current() { sed -n "s/^$1=//p" "$env_file" | tail -n 1; }
placeholder() { case "$1" in ''|change-me*|replace-with*|*=replace-with*) return 0 ;; *) return 1 ;; esac; }
# Sets KEY=VALUE in .env: replaces its line, or appends one.
put() {
    local key=$1 value=$2 tmp
    tmp=$(mktemp "$env_file.XXXXXX")
    awk -v k="$key" -v v="$value" 'BEGIN { done = 0 }
        index($0, k "=") == 1 { if (!done) { print k "=" v; done = 1 }; next }
        { print }
        END { if (!done) print k "=" v }' "$env_file" >"$tmp"
    mv "$tmp" "$env_file"
}
random_secret() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

filled=()
# Every KEY=... of .env.example except the signing key's three lines, which come as one pair.
for key in $(sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' .env.example); do
    case "$key" in LOCK_SIGNING_KEY_ID|LOCK_SIGNING_KEY|FENCE_PUBLIC_KEYS) continue ;; esac
    if placeholder "$(current "$key")"; then
        put "$key" "$(random_secret)"
        filled+=("$key")
    fi
done

if placeholder "$(current LOCK_SIGNING_KEY)" || placeholder "$(current FENCE_PUBLIC_KEYS)"; then
    if [ -n "${LOCK_SERVER_BIN:-}" ]; then
        generate=("$LOCK_SERVER_BIN" --generate-signing-key)
    elif [ -x target/release/lock-server ]; then
        generate=(target/release/lock-server --generate-signing-key)
    elif command -v docker >/dev/null 2>&1 && docker image inspect payouts/lock-server:local >/dev/null 2>&1; then
        generate=(docker run --rm payouts/lock-server:local --generate-signing-key)
    else
        echo "deploy/prepare-env.sh: no lock-server to generate the signing key: run deploy/build-images.sh first" >&2
        exit 1
    fi
    lines=$("${generate[@]}")
    for key in LOCK_SIGNING_KEY_ID LOCK_SIGNING_KEY FENCE_PUBLIC_KEYS; do
        value=$(printf '%s\n' "$lines" | sed -n "s/^$key=//p")
        if [ -z "$value" ]; then
            echo "deploy/prepare-env.sh: ${generate[*]} printed no $key" >&2
            exit 1
        fi
        put "$key" "$value"
    done
    filled+=(LOCK_SIGNING_KEY_ID LOCK_SIGNING_KEY FENCE_PUBLIC_KEYS)
fi

if [ ${#filled[@]} -eq 0 ]; then
    echo "$env_file: every secret already set, nothing changed"
else
    echo "$env_file: generated ${filled[*]}"
fi
