#!/bin/sh
# rmcp container entrypoint: run the container's command with librmcp_shim.so preloaded.
#
#   ENTRYPOINT ["/usr/local/bin/rmcp-entrypoint"]
#   CMD ["python3", "train.py"]
#
# With `rmcp` on PATH (or RMCP_BIN naming it) this execs `rmcp run -- "$@"`, which finds
# the shim ($RMCP_SHIM, else next to rmcp, else ../lib/) and merges LD_PRELOAD. Without
# it (or with RMCP_BIN set but empty) it does the same in sh: RMCP_SHIM, else the first
# of /usr/local/lib, /usr/lib, /opt/rmcp/lib and this script's directory holding
# librmcp_shim.so is put in LD_PRELOAD, first but behind any sanitizer runtime (existing
# entries kept, colon or space separated; never twice; another librmcp_shim.so replaced),
# ASAN_OPTIONS gets verify_asan_link_order=0 when the shim is LD_PRELOAD's only entry, the
# quirks are applied as `rmcp run` applies them (rmcp_core::quirks: on a machine whose KFD
# topology shows an RX 5000, gfx1010-gfx1013, AMDGCN_USE_BUFFER_OPS=0 unless it is set,
# and then TORCHINDUCTOR_CACHE_DIR=<Inductor's default>_rmcp_nobufferops unless it names
# another directory; RMCP_QUIRKS=off: neither), and "$@" is exec'd.
#
# Either way the command replaces this shell: its exit status and signals are its own.
# Not found: 127; not executable: 126 (as env(1)). Shim not found: 127 with a message.
# The shim's own settings (RMCP_MODE, RMCP_LOG, ...) pass through the environment.
set -eu

[ "$#" -gt 0 ] || set -- /bin/sh

shim_name=librmcp_shim.so

say() { printf 'rmcp-entrypoint: %s\n' "$*" >&2; }

# 1. rmcp run, when available.
if [ "${RMCP_BIN+set}" = set ]; then
    rmcp_bin=$RMCP_BIN
else
    rmcp_bin=$(command -v rmcp 2>/dev/null || true)
fi
if [ -n "$rmcp_bin" ]; then
    if [ -x "$rmcp_bin" ]; then
        exec "$rmcp_bin" run -- "$@"
    fi
    say "RMCP_BIN=$rmcp_bin is not executable; preloading the shim directly"
fi

# 2. Plain LD_PRELOAD.
if [ -n "${RMCP_SHIM:-}" ]; then
    if [ ! -f "$RMCP_SHIM" ]; then
        say "$shim_name not found: RMCP_SHIM=$RMCP_SHIM does not exist"
        exit 127
    fi
    shim=$RMCP_SHIM
else
    shim=
    here=$(CDPATH='' cd -- "$(dirname -- "$0")" 2>/dev/null && pwd -P) || here=
    for dir in /usr/local/lib /usr/lib /opt/rmcp/lib ${here:+"$here"}; do
        if [ -f "$dir/$shim_name" ]; then
            shim=$dir/$shim_name
            break
        fi
    done
    if [ -z "$shim" ]; then
        say "$shim_name not found; looked in /usr/local/lib, /usr/lib, /opt/rmcp/lib${here:+, $here}. Set RMCP_SHIM to its path."
        exit 127
    fi
fi

# LD_PRELOAD needs an absolute path without spaces or colons.
case $shim in
    /*) ;;
    *) shim=$(pwd -P)/$shim ;;
esac
case $shim in
    *[\ :]*)
        say "the shim's path '$shim' contains a space or a colon, which LD_PRELOAD cannot carry"
        exit 125
        ;;
esac

# Merge: same rules as `rmcp run` (src/preload.rs). Sanitizer runtimes (gcc's libasan,
# libhwasan, liblsan, libtsan, libubsan; clang's libclang_rt.<rt>[-<arch>].so) come first,
# in their order: AddressSanitizer refuses to start unless its runtime is first. Then, when
# the shim is already there and no other copy is, the other entries in their order (the
# value unchanged when nothing moved); otherwise the shim, then the other entries in order,
# minus other copies of the shim. Colon separated.
is_sanitizer_runtime() {
    case ${1##*/} in
        libasan.so | libasan.so.* | libhwasan.so | libhwasan.so.* | liblsan.so | liblsan.so.* | \
            libtsan.so | libtsan.so.* | libubsan.so | libubsan.so.*) return 0 ;;
        libclang_rt.asan.so | libclang_rt.asan-?*.so | \
            libclang_rt.hwasan.so | libclang_rt.hwasan-?*.so | \
            libclang_rt.hwasan_aliases.so | libclang_rt.hwasan_aliases-?*.so | \
            libclang_rt.lsan.so | libclang_rt.lsan-?*.so | \
            libclang_rt.tsan.so | libclang_rt.tsan-?*.so | \
            libclang_rt.ubsan_standalone.so | libclang_rt.ubsan_standalone-?*.so | \
            libclang_rt.ubsan_minimal.so | libclang_rt.ubsan_minimal-?*.so) return 0 ;;
    esac
    return 1
}
present=
others=
front=
kept=
rest=
moved=
old_ifs=$IFS
IFS=' :'
set -f
for entry in ${LD_PRELOAD:-}; do
    if is_sanitizer_runtime "$entry"; then
        front=${front:+$front:}$entry
        # A runtime behind another entry has to move.
        [ -z "$kept" ] || moved=1
        continue
    fi
    kept=${kept:+$kept:}$entry
    case $entry in
        "$shim") present=1 ;;
        "$shim_name" | */"$shim_name") others=1 ;;
        *) rest=${rest:+$rest:}$entry ;;
    esac
