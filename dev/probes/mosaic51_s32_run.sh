#!/bin/bash
cd "$(dirname "$0")"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for k in ${PLANS_RUN:-"bfloat16 32768" "float32 32768" "bfloat16 16384" "float32 16384"}; do
  timeout ${T:-110} python3 p.py gpu $k 2>&1 | grep -v -i warning
  echo "rc=$? ($k)"
done
