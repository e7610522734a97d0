#!/usr/bin/env bash
# Installs what joule needs from Debian's archive (idempotent). Not root: prints the exact command.
#   bash tools/setup.sh              what the main job needs: build joule and run it (tools/demo.sh)
#   bash tools/setup.sh --tests      also what the tests add (tools/test.sh)
#   bash tools/setup.sh --reference  also python3-torch/python3-h5py, to regenerate test fixtures
set -euo pipefail

packages=(cmake ninja-build g++ ccache pkg-config
          libtorch-dev libopenblas0-pthread libopenblas-dev
          libdnnl-dev         # oneDNN's headers: fp32 GEMMs through it where OpenBLAS's kernels are below the CPU
          libopenmpi-dev openmpi-bin libhdf5-dev libicu-dev zlib1g-dev libdeflate-dev
          libcxxopts-dev nlohmann-json3-dev libtoml11-dev
          libcpp-httplib-dev) # joule serve's HTTP server
test_packages=(libgtest-dev
               slurm-wlm munge        # the Slurm launch test runs a private one-host cluster
               chromium               # the HTML report test renders in headless Chromium
               clang libclang-rt-dev  # the libFuzzer harnesses (tests/fuzz)
               clang-format           # tools/check/format.sh holds the C++ files to .clang-format
               python3-venv curl)     # tests/e2e/serve.sh: tritonclient in a venv (below), curl
tests=0
for arg in "$@"; do
  case $arg in
    --tests) packages+=("${test_packages[@]}") tests=1 ;;
    --reference) packages+=("${test_packages[@]}" python3-torch python3-h5py) tests=1 ;;
    *) echo "joule setup: unknown argument '$arg' (use --tests or --reference)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "joule setup: missing packages. Run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "joule setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# LibTorch calls the BLAS behind the libblas.so.3 alternative: make sure it is OpenBLAS, not the
# reference BLAS (about 20x slower matmuls).
blas_link=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
if [[ -n "$blas_link" && "$blas_link" != *openblas* ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "joule setup: libblas.so.3 is $blas_link (reference BLAS). Run:" >&2
    echo "  sudo update-alternatives --auto libblas.so.3-x86_64-linux-gnu" >&2
    exit 1
  fi
  update-alternatives --auto libblas.so.3-x86_64-linux-gnu
fi
# tests/e2e/serve.sh drives joule serve with tritonclient[http] (PyPI: an independent Open Inference Protocol client),
# in a venv outside the repository.
if ((tests)); then
  venv=${JOULE_TRITONCLIENT_VENV:-$HOME/.cache/joule/venv-tritonclient}
  if ! "$venv/bin/python" -c "import tritonclient.http" 2> /dev/null; then
    echo "joule setup: tritonclient[http] into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "tritonclient[http]==2.73.0"
  fi
fi
echo "joule setup: all dependencies present"
