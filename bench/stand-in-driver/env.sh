# Sourced by the host-instruction counters (bench/host-instructions.sh,
# bench/python-host-instructions.sh) after they set `here` (bench/) and `root`: builds the
# stand-in driver into a temporary `work` folder (removed at exit), puts it and NVRTC first on
# the library path and points kiln's disk cache into `work`.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${CC:-cc}" -O2 -shared -fPIC -o "$work/libcuda.so" "$here/stand-in-driver/libcuda.c"
nvrtc="$("$root/scripts/install-nvrtc.sh")"
export LD_LIBRARY_PATH="$work:$nvrtc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_CACHE_DIR="$work/cache"
