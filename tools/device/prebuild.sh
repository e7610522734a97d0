#!/usr/bin/env bash
# Builds, on a Debian 12 build machine, the GPU machine's joule binaries ahead of its run, so that the run spends its
# minutes on the GPU and not on a compiler: joule, joule_nccl_tests and joule_mpi_tests, against the CUDA LibTorch of
# a python whose torch is the GPU image's own version (a LibTorch binary runs only against the LibTorch it was built
# with), stripped, into tools/device/prebuilt/ (git-ignored) with that version in torch_version.txt. h200.sh uses
# them when the image's torch version matches, and builds there otherwise. Run fetch_debs.sh first.
#   PYTHON=/opt/t211/bin/python bash tools/device/prebuild.sh      (a venv with: pip install torch==2.11.0)
# The Debian packages that run them there come from fetch_debs.sh; carry tools/device/debs and tools/device/prebuilt.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
build=${JOULE_PREBUILD_DIR:-$src/build/cuda}
out=$src/tools/device/prebuilt
torch_dir=$($python -c 'import torch, os; print(os.path.dirname(torch.__file__))')
torch_version=$($python -c 'import torch; print(torch.__version__)')
[[ $torch_version == *+cu* ]] || { echo "prebuild.sh: $python's torch is $torch_version, not a CUDA build" >&2; exit 1; }
site=$(dirname "$torch_dir")
rpath_link=$(ls -d "$site"/nvidia/*/lib 2> /dev/null | paste -sd:)
export CCACHE_BASEDIR=$src CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir" -DJOULE_WITH_NCCL=ON \
  -DNCCL_INCLUDE_DIR="$site/nvidia/nccl/include" -DNCCL_LIBRARY="$site/nvidia/nccl/lib/libnccl.so.2" \
  -DJOULE_ONEDNN=OFF -DJOULE_OPENMP=OFF ${rpath_link:+"-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link"} > /dev/null
cmake --build "$build" -j "$(nproc)" --target joule joule_nccl_tests joule_mpi_tests
rm -rf "$out" && mkdir -p "$out/bin"
for binary in tools/joule tools/joule-engine tests/joule_nccl_tests tests/joule_mpi_tests; do
  strip -o "$out/bin/$(basename $binary)" "$build/$binary"
done
# The shared libraries they need that neither LibTorch's wheel nor the Debian packages of fetch_debs.sh hold (a
# library a newer image lacks under this soname, libunistring.so.2 on Ubuntu 24.04, say): h200.sh adds those the
# image lacks. glibc's and the C++ runtime stay the image's own (newer, and backward compatible).
mkdir -p "$out/lib"
in_debs=" $(for deb in "$src"/tools/device/debs/*.deb; do dpkg-deb -c "$deb"; done 2> /dev/null | awk '{print ($(NF-1) == "->") ? $(NF-2) : $NF}' |
  xargs -r -n1 basename | sort -u | tr '\n' ' ') "
for lib in $(ldd "$out"/bin/* "$(readlink -f "$(command -v orted)")" | awk '$3 ~ /^\/(usr\/)?lib\// {print $3}' | sort -u); do
  name=$(basename "$lib")
  case $name in ld-linux* | libc.so.* | libm.so.* | libpthread.so.* | librt.so.* | libdl.so.* | libutil.so.* | \
    libresolv.so.* | libstdc++.so.* | libgcc_s.so.*) continue ;;
  esac
  [[ $in_debs == *" $name "* ]] || cp -L "$lib" "$out/lib/$name"
done
echo "$torch_version" > "$out/torch_version.txt"
git -C "$src" rev-parse --short HEAD > "$out/commit.txt"
git -C "$src" diff --quiet HEAD || echo "$(cat "$out/commit.txt") with uncommitted changes" > "$out/commit.txt"
echo "prebuild.sh: $(du -sh "$out" | cut -f1) in tools/device/prebuilt, torch $torch_version, $(cat "$out/commit.txt")"
