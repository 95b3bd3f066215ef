#!/bin/sh
# Renders a run's report.html headless, as a person would see it, to a PNG (docs/report.png was
# made this way). Needs Debian's chromium: apt-get install chromium.
# Usage: scripts/report_screenshot.sh runs/latest [out.png]
set -eu
run=${1:?usage: $0 RUN [out.png]}
out=${2:-report.png}
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,1250 \
    --screenshot="$out" "file://$(realpath "$run")/report.html" 2>/dev/null
echo "$out"
