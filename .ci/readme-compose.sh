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
down=$(grep -m1 '^docker-compose down' <<<"$block" | sed 's/ *#.*//')
# The block's own last line takes the stack down; on a failure before it, so does this.
# Either way a .env that was there before comes back.
trap '$down >/dev/null 2>&1 || true; [ -e ".env.before-readme-check.$$" ] && mv ".env.before-readme-check.$$" .env || true' EXIT
if [ -e .env ]; then
    mv .env ".env.before-readme-check.$$"
fi
printf '%s\n' "$block" | sed 's/^/  $ /'
bash -euxo pipefail -c "$block"
