#!/bin/sh
# Run every coverage-guided target for a bounded time: fuzz/run.sh [SECONDS per target, default 60]
set -e
T=${1:-60}
cd "$(dirname "$0")/.."
for f in json_envelope xml special_tokens mistral_pythonic harmony xml_tools xtml xml_element recipient; do
  python fuzz/target.py "$f" -max_total_time="$T" -rss_limit_mb=4096 || exit $?
done
