#!/usr/bin/env bash
# joule on the GPU machine, in one run (tools/device/README.md says how it is launched and what each step proves):
#   0. inventory: OS, GPU, compilers, PyTorch, which of joule's libraries the image has;
#   1. the Debian packages of tools/device/debs (fetch_debs.sh) unpacked into a prefix, with `dpkg -x`;
#   2. joule's binaries: those of tools/device/prebuilt (prebuild.sh, on a build machine, against the same torch
#      version) where they are carried and start, else joule configured against the image's PyTorch (a CUDA
#      LibTorch) and NCCL, and built with every core;
#   3. the unit tests (built there only), and the nccl backend's and the reducer's GPU tests at one rank (Nccl*);
#   4. joule bench train --device cuda --precision bf16 --config bert-large, seq 128: seq/s, MFU against the
#      H200's dense bf16 peak (989 TFLOP/s, NVIDIA H200 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h200);
#      and PyTorch's own eager bf16 step on the same GPU at the same batches (tools/device/torch_bench.py); with
#      AB_JOULE=PATH, that joule's bench alternated with this one's (ab.jsonl);
#   5. a short joule train --device cuda ending in the training-cost summary, energy from NVML;
#   6. the HuggingFace round trip of that run's final weights (tools/device/hf_roundtrip.py).
# Without a GPU (the build machines' rehearsal) the same steps run on the CPU with a small model.
# Every step's output lands in OUT (log.txt, inventory.txt, bench.jsonl, summary.json, hf_roundtrip.json); a failing
# step is reported and the next ones still run. Exit code: the number of failed steps.
#   bash tools/device/h200.sh OUT
set -uo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${JOULE_DEVICE_PREFIX:-/tmp/joule-prefix}
build=${JOULE_DEVICE_BUILD:-/tmp/joule-build}
work=${JOULE_DEVICE_WORK:-/tmp/joule-work}
exec > >(tee "$out/log.txt") 2>&1
failed=0
step() { echo; echo "== $(date +%T) $*"; }
bad() { echo "FAILED: $*"; failed=$((failed + 1)); }
python=${PYTHON:-python3}

step "0. inventory"
{
  grep PRETTY_NAME /etc/os-release
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv 2> /dev/null || echo "no nvidia-smi"
  for tool in g++ cmake ninja nvcc; do echo "$tool: $(command -v $tool) $($tool --version 2> /dev/null | head -1)"; done
  $python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  $python -c 'import transformers, safetensors; print("transformers", transformers.__version__)' 2>&1 | tail -1
  for lib in libhdf5_serial.so.103 libmpi.so.40 libicuuc.so.72 libdeflate.so.0 libgtest.so libnccl.so.2; do
    echo "$lib: $(ldconfig -p | grep -m1 " $lib " | sed 's/.*=> //' || true)"
  done
  nproc
} | tee "$out/inventory.txt"
gpu=0
$python -c 'import torch, sys; sys.exit(0 if torch.cuda.device_count() > 0 else 1)' 2> /dev/null && gpu=1

step "1. Debian packages into $prefix"
if ls "$src"/tools/device/debs/*.deb > /dev/null 2>&1; then
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$src"/tools/device/debs/*.deb; do dpkg -x "$deb" "$prefix" || bad "dpkg -x $deb"; done
  echo "$(ls "$src"/tools/device/debs/*.deb | wc -l) packages unpacked"
  usr=$prefix/usr lib=$prefix/usr/lib/x86_64-linux-gnu
  # Open MPI and pkgconf find their files relative to the prefix they were built for (/usr): relocate them.
  export OPAL_PREFIX=$usr PKG_CONFIG_SYSROOT_DIR=$prefix PKG_CONFIG_LIBDIR=$lib/pkgconfig:$usr/share/pkgconfig
  export PATH=$usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  echo "no tools/device/debs: using the system's packages (a Debian build machine)"
  usr=/usr lib=/usr/lib/x86_64-linux-gnu
fi

step "2. joule's binaries: carried (prebuilt) or built against the image's PyTorch"
torch_dir=$($python -c 'import torch, os; print(os.path.dirname(torch.__file__))')
torch_version=$($python -c 'import torch; print(torch.__version__)')
site=$(dirname "$torch_dir")
prebuilt=$src/tools/device/prebuilt
joule="" tests=""
if [[ -x $prebuilt/bin/joule ]]; then
  if [[ $(cat "$prebuilt/torch_version.txt") == "$torch_version" ]]; then
    # The image's LibTorch, CUDA and NCCL libraries, where the build machine's paths (RUNPATH) do not exist; last, the
    # carried libraries (prebuild.sh) whose soname the image lacks.
    gap=/tmp/joule-prebuilt-libs && rm -rf "$gap" && mkdir -p "$gap"
    known=$(ldconfig -p | awk 'NR > 1 {print $1}')
    for lib in "$prebuilt"/lib/*; do
      [[ -e $lib ]] && ! grep -qxF "$(basename "$lib")" <<< "$known" && ln -s "$lib" "$gap/" && echo "carried: $(basename "$lib")"
    done
    export LD_LIBRARY_PATH=$torch_dir/lib:$(ls -d "$site"/nvidia/*/lib 2> /dev/null | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$gap
    ldd "$prebuilt/bin/joule" | grep "not found"
    if "$prebuilt/bin/joule" version; then
      joule=$prebuilt/bin/joule tests=$prebuilt/bin
      echo "prebuilt binaries of $(cat "$prebuilt/commit.txt") against torch $torch_version: not building"
    else
      echo "the prebuilt joule does not start here: building"
    fi
  else
    echo "prebuilt for torch $(cat "$prebuilt/torch_version.txt"), the image has $torch_version: building"
  fi
