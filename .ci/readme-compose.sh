#!/usr/bin/env bash
# Runs the README's compose block exactly as written (the first ```sh block under "Run it with
# Docker Compose"), from a checkout with no .env: a newcomer's copy-paste, line by line.
set -euo pipefail
cd "$(dirname "$0")/.."
block=$(awk '/^## Run it with Docker Compose/ { section = 1 }
    section && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' README.md)
if [ -z "$block" ]; then
    echo "no sh block under '## Run it with Docker Compose' in README.md" >&2
    exit 1
fi
if [ -e .env ]; then
    mv .env ".env.before-readme-check.$$"
    trap 'mv ".env.before-readme-check.$$" .env' EXIT
fi
printf '%s\n' "$block" | sed 's/^/  $ /'
down=$(grep -m1 '^docker-compose down' <<<"$block" | sed 's/ *#.*//')
# The block's own last line takes the stack down; on a failure before it, so does this.
trap '$down >/dev/null 2>&1 || true; [ -e ".env.before-readme-check.$$" ] && mv ".env.before-readme-check.$$" .env || true' EXIT
bash -euxo pipefail -c "$block"
