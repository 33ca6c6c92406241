#!/usr/bin/env bash
# Builds the dashboard (web/ -> web/dist, which the coordinator serves) with the npm
# packages pinned in web/package-lock.json, and installs the browser test's
# playwright-core with them. Needs Node.js and npm (scripts/install-deps.sh) and the
# npm registry. Skips the install when web/node_modules already matches the lock.
set -euo pipefail
cd "$(dirname "$0")/../web"
if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.meridian-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.meridian-lock
fi
npx --no-install vite build --logLevel warn
echo "build-web: the dashboard is in web/dist"