fi
if [[ -z $joule ]]; then
  nccl=(); [[ -f $site/nvidia/nccl/lib/libnccl.so.2 ]] && nccl=(-DNCCL_INCLUDE_DIR="$site/nvidia/nccl/include" -DNCCL_LIBRARY="$site/nvidia/nccl/lib/libnccl.so.2")
  rpath_link=$(ls -d "$site"/nvidia/*/lib 2> /dev/null | paste -sd:)
  mpicc=$usr/bin/mpicc.openmpi; [[ -x $mpicc ]] || mpicc=$(command -v mpicc)
  hdf5_hints=(); [[ -d $usr/include/hdf5/serial ]] && hdf5_hints=(-DHDF5_C_INCLUDE_DIR="$usr/include/hdf5/serial"
    -DHDF5_C_LIBRARY_hdf5="$lib/hdf5/serial/libhdf5.so" -DHDF5_C_COMPILER_EXECUTABLE=/bin/false)  # its h5cc would name /usr
  t0=$SECONDS
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$torch_dir;$usr" \
    -DMPI_C_COMPILER="$mpicc" -DICU_ROOT="$usr" -DZLIB_ROOT="$usr" "${hdf5_hints[@]}" "${nccl[@]}" -DJOULE_ONEDNN=OFF -DJOULE_OPENMP=OFF \
    ${rpath_link:+"-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$rpath_link"} > "$out/configure.txt" 2>&1 ||
    { tail -40 "$out/configure.txt"; bad "cmake configure"; }
  grep -E "joule:|Found (Torch|MPI_C|HDF5|ICU)" "$out/configure.txt"
  cmake --build "$build" -j "$(nproc)" > "$out/build.txt" 2>&1 || { grep -E "error|FAILED" "$out/build.txt" | head -30; bad "build"; }
  echo "configured and built in $((SECONDS - t0)) s"
  joule=$build/tools/joule tests=$build/tests
  "$joule" version
fi

step "3. unit tests; the nccl backend at one rank"
if [[ $tests == "$build/tests" ]]; then
  (cd "$build" && ctest -j "$(nproc)" -LE "mpi|e2e|cluster|slurm|fuzz" --timeout 600 > "$out/unit_tests.txt" 2>&1) || bad "unit tests"
  tail -3 "$out/unit_tests.txt"
else
  echo "prebuilt: the unit tests ran on the build machine against the same LibTorch (prebuild.sh); not here"
fi
if (( gpu )); then
  { timeout 300 "$tests/joule_nccl_tests" && timeout 300 "$tests/joule_mpi_tests" --gtest_filter='Nccl*'; } > "$out/nccl_tests.txt" 2>&1 ||
    bad "nccl tests"
  tail -3 "$out/nccl_tests.txt"
else
  echo "no GPU: the nccl tests are skipped"
fi

step "4. bench train"
# On the GPU, one line per micro-batch (BENCH_MICRO_BATCHES): the best seq/s and MFU, and how they grow with the batch.
if (( gpu )); then
  bench=(--device cuda --precision bf16 --config bert-large --seq-len 128 --steps 10 --warmup 3 --peak-tflops 989)
  micro_batches=${BENCH_MICRO_BATCHES:-64 128 256}
else
  bench=(--device cpu --precision auto --config bert-tiny --seq-len 128 --steps 3 --warmup 1)
  micro_batches=8
fi
: > "$out/bench.jsonl"
for micro_batch in $micro_batches; do
  timeout 240 "$joule" bench train "${bench[@]}" --micro-batch "$micro_batch" >> "$out/bench.jsonl" ||
    bad "bench train --micro-batch $micro_batch"
done
cat "$out/bench.jsonl"
if (( gpu )) && [[ -n ${AB_JOULE:-} && $AB_JOULE != "$joule" ]]; then  # an A/B against another joule, alternated
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for micro_batch in ${AB_MICRO_BATCHES:-64 256}; do
      for binary in "$joule" "$AB_JOULE"; do
        timeout 240 "$binary" bench train "${bench[@]}" --micro-batch "$micro_batch" |
          $python -c "import json, sys; r = json.loads(sys.stdin.read()); r.update(binary='$binary', round=$round); print(json.dumps(r))" \
          >> "$out/ab.jsonl" || bad "A/B bench train $binary --micro-batch $micro_batch"
      done
    done
  done
  $python -c "
import json, statistics
runs = [json.loads(l) for l in open('$out/ab.jsonl')]
for mb in sorted({r['micro_batch'] for r in runs}):
    by = {b: [r['seq_per_s'] for r in runs if r['micro_batch'] == mb and r['binary'] == b] for b in ('$joule', '$AB_JOULE')}
    a, b = (statistics.median(v) for v in by.values())
    print(f'A/B micro-batch {mb}: this {a:.0f} seq/s, other {b:.0f} seq/s, ratio {a / b:.3f} ({len(by[\"$joule\"])} runs each)')"
fi
if (( gpu )) && [[ ${TORCH_BENCH:-1} != 0 ]]; then  # the anchor: PyTorch's eager step, same GPU, model, batches, precision
  timeout 240 $python "$src/tools/device/torch_bench.py" --config bert-large --seq-len 128 --micro-batch $micro_batches \
    > "$out/torch_bench.jsonl" || bad "torch_bench.py"
  cat "$out/torch_bench.jsonl"
fi

step "5. joule train, ending in the training-cost summary"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$joule" data synth --out corpus.txt --documents 2000 --seed 7 > /dev/null &&
  "$joule" data vocab --input corpus.txt --out vocab.txt --size 2000 > /dev/null &&
  "$joule" data create --input corpus.txt --vocab vocab.txt --out shards --seq-len 128 --max-pred 20 --shards 2 \
    --eval-documents 100 > /dev/null || bad "data create"
if (( gpu )); then
  train=(--device cuda --set model.config=bert-base --set train.micro_batch=64 --set train.global_batch=64 --steps 60
         --instance p5en.48xlarge)
else
  train=(--device cpu --set model.config=bert-tiny --set train.micro_batch=8 --set train.global_batch=8 --steps 20)
fi
timeout 300 "$joule" train --config "$src/configs/bert-large-phase1.toml" --data shards/train --eval-data shards/eval --run-dir run \
  "${train[@]}" --set train.log_every_steps=10 --set eval.every_steps=1000000 --set eval.batch=32 --set eval.max_batches=4 \
  --set checkpoint.every_steps=1000000 > "$out/train.txt" 2>&1 || bad "joule train"
grep -A60 "training-cost summary" "$out/train.txt" | head -60
cp run/summary.json "$out/summary.json" 2> /dev/null || bad "no summary.json"
grep -q '"gpu"' run/summary.json 2> /dev/null && grep -o '"source[^,]*nvml[^,]*' run/summary.json | head -2

step "6. HuggingFace round trip"
timeout 240 $python "$src/tools/device/hf_roundtrip.py" --joule "$joule" --model run/final --data shards/eval --out "$work/hf" > /dev/null ||
  bad "hf round trip"
cp "$work/hf/hf_roundtrip.json" "$out/" 2> /dev/null && $python -c "
import json; r = json.load(open('$out/hf_roundtrip.json'))
print('round trip ok:', r['ok'], {k: max(f['max_abs_diff'] or 0 for f in r[k].values()) for k in ('joule_to_hf', 'hf_to_joule')})"

step "done: $failed step(s) failed"
exit "$failed"
