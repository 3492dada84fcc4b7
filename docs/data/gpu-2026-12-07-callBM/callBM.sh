#!/usr/bin/env bash
# Device call BM (fourteenth session): docs/data/gpu-2026-12-07-callBL/callBL.sh as it stands,
# run with device-bin/ rebuilt at 91272ae (glint-old.xz and glint-bl.xz as packed for call BL).
exec bash docs/data/gpu-2026-12-07-callBL/callBL.sh "${1:-580}"
