#!/usr/bin/env bash
# Start the Knowledge API without PM2 (PM2 runs this same script).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/knowledge-api ] || make install
make --quiet bytecode
mkdir -p logs
exec .venv/bin/knowledge-api serve "$@"
