#!/usr/bin/env bash
# Fetch the wheels the lent GPU machine lacks (it reaches no registry), for Python 3.12 on x86-64.
#
#   bash dev/fetch_wheels.sh          # .whl/: Sphinx, sphinx-gallery, furo, Liger-Kernel, pytest and their needs
#   bash dev/fetch_wheels.sh quack    # .whl-quack/1 and .whl-quack/2: quack at the lock's versions, for
#                                     # dev/quack_install.sh (two calls: one carry is at most 64 MiB)
#   bash dev/fetch_wheels.sh tests    # .whl-tests/: what tests/test_site.py's notebooks need (nbclient, ipykernel)
#   bash dev/fetch_wheels.sh helion   # .whl-helion/: Helion 1.2.0, the newest that imports with the lock's torch
#                                     # 2.11 (the GPU image has its other needs but filecheck, which it does not import)
#
# Install .whl there with (dev/gpu_build.sh does):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
download() {  # download DIR SPEC...: no dependencies, binary wheels for the GPU machine's Python
    local dir=$1; shift
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$dir" "$@"
}
pin() { grep -i "^$1==" requirements-gpu.lock; }  # the lock's pin of a package
if [ "${1:-}" = quack ]; then
    # quack's own wheels and the CuTe DSL's, CUDA 13 only (installed with --no-deps, the CUDA 12 libraries that
    # the lock carries for pip check are not needed). The CUDA 13 libraries are one 92 MB wheel: cut in three,
    # the first part travels with the small wheels (and .whl), the other two in a second call.
    rm -rf .whl-quack && mkdir -p .whl-quack/1 .whl-quack/2 .whl-quack/big
    download .whl-quack/1 $(for p in quack-kernels nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base \
        nvidia-cutlass-dsl-libs-core apache-tvm-ffi torch-c-dlpack-ext einops; do pin $p; done)
    download .whl-quack/big "$(pin nvidia-cutlass-dsl-libs-cu13)"
    big=$(ls .whl-quack/big/*.whl)
    split -n 3 -d "$big" .whl-quack/big/part
    mv .whl-quack/big/part00 .whl-quack/1/ && mv .whl-quack/big/part01 .whl-quack/big/part02 .whl-quack/2/
    for d in 1 2; do echo "$(basename "$big") $(sha256sum "$big" | cut -c1-64)" > .whl-quack/$d/MANIFEST; done
    rm -rf .whl-quack/big
    du -sh .whl-quack/1 .whl-quack/2
    exit
fi
if [ "${1:-}" = helion ]; then  # dev/gpu_build.sh installs it there (pip install --no-deps --target /tmp/helion-site)
    rm -rf .whl-helion && mkdir -p .whl-helion
    download .whl-helion helion==1.2.0
    ls .whl-helion
    exit
fi
if [ "${1:-}" = tests ]; then
    # what tests/test_site.py needs beyond .whl to run the notebooks in a Jupyter kernel (nbclient, ipykernel)
    rm -rf .whl-tests && mkdir -p .whl-tests
    download .whl-tests nbformat nbclient ipykernel jupyter-client jupyter-core traitlets pyzmq tornado comm debugpy \
        ipython ipython-pygments-lexers matplotlib-inline nest-asyncio psutil fastjsonschema jsonschema attrs referencing \
        rpds-py jsonschema-specifications platformdirs python-dateutil prompt-toolkit jedi parso pexpect ptyprocess \
        stack-data executing asttokens pure-eval wcwidth decorator pygments
    du -sh .whl-tests
    exit
fi
mkdir -p .whl
download .whl sphinx==9.0.4 sphinx-gallery==0.22.1 furo==2025.12.19 liger-kernel==0.8.5 "docutils<0.23" alabaster \
    babel imagesize snowballstemmer roman-numerals sphinxcontrib-applehelp sphinxcontrib-devhelp \
    sphinxcontrib-htmlhelp sphinxcontrib-jsmath sphinxcontrib-qthelp sphinxcontrib-serializinghtml \
    beautifulsoup4 soupsieve sphinx-basic-ng accessible-pygments pytest iniconfig pluggy pytest-xdist execnet
ls .whl