done
set +f
IFS=$old_ifs

if [ -z "$present" ] || [ -n "$others" ]; then
    LD_PRELOAD=${front:+$front:}$shim${rest:+:$rest}
elif [ -n "$moved" ]; then
    LD_PRELOAD=${front:+$front:}$kept
fi
export LD_PRELOAD

# AddressSanitizer: with the shim alone in LD_PRELOAD, a program linked against ASan's
# shared runtime finds the shim ahead of it and refuses to start ("ASan runtime does not
# come first in initial library list"). As rmcp run does, turn that one check off, unless
# ASAN_OPTIONS already names it. Processes without ASan never read the variable.
if [ -z "$front$rest" ]; then
    case ${ASAN_OPTIONS:-} in
        *verify_asan_link_order*) ;;
        *)
            ASAN_OPTIONS=verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
            export ASAN_OPTIONS
            ;;
    esac
fi

# Quirks (rmcp_core::quirks; `rmcp run` says why on its banner line): Triton's buffer
# loads and stores read 0 and drop writes on RDNA1, and Inductor's FX graph cache does not
# key on the knob, so it gets a cache of its own beside its default one.
has_rdna1() {
    for props in "${RMCP_SYSFS_ROOT:-/sys/class/kfd/kfd/topology}"/nodes/*/properties; do
        # Regular files only: never wait on a FIFO.
        [ -f "$props" ] || continue
        while read -r key value; do
            case $key:$value in
                gfx_target_version:10010[0-3]) return 0 ;;
            esac
        done <"$props"
    done
    return 1
}
case ${RMCP_QUIRKS:-on} in
    [oO][fF][fF] | 0) ;;
    *)
        if [ -n "${AMDGCN_USE_BUFFER_OPS:-}" ]; then
            case $AMDGCN_USE_BUFFER_OPS in
                0 | [fF][aA][lL][sS][eE] | [oO][fF][fF]) what="Triton compiles global loads and stores" ;;
                *) what="on an RX 5000 (RDNA1) Triton's buffer loads and stores read 0 and drop writes: unset it to let rmcp set it to 0" ;;
            esac
            [ "${RMCP_LOG:-}" = off ] || ! has_rdna1 ||
                say "AMDGCN_USE_BUFFER_OPS=$AMDGCN_USE_BUFFER_OPS kept: $what"
        elif has_rdna1; then
            AMDGCN_USE_BUFFER_OPS=0
            export AMDGCN_USE_BUFFER_OPS
            # Python's tempfile.gettempdir() and getpass.getuser(), as far as the
            # environment says.
            tmp=${TMPDIR:-${TEMP:-${TMP:-/tmp}}}
            user=${LOGNAME:-${USER:-${LNAME:-${USERNAME:-$(id -un 2>/dev/null || id -u)}}}}
            default=${tmp%/}/torchinductor_$user
            if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ] || [ "${TORCHINDUCTOR_CACHE_DIR%/}" = "$default" ]; then
                TORCHINDUCTOR_CACHE_DIR=${default}_rmcp_nobufferops
                export TORCHINDUCTOR_CACHE_DIR
            fi
            [ "${RMCP_LOG:-}" = off ] ||
                say "RX 5000 (RDNA1): AMDGCN_USE_BUFFER_OPS=0 (Triton's buffer loads and stores read 0 and drop writes there), TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR; RMCP_QUIRKS=off leaves both as they were"
        fi
        ;;
esac

# POSIX exec: command not found -> 127, found but not executable -> 126.
exec "$@"
