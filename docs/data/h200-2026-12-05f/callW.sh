#!/usr/bin/env bash
# Device call W (the session's last ~60 s): conformance on the review commits (the shared mma
# wrapper, the top-k kernels' shared output pass, the cluster threshold of 8,192 keys).
export NCCL_NVLS_ENABLE=0 GLINT_KERNEL_CACHE=/tmp/glint-kernels RUST_LOG=warn
tar -xJf device-pack/bin.tar.xz
cat device-bin/COMMIT > $OUT/ct.txt
timeout 50 device-bin/tests/glint-cuda--conformance > $OUT/conformance.log 2>&1; echo "conformance rc=$? $(grep '^test result' $OUT/conformance.log | tail -1)" >> $OUT/ct.txt
