#!/usr/bin/env bash
# Builds the recording hook library (build/libfragsim_hook.so) and a fragsim
# binary with cgo, so that `fragsim probe` works (build/fragsim). Needs Go, gcc
# and g++, no CUDA toolkit nor PyTorch: both are found at run time. Binaries built
# against an older glibc run on newer ones, so build on the oldest system.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
export CGO_ENABLED=1
go build -trimpath -buildmode=c-shared -o build/libfragsim_hook.so ./cuda/hook
rm -f build/libfragsim_hook.h
go build -trimpath -o build/fragsim ./cmd/fragsim
echo "built build/libfragsim_hook.so and build/fragsim"
