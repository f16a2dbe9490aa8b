#!/usr/bin/env bash
# Moves a CUDA build of pipetrain to a GPU machine that has the NVIDIA driver,
# the CUDA runtime, cuBLAS and NCCL but none of the build's other libraries
# (Open MPI, libyaml, hwloc, OpenBLAS, ...) and no network to install them:
# build here, run scripts/gpu_check.sh --prebuilt there.
#
#   scripts/gpu_bundle.sh pack BUILD_DIR FILE.tar.xz
#       BUILD_DIR (a CUDA build, e.g. build-gpu made as gpu_check.sh makes it)
#       without its object files, every shared library its programs need
#       except the C library's and CUDA's, and Open MPI's and PMIx's plugins,
#       help files and orted (which a program that starts MPI alone forks)
#   scripts/gpu_bundle.sh unpack FILE.tar.xz RUNTIME_DIR
#       run from the repository's root on the GPU machine: the build becomes
#       ./build-gpu (its ctest files rewritten for this checkout's path), the
#       libraries go to RUNTIME_DIR, and RUNTIME_DIR/env.sh is written; then
#         . RUNTIME_DIR/env.sh && bash scripts/gpu_check.sh --prebuilt LOGDIR
#
# env.sh points Open MPI and PMIx at their relocated files (OPAL_* and
# PMIX_* variables) and the loader at RUNTIME_DIR/lib, then the directories of
# libcudart, libcublasLt and libnccl it finds under /usr/local, /opt and
# /usr/lib (NCCL may come with a Python package, e.g. PyTorch's).
set -euo pipefail
usage() {
    echo "usage: $0 pack BUILD_DIR FILE.tar.xz | unpack FILE.tar.xz RUNTIME_DIR" >&2
    exit 2
}
[ $# -eq 3 ] || usage

pack() {
    local build=$1 out=$2
    [ -x "$build/pipetrain" ] && [ -f "$build/CTestTestfile.cmake" ] || {
        echo "$0: $build is not a pipetrain build directory" >&2
        exit 2
    }
    local mpilib pmixlib
    mpilib=$(dirname "$(find /usr/lib -name 'mca_pml_ob1.so' -path '*openmpi*' | head -1)")
    pmixlib=$(dirname "$(find /usr/lib -name 'pmix_mca_*.so' | head -1)" 2>/dev/null || true)
    [ -d "$mpilib" ] || { echo "$0: Open MPI's plugins not found under /usr/lib" >&2; exit 2; }
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build" "$stage/lib" "$stage/ompi/plugins" "$stage/ompi/bin" "$stage/ompi/share" \
             "$stage/ompi/etc" "$stage/pmix/plugins" "$stage/pmix/share"
    (cd "$build" && tar --exclude='*.o' --exclude='*.a' -cf - .) | tar -C "$stage/build" -xf -
    cp -L "$mpilib"/*.so "$stage/ompi/plugins/"
    [ -n "$pmixlib" ] && cp -L "$pmixlib"/*.so "$stage/pmix/plugins/"
    cp -L "$(command -v orted)" "$stage/ompi/bin/"
    local share
    share=$(ompi_info --parsable --path pkgdatadir 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
    [ -d "$share" ] && cp -r "$share" "$stage/ompi/share/openmpi"
    local etc
    etc=$(ompi_info --parsable --path sysconfdir 2>/dev/null | sed -n 's/^path:sysconfdir://p')
    [ -d "$etc" ] && cp -r "$etc"/. "$stage/ompi/etc/"
    [ -n "$pmixlib" ] && [ -d "$pmixlib/../share/pmix" ] && cp -r "$pmixlib/../share/pmix" "$stage/pmix/share/"
    # every library the programs and plugins load, but the C library's, the
    # compiler's runtime and CUDA's (those come from the GPU machine)
    local skip='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
    find "$stage/build" "$stage/ompi" "$stage/pmix" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
        xargs -0 -r ldd 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u | grep -Ev "$skip" |
        while read -r lib; do cp -L "$lib" "$stage/lib/"; done
    (cd "$(dirname "$build")" && pwd) > "$stage/build-parent"
    tar -C "$stage" -cJf "$out" .
    echo "$out: $(du -h "$out" | cut -f1)"
}

unpack() {
    local file=$1 rt=$2
    [ -f scripts/gpu_check.sh ] || { echo "$0 unpack: run it from the repository's root" >&2; exit 2; }
    mkdir -p "$rt"
    rt=$(cd "$rt" && pwd)
    tar -C "$rt" -xJf "$file"
    local old
    old=$(cat "$rt/build-parent")
    rm -rf build-gpu
    mv "$rt/build" build-gpu
    # ctest's files name the source and build directories by absolute path
    find build-gpu -name 'CTestTestfile.cmake' -print0 | xargs -0 sed -i "s#$old/#$(pwd)/#g"
    local cuda=""
    for n in libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudart.so.12 libcublasLt.so.12; do
        local p
        p=$(find /usr/local /opt /usr/lib -name "$n" 2>/dev/null | head -1 || true)
        [ -n "$p" ] && cuda="$cuda:$(dirname "$p")"
    done
    cat > "$rt/env.sh" <<EOF
export LD_LIBRARY_PATH=$rt/lib$cuda\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export OPAL_PREFIX=$rt/ompi OPAL_EXEC_PREFIX=$rt/ompi OPAL_BINDIR=$rt/ompi/bin OPAL_LIBDIR=$rt/lib
export OPAL_PKGLIBDIR=$rt/ompi/plugins OPAL_DATADIR=$rt/ompi/share OPAL_DATAROOTDIR=$rt/ompi/share
export OPAL_PKGDATADIR=$rt/ompi/share/openmpi OPAL_SYSCONFDIR=$rt/ompi/etc
export OMPI_MCA_mca_base_component_path=$rt/ompi/plugins OMPI_MCA_mca_base_component_show_load_errors=0
export PMIX_INSTALL_PREFIX=$rt/pmix PMIX_MCA_mca_base_component_path=$rt/pmix/plugins
export PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$rt/ompi/bin:\$PATH
EOF
    echo "unpacked: build-gpu, and the libraries in $rt; next: . $rt/env.sh"
}

case $1 in
pack) pack "$2" "$3" ;;
unpack) unpack "$2" "$3" ;;
*) usage ;;
esac
