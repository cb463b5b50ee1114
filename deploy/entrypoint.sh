#!/bin/sh
# The container's entrypoint: `pagedserve serve` with the model path and flags from the
# environment, then any arguments given to the container (they win: a flag given twice takes
# its last value).
#   PAGEDSERVE_MODEL  model folder or .gguf file (default /models/model)
#   PAGEDSERVE_HOST   listen address (default 0.0.0.0: reachable from the pod network)
#   PAGEDSERVE_PORT   TCP port (default 8000)
#   PAGEDSERVE_ARGS   more serve flags, split on spaces (e.g. "--metrics-compat vllm")
# `docker run IMAGE --help` prints every flag.
set -eu
# shellcheck disable=SC2086  # PAGEDSERVE_ARGS is a list of flags: split it on purpose
exec /usr/local/bin/pagedserve serve \
  --model "${PAGEDSERVE_MODEL:-/models/model}" \
  --host "${PAGEDSERVE_HOST:-0.0.0.0}" \
  --port "${PAGEDSERVE_PORT:-8000}" \
  ${PAGEDSERVE_ARGS:-} "$@"
