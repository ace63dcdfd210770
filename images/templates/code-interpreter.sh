#!/bin/bash
# images/templates/code-interpreter.sh OUT.img
#
# The `code-interpreter` template (E2B's `code-interpreter-v1`, docs/e2b.md):
# the `python` template with numpy, pandas and matplotlib from Debian, a
# Jupyter kernel (python3-ipykernel, python3-jupyter-client), and Airlock's
# code interpreter server (code-interpreter.d/usr/local/lib/airlock/
# interpreter.py), which the template build starts before its snapshot
# (code-interpreter.d/etc/airlock/template-start), so that every sandbox
# has it answering on port 49999 with a warm kernel.
#
# Environment: as python.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# python3-munkres: matplotlib's python3-fonttools depends on
# "python3-scipy | python3-munkres", and apt takes the first, whose
# python3-pythran brings g++, Boost's and OpenBLAS's headers and the Python
# headers: about 600 MiB and two minutes of the build for nothing a figure
# needs (pip can still install scipy, with a compiler the user adds)
export EXTRA_PACKAGES=python3-numpy,python3-pandas,python3-matplotlib,python3-munkres,python3-ipykernel,python3-jupyter-client${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}
export EXTRA_TREE=$HERE/code-interpreter.d
export MIN_IMAGE_MB=${MIN_IMAGE_MB:-2048}
# matplotlib's font cache (root's, as the kernel runs as root), made at the
# host's speed: otherwise every sandbox's first figure builds it under
# emulation (3.3 s of the 8.2 s its first import of pyplot took under TCG)
export EXTRA_CUSTOMIZE="HOME=/root MPLBACKEND=Agg python3 -c 'import matplotlib.font_manager'"
exec "$HERE/python.sh" "$@"
