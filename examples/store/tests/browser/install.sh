#!/usr/bin/env bash
# Installs the browser tests' npm packages exactly as package-lock.json pins them.
# Chromium itself comes from Debian (/usr/bin/chromium); playwright never downloads a browser.
set -euo pipefail
cd "$(dirname "$0")"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
npm ci --no-audit --no-fund
