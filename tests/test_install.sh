#!/usr/bin/env bash
# `make install`'s result builds an application: the build installed under a temporary
# prefix, a program using both public headers compiled with `pkg-config --cflags --libs
# moevm` alone, and run against the installed libmoevm.so. A cross build gives its compiler
# and the emulator that runs its programs (tests/cross/aarch64.sh: qemu-aarch64 -L /).
# usage: test_install.sh BUILD_DIR [CC [RUNNER...]]
set -u
build=$1
cc=${2:-cc}
runner=("${@:3}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; echo "0 passed, 1 failed"; exit 1; }
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/log" 2>&1 || fail "cmake --install: $(cat "$tmp/log")"
pc=$(find "$tmp/prefix" -name moevm.pc | head -n 1)
[ -n "$pc" ] || fail "no moevm.pc installed"
[ -x "$tmp/prefix/bin/moevm" ] || fail "no bin/moevm installed"
cat >"$tmp/app.c" <<'C'
#include <moevm/engine.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    mvm_engine *e = NULL;
    mvm_engine_params p = {.model = "/nonexistent/model.gguf"};
    mvm_status st = mvm_engine_load(&p, &e);
    printf("moevm %s: %s: %s\n", mvm_version(), mvm_status_name(st), mvm_last_error());
    return st != MVM_OK && e == NULL && strstr(mvm_last_error(), "model.gguf") ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs moevm) || fail "pkg-config moevm"
"$cc" -std=c11 -Wall -Werror "$tmp/app.c" -o "$tmp/app" $flags 2>"$tmp/log" ||
    fail "$cc: $(cat "$tmp/log")"
libdir=$(pkg-config --variable=libdir moevm)
LD_LIBRARY_PATH=$libdir "${runner[@]}" "$tmp/app" >"$tmp/out" 2>&1 ||
    fail "the application: $(cat "$tmp/out")"
echo "$(cat "$tmp/out")"
echo "1 passed, 0 failed"
