#!/usr/bin/env bash
# Build the artifact infra/template.yaml deploys: target/lambda/quarry-lambda-indexer/bootstrap
# (cargo lambda build --release; x86_64, or pass --arm64 and deploy with Architecture=arm64).
# The same file tests/lambda_emulator.rs runs under the runtime emulator. Prints its size and sha256.
set -euo pipefail
exec "$(dirname "$0")/../scripts/lambda-build" "$@"
