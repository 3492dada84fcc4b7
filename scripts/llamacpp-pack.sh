#!/usr/bin/env bash
# Packs the llama.cpp that PyPI's llama-cpp-python sdist vendors (pinned below) into
# device-pack/llama.cpp.tar.xz: CMake files, ggml with only its CPU and CUDA backends, src,
# include, common, vendor, and tools/ reduced to llama-bench (~4 MB), for the side-by-side
# run on the GPU machine (scripts/cuda-llamacpp.sh builds it there).
#   SDIST=path/to/llama_cpp_python-0.3.36.tar.gz bash scripts/llamacpp-pack.sh
set -euo pipefail
VERSION=0.3.36
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${SDIST:-}" ]; then
    python3 -m pip download --no-deps --no-binary :all: --no-build-isolation \
        "llama-cpp-python==$VERSION" -d "$work" >/dev/null 2>&1 || true
    if [ ! -e "$work/llama_cpp_python-$VERSION.tar.gz" ]; then
        # pip download builds the sdist's metadata first, which fails without its build
        # backend: take the file from PyPI's simple index instead (its sha256 is in the link).
        url=$(curl -fsSL https://pypi.org/simple/llama-cpp-python/ |
            grep -o "https://[^\"]*llama_cpp_python-$VERSION\.tar\.gz#sha256=[0-9a-f]*" | head -1)
        curl -fsSL -o "$work/llama_cpp_python-$VERSION.tar.gz" "${url%%#*}"
        echo "${url##*sha256=}  $work/llama_cpp_python-$VERSION.tar.gz" | sha256sum -c --quiet
    fi
    SDIST=$work/llama_cpp_python-$VERSION.tar.gz
fi
tar -xzf "$SDIST" -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
dst="$work/llama.cpp"
mkdir -p "$dst/ggml/src" "$dst/tools"
cp "$src"/CMakeLists.txt "$src"/LICENSE "$dst"/
cp -r "$src"/cmake "$src"/src "$src"/include "$src"/common "$src"/vendor "$dst"/
cp -r "$src"/ggml/CMakeLists.txt "$src"/ggml/cmake "$src"/ggml/include "$dst/ggml/"
find "$src/ggml/src" -maxdepth 1 -type f -exec cp {} "$dst/ggml/src/" \;
cp -r "$src"/ggml/src/ggml-cpu "$src"/ggml/src/ggml-cuda "$dst/ggml/src/"
cp -r "$src"/tools/llama-bench "$dst/tools/"
printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' \
    > "$dst/tools/CMakeLists.txt"
mkdir -p device-pack
tar -cJf device-pack/llama.cpp.tar.xz -C "$work" llama.cpp
ls -la device-pack/llama.cpp.tar.xz
