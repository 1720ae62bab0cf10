#!/usr/bin/env bash
# Search path edits on a large ELF file (issue #18 item 3): `quarry package python` over a
# TheRock tree whose one core library is SIZE_MIB large (an incompressible non-loaded section
# added with objcopy), against what TheRock runs for that file (`cp`, then `patchelf --add-rpath`
# twice and `patchelf --set-rpath --force-rpath`). Peak RSS from /usr/bin/time; Quarry's run
# includes writing every wheel (the zip of the library dominates its wall time), patchelf's only
# the edits. The point is memory: patchelf reads the file whole, Quarry's edit reads headers only.
#
#   bench/rpath.sh target/release/quarry [SIZE_MIB]
set -euo pipefail
quarry=$(realpath "$1")
size=${2:-256}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/artifacts/core-hip_lib_generic/core/clr/stage
mkdir -p "$stage/lib"
echo "core/clr/stage" > "$work/artifacts/core-hip_lib_generic/artifact_manifest.txt"
printf 'int big(void) { return 1; }\n' > "$work/big.c"
cc -shared -fPIC -o "$work/small.so" "$work/big.c" -Wl,-soname,libbig.so -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN'
head -c $((size * 1024 * 1024)) /dev/urandom > "$work/blob"
objcopy --add-section .qblob="$work/blob" "$work/small.so" "$stage/lib/libbig.so"
rm "$work/blob"
echo "library: $(stat -c %s "$stage/lib/libbig.so") bytes"

measure() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" > /dev/null 2>&1
  read -r wall rss < "$work/time"
  printf '| %s | %s | %s |\n' "$label" "$wall" "$((rss / 1024))"
}
echo "| what | wall (s) | peak RSS (MiB) |"
echo "| --- | ---: | ---: |"
SOURCE_DATE_EPOCH=1795000000 ROCM_SDK_WHEEL_PLATFORM_TAG=linux-x86_64 \
  measure "quarry package python --jobs 1 (edit + every wheel)" \
  "$quarry" package python --artifact-dir "$work/artifacts" --dest-dir "$work/dist" --rocm-version 7.1.0 --jobs 1
copy=$work/patchelf.so
measure "cp (TheRock's shutil.copy2)" cp "$stage/lib/libbig.so" "$copy"
measure "patchelf --add-rpath (1st)" patchelf --add-rpath '$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib' "$copy"
measure "patchelf --add-rpath (2nd)" patchelf --add-rpath '$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib' "$copy"
measure "patchelf --set-rpath --force-rpath" patchelf --set-rpath "$(patchelf --print-rpath "$copy")" --force-rpath "$copy"
unzip -q -o "$work/dist"/rocm_sdk_core-*.whl -d "$work/site"
echo
echo "quarry:   $(readelf -d "$work/site/_rocm_sdk_core/lib/libbig.so" | grep -E 'R(UN)?PATH')"
echo "patchelf: $(readelf -d "$copy" | grep -E 'R(UN)?PATH')"
