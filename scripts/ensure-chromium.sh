#!/usr/bin/env bash
# Browser tests drive Debian's chromium (playwright cannot download its own browsers here).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
elif command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "error: the browser tests need /usr/bin/chromium; install it with: apt-get install -y chromium" >&2
  exit 1
fi
test -x /usr/bin/chromium
