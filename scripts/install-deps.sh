#!/usr/bin/env bash
# Installs the Debian packages Meridian needs to build and test, only those missing.
# Idempotent: a second run installs nothing and touches no package lists.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libfmt-dev libspdlog-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsqlite3-dev libpq-dev postgresql
  libxxhash-dev libssl-dev libsodium-dev zlib1g-dev libcpp-httplib-dev iperf3 python3-numpy prometheus
  iproute2 nftables iputils-ping systemd curl slurm-wlm munge python3-kubernetes python3-yaml
  python3-torch python3-sklearn openmpi-bin python3-mpi4py
  mosquitto mosquitto-clients libmosquitto-dev
  libh2o-evloop-dev wrk
  python3-dev pybind11-dev python3-cloudpickle python3-pytest python3-distributed
  clang libclang-rt-14-dev
  chromium
)
# Node.js and npm build the dashboard; this kind of machine may have them without
# Debian's packages (a newer Node.js), which serve as well.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
