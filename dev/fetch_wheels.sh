#!/usr/bin/env bash
# Fetch the wheels the lent GPU machine lacks (it reaches no registry) into .whl/,
# for Python 3.12 on x86-64. Install there with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
pkgs=(sphinx==9.0.4 sphinx-gallery==0.22.1 furo==2025.12.19 liger-kernel==0.8.5 "docutils<0.23" alabaster
      babel imagesize snowballstemmer roman-numerals sphinxcontrib-applehelp sphinxcontrib-devhelp
      sphinxcontrib-htmlhelp sphinxcontrib-jsmath sphinxcontrib-qthelp sphinxcontrib-serializinghtml
      beautifulsoup4 soupsieve sphinx-basic-ng accessible-pygments pytest iniconfig pluggy)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pkgs[@]}"
ls .whl
