#!/usr/bin/env bash
# Compile requirements/image.txt: every package the image installs (the product with its `demo`
# extra, the Python client with its `permits` extra, their build backend) at the version
# constraints.txt pins, with the hash of every file the package index holds for it, so that
# `pip install --require-hashes` in the Dockerfile refuses anything else. Run it after changing
# constraints.txt or a dependency in either pyproject.toml; tests/deploy/test_image_lock.py
# fails until then. Needs pip-tools (`pip install pip-tools`) and the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the package index: no local wheel folder or extra index of this machine's pip settings.
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  CUSTOM_COMPILE_COMMAND="scripts/lock_image.sh" \
  pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
  --no-emit-find-links --extra demo --extra permits --output-file requirements/image.txt \
  pyproject.toml clients/python/pyproject.toml requirements/image.in
