#!/usr/bin/env bash
# Downloads, on a Debian 12 build machine, the Debian packages the GPU machine's image lacks for building joule (HDF5,
# Open MPI, ICU, cxxopts, toml11, nlohmann-json, GoogleTest, libdeflate, pkg-config and what they link), into
# tools/device/debs/ (git-ignored). tools/device/h200.sh unpacks them there into a prefix with `dpkg -x`; the C and
# C++ runtime (libc6, libstdc++6) stays the image's own. About 35 MB.
#   bash tools/device/fetch_debs.sh          then carry tools/device/debs to the device machine
set -euo pipefail
cd "$(dirname "$0")"
packages=(
  # HDF5 (serial) and what libhdf5 links
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 libsz2 libaec0 libaec-dev zlib1g-dev
  libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libbrotli1 libldap-2.5-0 libsasl2-2 libsasl2-modules-db
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libunistring2  # Ubuntu 24.04 has libunistring5
  # Open MPI 4.1 with PMIx, and its transports
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libpmix-dev libhwloc15 libhwloc-dev libevent-2.1-7
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-dev libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
  libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libmunge2
  # the rest of joule's find_package list
  libicu72 libicu-dev libcxxopts-dev nlohmann-json3-dev libtoml11-dev libgtest-dev libdeflate0 libdeflate-dev
  pkgconf pkgconf-bin libpkgconf3
)
rm -rf debs && mkdir debs && cd debs
apt-get download "${packages[@]}"
echo "fetch_debs.sh: $(ls | wc -l) packages, $(du -sh . | cut -f1) in tools/device/debs"
