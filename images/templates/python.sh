#!/bin/bash
# images/templates/python.sh OUT.img
#
# The `python` template root file system (the default for users): Debian
# bookworm minbase (images/debian.sh) with python3, pip and venv, and the
# tools an agent expects in a Debian box (ps, less, unzip, jq, wget, file,
# git, curl, CA certificates), at least 1 GiB.
#
# Environment: debian.sh's (AIRLOCK_APT_CACHE, AIRLOCK_MIRROR, SUITE,
# EXTRA_TREE, ...), and EXTRA_PACKAGES (comma list) for a template built on
# this one (code-interpreter.sh).
set -euo pipefail
# Keep in step with tests/integration/test_python_template.py and
# docs/images.md (which says why there is no C compiler).
PACKAGES=python3,python3-pip,python3-venv,bash,coreutils,procps,less,unzip,jq,wget,file,ca-certificates,curl,git
PACKAGES=$PACKAGES${EXTRA_PACKAGES:+,$EXTRA_PACKAGES} REQUIRE=/usr/bin/python3 \
	exec "$(dirname "$0")/../debian.sh" "$@"
