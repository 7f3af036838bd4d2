#!/usr/bin/env bash
# The sandbox walls each test run off with Debian's bubblewrap (an allow-listed view of the files);
# without it runs fall back to a hide-list and say their isolation is weaker.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
elif command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
else
  echo "error: the test sandbox needs bubblewrap (bwrap); install it with: apt-get install -y bubblewrap" >&2
  exit 1
fi
command -v bwrap >/dev/null 2>&1
